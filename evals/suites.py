"""Suites: the tasks of one or more skills, and whether each bucket is capability or regression.

A suite file (YAML), paths relative to it::

    name: memex
    skills: [card-agent, pkm-agent]     # each skill's cases.yaml
    skills_path: ../skills              # where the bundles are (default: the built-in skills)
    tasks: [{file: extra.json, skill: card-agent}]   # more task files (optional)
    fixtures: [fixtures/]               # more folders to look base fixtures up in (optional)
    kinds:                              # bucket -> capability | regression
      card-agent/positive: regression   # a bucket is "<skill>/<bucket>"; a bare bucket name
                                        # applies to every skill

``skilldeck eval run --skill NAME`` uses the skill's own suite file,
``<bundle>/evals/suite.yaml``, when it exists (only ``kinds`` is needed there). Every bucket is
a capability bucket until ``skilldeck eval promote`` records it as regression.

Base fixtures are looked up, by name, in ``fixtures/`` next to the task file, in the bundle's
``fixtures/`` and in the suite's ``fixtures`` folders. A folder is copied as the trial's
workspace. A file (``<name>.<ext>``, e.g. a ``.jsonl`` of messages) is for the skill's eval
setup hook (``scripts/eval_setup.py``, see :mod:`skilldeck.evals.setup`) to read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from skilldeck._internal.documents import DocumentError, parse_yaml
from skilldeck.errors import EvalConfigError
from skilldeck.evals.setup import EvalSetup, load_setup
from skilldeck.evals.tasks import Task, check_unique, load_tasks
from skilldeck.skills import SkillBundle, builtin_skills_dir, load_skills
from skilldeck.skills.trust import TrustSource

__all__ = [
    "KINDS",
    "Kind",
    "Suite",
    "assemble",
    "bundles_in",
    "load_suite",
    "promote",
    "skill_suite_path",
    "suite_for_skill",
]

Kind = Literal["capability", "regression"]
KINDS: tuple[Kind, ...] = ("capability", "regression")
_SUITE_KEYS = ("name", "skills", "skills_path", "tasks", "fixtures", "kinds")


@dataclass(frozen=True)
class Suite:
    """Tasks with their bundles, fixture folders and bucket kinds."""

    name: str
    tasks: tuple[Task, ...]
    bundles: tuple[SkillBundle, ...]
    kinds: Mapping[str, Kind] = field(default_factory=dict)
    fixture_dirs: tuple[Path, ...] = ()
    path: Path | None = None
    #: Each skill's eval setup hook, for the skills that have one.
    setups: Mapping[str, EvalSetup] = field(default_factory=dict)

    @staticmethod
    def bucket_key(task: Task) -> str:
        return f"{task.skill}/{task.bucket}"

    def kind(self, bucket_key: str) -> Kind:
        """``regression`` if the bucket (or its bare name) was promoted, else ``capability``."""
        bare = bucket_key.split("/", 1)[-1]
        return self.kinds.get(bucket_key) or self.kinds.get(bare) or "capability"

    def buckets(self) -> list[str]:
        return sorted({self.bucket_key(t) for t in self.tasks})

    def bundle(self, skill: str) -> SkillBundle:
        return next(b for b in self.bundles if b.name == skill)

    def fixture(self, task: Task) -> Path | None:
        """``task``'s base fixture: a folder to copy as its workspace, a file for its skill's
        setup hook, or ``None`` (an empty workspace)."""
        if task.fixture_path is not None:
            return task.fixture_path
        if task.base_fixture is None:
            return None
        return self.find_fixture(
            task, task.base_fixture, optional=task.fixture_optional, what="base fixture"
        )

    def find_fixture(
        self, task: Task, name: str, *, optional: bool = False, what: str = "fixture"
    ) -> Path | None:
        """The fixture ``name`` for ``task``: a folder ``name``, or else the one file
        ``name.<ext>``, in the first place that has one; raise if none does (unless
        ``optional``)."""
        places = [task.source.parent / "fixtures"] if task.source else []
        places += [self.bundle(str(task.skill)).path / "fixtures", *self.fixture_dirs]
        for place in places:
            if (place / name).is_dir():
                return place / name
            files = sorted(p for p in place.glob(f"{name}.*") if p.is_file())
            if len(files) > 1:
                raise EvalConfigError(
                    f"task {task.id!r}: {what} {name!r} is ambiguous in {place}: "
                    f"{', '.join(p.name for p in files)}; keep one"
                )
            if files:
                return files[0]
        if optional:
            return None
        looked = ", ".join(str(p) for p in places)
        raise EvalConfigError(
            f"task {task.id!r}: {what} {name!r} not found in {looked}; "
            f"create the folder or fix the name"
        )


def bundles_in(paths: Sequence[Path], trust: TrustSource = ()) -> dict[str, SkillBundle]:
    """The skills under ``paths`` (the built-in skills when there are none), by name; the
    scripts of those ``trust`` names may run too (see :func:`~skilldeck.skills.load_skills`)."""
    return {b.name: b for b in load_skills(list(paths) or builtin_skills_dir(), trust=trust)}


def assemble(
    name: str,
    skills: Sequence[str],
    bundles: Mapping[str, SkillBundle],
    extra: Sequence[Task],
    kinds: Mapping[str, Kind],
    fixture_dirs: Sequence[Path],
    path: Path | None,
) -> Suite:
    tasks: list[Task] = []
    for skill in skills:
        bundle = bundles.get(skill)
        if bundle is None:
            raise EvalConfigError(
                f"suite {name!r}: no skill {skill!r}; found: {', '.join(sorted(bundles))}"
            )
        if bundle.cases_path is None:
            raise EvalConfigError(f"suite {name!r}: skill {skill!r} has no cases.yaml")
        tasks += load_tasks(bundle.cases_path, skill=skill)
    for task in extra:
        if task.skill not in bundles:
            raise EvalConfigError(f"task {task.id!r}: skill {task.skill!r} is not loaded")
    tasks += extra
    check_unique(tasks, f"suite {name!r}")
    used = [b for n, b in bundles.items() if n in {t.skill for t in tasks}]
    for bundle in used:  # every trial would refuse to run: say so before any does
        bundle.require_trust("preprocess", "validate")
    setups = {b.name: hook for b in used if (hook := load_setup(b)) is not None}
    suite = Suite(
        name=name,
        tasks=tuple(tasks),
        bundles=tuple(used),
        kinds=dict(kinds),
        fixture_dirs=tuple(fixture_dirs),
        path=path,
        setups=setups,
    )
    for task in suite.tasks:  # a missing fixture fails now, before any trial runs
        found = suite.fixture(task)
        if found is not None and found.is_file() and task.skill not in setups:
            raise EvalConfigError(
                f"task {task.id!r}: base fixture {found} is a file, which only a skill's "
                "scripts/eval_setup.py can use; a workspace fixture is a folder"
            )
    return suite


def load_suite(path: str | Path, *, skill: str | None = None, trust: TrustSource = ()) -> Suite:
    """Read a suite file; ``skill`` is the default ``skills`` (for a bundle's own file);
    ``trust``: bundles whose scripts may run (see :func:`~skilldeck.skills.load_skills`)."""
    path = Path(path)
    raw = _read(path)
    unknown = sorted(set(raw) - set(_SUITE_KEYS))
    if unknown:
        raise EvalConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; use {_SUITE_KEYS}")
    here = path.parent
    default_root = [path.parent.parent.parent] if skill else []
    roots = [here / p for p in _list(raw.get("skills_path"), path, "skills_path")] or default_root
    bundles = bundles_in(roots, trust)
    skills = _list(raw.get("skills"), path, "skills") or ([skill] if skill else [])
    extra: list[Task] = []
    for i, item in enumerate(raw.get("tasks") or []):
        if not isinstance(item, Mapping) or not isinstance(item.get("file"), str):
            raise EvalConfigError(f"{path}: tasks[{i}]: must be {{file, skill}}")
        extra += load_tasks(here / item["file"], skill=item.get("skill"))
    if not skills and not extra:
        raise EvalConfigError(f"{path}: the suite has no skills and no tasks")
    fixtures = [here / p for p in _list(raw.get("fixtures"), path, "fixtures")]
    name = str(raw.get("name") or (skill or path.stem))
    return assemble(name, skills, bundles, extra, _kinds(raw, path), fixtures, path)


def skill_suite_path(bundle: SkillBundle) -> Path:
    """Where a skill keeps its suite settings: ``<bundle>/evals/suite.yaml``."""
    return bundle.path / "evals" / "suite.yaml"


def suite_for_skill(skill: str, skills_path: Sequence[Path] = (), trust: TrustSource = ()) -> Suite:
    """The suite of one skill's ``cases.yaml`` (with its ``evals/suite.yaml`` if any)."""
    bundles = bundles_in(skills_path, trust)
    bundle = bundles.get(skill)
    if bundle is None:
        raise EvalConfigError(f"no skill {skill!r}; found: {', '.join(sorted(bundles))}")
    own = skill_suite_path(bundle)
    if own.is_file():
        return load_suite(own, skill=skill, trust=trust)
    return assemble(skill, [skill], bundles, [], {}, [], None)


def promote(bucket: str, suite_file: Path, known: Sequence[str]) -> bool:
    """Record ``bucket`` as a regression bucket in ``suite_file``; False if it already was.

    ``known`` are the suite's bucket keys; ``bucket`` must be one of them or a bare bucket
    name one of them ends with.
    """
    bare = {k.split("/", 1)[-1] for k in known}
    if bucket not in known and bucket not in bare:
        raise EvalConfigError(
            f"no bucket {bucket!r} in the suite; buckets: {', '.join(sorted(known))}"
        )
    raw = _read(suite_file) if suite_file.is_file() else {}
    kinds = dict(raw.get("kinds") or {})
    if kinds.get(bucket) == "regression":
        return False
    kinds[bucket] = "regression"
    raw["kinds"] = dict(sorted(kinds.items()))
    suite_file.parent.mkdir(parents=True, exist_ok=True)
    suite_file.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True), "utf-8")
    return True


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise EvalConfigError(f"suite file {str(path)!r} does not exist")
    try:
        raw = parse_yaml(path.read_text("utf-8")) or {}
    except DocumentError as exc:
        raise EvalConfigError(f"{path}: {exc.reason}") from None
    if not isinstance(raw, dict):
        raise EvalConfigError(f"{path}: a suite file is a mapping (name, skills, kinds, ...)")
    return raw


def _list(value: Any, path: Path, key: str) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise EvalConfigError(f"{path}: {key} must be a string or a list of strings")
    return list(items)


def _kinds(raw: Mapping[str, Any], path: Path) -> dict[str, Kind]:
    kinds = raw.get("kinds") or {}
    if not isinstance(kinds, Mapping) or not all(v in KINDS for v in kinds.values()):
        raise EvalConfigError(f"{path}: kinds must map buckets to capability or regression")
    return {str(k): v for k, v in kinds.items()}
