"""One trial: a task run once on the real SkillDeck graph, in a fresh workspace.

The workspace is the matter folder ``<files_root>/<trial id>``: the deck's ``files_root`` is
the suite's trials folder and the trial binds its own id as ``matter_id``, after copying the
task's base fixture there. The run carries ``{"skilldeck_case": task id}`` in its metadata, so a
scripted cassette answers with that task's turns; card answers in the task resume the run.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from langchain_core.callbacks import BaseCallbackHandler

from skilldeck.deck import SkillDeck
from skilldeck.errors import SkillDeckError
from skilldeck.evals.cassette import EPOCH_KEY
from skilldeck.evals.environment import environment_state
from skilldeck.evals.outcome import Outcome, diff_files, read_transcript, snapshot
from skilldeck.evals.tasks import Task
from skilldeck.scripted import CASE_KEY
from skilldeck.types import RunResult

__all__ = ["run_trial", "trial_id"]


def trial_id(task: Task, epoch: int) -> str:
    """A folder-, thread- and store-safe id: ``<task id>-e<epoch>`` (store namespaces refuse
    dots). Unique per (task, epoch): the id ends with the epoch's digits."""
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', task.id)}-e{epoch}"


def run_trial(
    deck: SkillDeck,
    task: Task,
    *,
    epoch: int,
    fixture: Path | None,
    run_id: str,
    callbacks: Sequence[BaseCallbackHandler] = (),
) -> Outcome:
    """Run ``task`` once and collect its :class:`Outcome`; never raises for a failing run."""
    assert task.skill is not None, "suites give every task a skill"
    bundle = next(b for b in deck.bundles if b.name == task.skill)
    tid = trial_id(task, epoch)
    workspace = Path(deck.settings.files_root) / tid
    if workspace.exists():
        shutil.rmtree(workspace)
    if fixture is not None:
        shutil.copytree(fixture, workspace)
    else:
        workspace.mkdir(parents=True)
    before = snapshot(workspace)
    thread_id = f"{run_id}-{tid}"
    meta = {CASE_KEY: task.id, EPOCH_KEY: epoch}
    started = time.perf_counter()
    result: RunResult | None = None
    error = None
    try:
        result = deck.run(
            task.input,
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
            result = deck.resume(thread_id, answers, metadata=meta, callbacks=list(callbacks))
    except SkillDeckError as exc:  # e.g. a task's answers do not fit the card
        error = {**exc.to_dict(), "where": "harness"}
    except Exception as exc:  # one broken trial must not end a long suite; it is graded as is
        error = {"code": "HARNESS_ERROR", "message": f"{type(exc).__name__}: {exc}"}
    elapsed = time.perf_counter() - started
    if result is None:  # the run broke off: read what its checkpoints kept, if any
        with contextlib.suppress(SkillDeckError):
            result = deck.get_thread(thread_id)
    transcript, calls = read_transcript(deck, thread_id) if result is not None else ((), ())
    outcome = Outcome(
        trial_id=tid,
        task_id=task.id,
        skill=task.skill,
        epoch=epoch,
        thread_id=thread_id,
        status=result.status if result is not None else "error",
        state=result.state if result is not None else {},
        workspace=workspace,
        card=dict(result.card) if result is not None and result.card else None,
        error=error or (result.error if result is not None else None),
        changes=diff_files(before, snapshot(workspace)),
        transcript=transcript,
        tool_calls=calls,
        fixture=before,
        elapsed_s=elapsed,
        resolve=deck.tools.resolve,
    )
    env = environment_state(outcome, task.input, bundle.data_keys)
    return replace(outcome, environment=env)
