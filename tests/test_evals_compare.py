"""L2: comparing reports (exit codes of the merge rule) and judge calibration numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from skilldeck.cli import app
from skilldeck.errors import EvalConfigError
from skilldeck.evals import agreement, calibrate, compare_reports, load_labels

pytestmark = pytest.mark.L2


def report(buckets: dict[str, tuple[str, float | None]], pass_rate: float = 0.5) -> dict[str, Any]:
    return {
        "buckets": {
            key: {"kind": kind, "mean_score": score, "pass_rate": pass_rate}
            for key, (kind, score) in buckets.items()
        },
        "tasks": [],
    }


BASE = {"c/pos": ("capability", 0.8), "c/neg": ("capability", 0.6), "r/pos": ("regression", 0.9)}


def run_compare(tmp_path: Path, new: dict[str, Any], *extra: str) -> Any:
    (tmp_path / "base.json").write_text(json.dumps(report(BASE)), "utf-8")
    (tmp_path / "new.json").write_text(json.dumps(new), "utf-8")
    args = ["eval", "compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"), *extra]
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize(
    ("changes", "code", "reason"),
    [
        ({}, 0, None),
        ({"c/pos": ("capability", 0.9)}, 0, None),  # one bucket better, none worse
        ({"c/neg": ("capability", 0.5)}, 1, "the change only drops buckets: c/neg"),
        ({"r/pos": ("regression", 0.85)}, 1, "regression bucket r/pos dropped 0.900 -> 0.850"),
        ({"c/pos": ("capability", 0.9), "c/neg": ("capability", 0.5)}, 1,
         "mixed change: improves c/pos but drops c/neg"),
        ({"c/pos": ("regression", 0.7)}, 1, "regression bucket c/pos dropped"),  # promoted since
    ],
)  # fmt: skip
def test_compare_exit_codes_follow_the_merge_rule(
    tmp_path: Path, changes: dict[str, tuple[str, float]], code: int, reason: str | None
) -> None:
    result = run_compare(tmp_path, report({**BASE, **changes}), "--json")
    assert result.exit_code == code, result.output
    body = json.loads(result.stdout)
    assert body["ok"] is (code == 0)
    if reason:
        assert any(reason in r for r in body["reasons"]), body["reasons"]


def test_compare_prints_per_bucket_deltas(tmp_path: Path) -> None:
    new = report({**BASE, "c/pos": ("capability", 0.9), "c/neg": ("capability", 0.5)})
    result = run_compare(tmp_path, new)
    assert result.exit_code == 1
    assert "+0.100" in result.stdout and "-0.100" in result.stdout
    assert "improved" in result.stdout and "dropped" in result.stdout
    assert "fail mixed change" in result.stderr


def test_tolerance_metric_and_added_buckets() -> None:
    base = report(BASE)
    noise = report({**BASE, "c/pos": ("capability", 0.79)})
    assert not compare_reports(base, noise).ok
    assert compare_reports(base, noise, tolerance=0.02).ok  # capability noise is tolerated
    small = report({**BASE, "r/pos": ("regression", 0.89)})
    assert not compare_reports(base, small, tolerance=0.02).ok  # a regression bucket never is
    by_pass = compare_reports(base, report(BASE, pass_rate=0.4), metric="pass_rate")
    assert by_pass.reasons == ("regression bucket r/pos dropped 0.500 -> 0.400",)
    grown = compare_reports(base, report({**BASE, "x/new": ("capability", 0.1)}))
    assert grown.ok and grown.rows[-1].change == "added"
    unscored = compare_reports(base, report({**BASE, "c/pos": ("capability", None)}))
    assert unscored.ok and [r.change for r in unscored.rows if r.bucket == "c/pos"] == [
        "not scored"
    ]


def test_compare_refuses_bad_input(tmp_path: Path) -> None:
    missing = CliRunner().invoke(app, ["eval", "compare", "nope.json", "nope2.json"])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    (tmp_path / "x.json").write_text('{"tasks": []}', "utf-8")
    result = CliRunner().invoke(app, ["eval", "compare", str(tmp_path / "x.json"), "nope.json"])
    assert result.exit_code == 2 and "not an eval report" in result.output
    assert run_compare(tmp_path, report(BASE), "--metric", "f1").exit_code == 2
    with pytest.raises(EvalConfigError, match="tolerance"):
        compare_reports(report(BASE), report(BASE), tolerance=-1)


# -- calibration ----------------------------------------------------------------------------------
T, F = True, False


def test_agreement_accuracy_and_kappa_by_hand() -> None:
    # 8 pairs (judge, human): agree 6 -> accuracy 0.75; both say pass half the time ->
    # expected agreement 0.5 -> kappa (0.75 - 0.5) / (1 - 0.5) = 0.5.
    even = agreement([(T, T), (T, T), (T, F), (F, F), (F, T), (F, F), (T, T), (F, F)])
    assert (even.pairs, even.accuracy, even.kappa) == (8, 0.75, 0.5)
    # TT 4, TF 2, FT 1, FF 3: accuracy 0.7; judge 0.6 pass, human 0.5 pass ->
    # expected 0.6*0.5 + 0.4*0.5 = 0.5 -> kappa 0.2 / 0.5 = 0.4.
    pairs = [(T, T)] * 4 + [(T, F)] * 2 + [(F, T)] + [(F, F)] * 3
    skewed = agreement(pairs)
    assert (skewed.accuracy, skewed.kappa) == (0.7, 0.4)
    assert skewed.confusion == {
        "judge_pass_human_pass": 4,
        "judge_pass_human_fail": 2,
        "judge_fail_human_pass": 1,
        "judge_fail_human_fail": 3,
    }
    constant = agreement([(T, T), (T, T)])
    assert (constant.accuracy, constant.kappa) == (1.0, None)  # kappa undefined
    assert agreement([]).accuracy is None


def trial(epoch: int, verdict: bool | None) -> dict[str, Any]:
    score = None if verdict is None else float(verdict)
    grade = {"name": "pkm_insight_quality", "score": score, "passed": verdict, "rationale": ""}
    return {"trial_id": f"t-e{epoch}", "epoch": epoch, "grades": [grade]}


def test_calibrate_pairs_labels_with_report_verdicts(tmp_path: Path) -> None:
    judged = {"buckets": {}, "tasks": [
        {"id": "a", "trials": [trial(0, True), trial(1, False)]},
        {"id": "b", "trials": [trial(0, False)]},
        {"id": "c", "trials": [trial(0, None)]},
    ]}  # fmt: skip
    labels = tmp_path / "labels.yaml"
    labels.write_text(
        yaml.safe_dump(
            [
                {"task": "a", "grader": "pkm_insight_quality", "trial": 0, "label": "pass"},
                {"task": "a", "grader": "pkm_insight_quality", "trial": "t-e1", "label": True},
                {"task": "b", "grader": "pkm_insight_quality", "label": "fail"},
                {"task": "c", "grader": "pkm_insight_quality", "label": "pass"},
                {"task": "zzz", "grader": "pkm_insight_quality", "label": "pass"},
            ]
        ),
        "utf-8",
    )
    result = calibrate(judged, load_labels(labels))
    # pairs (judge, human): a-e0 (T, T), a-e1 (F, T), b (F, F) -> accuracy 2/3;
    # judge pass 1/3, human pass 2/3 -> expected 2/9 + 2/9 = 4/9 -> kappa (6/9 - 4/9)/(5/9) = 0.4
    assert (result.pairs, result.accuracy, result.kappa) == (3, 0.666667, 0.4)
    assert (result.not_scored, result.unmatched) == (1, ["zzz/pkm_insight_quality"])
    report_file = tmp_path / "report.json"
    report_file.write_text(json.dumps(judged), "utf-8")
    cli = CliRunner().invoke(app, ["eval", "calibrate", str(report_file), str(labels), "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout)["kappa"] == 0.4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "non-empty list"),
        ("- {task: a, grader: g, label: maybe}", "label must be true/false or pass/fail"),
        ("- {task: a, label: true}", "needs string task and grader"),
        ("- [", "unreadable labels"),
    ],
)
def test_bad_label_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "labels.yaml"
    path.write_text(text, "utf-8")
    with pytest.raises(EvalConfigError) as info:
        load_labels(path)
    assert message in str(info.value)
