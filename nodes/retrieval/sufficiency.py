"""Whether the evidence so far suffices (seed 002, section 4): empty, ``Error:``, ``no excel
files found``, off-topic, missing entity or scope, no usable evidence, partial or truncated
coverage."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from skilldeck.nodes.retrieval.evidence import Evidence, Result
from skilldeck.nodes.retrieval.plan import Plan
from skilldeck.nodes.retrieval.terms import Term

__all__ = ["EXPANDABLE", "Verdict", "judge", "usable"]

#: Verdict codes after which a larger top_k may help (results were many but not enough).
EXPANDABLE = frozenset({"missing_entity", "missing_scope", "no_usable_evidence", "partial"})


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the evidence so far suffices; ``code``/``why`` say why not."""

    sufficient: bool
    code: str | None
    why: str | None
    usable: tuple[Evidence, ...]


def _labels(terms: Iterable[Term]) -> str:
    return ", ".join(repr(t.label) for t in terms)


def usable(plan: Plan, item: Evidence) -> bool:
    """Whether ``item`` is evidence for the question: its entity, scope and most core terms."""
    tokens = item.tokens
    if plan.entities:
        hits = [e.found_in(tokens) for e in plan.entities]
        if not (any(hits) if plan.any_entity else all(hits)):
            return False
    if plan.years and not any(y in tokens for y in plan.years):
        return False
    found = sum(t.found_in(tokens) for t in plan.core)
    return found * 2 >= len(plan.core)


def judge(
    plan: Plan,
    result: Result,
    *,
    ok: bool,
    content: str,
    before: Sequence[Evidence],
    top_k: int | None = None,
) -> Verdict:
    """Apply section 4 to one step; partial coverage counts the evidence gathered ``before``."""
    if not ok or content.lstrip().startswith("Error:"):
        first = content.strip().splitlines()[0] if content.strip() else "Error"
        return Verdict(False, "error", f"starts with Error: {first[:160]}", ())
    if "no excel files found" in content.lower():
        return Verdict(False, "no_excel_files", "says 'no excel files found'", ())
    if not result.items:
        return Verdict(False, "empty", f"empty: {result.summary}", ())
    terms = (*plan.entities, *plan.core, *plan.facets)
    if terms and not any(t.found_in(i.tokens) for i in result.items for t in terms):
        why = f"off-topic: none of {len(result.items)} results mentions {_labels(terms[:6])}"
        return Verdict(False, "off_topic", why, ())
    good = tuple(i for i in result.items if usable(plan, i))
    if not good:
        if plan.entities and not any(
            any(e.found_in(i.tokens) for e in plan.entities) for i in result.items
        ):
            why = f"misses the core entity: no result mentions {_labels(plan.entities)}"
            return Verdict(False, "missing_entity", why, ())
        about = [i for i in result.items if all(e.found_in(i.tokens) for e in plan.entities)]
        if plan.years and not any(y in i.tokens for i in about for y in plan.years):
            why = f"misses the scope: no result about the entity mentions {', '.join(plan.years)}"
            return Verdict(False, "missing_scope", why, ())
        why = f"no usable evidence: no result covers half of {_labels(plan.core[:8])}"
        return Verdict(False, "no_usable_evidence", why, ())
    if plan.full_coverage and result.truncated:
        return Verdict(False, "truncated", f"partial: truncated, {result.summary}", good)
    cut = next((i for i in before if i.counts), None)
    if plan.full_coverage and cut is not None and cut.counts is not None:
        why = f"partial: the {cut.ref} rows stay truncated ({cut.counts[2]} omitted, M)"
        return Verdict(False, "partial", why, good)
    if plan.kind in ("list", "historical") and top_k is not None and result.returned >= top_k:
        why = f"partial: {result.returned} chunks fill top_k {top_k}; a {plan.kind} may have more"
        return Verdict(False, "partial", why, good)
    gathered = (*before, *good)
    missing = [f for f in plan.facets if not any(f.found_in(i.tokens) for i in gathered)]
    if missing:
        why = f"partial: nothing covers {_labels(missing)} yet"
        return Verdict(False, "partial", why, good)
    if plan.kind == "mixed":
        data = any(i.kind == "table" or re.search(r"\d", i.text) for i in gathered)
        text = any(i.kind != "table" for i in gathered)
        if not (data and text):
            half = "an explanation" if data else "the data"
            return Verdict(False, "partial", f"partial: a mixed request still lacks {half}", good)
    return Verdict(True, None, None, good)
