"""L2: report aggregates: mean score, pass rate, pass@k and pass^k, not-scored graders."""

from __future__ import annotations

from pathlib import Path

import pytest

from skilldeck.evals import GradeResult, Outcome, Suite, TrialResult, build_report, pass_at_k
from skilldeck.evals.report import markdown, pass_pow_k
from skilldeck.evals.tasks import task_from_dict

pytestmark = pytest.mark.L2


def test_pass_at_k_by_hand() -> None:
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(3, 0, 3) == 0.0 and pass_at_k(3, 1, 3) == 1.0
    assert pass_pow_k(3, 2, 2) == pytest.approx(1 / 3)  # C(2,2)/C(3,2)
    assert pass_pow_k(3, 3, 3) == 1.0


def results(tmp_path: Path) -> tuple[Suite, list[TrialResult]]:
    """Task a passes 1 of 3 epochs (scores 1, 0.5, 0); task b passes 3 of 3; c is unscored."""
    graders = [{"name": "card_completion"}, {"name": "pkm_insight_quality"}]
    tasks = tuple(
        task_from_dict({"id": i, "bucket": b, "input": {}, "graders": graders}, skill="s")
        for i, b in (("a", "pos"), ("b", "pos"), ("c", "neg"))
    )
    verdicts = {"a": [1.0, 0.5, 0.0], "b": [1.0, 1.0, 1.0], "c": [None, None, None]}
    made = []
    for task in tasks:
        for epoch, score in enumerate(verdicts[task.id]):
            outcome = Outcome(
                trial_id=f"{task.id}-e{epoch}", task_id=task.id, skill="s", epoch=epoch,
                thread_id="t", status="finished", state={}, workspace=tmp_path,
            )  # fmt: skip
            first = GradeResult.not_scored("n/a") if score is None else GradeResult.of(score, "x")
            grades = ((task.graders[0], first), (task.graders[1], GradeResult.not_scored("no")))
            made.append(TrialResult(task, outcome, grades))
    return Suite("demo", tasks, ()), made


def test_bucket_and_grader_aggregates(tmp_path: Path) -> None:
    suite, made = results(tmp_path)
    report = build_report(suite, list(reversed(made)), {"epochs": 3})
    pos = report["buckets"]["s/pos"]
    assert (pos["tasks"], pos["trials"], pos["scored"]) == (2, 6, 6)
    assert pos["mean_score"] == 0.75  # (1 + 0.5 + 0 + 3) / 6
    assert pos["pass_rate"] == 0.666667  # 4 of 6 trials
    # pass@1: a 1/3, b 1 -> 2/3; pass@3: a 1, b 1; pass^3: a 0, b 1 -> 0.5
    assert pos["pass_at_k"] == {"1": 0.666667, "3": 1.0}
    assert pos["pass_pow_k"] == {"1": 0.666667, "3": 0.5}
    neg = report["buckets"]["s/neg"]
    assert (neg["mean_score"], neg["pass_rate"], neg["pass_at_k"]) == (
        None,
        None,
        {"1": None, "3": None},
    )
    assert report["graders"]["pkm_insight_quality"] == {
        "count": 9, "scored": 0, "not_scored": 9, "mean_score": None, "pass_rate": None,
    }  # fmt: skip
    assert report["graders"]["card_completion"]["not_scored"] == 3
    assert [t["id"] for t in report["tasks"]] == ["a", "b", "c"]  # suite order, epochs sorted
    assert [tr["epoch"] for tr in report["tasks"][0]["trials"]] == [0, 1, 2]
    text = markdown(report)
    assert (
        "| s/neg | capability | 1 | 3 | not scored | not scored | not scored | not scored |" in text
    )
    assert "## Trials that did not pass (2)" in text  # a-e1 and a-e2
