"""Answers: the rule-based answer from the evidence, and the citation contract every answer
(rules or model) must pass."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence, Set

from skilldeck.nodes.retrieval.evidence import (
    CITATION_TAG,
    Evidence,
    citations_in,
    make_evidence,
    normal_citation,
)
from skilldeck.nodes.retrieval.plan import Plan
from skilldeck.nodes.retrieval.sufficiency import usable
from skilldeck.nodes.retrieval.terms import TOKENS, token_set
from skilldeck.tools.tables import row_text

__all__ = ["check_answer", "compose_answer", "no_information", "select_evidence"]

# The rules answer's own words, English or Chinese (by the question): never retrieved facts.
_FRAME = {
    False: {
        "partial": "Note: this answer may be incomplete: every source was searched and none "
        "covered the whole request.",
        "none": "No relevant information was found for this question after trying every "
        "applicable source: {sources}.",
        "from": "From {ref}:",
        "counts": "{t} rows matched (N+M = {t}); {s} are shown (N = {s}) and {o} are omitted "
        "(M = {o}).",
    },
    True: {
        "partial": "注意：以下回答可能不完整：所有来源都已检索，但没有一个完整覆盖该问题。",
        "none": "已尝试所有适用的来源（{sources}），未找到与该问题相关的信息。",
        "from": "来自 {ref}：",
        "counts": "共匹配 {t} 行（N+M = {t}），显示 {s} 行（N = {s}），省略 {o} 行（M = {o}）。",
    },
}
_FRAME_TOKENS = frozenset(
    t for lang in _FRAME.values() for text in lang.values() for t in TOKENS.tokens(text)
)
_CAPS = {"table": 3, "lines": 3, "text": 3}
_CHUNK_CAPS = {"simple": 3, "moderate": 5, "broad": 8}


def select_evidence(plan: Plan, items: Sequence[Evidence]) -> list[Evidence]:
    """The evidence an answer uses: usable items in retrieval order, a few of each kind."""
    caps = {**_CAPS, "chunk": _CHUNK_CAPS[plan.breadth]}
    taken: dict[str, int] = {}
    out: list[Evidence] = []
    seen: set[str] = set()
    for item in items:
        if item.citation in seen or taken.get(item.kind, 0) >= caps.get(item.kind, 3):
            continue
        seen.add(item.citation)
        taken[item.kind] = taken.get(item.kind, 0) + 1
        out.append(item)
    return out


def _terms_tokens(plan: Plan) -> set[str]:
    return {t for term in (*plan.entities, *plan.core, *plan.facets) for a in term.alts for t in a}


def _excerpt(plan: Plan, text: str, limit: int = 600) -> str:
    """The sentences of ``text`` that mention the question's terms (the start if none do)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    wanted = _terms_tokens(plan) | set(plan.years)
    sentences = re.split(r"(?<=[.!?。！？；;])\s*", flat)
    picked: list[str] = []
    for sentence in sentences:
        if wanted & token_set(sentence) and sum(map(len, picked)) + len(sentence) <= limit:
            picked.append(sentence)
    return " ".join(picked) if picked else flat[:limit].rsplit(" ", 1)[0] + " …"


def _row_item(item: Evidence, row: Sequence[str]) -> Evidence:
    return make_evidence(
        item.source, "row", item.ref, " ".join(row), "", item.step, header=item.header
    )


def _render(plan: Plan, item: Evidence, state_counts: bool) -> str:
    frame = _FRAME[plan.zh]
    if item.kind == "table":
        # Rows that are evidence on their own first, then rows that share a term, then any.
        rows = [r for r in item.rows if usable(plan, _row_item(item, r))]
        wanted = _terms_tokens(plan) | set(plan.years)
        rows = rows or [r for r in item.rows if wanted & token_set(" ".join(r))]
        rows = rows[:10] or list(item.rows[:5])
        lines = [frame["from"].format(ref=item.ref)]
        if state_counts and item.counts:
            t, s, o = item.counts
            lines.append(frame["counts"].format(t=t, s=s, o=o))
        lines += [f"- {row_text(item.header, row)}" for row in rows]
        return "\n".join([*lines, item.citation])
    lead = f"{item.heading}: " if item.heading else f"{item.ref}: " if item.kind == "lines" else ""
    return f"{lead}{_excerpt(plan, item.text)} {item.citation}"


def no_information(plan: Plan, sources: Sequence[str]) -> str:
    """The reply when every applicable source was tried without usable evidence."""
    return _FRAME[plan.zh]["none"].format(sources=", ".join(dict.fromkeys(sources)) or "none")


def compose_answer(
    plan: Plan, used: Sequence[Evidence], *, complete: bool, sources: Sequence[str]
) -> str:
    """The rule-based answer: one paragraph per used item, each followed by its citation.

    A truncated table result states ``N+M``, ``N`` and ``M`` once; an answer from partial
    evidence says so first; without evidence the answer says nothing relevant was found.
    """
    if not used:
        return no_information(plan, sources)
    blocks = [] if complete else [_FRAME[plan.zh]["partial"]]
    stated: set[int] = set()
    for item in used:
        blocks.append(_render(plan, item, item.step not in stated))
        if item.counts:
            stated.add(item.step)
    return "\n\n".join(blocks)


def _uses_knowledge(body: str, vocabulary: Set[str], question: Set[str]) -> bool:
    """Whether a paragraph states retrieved facts: two of their words, or one of their numbers."""
    shared = (token_set(body) - question - _FRAME_TOKENS) & vocabulary
    return len(shared) >= 2 or any(any(c.isdigit() for c in t) for t in shared)


def check_answer(
    answer: str,
    *,
    question: str,
    shown: Sequence[Evidence],
    known: Mapping[str, tuple[int, int, int] | None],
) -> list[dict[str, str]]:
    """Errors of an answer against the citation contract (empty when it passes).

    Every paragraph (blank-line separated block) that states retrieved facts ends with at
    least one citation; every citation is one the tools returned (``known``, with ``N+M``,
    ``N``, ``M`` for truncated table results); no block holds citations alone; a cited
    truncated table result has its three counts stated.
    """
    errors: list[str] = []
    vocabulary = {t for item in shown for t in item.tokens}
    asked = token_set(question)
    blocks = [b.strip() for b in re.split(r"\n\s*\n", answer) if b.strip()]
    if not blocks:
        errors.append("the answer is empty")
    for number, block in enumerate(blocks, start=1):
        tags = [normal_citation(t) for t in CITATION_TAG.findall(block)]
        body = CITATION_TAG.sub(" ", block).strip()
        where = f"paragraph {number} ({' '.join(body.split())[:60]!r})"
        if tags and not body:
            errors.append(
                f"paragraph {number} holds only citations: place each one right after the "
                "paragraph that uses it, never collected in a block of their own"
            )
            continue
        errors += [
            f"{where} cites {tag}, which no tool returned: copy the <CITATION .../> tags of "
            "the evidence exactly"
            for tag in tags
            if tag not in known
        ]
        if tags and not block.rstrip().endswith("/>"):
            errors.append(
                f"{where} goes on after its citation: put the <CITATION .../> right after the "
                "paragraph, at its end"
            )
        if not tags and _uses_knowledge(body, vocabulary, asked):
            errors.append(f"{where} uses retrieved knowledge but has no <CITATION .../> after it")
    for tag in citations_in(answer):
        counts = known.get(tag)
        if counts and not all(re.search(rf"(?<![\d.]){n}(?![\d.])", answer) for n in counts):
            t, s, o = counts
            errors.append(
                f"{tag} is from a truncated table result: state the total matches (N+M = {t}), "
                f"the displayed count (N = {s}) and the omitted count (M = {o})"
            )
    return [{"path": "$.data.answer", "message": e} for e in errors]
