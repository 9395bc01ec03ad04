"""card-agent graders (seed 003): completion, template choice and facts kept in the YAML."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from skilldeck.evals.environment import saved_card
from skilldeck.evals.graders.base import ConfigReader, GradeContext, Grader, GradeResult, grader

__all__ = ["CardCompletion", "CardMustContain", "CardTemplateChoice"]


def _card(ctx: GradeContext) -> dict[str, Any]:
    fact_id = ctx.task.input.get("fact_id")
    return saved_card(ctx.outcome, fact_id if isinstance(fact_id, str) else None)


@grader("card_completion")
@dataclass(frozen=True, slots=True)
class CardCompletion(Grader):
    """The save tool succeeded, the card file exists, its status is ``completed`` and it has a
    title and a UI config. All or nothing."""

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        card = _card(ctx)
        ui = card["ui_config"]
        checks = {
            "card__save succeeded": card["save_ok"],
            "card file exists": card["exists"],
            "status is completed": card["status"] == "completed",
            "title present": isinstance(card["title"], str) and bool(card["title"].strip()),
            "ui_config present": isinstance(ui, Mapping) and bool(ui),
        }
        failed = [name for name, ok in checks.items() if not ok]
        where = card["path"] or "no card file"
        why = f"{where}: " + (f"failed: {', '.join(failed)}" if failed else "all checks hold")
        return GradeResult.check(not failed, why)


@grader("card_template_choice")
@dataclass(frozen=True, slots=True)
class CardTemplateChoice(Grader):
    """1 when the primary template is acceptable, 0.5 when an acceptable template is only
    secondary, 0 otherwise."""

    expected_template_ids: tuple[str, ...]

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        return cls(config.strings("expected_template_ids"))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        chosen = [str(t) for t in _card(ctx)["template_ids"]]
        accepted = set(self.expected_template_ids)
        if chosen and chosen[0] in accepted:
            return GradeResult.of(1.0, f"primary template {chosen[0]!r} is acceptable")
        secondary = [t for t in chosen[1:] if t in accepted]
        if secondary:
            return GradeResult.of(
                0.5, f"acceptable {secondary[0]!r} is only secondary; primary is {chosen[0]!r}"
            )
        expected = sorted(accepted)
        return GradeResult.of(0.0, f"templates {chosen} include none of {expected}")


@grader("card_must_contain")
@dataclass(frozen=True, slots=True)
class CardMustContain(Grader):
    """Every substring occurs (any case) in the saved card YAML; partial credit."""

    substrings: tuple[str, ...]

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        return cls(config.strings("substrings"))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        text = _card(ctx)["yaml"]
        if text is None:
            return GradeResult.of(0.0, "no saved card YAML to scan")
        missing = [s for s in self.substrings if s.casefold() not in text.casefold()]
        found = len(self.substrings) - len(missing)
        why = f"card YAML lacks {missing}" if missing else "card YAML has every substring"
        return GradeResult.of(found / len(self.substrings), why)
