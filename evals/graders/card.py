"""card-agent's eval environment and graders (seed 003): completion, template choice and
facts kept in the YAML.

The environment (``is_complete``, ``status``, ``template_ids``, ``card_tags`` and the saved
``yaml``, from ``Cards/*.yaml`` and the ``card__save`` result) and the graders read the same
:func:`saved_card`, so they work for any skill that saves cards. Registered by skilldeck's
built-in plugin (:mod:`skilldeck.builtins`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import yaml

from skilldeck.evals.environment import environment
from skilldeck.evals.graders.base import ConfigReader, GradeContext, Grader, GradeResult, grader
from skilldeck.evals.outcome import Outcome
from skilldeck.tools.cards import CARDS_DIR, card_relpath

__all__ = ["CardCompletion", "CardMustContain", "CardTemplateChoice", "fact_id_of", "saved_card"]


# -- environment ------------------------------------------------------------------------------
def saved_card(outcome: Outcome, fact_id: str | None) -> dict[str, Any]:
    """The card the trial saved: the ``card__save`` result and the YAML file it wrote."""
    saves = [c for c in outcome.tool_calls if c.name == "card__save"]
    good = [c for c in saves if c.ok]
    result = _json_object(good[-1].result) if good else {}
    candidates = [str(result["path"])] if isinstance(result.get("path"), str) else []
    if fact_id:
        candidates.append(card_relpath(fact_id))
    candidates += sorted(p for p in _files(outcome) if p.startswith(f"{CARDS_DIR}/"))
    path, text = next(
        ((p, t) for p in candidates if (t := outcome.read(_relative(outcome, p))) is not None),
        (None, None),
    )
    card = _yaml_mapping(text)
    ui = card.get("ui_config")
    return {
        "save_ok": bool(good),
        "saves": len(saves),
        "path": path,
        "exists": text is not None,
        "yaml": text,
        "fact_id": card.get("fact_id"),
        "title": card.get("title"),
        "status": card.get("status"),
        "template_ids": list(card.get("template_ids") or []),
        "card_tags": list(card.get("tags") or []),
        "ui_config": ui if isinstance(ui, Mapping) else None,
        "insight": card.get("insight"),
        "is_complete": bool(good) and text is not None and card.get("status") == "completed",
    }


@environment("card-agent")
def _card_environment(outcome: Outcome, task_input: Mapping[str, Any]) -> dict[str, Any]:
    card = saved_card(outcome, fact_id_of(task_input))
    keys = ("is_complete", "status", "template_ids", "card_tags", "yaml", "save_ok", "path")
    return {k: card[k] for k in keys}


# -- helpers ----------------------------------------------------------------------------------
def fact_id_of(task_input: Mapping[str, Any]) -> str | None:
    """The task input's ``fact_id``, if it names one."""
    value = task_input.get("fact_id")
    return value if isinstance(value, str) else None


def _files(outcome: Outcome) -> list[str]:
    root = outcome.workspace
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]


def _relative(outcome: Outcome, path: str) -> str:
    """Tool results may give an absolute path inside the workspace; graders want it relative."""
    root = str(outcome.workspace.resolve())
    return path[len(root) :].lstrip("/") if path.startswith(root) else path


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _yaml_mapping(text: str | None) -> dict[str, Any]:
    try:
        value = yaml.safe_load(text or "")
    except yaml.YAMLError:
        return {}
    return value if isinstance(value, dict) else {}


# -- graders ----------------------------------------------------------------------------------
def _card(ctx: GradeContext) -> dict[str, Any]:
    return saved_card(ctx.outcome, fact_id_of(ctx.task.input))


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
