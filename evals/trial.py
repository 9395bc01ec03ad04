"""One trial: a task run once on the real SkillDeck graph, in a fresh workspace.

The workspace is the matter folder ``<files_root>/<trial id>``: the deck's ``files_root`` is
the suite's trials folder and the trial binds its own id as ``matter_id``, after copying the
task's base fixture there (a folder; a file fixture is left to the skill's setup hook). The
skill's eval setup hook, if any, then prepares the trial and gives the run input (see
:mod:`skilldeck.evals.setup`). The run carries ``{"skilldeck_case": task id}`` in its metadata, so a
scripted cassette answers with that task's turns; card answers in the task resume the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from skilldeck import Resume
from skilldeck.deck import SkillDeck
from skilldeck.errors import EvalConfigError, SkillDeckError
from skilldeck.evals.cassette import EPOCH_KEY
from skilldeck.evals.environment import environment_state
from skilldeck.evals.outcome import Outcome, diff_files, read_transcript, snapshot
from skilldeck.evals.setup import EvalSetup, RunScope, TrialSetup
from skilldeck.evals.tasks import Task
from skilldeck.nodes.model_call import RUN_TIMEOUT_KEY
from skilldeck.scripted import CASE_KEY
from skilldeck.types import RunResult

__all__ = ["outcome_of", "run_trial", "trial_id"]


def trial_id(task: Task, epoch: int) -> str:
    """An opaque, folder-, thread- and store-safe id: ``t<digest of the task id>-e<epoch>``.

    The model sees it (it is the trial's ``matter_id`` and in its thread id), so it must not
    carry the task id: a case named ``neg_webinar_not_event`` would tell the model the answer.
    It is stable, so a recorded cassette's requests match on replay; reports name the task.
    """
    return f"t{hashlib.sha256(task.id.encode()).hexdigest()[:12]}-e{epoch}"


def run_trial(
    deck: SkillDeck,
    task: Task,
    *,
    epoch: int,
    fixture: Path | None,
    run_id: str,
    callbacks: Sequence[BaseCallbackHandler] = (),
    setup: EvalSetup | None = None,
    find_fixture: Callable[[str], Path] | None = None,
    scope: RunScope | None = None,
) -> Outcome:
    """Run ``task`` once and collect its :class:`Outcome`; never raises for a failing run.

    ``setup`` (the skill's hook) prepares the trial first, with ``find_fixture`` to look up
    more fixtures by name and ``scope`` shared by the run's trials.

    Raises:
        EvalConfigError: the setup hook failed (nothing ran).
    """
    assert task.skill is not None, "suites give every task a skill"
    bundle = next(b for b in deck.bundles if b.name == task.skill)
    tid = trial_id(task, epoch)
    workspace = _workspaces(deck) / tid
    if workspace.exists():
        shutil.rmtree(workspace)
    if fixture is not None and fixture.is_dir():
        shutil.copytree(fixture, workspace)
    else:
        workspace.mkdir(parents=True)
    run_input = dict(task.input)
    if setup is not None:
        run_input = setup(
            task,
            TrialSetup(
                id=tid,
                deck=deck,
                bundle=bundle,
                workspace=workspace,
                fixture=fixture,
                user_id=task.user_id,
                find_fixture=find_fixture or _no_fixtures,
                scope=scope or RunScope(),
            ),
        )
    before = snapshot(workspace)
    thread_id = f"{run_id}-{tid}"
    meta: dict[str, Any] = {CASE_KEY: task.id, EPOCH_KEY: epoch}
    if task.timeout_s is not None:
        meta[RUN_TIMEOUT_KEY] = task.timeout_s
    started = time.perf_counter()
    result: RunResult | None = None
    error = None
    try:
        result = deck.run(
            run_input,
            context=task.context or bundle.contexts[0],
            thread_id=thread_id,
            user_id=task.user_id,
            matter_id=tid if task.matter else None,
            next_skill=task.skill,
            metadata=meta,
            callbacks=list(callbacks),
        )
        for answers in task.answers:
            if result.status != "interrupted":
                break
            result = deck.run(Resume(thread_id, answers), metadata=meta, callbacks=list(callbacks))
    except SkillDeckError as exc:  # e.g. a task's answers do not fit the card
        error = {**exc.to_dict(), "where": "harness"}
    except Exception as exc:  # one broken trial must not end a long suite; it is graded as is
        error = {"code": "HARNESS_ERROR", "message": f"{type(exc).__name__}: {exc}"}
    elapsed = time.perf_counter() - started
    if result is None:  # the run broke off: read what its checkpoints kept, if any
        with contextlib.suppress(SkillDeckError):
            result = deck.get_thread(thread_id)
    return outcome_of(
        deck,
        task,
        result,
        thread_id=thread_id,
        trial_id=tid,
        epoch=epoch,
        workspace=workspace,
        before=before,
        error=error,
        elapsed_s=elapsed,
    )


def outcome_of(
    deck: SkillDeck,
    task: Task,
    result: RunResult | None,
    *,
    thread_id: str | None = None,
    trial_id: str | None = None,
    epoch: int = 0,
    workspace: Path | None = None,
    before: Mapping[str, bytes] | None = None,
    error: dict[str, Any] | None = None,
    elapsed_s: float = 0.0,
) -> Outcome:
    """What graders see of ``result``, a run of ``task`` on ``deck``: the final state, the
    transcript read back from the checkpoints, the environment state and, when ``before``
    (the workspace's snapshot before the run) is given, the workspace diff.

    :func:`run_trial` builds its outcome with it; a test that runs a task on its own deck
    grades the run the same way with ``grade(task, outcome_of(deck, task, result))``.
    """
    skill = task.skill
    if skill is None and result is not None:  # a task file without skills: the one that ran
        skill = (result.state.get("attempt") or {}).get("skill")
    bundle = next((b for b in deck.bundles if b.name == skill), None)
    thread_id = thread_id or (result.thread_id if result is not None else "")
    if workspace is None:
        matter = result.state.get("matter_id") if result is not None else None
        workspace = _workspaces(deck) / str(matter or "")
    transcript, calls = read_transcript(deck, thread_id) if result is not None else ((), ())
    outcome = Outcome(
        trial_id=trial_id or thread_id,
        task_id=task.id,
        skill=str(skill),
        epoch=epoch,
        thread_id=thread_id,
        status=result.status if result is not None else "error",
        state=result.state if result is not None else {},
        workspace=workspace,
        card=dict(result.card) if result is not None and result.card else None,
        error=error or (result.error.dump() if result is not None and result.error else None),
        changes=diff_files(before, snapshot(workspace)) if before is not None else (),
        transcript=transcript,
        tool_calls=calls,
        fixture=before or {},
        elapsed_s=elapsed_s,
        resolve=deck.tools.resolve,
    )
    keys = bundle.data_keys if bundle is not None else ()
    return replace(outcome, environment=environment_state(outcome, task.input, keys))


def _no_fixtures(name: str) -> Path:
    raise EvalConfigError(f"no fixture folders to look {name!r} up in (run the task in a suite)")


def _workspaces(deck: SkillDeck) -> Path:
    """The folder of the trials' matter folders: a suite's deck always has a files root."""
    assert deck.settings.files_root is not None, "run_suite sets the files root"
    return Path(deck.settings.files_root)
