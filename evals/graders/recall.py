"""Memory-recall graders (nomemory-recall): a memory view cites only what it was shown."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from skilldeck.evals._paths import value_at
from skilldeck.evals.graders.base import ConfigReader, GradeContext, Grader, GradeResult, grader

__all__ = ["CitesEvidence"]


def _cited(item: Any) -> list[str] | None:
    """An item's ``evidence`` ids, or ``None`` when the item is not ``{text, evidence: [...]}``."""
    ids = item.get("evidence") if isinstance(item, Mapping) else None
    return [str(i) for i in ids] if isinstance(ids, list) else None


@grader("cites_evidence")
@dataclass(frozen=True, slots=True)
class CitesEvidence(Grader):
    """Every item of the memory view (``view``, default ``state.memory_view``: lists of
    ``{text, evidence}`` by section) cites only message ids of the evidence list (``evidence``,
    default ``state.evidence``: ``[{message_id, ...}]``). Credit: the share of items that do;
    an empty view passes (the other graders say whether it should be empty)."""

    view: str = "state.memory_view"
    evidence: str = "state.evidence"

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        return cls(
            config.path("view", "state.memory_view"), config.path("evidence", "state.evidence")
        )

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        view_obj = ctx.outcome.view()
        shown_raw = value_at(view_obj, self.evidence)
        shown = {
            str(e.get("message_id"))
            for e in (shown_raw if isinstance(shown_raw, list) else [])
            if isinstance(e, Mapping)
        }
        sections = value_at(view_obj, self.view)
        items = [
            item
            for section in (sections.values() if isinstance(sections, Mapping) else [])
            for item in (section if isinstance(section, list) else [section])
        ]
        if not items:
            return GradeResult.check(True, f"{self.view} has no items")
        bad = []
        for item in items:
            cited = _cited(item)
            if cited is None:
                bad.append("an item without an evidence list")
            elif stray := sorted(set(cited) - shown):
                bad.append(f"{stray} not in {self.evidence}")
        why = (
            f"{len(bad)} of {len(items)} item(s) cite outside the evidence: {'; '.join(bad)}"
            if bad
            else f"all {len(items)} item(s) cite only evidence messages"
        )
        return GradeResult.of((len(items) - len(bad)) / len(items), why)
