"""Suites in the layout of Memex's ``dart_agent_core`` evals (seed 003), run as they are::

    suite.json                    {"kind": "capability", "task_pass_threshold": 0.75, ...}
    tasks/<bucket>/<task>/task.json
    _starter_pkm/                 a base fixture (named by ``input.base_fixture``)

A ``task.json`` has ``id``, ``description``, ``trials_per_run``, ``timeout_seconds``,
``metadata.failure_bucket``, ``input`` (``fact_id``, ``content``, and ``fixture_dir``, a folder
relative to the suite, or ``base_fixture``, a ``_name/`` folder beside ``tasks/``),
``reference_solution`` and ``graders`` (``[{name, config}]``). The bucket is
``metadata.failure_bucket`` (else the bucket folder's name), each task runs ``trials_per_run``
trials, each trial may take ``timeout_seconds``, and a trial passes when its score (the mean of
the graders that scored; a grader that does not apply scores nothing) reaches
``task_pass_threshold``. The skill is the agent the graders grade (``card_*``: card-agent,
``pkm_*``: pkm-agent) unless one is given.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skilldeck.errors import EvalConfigError
from skilldeck.evals.suites import Kind, Suite, assemble, bundles_in
from skilldeck.evals.tasks import Task, task_from_dict
from skilldeck.skills.trust import TrustSource

__all__ = ["AGENTS", "is_memex_suite", "load_memex_suite"]

#: The agent a grader family grades, by the grader name's prefix.
AGENTS = {"card": "card-agent", "pkm": "pkm-agent"}


def is_memex_suite(path: Path) -> bool:
    """Whether ``path`` is a suite folder in the ``dart_agent_core`` layout."""
    return path.is_dir() and (path / "suite.json").is_file() and (path / "tasks").is_dir()


def _json(file: Path) -> Any:
    try:
        return json.loads(file.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EvalConfigError(f"{file}: not a JSON file: {exc}") from None


def _number(raw: Mapping[str, Any], key: str, where: Path, *, integer: bool = False) -> Any:
    value = raw.get(key)
    kind = int if integer else (int, float)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise EvalConfigError(
            f"{where}: {key} must be a positive {'integer' if integer else 'number'}"
        )
    return value


def _skill(raw: Mapping[str, Any], skill: str | None, where: Path) -> str:
    if skill is not None:
        return skill
    graders: list[Any] = raw["graders"] if isinstance(raw.get("graders"), list) else []
    families = {
        AGENTS.get(str(g.get("name", "")).split("_", 1)[0])
        for g in graders
        if isinstance(g, Mapping)
    }
    families.discard(None)
    if len(families) != 1:
        raise EvalConfigError(
            f"{where}: cannot tell which skill the task grades from its graders; pass --skill"
        )
    return str(families.pop())


def _task(file: Path, root: Path, suite: Mapping[str, Any], skill: str | None) -> Task:
    raw = _json(file)
    if not isinstance(raw, Mapping):
        raise EvalConfigError(f"{file}: a task is a JSON object")
    given = dict(raw.get("input") or {})
    fixture: Path | None = None
    for key in ("fixture_dir", "base_fixture"):
        name = given.pop(key, None)
        if name is None:
            continue
        if not isinstance(name, str) or not name:
            raise EvalConfigError(f"{file}: input.{key} must name a folder")
        folder = (root / name).resolve()
        if not folder.is_relative_to(root.resolve()) or not folder.is_dir():
            raise EvalConfigError(f"{file}: input.{key} {name!r} is not a folder inside {root}")
        fixture = folder
    metadata: Mapping[str, Any] = (
        raw["metadata"] if isinstance(raw.get("metadata"), Mapping) else {}
    )
    bucket = metadata.get("failure_bucket") or file.parent.parent.name
    task = task_from_dict(
        {
            "id": raw.get("id"),
            "bucket": str(bucket),
            "description": raw.get("description") or "",
            "input": given,
            "graders": raw.get("graders"),
        },
        skill=_skill(raw, skill, file),
        source=file,
        where=str(file),
    )
    threshold = suite.get("task_pass_threshold")
    return dataclasses.replace(
        task,
        trials=_number(raw, "trials_per_run", file, integer=True),
        timeout_s=_number(raw, "timeout_seconds", file),
        pass_threshold=float(threshold) if threshold is not None else None,
        fixture_path=fixture,
        reference=raw.get("reference_solution"),
    )


def load_memex_suite(
    folder: str | Path,
    *,
    skill: str | None = None,
    skills_path: Sequence[Path] = (),
    trust: TrustSource = (),
) -> Suite:
    """The suite in ``folder``, with the skills under ``skills_path`` (default: built-in;
    ``trust``: bundles whose scripts may run, see :func:`~skilldeck.skills.load_skills`).

    Raises:
        EvalConfigError: the folder is not such a suite, or a file in it is malformed (named).
    """
    root = Path(folder)
    if not is_memex_suite(root):
        raise EvalConfigError(f"{root}: not a suite folder (suite.json and tasks/ expected)")
    meta = _json(root / "suite.json")
    if not isinstance(meta, Mapping):
        raise EvalConfigError(f"{root / 'suite.json'}: must be a JSON object")
    threshold = meta.get("task_pass_threshold")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 <= threshold <= 1
    ):
        raise EvalConfigError(f"{root / 'suite.json'}: task_pass_threshold must be in [0, 1]")
    files = sorted((root / "tasks").glob("*/*/task.json"))
    if not files:
        raise EvalConfigError(f"{root}: no tasks/<bucket>/<task>/task.json")
    tasks = [_task(file, root, meta, skill) for file in files]
    kind: Kind = "regression" if meta.get("kind") == "regression" else "capability"
    kinds = {f"{t.skill}/{t.bucket}": kind for t in tasks}
    name = str(meta.get("name") or root.name)
    bundles = bundles_in(skills_path, trust)
    return assemble(name, [], bundles, tasks, kinds, [root], root / "suite.json")
