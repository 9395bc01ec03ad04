"""Eval tasks in the seed's shape: ``{id, input, graders: [{name, config}]}`` plus ``bucket``.

Tasks come from a skill's ``cases.yaml`` or from any JSON/YAML file holding one task, a list of
tasks, or ``{tasks: [...]}``. A few ``input`` keys belong to the harness, not to the skill, and
are taken out of the run input:

- ``base_fixture``: the workspace folder copied fresh for each trial (also allowed top-level);
- ``context``: the run's context (default: the skill's first trigger context);
- ``answers``: a card's answers, or a list of them for several cards in turn;
- ``user_id``: the user the run is bound to;
- ``matter_id``: ``null`` runs without a matter (no workspace); a name is used as the base
  fixture when there is no ``base_fixture`` and a fixture of that name exists. Either way a
  trial with a matter binds its own trial id, so trials never share files.

Keys that only a skill's eval setup hook reads (nomemory-recall's ``messages``, rag-retrieve's
``knowledge``) stay in ``input``; the hook returns the run input without them (see
:mod:`skilldeck.evals.setup`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skilldeck._internal.documents import DocumentError, parse_yaml
from skilldeck.errors import EvalConfigError
from skilldeck.evals.graders import Grader, build_grader

__all__ = ["HARNESS_KEYS", "GraderSpec", "Task", "load_tasks", "task_from_dict"]

HARNESS_KEYS = ("base_fixture", "context", "answers", "user_id", "matter_id")
# A fixture is a folder of the skill's fixtures/ (or beside a suite): a name, never a path.
_FIXTURE_NAME = re.compile(r"(?!\.\.?$)[A-Za-z0-9_.][A-Za-z0-9_.-]*")
_TASK_ID = re.compile(r"(?!\.\.?$)[\w.:-]{1,200}")
_TASK_KEYS = ("id", "bucket", "input", "graders", "base_fixture", "skill", "description")


@dataclass(frozen=True, slots=True)
class GraderSpec:
    """One entry of a task's ``graders``: its name, config and the grader built from them."""

    name: str
    config: dict[str, Any]
    grader: Grader


@dataclass(frozen=True)
class Task:
    """One eval task; ``input`` is the run input (harness keys already taken out)."""

    id: str
    input: dict[str, Any]
    graders: tuple[GraderSpec, ...]
    bucket: str = "default"
    skill: str | None = None
    base_fixture: str | None = None
    fixture_optional: bool = False
    context: str | None = None
    answers: tuple[dict[str, Any], ...] = ()
    user_id: str | None = None
    matter: bool = True
    description: str = ""
    source: Path | None = field(default=None, compare=False)
    #: Trials of this task per run (Memex's ``trials_per_run``); ``None``: the run's epochs.
    trials: int | None = None
    #: Seconds one trial may run (``timeout_seconds``); then its run stops as ``RUN_TIMEOUT``.
    timeout_s: float | None = None
    #: A trial passes when its score reaches this (``task_pass_threshold``); ``None``: when
    #: every scored grader passes.
    pass_threshold: float | None = None
    #: A workspace folder to copy, given by path (Memex's ``fixture_dir``), not by name.
    fixture_path: Path | None = field(default=None, compare=False)
    #: What a right answer looks like (``reference_solution``), for reports and judges.
    reference: Any = None


def task_from_dict(
    raw: Any, *, skill: str | None = None, source: Path | None = None, where: str = "task"
) -> Task:
    """Build one task; raise :class:`EvalConfigError` naming ``where`` and the bad key."""
    if not isinstance(raw, Mapping):
        raise EvalConfigError(f"{where}: a task must be a mapping with id, input and graders")
    task_id = raw.get("id")
    if not isinstance(task_id, str) or not task_id.strip():
        raise EvalConfigError(f"{where}: id must be a non-empty string")
    if not _TASK_ID.fullmatch(task_id):
        # Ids name trial folders and key cassettes: never a path.
        raise EvalConfigError(
            f"{where}: id {task_id!r} must be letters, digits and . _ : - (no '/', no '..')"
        )
    where = f"{where} ({task_id})"
    unknown = sorted(set(raw) - set(_TASK_KEYS))
    if unknown:
        raise EvalConfigError(
            f"{where}: unknown key(s) {', '.join(map(str, unknown))}; a task has "
            f"{', '.join(_TASK_KEYS)}"
        )
    given = raw.get("input", {})
    if not isinstance(given, Mapping):
        raise EvalConfigError(f"{where}: input must be a mapping")
    run_input = dict(given)
    harness = {k: run_input.pop(k) for k in HARNESS_KEYS if k in run_input}
    fixture = _fixture(raw, harness, where)
    matter = harness.get("matter_id", True)
    if matter is not True and matter is not None and not isinstance(matter, str):
        raise EvalConfigError(f"{where}: input.matter_id must be a string or null")
    if fixture is None and isinstance(matter, str):
        fixture, optional = matter, True
    else:
        optional = False
    return Task(
        id=task_id,
        input=run_input,
        graders=_graders(raw.get("graders"), where),
        bucket=_string(raw.get("bucket", "default"), f"{where}: bucket"),
        skill=_optional(raw.get("skill", skill), f"{where}: skill"),
        base_fixture=fixture,
        fixture_optional=optional,
        context=_optional(harness.get("context"), f"{where}: input.context"),
        answers=_answers(harness.get("answers"), where),
        user_id=_optional(harness.get("user_id"), f"{where}: input.user_id"),
        matter=matter is not None,
        description=str(raw.get("description") or ""),
        source=source,
    )


def load_tasks(path: str | Path, *, skill: str | None = None) -> list[Task]:
    """The tasks of a JSON/YAML file (one task, a list, or ``{tasks: [...]}``)."""
    path = Path(path)
    if not path.is_file():
        raise EvalConfigError(f"task file {str(path)!r} does not exist")
    try:
        raw = parse_yaml(path.read_text("utf-8"))
    except DocumentError as exc:
        raise EvalConfigError(f"{path}: {exc.reason}") from None
    if isinstance(raw, Mapping) and "tasks" in raw:
        raw = raw["tasks"]
    items: Sequence[Any] = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(items, list) or not items:
        raise EvalConfigError(f"{path}: expected a task, a list of tasks or {{tasks: [...]}}")
    tasks = [
        task_from_dict(item, skill=skill, source=path, where=f"{path}: task[{i}]")
        for i, item in enumerate(items)
    ]
    check_unique(tasks, str(path))
    return tasks


def check_unique(tasks: Sequence[Task], where: str) -> None:
    """Task ids key cassettes and reports: they must be unique."""
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise EvalConfigError(f"{where}: task id {task.id!r} is used twice; ids must be unique")
        seen.add(task.id)


def _fixture(raw: Mapping[str, Any], harness: Mapping[str, Any], where: str) -> str | None:
    top, inner = raw.get("base_fixture"), harness.get("base_fixture")
    if top is not None and inner is not None and top != inner:
        raise EvalConfigError(f"{where}: base_fixture is given twice with different values")
    name = _optional(top if top is not None else inner, f"{where}: base_fixture")
    if name is not None and not _FIXTURE_NAME.fullmatch(name):
        raise EvalConfigError(
            f"{where}: base_fixture {name!r} must name a folder beside the cases (letters, "
            "digits, '_', '-', '.'), not a path"
        )
    return name


def _graders(raw: Any, where: str) -> tuple[GraderSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise EvalConfigError(f"{where}: graders must be a non-empty list of {{name, config}}")
    specs = []
    for i, item in enumerate(raw):
        here = f"{where}: graders[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise EvalConfigError(f"{here}: must be a mapping with a string name")
        extra = sorted(set(item) - {"name", "config"})
        if extra:
            raise EvalConfigError(f"{here}: unknown key(s) {', '.join(extra)}; use name, config")
        config = item.get("config") or {}
        try:
            built = build_grader(item["name"], config)
        except EvalConfigError as exc:
            raise EvalConfigError(f"{here}: {exc}") from None
        specs.append(GraderSpec(item["name"], dict(config), built))
    return tuple(specs)


def _answers(raw: Any, where: str) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(items, list) or not all(isinstance(a, Mapping) for a in items):
        raise EvalConfigError(
            f"{where}: input.answers must map field_key to value, or be a list of such maps"
        )
    return tuple(dict(a) for a in items)


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise EvalConfigError(f"{what} must be a non-empty string")
    return value


def _optional(value: Any, what: str) -> str | None:
    return None if value is None else _string(value, what)
