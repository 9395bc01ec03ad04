"""L2, done means: the card-agent and pkm-agent suites run through the CLI on their scripted
cassettes; the report matches hand-computed numbers, and a worse model fails ``compare``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from skilldeck.cli import app
from skilldeck.skills import builtin_skills_dir

pytestmark = [pytest.mark.L2, pytest.mark.slow]

SKILLS = builtin_skills_dir()


def run(skill: str, cassette: Path, out: Path) -> dict[str, Any]:
    args = ["eval", "run", "--skill", skill, "--model", f"scripted:{cassette}"]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--concurrency", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["files"]["html"] == str(out / "report.html")
    report: dict[str, Any] = json.loads((out / "report.json").read_text("utf-8"))
    return report


def trials(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["id"]: t["trials"][0] for t in report["tasks"]}


def grades(trial: dict[str, Any]) -> dict[str, float | None]:
    return {g["name"]: g["score"] for g in trial["grades"]}


@pytest.fixture(scope="module")
def card(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("card")
    return out, run("card-agent", SKILLS / "card-agent" / "evals" / "scripted.yaml", out)


@pytest.fixture(scope="module")
def pkm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("pkm")
    return out, run("pkm-agent", SKILLS / "pkm-agent" / "evals" / "scripted.yaml", out)


def test_card_suite_numbers(card: tuple[Path, dict[str, Any]]) -> None:
    _, report = card
    assert len(report["tasks"]) >= 25
    by_id = trials(report)
    assert by_id["card_event_meeting_with_time"]["passed"] is True
    # [compact, metric]: the acceptable template is only secondary -> 0.5; (1 + 0.5 + 1) / 3
    health = by_id["card_health_sleep"]
    assert grades(health) == {
        "card_completion": 1.0,
        "card_template_choice": 0.5,
        "card_must_contain": 1.0,
    }
    assert (health["score"], health["passed"]) == (0.833333, False)
    # the booking reference is lost: 2 of 3 substrings; (1 + 1 + 2/3) / 3
    assert by_id["card_travel_flight"]["score"] == 0.888889
    assert by_id["card_travel_flight"]["environment"]["template_ids"][0] == "event"
    positive = report["buckets"]["card-agent/positive"]
    # 13 perfect tasks + 0.833333 + 0.888889, over 15; 13 of 15 pass
    assert positive["mean_score"] == pytest.approx((13 + 0.833333 + 0.888889) / 15, abs=1e-6)
    assert (positive["pass_rate"], positive["pass_at_k"]["1"]) == (0.866667, 0.866667)
    negative = report["buckets"]["card-agent/negative"]  # one [event, todo] -> 0.5
    assert negative["mean_score"] == pytest.approx((6 + 0.833333) / 7, abs=1e-6)
    assert report["buckets"]["card-agent/ambiguous"]["mean_score"] == 1.0


def test_pkm_suite_numbers(pkm: tuple[Path, dict[str, Any]]) -> None:
    _, report = pkm
    assert len(report["tasks"]) >= 32
    by_id = trials(report)
    sleep = by_id["pkm_starter_route_into_health_sleep"]
    assert (sleep["score"], sleep["passed"]) == (1.0, True)
    # no judge model: the judge graders are "not scored", never passed
    judged = [g for g in sleep["grades"] if g["name"].startswith(("pkm_insight", "pkm_append"))]
    assert [(g["score"], g["passed"]) for g in judged] == [(None, None), (None, None)]
    assert report["graders"]["pkm_insight_quality"]["scored"] == 0
    assert report["graders"]["pkm_insight_quality"]["pass_rate"] is None
    # right bucket, wrong file -> routed 0.5; (1 + 0.5 + 1 + 1) / 4 scored graders
    plot = by_id["pkm_novelist_plot_chapter_four"]
    assert grades(plot)["pkm_routed_correctly"] == 0.5 and plot["score"] == 0.875
    # appended without reading the note first -> read_before_write 0; (1 + 1 + 0 + 1) / 4
    ta = by_id["pkm_researcher_ta_cheatsheet"]
    assert grades(ta)["pkm_read_before_write"] == 0.0 and ta["score"] == 0.75
    assert any(c["change"] == "changed" for c in ta["diff"])
    # filed outside both listed buckets -> routed 0; (1 + 0 + 1 + 1 + 1) / 5
    assert by_id["pkm_ambiguous_reread_judge_paper"]["score"] == 0.8
    skip = by_id["pkm_negative_ok"]
    assert (skip["score"], skip["diff"], skip["environment"]["action"]) == (1.0, [], "skipped")
    positive = report["buckets"]["pkm-agent/positive"]
    assert positive["mean_score"] == pytest.approx((24 + 0.875 + 0.875 + 0.75) / 27, abs=1e-6)
    assert positive["pass_rate"] == pytest.approx(24 / 27, abs=1e-6)
    assert report["buckets"]["pkm-agent/ambiguous"]["mean_score"] == pytest.approx(5.8 / 6)
    assert report["buckets"]["pkm-agent/negative"]["pass_rate"] == 1.0


def compare(base: Path, new: Path) -> Any:
    args = ["eval", "compare", str(base / "report.json"), str(new / "report.json"), "--json"]
    return CliRunner().invoke(app, args)


def test_a_worse_card_model_fails_compare(
    card: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    good, _ = card
    worse = run("card-agent", SKILLS / "card-agent" / "evals" / "worse.yaml", tmp_path)
    hotel = trials(worse)["card_amb_hotel_booking"]  # never saves: the run fails, all 0
    assert (hotel["status"], hotel["score"]) == ("failed", 0.0)
    result = compare(good, tmp_path)
    assert result.exit_code == 1, result.output
    body = json.loads(result.stdout)
    assert {r["change"] for r in body["buckets"]} == {"dropped"}
    assert body["reasons"] == [
        "the change only drops buckets: card-agent/ambiguous, card-agent/negative, "
        "card-agent/positive"
    ]
    assert compare(good, good).exit_code == 0


def test_a_worse_pkm_model_fails_compare_by_the_merge_rule(
    pkm: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    good, _ = pkm
    worse = run("pkm-agent", SKILLS / "pkm-agent" / "evals" / "worse.yaml", tmp_path)
    # pkm__write over Sleep.md: right file, both seed markers gone; (1 + 1 + 0) / 3
    sleep = trials(worse)["pkm_starter_route_into_health_sleep"]
    assert grades(sleep)["pkm_no_overwrite"] == 0.0 and sleep["score"] == 0.666667
    result = compare(good, tmp_path)
    assert result.exit_code == 1, result.output
    reasons = json.loads(result.stdout)["reasons"]
    assert reasons == [
        "mixed change: improves pkm-agent/ambiguous but drops pkm-agent/negative, "
        "pkm-agent/positive (keep a change only if no bucket gets worse)"
    ]


def test_export_failures_writes_what_a_prompt_iteration_needs(tmp_path: Path) -> None:
    worse = run("card-agent", SKILLS / "card-agent" / "evals" / "worse.yaml", tmp_path / "run")
    failing = [(t, r) for t in worse["tasks"] for r in t["trials"] if r["passed"] is False]
    assert failing
    out = tmp_path / "export"
    args = ["eval", "export-failures", str(tmp_path / "run" / "report.json"), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["trials"]) == len(failing)
    skill_md = (SKILLS / "card-agent" / "SKILL.md").read_text("utf-8")
    assert (out / "skills" / "card-agent" / "SKILL.md").read_text("utf-8") == skill_md
    assert json.loads((out / "report.json").read_text("utf-8")) == worse
    index = (out / "README.md").read_text("utf-8")
    for task, trial in failing:
        folder = out / "trials" / f"{task['id']}-e{trial['epoch']}"
        assert f"[{task['id']}](trials/{folder.name}/grades.md)" in index
        grades = (folder / "grades.md").read_text("utf-8")
        for grade in trial["grades"]:
            assert grade["rationale"] in grades
        transcript = (folder / "transcript.md").read_text("utf-8")
        for entry in trial["transcript"]:
            assert entry["content"] in transcript
        diff = (folder / "workspace.diff").read_text("utf-8")
        assert diff == "".join(c["diff"] for c in trial["diff"])
    # A folder that is not empty is never written into; an unknown report is an error.
    again = CliRunner().invoke(app, [*args, "--json"])
    assert again.exit_code == 2 and "not empty" in again.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{}", "utf-8")
    refused = CliRunner().invoke(app, ["eval", "export-failures", str(bad), "--out",
                                       str(tmp_path / "x"), "--json"])  # fmt: skip
    assert refused.exit_code == 2 and "not an eval report" in refused.stdout
    assert not (tmp_path / "x").exists()
