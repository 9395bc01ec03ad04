"""Tool results as citable evidence: a chunk, a table's shown rows, or runs of local lines."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from skilldeck.nodes.retrieval.terms import TOKENS

__all__ = [
    "CITATION_TAG",
    "Evidence",
    "Result",
    "citations_in",
    "make_evidence",
    "normal_citation",
    "parse_result",
]

#: A ``<CITATION .../>`` tag as tools write it and answers must copy it.
CITATION_TAG = re.compile(r"<CITATION\b[^>]*?/>")


def citations_in(text: str) -> list[str]:
    """The ``<CITATION .../>`` tags of ``text``, normalised, in order, without repeats."""
    return list(dict.fromkeys(normal_citation(tag) for tag in CITATION_TAG.findall(text)))


def normal_citation(tag: str) -> str:
    """``tag`` with its whitespace normalised: tags are compared as strings."""
    return re.sub(r"\s*/>$", " />", " ".join(tag.split()))


@dataclass(frozen=True, slots=True)
class Evidence:
    """One citable piece of a tool result: a chunk, a table's shown rows, or local lines.

    ``counts`` is ``(N+M, N, M)`` of the table result it came from, when that was truncated.
    """

    source: str
    kind: str
    ref: str
    text: str
    citation: str
    step: int
    heading: str = ""
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    counts: tuple[int, int, int] | None = None
    tokens: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["tokens"]
        return out

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Evidence:
        counts = value.get("counts")
        return make_evidence(
            value["source"],
            value["kind"],
            value["ref"],
            value["text"],
            value["citation"],
            int(value["step"]),
            heading=value.get("heading", ""),
            header=tuple(value.get("header", ())),
            rows=tuple(tuple(r) for r in value.get("rows", ())),
            counts=(int(counts[0]), int(counts[1]), int(counts[2])) if counts else None,
        )


def make_evidence(
    source: str, kind: str, ref: str, text: str, citation: str, step: int, **extra: Any
) -> Evidence:
    searchable = " ".join([ref, extra.get("heading", ""), *extra.get("header", ()), text])
    tokens = frozenset(TOKENS.tokens(searchable))
    return Evidence(
        source, kind, ref, text, normal_citation(citation), step, **extra, tokens=tokens
    )


@dataclass(frozen=True, slots=True)
class Result:
    """A parsed tool result: its evidence and what the sufficiency rules need to know."""

    items: tuple[Evidence, ...]
    returned: int  # chunks, shown rows or lines returned
    truncated: bool
    summary: str


def parse_result(tool: str, content: str, step: int) -> Result:
    """The evidence of one tool result (rag, table, local, or any tool with citations)."""
    try:
        body = json.loads(content)
    except json.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("chunks"), list):
        chunks = [c for c in body["chunks"] if isinstance(c, dict) and c.get("citation")]
        items = tuple(
            make_evidence(
                tool,
                "chunk",
                str(c.get("file_ref", "")),
                str(c.get("text", "")),
                str(c["citation"]),
                step,
                heading=str(c.get("heading", "")),
            )
            for c in chunks
        )
        best = f"; best {items[0].ref}" if items else ""
        summary = f"{len(items)} chunks (top_k {body.get('top_k', '?')}){best}"
        return Result(items, len(items), False, summary)
    if isinstance(body, dict) and isinstance(body.get("tables"), list):
        total, shown = int(body.get("total", 0)), int(body.get("shown", 0))
        omitted = int(body.get("omitted", 0))
        counts = (total, shown, omitted) if omitted else None
        items = tuple(
            make_evidence(
                tool,
                "table",
                str(t.get("file_ref_table", "")),
                "\n".join(" ".join(r) for r in t["rows"]),
                str(t["citation"]),
                step,
                header=tuple(t.get("header", ())),
                rows=tuple(tuple(r) for r in t["rows"]),
                counts=counts,
            )
            for t in body["tables"]
            if isinstance(t, dict) and t.get("citation") and t.get("rows")
        )
        refs = ", ".join(i.ref for i in items[:3])
        summary = f"{total} rows matched (N+M), {shown} shown (N), {omitted} omitted (M)" + (
            f" in {refs}" if refs else ""
        )
        return Result(items, shown, omitted > 0, summary)
    if isinstance(body, dict) and isinstance(body.get("matches"), list):
        items = _line_runs(tool, [m for m in body["matches"] if isinstance(m, dict)], step)
        total = int(body.get("total", len(body["matches"])))
        summary = f"{total} lines matched in {len({i.ref for i in items})} files"
        return Result(items, len(body["matches"]), bool(body.get("truncated")), summary)
    cited = citations_in(content)
    text = content.strip()
    items = (make_evidence(tool, "text", tool, text, cited[0], step),) if text and cited else ()
    summary = f"{len(text)} characters, {len(cited)} citations" if text else "empty"
    return Result(items, len(items), False, summary)


def _line_runs(tool: str, matches: Sequence[Mapping[str, Any]], step: int) -> tuple[Evidence, ...]:
    """Local matches as runs of consecutive lines per file, best run first."""
    by_file: dict[str, dict[int, str]] = {}
    for m in matches:
        by_file.setdefault(str(m.get("path", "")), {})[int(m.get("line", 0))] = str(m["text"])
    runs: list[Evidence] = []
    for path, lines in by_file.items():
        numbers = sorted(lines)
        start = prev = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == prev + 1:
                prev = number
                continue
            text = " ".join(lines[n] for n in range(start, prev + 1))
            file = path.replace('"', "&quot;")
            citation = f'<CITATION file="{file}" lines="{start}-{prev}" />'
            runs.append(make_evidence(tool, "lines", path, text, citation, step))
            if number is not None:
                start = prev = number
    return tuple(runs)
