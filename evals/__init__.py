"""The evaluation harness: tasks, graders, suites, reports, comparisons, record and replay.

Trials run the real SkillDeck graph (the same compiled graph an app embeds) in a fresh
workspace per trial; see :func:`run_suite` and ``skilldeck eval --help``.

>>> from skilldeck.evals import run_suite, suite_for_skill, write_reports
>>> cassette = "scripted:skills/card-agent/evals/scripted.yaml"
>>> report = run_suite(suite_for_skill("card-agent"), out=Path("out"), model=cassette)
>>> write_reports(report, Path("out"))
"""

from skilldeck.evals.calibration import Calibration, agreement, calibrate, load_labels
from skilldeck.evals.cassette import CassetteRecorder, to_turn
from skilldeck.evals.compare import BucketDelta, Comparison, compare_reports
from skilldeck.evals.environment import environment, environment_state
from skilldeck.evals.graders import (
    ConfigReader,
    GradeContext,
    Grader,
    GradeResult,
    build_grader,
    grader,
    registered_graders,
)
from skilldeck.evals.judge import Judge
from skilldeck.evals.outcome import FileChange, Outcome, ToolCall
from skilldeck.evals.report import build_report, load_report, markdown, pass_at_k, write_reports
from skilldeck.evals.runner import TrialResult, grade, run_suite
from skilldeck.evals.setup import EvalSetup, RunScope, TrialSetup, load_setup
from skilldeck.evals.suites import Suite, load_suite, promote, suite_for_skill
from skilldeck.evals.tasks import GraderSpec, Task, load_tasks, task_from_dict
from skilldeck.evals.trial import outcome_of, run_trial

__all__ = [
    "BucketDelta",
    "Calibration",
    "CassetteRecorder",
    "Comparison",
    "ConfigReader",
    "EvalSetup",
    "FileChange",
    "GradeContext",
    "GradeResult",
    "Grader",
    "GraderSpec",
    "Judge",
    "Outcome",
    "RunScope",
    "Suite",
    "Task",
    "ToolCall",
    "TrialResult",
    "TrialSetup",
    "agreement",
    "build_grader",
    "build_report",
    "calibrate",
    "compare_reports",
    "environment",
    "environment_state",
    "grade",
    "grader",
    "load_labels",
    "load_report",
    "load_setup",
    "load_suite",
    "load_tasks",
    "markdown",
    "outcome_of",
    "pass_at_k",
    "promote",
    "registered_graders",
    "run_suite",
    "run_trial",
    "suite_for_skill",
    "task_from_dict",
    "to_turn",
    "write_reports",
]
