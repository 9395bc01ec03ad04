"""Run a suite: every task for N epochs on one deck, trials in parallel with a bound."""

from __future__ import annotations

import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from skilldeck.deck import SkillDeck
from skilldeck.errors import EvalConfigError, SkillDeckError
from skilldeck.evals.cassette import CassetteRecorder
from skilldeck.evals.graders import GradeContext, GradeResult
from skilldeck.evals.judge import Judge
from skilldeck.evals.outcome import Outcome
from skilldeck.evals.report import build_report
from skilldeck.evals.setup import RunScope
from skilldeck.evals.suites import Suite
from skilldeck.evals.tasks import GraderSpec, Task
from skilldeck.evals.trial import run_trial, trial_id
from skilldeck.settings import Settings

__all__ = ["TrialResult", "grade", "run_suite"]


@dataclass(frozen=True)
class TrialResult:
    """A graded trial. ``score`` is the mean of the scored graders; ``passed`` needs every
    scored grader to pass, or the score to reach the task's ``pass_threshold`` when it has one
    (``None`` when no grader scored)."""

    task: Task
    outcome: Outcome
    grades: tuple[tuple[GraderSpec, GradeResult], ...]

    @property
    def score(self) -> float | None:
        scores = [r.score for _, r in self.grades if r.score is not None]
        return round(sum(scores) / len(scores), 6) if scores else None

    @property
    def passed(self) -> bool | None:
        threshold = self.task.pass_threshold
        if threshold is not None:
            score = self.score
            return None if score is None else score >= threshold
        verdicts = [r.passed for _, r in self.grades if r.passed is not None]
        return all(verdicts) if verdicts else None


def grade(task: Task, outcome: Outcome, judge: Judge | None = None) -> TrialResult:
    """Run every grader of ``task`` on ``outcome`` (a crashing grader scores 0, with why)."""
    grades = []
    judged = 0
    for spec in task.graders:
        context = GradeContext(task, outcome, judge, judged)
        judged += spec.grader.uses_judge
        try:
            result = spec.grader.evaluate(context)
        except Exception as exc:
            result = GradeResult.check(False, f"grader crashed: {type(exc).__name__}: {exc}")
        grades.append((spec, result))
    return TrialResult(task, outcome, tuple(grades))


def run_suite(
    suite: Suite,
    *,
    out: Path,
    model: str | None = None,
    judge: Judge | None = None,
    epochs: int = 1,
    concurrency: int = 1,
    record: Path | None = None,
    settings: Settings | None = None,
    checkpoint: str | None = None,
    on_trial: Callable[[TrialResult], None] | None = None,
    callbacks: Sequence[BaseCallbackHandler] = (),
) -> dict[str, Any]:
    """Run ``suite`` and return its report (see :func:`build_report`); nothing is written
    except the trial workspaces, the run's stores and checkpoints under ``out`` and the
    ``record`` cassette. ``callbacks`` (LangChain handlers, e.g. a tracer) see every run's
    model and tool calls.

    The deck's message store, Chroma and knowledge base are fresh ones in ``out/stores/``
    (whatever ``settings`` say), so cases see only what their setup hooks put there and the
    user's own stores are never touched.

    Raises:
        EvalConfigError: bad ``epochs``/``concurrency``, or a skill's setup hook failed;
            ModelConfigError: no usable model.
    """
    if epochs < 1 or concurrency < 1:
        raise EvalConfigError("epochs and concurrency must be at least 1")
    out.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    update: dict[str, Any] = {
        "files_root": str((out / "workspaces").resolve()),
        **_fresh_stores(out / "stores", run_id),
    }
    if model:
        update["model"] = model
    deck_settings = (settings or Settings()).model_copy(update=update)
    recorder = CassetteRecorder() if record is not None else None
    callbacks = [*callbacks, *([recorder] if recorder else [])]
    if judge is not None and recorder is not None:
        judge = judge.with_callbacks(callbacks)
    jobs = [(task, epoch) for task in suite.tasks for epoch in range(task.trials or epochs)]
    ids = Counter(trial_id(task, 0) for task in suite.tasks)  # a digest of the task id
    repeated = sorted({t.id for t in suite.tasks if ids[trial_id(t, 0)] > 1})
    if repeated:
        raise EvalConfigError(
            f"task id(s) {', '.join(repeated)} appear more than once in the suite; "
            "give each task its own id"
        )
    fixtures = {task.id: suite.fixture(task) for task in suite.tasks}
    scope = RunScope()
    started, clock = datetime.now(UTC), time.perf_counter()
    results: list[TrialResult] = []
    url = checkpoint or f"sqlite:///{(out / 'checkpoints.sqlite').resolve()}"
    with SkillDeck(list(suite.bundles), checkpointer=url, settings=deck_settings) as deck:
        deck.check_models()
        models = {b.name: _label(deck, b.name) for b in suite.bundles}
        modes = {b.name: _mode(deck, b.name) for b in suite.bundles}

        def trial(task: Task, epoch: int) -> TrialResult:
            outcome = run_trial(
                deck,
                task,
                epoch=epoch,
                fixture=fixtures[task.id],
                run_id=run_id,
                callbacks=callbacks,
                setup=suite.setups.get(str(task.skill)),
                find_fixture=lambda name: _found(suite.find_fixture(task, name)),
                scope=scope,
            )
            return grade(task, outcome, judge)

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            futures = [pool.submit(trial, task, epoch) for task, epoch in jobs]
            try:
                for future in as_completed(futures):
                    result = future.result()
                    results.append(result)
                    if on_trial is not None:
                        on_trial(result)
            except BaseException:  # a failed setup stops the suite: do not start more trials
                pool.shutdown(cancel_futures=True)
                raise
    if recorder is not None and record is not None:
        verdicts = {r.task.id: r.passed for r in results if r.outcome.epoch == 0}
        recorder.write(
            record,
            {
                "models": models,
                "output_modes": modes,
                "date": started.date().isoformat(),
                "passed": dict(sorted(verdicts.items())),
            },
        )
    meta = {
        "suite": suite.name,
        "run_id": run_id,
        "started_at": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.perf_counter() - clock, 3),
        "models": models,
        "judge_model": judge.label if judge else None,
        "epochs": epochs,
        "concurrency": concurrency,
        "recorded_to": str(record) if record else None,
    }
    return build_report(suite, results, meta)


def _fresh_stores(folder: Path, run_id: str) -> dict[str, Any]:
    """Settings for a run's own stores under ``folder`` (earlier runs' stores removed)."""
    if folder.is_dir():
        shutil.rmtree(folder)
    own = (folder / run_id).resolve()
    return {
        "messages_path": str(own / "messages.sqlite"),
        "chroma_path": str(own / "chroma"),
        "chroma_url": None,
        "knowledge_path": str(own / "knowledge"),
    }


def _found(path: Path | None) -> Path:
    assert path is not None, "find_fixture raises when a fixture is missing"
    return path


def _mode(deck: SkillDeck, skill: str) -> str | None:
    """The output mode the skill's calls used (``auto`` resolved), or ``None`` for rules."""
    try:
        return deck.output_mode(skill)
    except SkillDeckError:
        return None


def _label(deck: SkillDeck, skill: str) -> str:
    try:
        return deck.model_spec(skill).label
    except SkillDeckError:
        return "rules"
