"""``check_skills``: every problem of a skills folder at once, without running anything.

It loads each bundle as a deck would (:func:`~skilldeck.skills.loader.inspect_bundle`): the
scripts of a bundle the deck does not trust are never imported, and a warning names them. It checks
that the bundles form a deck (names, modes, tools: the graph builder's checks), and goes on to
what a run or an eval would trip on later: the bundle's eval cases (``cases.yaml``) and its
scripted cassette, whose ``output`` turns are held to the rules a run applies (the same code).
``skilldeck check DIR`` prints the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skilldeck.errors import SkillDeckError
from skilldeck.settings import Settings
from skilldeck.skills.bundle import SkillBundle
from skilldeck.skills.loader import inspect_bundle, skill_folders, trust_policy
from skilldeck.skills.problems import Problems
from skilldeck.skills.trust import TrustPolicy, TrustSource
from skilldeck.types import Problem

__all__ = ["CheckReport", "check_skills"]


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What :func:`check_skills` found: the bundles that load, and every problem."""

    folders: tuple[Path, ...]
    bundles: tuple[SkillBundle, ...]
    problems: tuple[Problem, ...]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    def ok(self, *, strict: bool = False) -> bool:
        """No errors (and, with ``strict``, no warnings)."""
        return not (self.errors or (strict and self.warnings))

    def of(self, folder: Path) -> list[Problem]:
        """The problems of the bundle in ``folder``."""
        return [p for p in self.problems if Path(p.file).is_relative_to(folder)]


def check_skills(
    paths: str | Path | Sequence[str | Path],
    *,
    reference_token_budget: int = 4000,
    settings: Settings | None = None,
    trust: TrustSource = (),
) -> CheckReport:
    """Check every bundle under ``paths`` (a skills folder, a bundle folder, or a list).
    MCP servers the skills name are asked for their tools (``settings``: where else they are
    configured, and how long they may take). Scripts are imported only from the bundles a deck
    of ``settings`` and ``trust`` would trust (see :class:`~skilldeck.SkillDeck`).

    Raises:
        BundleError: a folder in ``paths`` does not exist.
    """
    from skilldeck.graph.builder import deck_problems, deck_tools
    from skilldeck.tools import default_registry
    from skilldeck.tools.mcp import tools_for_skills

    roots = [paths] if isinstance(paths, str | Path) else list(paths)
    settings = settings or Settings()
    policy = trust_policy(TrustPolicy.of(settings.trusted_paths, trust))
    problems = Problems()
    folders: list[Path] = []
    bundles: list[SkillBundle] = []
    seen: dict[str, Path] = {}
    for root in roots:
        for folder in skill_folders(Path(root).resolve()):
            folders.append(folder)
            bundle, found = inspect_bundle(
                folder,
                order=len(bundles),
                reference_token_budget=reference_token_budget,
                trust=policy,
            )
            problems.extend(found.items)
            if bundle is None:
                continue
            if bundle.name in seen:
                problems.error(
                    folder, "$.name", f"skill {bundle.name!r} is also in {seen[bundle.name]}"
                )
                continue
            seen[bundle.name] = folder
            bundles.append(bundle)
            problems.extend(_cases(bundle))
            problems.extend(_cassette(bundle, settings))
    # Tool names only: the stores behind the memory, knowledge and matters tools are never opened.
    try:
        mcp = tools_for_skills(bundles, settings.mcp_config, settings.mcp_timeout_s)
    except SkillDeckError as exc:  # the servers' tools are unknown: report it, check the rest
        problems.error(folders[0] if folders else ".", "$.tools", str(exc))
        mcp = []
    registry = default_registry(".", memory=_never, knowledge=_never, matters=_never)
    bound, registry = deck_tools(bundles, registry, mcp)
    problems.extend(deck_problems(bound, registry))
    return CheckReport(tuple(folders), tuple(bundles), tuple(problems.items))


def _never() -> Any:
    raise AssertionError("check_skills never calls a tool")


def _cases(bundle: SkillBundle) -> list[Problem]:
    """The eval cases must load as tasks (what ``skilldeck eval run`` would refuse)."""
    from skilldeck.errors import EvalConfigError
    from skilldeck.evals.tasks import load_tasks

    if bundle.cases_path is None:
        return []
    try:
        load_tasks(bundle.cases_path, skill=bundle.name)
    except EvalConfigError as exc:
        return [
            Problem(str(bundle.cases_path), "$", str(exc).removeprefix(f"{bundle.cases_path}: "))
        ]
    return []


def _cassette(bundle: SkillBundle, settings: Settings) -> list[Problem]:
    """A bundle whose own model is a scripted cassette: the cassette must load, and each of
    its ``output`` turns for this skill, unless marked invalid, must pass every rule a run
    holds it to (the same :class:`~skilldeck.skills.contract.OutputContract`, with the host's
    limits; only the pins and ``scripts/validate.py`` need a run's state)."""
    from skilldeck.errors import ModelConfigError
    from skilldeck.scripted import load_script
    from skilldeck.skills.contract import OutputLimits

    execution = bundle.execution
    if execution.provider != "scripted" or not execution.model:
        return []
    file = (bundle.path / execution.model).resolve()
    try:
        script = load_script(file)
    except ModelConfigError as exc:
        return [Problem(str(file), "$", str(exc).removeprefix(f"{file}: "))]
    found = []
    limits = OutputLimits(settings.max_output_bytes, settings.max_output_depth)
    lists = [("skills", script.skills.get(bundle.name, []))] + [
        (f"cases.{case}.skills", turns.get(bundle.name, [])) for case, turns in script.cases.items()
    ]
    for where, turns in lists:
        for i, turn in enumerate(turns):
            if "output" not in turn or turn.get("invalid"):
                continue
            _, errors = bundle.contract.problems(turn["output"], limits)
            for error in errors:
                path = f"$.{where}.{bundle.name}[{i}].output{error['path'].removeprefix('$')}"
                found.append(Problem(str(file), path, error["message"]))
    return found
