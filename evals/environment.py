"""``environment_state``: what a skill left in its workspace, in the seed's terms.

card-agent: ``is_complete``, ``status``, ``template_ids``, ``card_tags`` and the saved ``yaml``
(from ``Cards/*.yaml`` and the ``card__save`` result). pkm-agent: ``status``, ``action``,
``files_changed`` (relative to ``PKM/``) and ``insight``. Any other skill: its data fields and
the run status. Graders use the same helpers, so they work for any skill that saves cards or
PKM notes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from skilldeck.evals.outcome import Outcome
from skilldeck.tools.cards import CARDS_DIR, card_relpath
from skilldeck.tools.pkm import PARA_FOLDERS, PKM_DIR

__all__ = [
    "PARA_FOLDERS",
    "PKM_ROOT",
    "environment",
    "environment_state",
    "pkm_path",
    "pkm_written",
    "saved_card",
]

#: Workspace paths of PKM notes start with this (the pkm tools' root folder).
PKM_ROOT = f"{PKM_DIR}/"

Extractor = Callable[[Outcome, Mapping[str, Any]], dict[str, Any]]
_EXTRACTORS: dict[str, Extractor] = {}


def environment(skill: str) -> Callable[[Extractor], Extractor]:
    """Register the environment extractor of ``skill``: ``(outcome, task input) -> dict``."""

    def register(fn: Extractor) -> Extractor:
        _EXTRACTORS[skill] = fn
        return fn

    return register


def environment_state(
    outcome: Outcome, task_input: Mapping[str, Any], data_keys: Iterable[str]
) -> dict[str, Any]:
    """The environment state of ``outcome``: the skill's extractor, or its data fields."""
    extractor = _EXTRACTORS.get(outcome.skill)
    if extractor is not None:
        return extractor(outcome, task_input)
    data = {k: outcome.state[k] for k in data_keys if k in outcome.state}
    return {**data, "status": outcome.status}


# -- cards ------------------------------------------------------------------------------------
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
    card = saved_card(outcome, _fact_id(task_input))
    keys = ("is_complete", "status", "template_ids", "card_tags", "yaml", "save_ok", "path")
    return {k: card[k] for k in keys}


# -- PKM --------------------------------------------------------------------------------------
def pkm_path(path: str) -> str:
    """A path relative to ``PKM/`` as the pkm tools take it (``./`` and ``PKM/`` dropped)."""
    path = path.strip().replace("\\", "/").lstrip("/")
    while path.startswith("./"):
        path = path[2:]
    return path.removeprefix(PKM_ROOT)


def pkm_written(outcome: Outcome) -> list[str]:
    """PKM files the trial added or changed, relative to ``PKM/``."""
    return [
        p.removeprefix(PKM_ROOT)
        for p in outcome.changed("added", "changed")
        if p.startswith(PKM_ROOT)
    ]


@environment("pkm-agent")
def _pkm_environment(outcome: Outcome, task_input: Mapping[str, Any]) -> dict[str, Any]:
    raw = outcome.state.get("pkm")
    pkm: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    insight = pkm.get("insight")
    if not insight:
        insight = saved_card(outcome, _fact_id(task_input)).get("insight")
    changed = [p.removeprefix(PKM_ROOT) for p in outcome.changed() if p.startswith(PKM_ROOT)]
    return {
        "status": outcome.status,
        "action": pkm.get("action"),
        "files_changed": changed,
        "insight": insight,
        "files": list(pkm.get("files") or []),
        "reason": pkm.get("reason"),
    }


# -- helpers ----------------------------------------------------------------------------------
def _fact_id(task_input: Mapping[str, Any]) -> str | None:
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
