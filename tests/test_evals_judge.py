"""L3: the judge graders on a real model (runs only with SKILLDECK_BASE_URL and SKILLDECK_MODEL)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skilldeck.evals import GradeContext, Judge, Outcome, build_grader, task_from_dict

pytestmark = [pytest.mark.L3, pytest.mark.integration]

RECORD = "Slept 5.5h, energy crashed at 2pm, needed two coffees to get through the afternoon."
GOOD = "Short nights seem to set up the early-afternoon crash; caffeine only papers over it."
BAD = (
    "Evidence: 1) slept 5.5h 2) energy crashed 3) two coffees 4) afternoon 5) the user also "
    "ran a marathon in Paris last week and has a dog called Rex, which proves many things."
)


def insight_score(tmp_path: Path, insight: str, judge: Judge) -> float | None:
    outcome = Outcome(
        trial_id="t-e0", task_id="t", skill="pkm-agent", epoch=0, thread_id="th",
        status="finished", state={"pkm": {"action": "saved", "insight": insight}},
        workspace=tmp_path,
    )  # fmt: skip
    task = task_from_dict(
        {"id": "t", "input": {"content": RECORD}, "graders": [{"name": "pkm_insight_quality"}]}
    )
    grader = build_grader("pkm_insight_quality", {})
    return grader.evaluate(GradeContext(task, outcome, judge, 0)).score


def test_the_judge_prefers_a_grounded_concise_insight(tmp_path: Path) -> None:
    judge = Judge.from_spec(os.environ.get("SKILLDECK_MODEL") or "default")
    good, bad = insight_score(tmp_path, GOOD, judge), insight_score(tmp_path, BAD, judge)
    assert good is not None and bad is not None, "the judge reply was unreadable"
    assert good > bad
    assert bad < 0.7  # invented facts and an evidence list fail the rubric
