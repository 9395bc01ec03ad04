"""Per-skill eval setup: a bundle's ``scripts/eval_setup.py`` prepares each trial.

Some cases need more than a workspace folder before they can run: nomemory-recall needs the
user's messages in the deck's memory, rag-retrieve a knowledge folder indexed. Such a bundle
ships ``scripts/eval_setup.py`` defining::

    def setup(task: Task, trial: TrialSetup) -> Mapping[str, Any] | None: ...

The suite loads the hook with the bundle's cases (an import error or a missing ``setup`` is an
:class:`~skilldeck.errors.EvalConfigError` naming the file, before anything runs), and only
from a bundle the deck trusts (:mod:`skilldeck.skills.trust`; else
:class:`~skilldeck.errors.UntrustedScriptsError`). The harness
calls it before each trial, after the base fixture is copied into the workspace. It may fill
the deck's stores (``trial.deck.memory``, ``trial.deck.knowledge``) and the workspace, and it
returns the run input (``None``: ``task.input`` as is), so keys only the hook reads do not
reach the skill. If it raises, the suite stops with an ``EvalConfigError`` naming the file and
the task: nothing is graded on a half-built environment.

An eval run's deck opens its stores in the run's folder, never the user's, so a hook writes
only there. Hooks get the bundle from ``trial.bundle``; data flows one way: bundle, loader,
harness.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from skilldeck.errors import BundleError, EvalConfigError
from skilldeck.skills import SkillBundle
from skilldeck.skills.loader import load_script

if TYPE_CHECKING:
    from skilldeck.deck import SkillDeck
    from skilldeck.evals.tasks import Task

__all__ = ["EvalSetup", "RunScope", "TrialSetup", "load_setup"]

T = TypeVar("T")


class RunScope:
    """What the trials of one suite run share: :meth:`once` results, e.g. an indexed folder."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[str, Any] = {}

    def once(self, key: str, make: Callable[[], T]) -> T:
        """``make()`` the first time ``key`` is asked for in this run, its result after that.

        Trials run in parallel; the first caller makes, the others wait for it.
        """
        with self._lock:
            if key not in self._done:
                self._done[key] = make()
            value: T = self._done[key]
            return value


@dataclass(frozen=True)
class TrialSetup:
    """One trial as a setup hook sees it.

    Attributes:
        id: the trial id (also its ``matter_id`` when the task runs with a matter).
        deck: the suite's deck; its ``memory`` and ``knowledge`` are the run's own stores.
        bundle: the skill under test.
        workspace: the trial's matter folder, holding a copy of a folder base fixture.
        fixture: the task's base fixture as found (a folder or a file), or ``None``.
        user_id: the user the run is bound to, if the task names one.
        find_fixture: a fixture by name, looked up where base fixtures are.
        scope: what the run's trials share (see :meth:`once`).
    """

    id: str
    deck: SkillDeck
    bundle: SkillBundle
    workspace: Path
    fixture: Path | None
    user_id: str | None
    find_fixture: Callable[[str], Path]
    scope: RunScope = field(default_factory=RunScope)

    def once(self, key: str, make: Callable[[], T]) -> T:
        """``make()`` once per suite run (see :meth:`RunScope.once`)."""
        return self.scope.once(key, make)


SetupFn = Callable[["Task", TrialSetup], Mapping[str, Any] | None]


@dataclass(frozen=True)
class EvalSetup:
    """A loaded ``scripts/eval_setup.py``: call it to prepare a trial and get its run input."""

    file: Path
    fn: SetupFn = field(repr=False)

    def __call__(self, task: Task, trial: TrialSetup) -> dict[str, Any]:
        """The run input for ``task``; raise :class:`EvalConfigError` naming the file."""
        try:
            given = self.fn(task, trial)
        except Exception as exc:
            raise EvalConfigError(
                f"{self.file}: setup failed for task {task.id!r}: {type(exc).__name__}: {exc}"
            ) from exc
        if given is None:
            return dict(task.input)
        if not isinstance(given, Mapping):
            raise EvalConfigError(
                f"{self.file}: setup returned {type(given).__name__} for task {task.id!r}; "
                "return the run input (a mapping) or None"
            )
        return dict(given)


def load_setup(bundle: SkillBundle) -> EvalSetup | None:
    """The bundle's eval setup hook, or ``None`` when it has none.

    Raises:
        UntrustedScriptsError: the bundle is not trusted (nothing was imported).
        EvalConfigError: the file does not import or defines no callable ``setup``.
    """
    file = bundle.eval_setup_path
    if file is None:
        return None
    try:
        fn = load_script(bundle, "eval_setup")
    except BundleError as exc:
        raise EvalConfigError(f"{exc.file}: {exc.reason}") from None
    return EvalSetup(file, fn)
