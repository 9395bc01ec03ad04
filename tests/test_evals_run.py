"""L2: suites run on the real graph: outcomes, workspaces, card answers, record and replay."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEMO_FILES, DEMO_SCRIPT, output, write_bundle
from typer.testing import CliRunner

from skilldeck.cli import app
from skilldeck.errors import EvalConfigError, ModelConfigError
from skilldeck.evals import load_suite, run_suite, suite_for_skill, write_reports

pytestmark = pytest.mark.L2

SLEEP = "# Sleep\n<!-- seed:sleep-1 -->\n- 2026-05-01: 7h\n"
GRADERS = [
    {"name": "pkm_read_before_write"},
    {"name": "pkm_no_overwrite"},
    {"name": "pkm_routed_correctly", "config": {"expected_files": ["Areas/Sleep.md"]}},
    {
        "name": "trajectory_match",
        "config": {"tools": ["pkm__read", "pkm__append"], "mode": "strict"},
    },
    {"name": "json_path_equals", "config": {"path": "environment.pkm.action", "value": "saved"}},
]
SAVED = output(data={"pkm": {"action": "saved", "files": ["Areas/Sleep.md"]}})


def read(path: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "pkm__read", "args": {"path": path}}]}


def append(path: str, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "pkm__append", "args": {"path": path, "text": text}}]}


#: The careful trial reads before it appends; the blind one appends straight away.
CASSETTE = {
    "cases": {
        "append_sleep": {
            "skills": {"notes": [read("Areas/Sleep.md"), append("Areas/Sleep.md", "- 5h"), SAVED]}
        },
        "blind_append": {"skills": {"notes": [append("Areas/Sleep.md", "- 6h"), SAVED]}},
    }
}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    folder = write_bundle(
        root,
        "notes",
        meta={"triggers": {"contexts": ["notes"]}, "tools": ["pkm__read", "pkm__append"]},
        data={"pkm": {"type": "object"}},
    )
    areas = folder / "fixtures" / "_base" / "PKM" / "Areas"
    areas.mkdir(parents=True)
    (areas / "Sleep.md").write_text(SLEEP, "utf-8")
    tasks = [
        {"id": "append_sleep", "bucket": "positive", "base_fixture": "_base",
         "input": {"content": "Slept 5h"}, "graders": GRADERS},
        {"id": "blind_append", "bucket": "negative", "base_fixture": "_base",
         "input": {"content": "Slept 6h"}, "graders": GRADERS},
    ]  # fmt: skip
    # A JSON round trip keeps YAML from writing the shared grader list as an anchor.
    (folder / "cases.yaml").write_text(yaml.safe_dump(json.loads(json.dumps(tasks))), "utf-8")
    return root


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    path = tmp_path / "cassette.yaml"
    path.write_text(yaml.safe_dump(CASSETTE), "utf-8")
    return path


def scores(report: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        t["id"]: [(g["name"], g["score"], g["passed"]) for tr in t["trials"] for g in tr["grades"]]
        for t in report["tasks"]
    }


def test_a_suite_run_collects_outcomes_on_the_real_graph(
    skills: Path, cassette: Path, tmp_path: Path
) -> None:
    suite = suite_for_skill("notes", [skills])
    report = run_suite(
        suite, out=tmp_path / "out", model=f"scripted:{cassette}", epochs=2, concurrency=2
    )
    careful, blind = report["tasks"]
    # careful: every grader 1. blind: read_before_write 0, strict trajectory LCS 1/2 = 0.5.
    assert [t["score"] for t in careful["trials"]] == [1.0, 1.0]
    assert [t["score"] for t in blind["trials"]] == [0.7, 0.7]
    assert [g["score"] for g in blind["trials"][0]["grades"]] == [0.0, 1.0, 1.0, 0.5, 1.0]
    assert "Areas/Sleep.md" in blind["trials"][0]["grades"][0]["rationale"]
    assert report["buckets"]["notes/positive"] | {"pass_at_k": None, "pass_pow_k": None} == {
        "kind": "capability", "skill": "notes", "bucket": "positive", "tasks": 1, "trials": 2,
        "scored": 2, "mean_score": 1.0, "pass_rate": 1.0, "pass_at_k": None, "pass_pow_k": None,
    }  # fmt: skip
    assert report["buckets"]["notes/negative"]["pass_at_k"] == {"1": 0.0, "2": 0.0}
    assert report["summary"]["mean_score"] == 0.85
    assert report["graders"]["pkm_read_before_write"] == {
        "count": 4, "scored": 4, "not_scored": 0, "mean_score": 0.5, "pass_rate": 0.5,
    }  # fmt: skip

    trial = careful["trials"][1]
    assert trial["epoch"] == 1 and trial["status"] == "finished"
    # Opaque (the model sees it), stable, one per epoch.
    assert re.fullmatch(r"t[0-9a-f]{12}-e1", trial["trial_id"])
    assert careful["trials"][0]["trial_id"] == trial["trial_id"][:-1] + "0"
    assert [e["role"] for e in trial["transcript"]] == [
        "user", "model", "tool", "model", "tool", "model",
    ]  # fmt: skip
    assert [(c["name"], c["ok"]) for c in trial["tool_calls"]] == [
        ("pkm__read", True),
        ("pkm__append", True),
    ]
    assert trial["environment"] == {
        "pkm": {"action": "saved", "files": ["Areas/Sleep.md"]},
        "status": "finished",
    }
    (change,) = trial["diff"]
    assert (change["path"], change["change"]) == ("PKM/Areas/Sleep.md", "changed")
    assert "+- 5h" in change["diff"] and "-- 2026-05-01" not in change["diff"]

    # Each trial had its own copy of the fixture; the fixture itself is untouched.
    workspaces = tmp_path / "out" / "workspaces"
    for epoch in (0, 1):
        tid = careful["trials"][epoch]["trial_id"]
        text = (workspaces / tid / "PKM/Areas/Sleep.md").read_text("utf-8")
        assert text == SLEEP + "- 5h\n"
    assert (skills / "notes/fixtures/_base/PKM/Areas/Sleep.md").read_text("utf-8") == SLEEP


def test_reports_are_written_as_json_markdown_and_html(
    skills: Path, cassette: Path, tmp_path: Path
) -> None:
    report = run_suite(
        suite_for_skill("notes", [skills]), out=tmp_path / "out", model=f"scripted:{cassette}"
    )
    paths = write_reports(report, tmp_path / "out")
    assert json.loads(paths["json"].read_text("utf-8"))["summary"] == report["summary"]
    md = paths["markdown"].read_text("utf-8")
    assert "| notes/negative | capability | 1 | 1 | 0.70 | 0.00 | 0.00 |" in md
    assert "- **blind_append** epoch 0 (notes/negative), score 0.70" in md
    assert "pkm_read_before_write 0.00: edited without reading first" in md
    assert paths["html"].read_text("utf-8").startswith("<!DOCTYPE html>")


def test_a_failing_run_is_graded_not_raised(skills: Path, tmp_path: Path) -> None:
    short = tmp_path / "short.yaml"  # no turns for blind_append: the model call fails
    short.write_text(yaml.safe_dump({"cases": {"append_sleep": CASSETTE["cases"]["append_sleep"]}}))
    report = run_suite(
        suite_for_skill("notes", [skills]), out=tmp_path / "o", model=f"scripted:{short}"
    )
    trial = report["tasks"][1]["trials"][0]
    assert trial["status"] == "failed"
    assert trial["error"]["code"] == "MODEL_ERROR" and "no turn 0" in trial["error"]["message"]
    assert trial["passed"] is False and trial["diff"] == []


def test_run_refuses_bad_settings_before_any_trial(skills: Path, tmp_path: Path) -> None:
    suite = suite_for_skill("notes", [skills])
    with pytest.raises(EvalConfigError, match="at least 1"):
        run_suite(suite, out=tmp_path / "o", model="scripted:x.yaml", epochs=0)
    with pytest.raises(ModelConfigError, match="does not exist"):
        run_suite(suite, out=tmp_path / "o", model=f"scripted:{tmp_path / 'missing.yaml'}")
    assert not (tmp_path / "o" / "workspaces").exists()
    result = CliRunner().invoke(app, ["eval", "run", "--skill", "notes", "--suite", "s.yaml"])
    assert result.exit_code == 2 and "exactly one of --skill NAME or --suite FILE" in result.output


def test_litigation_cases_run_with_card_answers(tmp_path: Path) -> None:
    """The built-in litigation-intake cases: a card is asked, then answered from input.answers."""
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(
        yaml.safe_dump({"skills": ["litigation-intake"], "fixtures": [str(DEMO_FILES)]}), "utf-8"
    )
    report = run_suite(load_suite(suite_file), out=tmp_path / "o", model=f"scripted:{DEMO_SCRIPT}")
    by_id = {t["id"]: t["trials"][0] for t in report["tasks"]}
    asks = by_id["intake_missing_defendant_asks"]
    assert asks["passed"] is True and asks["status"] == "interrupted"
    done = by_id["intake_complete_after_answers"]
    assert done["passed"] is True and done["status"] == "finished"
    names = [c["name"] for c in done["tool_calls"]]
    assert names == ["file__parse", "element__extract", "file__parse"]  # read again after the card
    assert done["tool_calls"][0]["ok"] is True  # complaint.txt was copied from the demo matter
    assert by_id["intake_other_context_does_not_run"]["passed"] is True


def litigation(tmp_path: Path, case: dict[str, Any]) -> dict[str, Any]:
    """The one trial of ``case`` on litigation-intake with the demo's model and matter files."""
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump([case]), "utf-8")
    suite = {
        "tasks": [{"file": "tasks.yaml", "skill": "litigation-intake"}],
        "fixtures": [str(DEMO_FILES)],
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite), "utf-8")
    suite_file = load_suite(tmp_path / "suite.yaml")
    report = run_suite(suite_file, out=tmp_path / "o", model=f"scripted:{DEMO_SCRIPT}")
    trial: dict[str, Any] = report["tasks"][0]["trials"][0]
    return trial


def test_answers_that_do_not_fit_the_card_are_a_trial_error(tmp_path: Path) -> None:
    given = {
        "matter_id": "demo-matter",
        "documents": ["complaint.txt"],
        "answers": {"profile.defendant.name": "Acme"},
    }
    finished = {"name": "json_path_equals", "config": {"path": "status", "value": "finished"}}
    trial = litigation(tmp_path, {"id": "bad_answers", "input": given, "graders": [finished]})
    assert trial["status"] == "interrupted" and trial["passed"] is False
    assert (trial["error"]["code"], trial["error"]["where"]) == ("INVALID_ANSWERS", "harness")
    assert "profile.defendant.type" in trial["error"]["message"]


def test_matter_id_null_runs_without_a_matter(tmp_path: Path) -> None:
    no_attempt = {"name": "json_path_equals", "config": {"path": "state.attempt", "value": None}}
    given = {"context": "matter", "matter_id": None}
    trial = litigation(tmp_path, {"id": "no_matter", "input": given, "graders": [no_attempt]})
    assert trial["passed"] is True
    # Its skill works in a matter's files: the run is refused before it starts.
    assert trial["error"]["code"] == "MATTER_REQUIRED"


def test_record_then_replay_gives_the_same_scores(skills: Path, tmp_path: Path) -> None:
    """A "live" model (here: plain scripted turns, no cases) is recorded to a cassette; the
    replay answers from the cassette's per-case turns only, judge verdicts included."""
    cases = yaml.safe_load((skills / "notes" / "cases.yaml").read_text("utf-8"))
    for case in cases:
        case["graders"].append(
            {"name": "llm_judge", "config": {"rubric": "Concise?", "path": "state.pkm"}}
        )
    (skills / "notes" / "cases.yaml").write_text(yaml.safe_dump(cases), "utf-8")
    live = tmp_path / "live.yaml"
    verdict = {"output": {"score": 0.5, "rationale": "ok"}}
    live.write_text(yaml.safe_dump({"skills": {
        "notes": CASSETTE["cases"]["append_sleep"]["skills"]["notes"],
        "judge": [verdict],
    }}), "utf-8")  # fmt: skip
    runner = CliRunner()
    base = ["eval", "run", "--skill", "notes", "--skills", str(skills), "--json"]
    first = runner.invoke(app, [*base, "--model", f"scripted:{live}", "--judge-model",
                                f"scripted:{live}", "--record", str(tmp_path / "tape.yaml"),
                                "--out", str(tmp_path / "a")])  # fmt: skip
    assert first.exit_code == 0, first.output
    tape = yaml.safe_load((tmp_path / "tape.yaml").read_text("utf-8"))
    assert tape["skills"] == {}
    assert set(tape["cases"]) == {"append_sleep", "blind_append"}
    assert tape["recorded"]["models"] == {"notes": f"scripted:{live}"}
    assert set(tape["recorded"]) == {"models", "output_modes", "date", "passed"}
    first_turn = tape["cases"]["append_sleep"]["skills"]["notes"][0]
    assert len(first_turn.pop("request")) == 16  # the digest of the request it answered
    assert first_turn == read("Areas/Sleep.md")
    judged_turns = tape["cases"]["append_sleep"]["skills"]["judge"]
    assert [json.loads(t["text"]) for t in judged_turns] == [verdict["output"]]  # as written
    replay = runner.invoke(app, [*base, "--model", f"scripted:{tmp_path / 'tape.yaml'}",
                                 "--judge-model", f"scripted:{tmp_path / 'tape.yaml'}",
                                 "--out", str(tmp_path / "b")])  # fmt: skip
    assert replay.exit_code == 0, replay.output
    a = json.loads((tmp_path / "a" / "report.json").read_text("utf-8"))
    b = json.loads((tmp_path / "b" / "report.json").read_text("utf-8"))
    assert tape["recorded"]["passed"] == {t["id"]: t["trials"][0]["passed"] for t in a["tasks"]}
    assert scores(a) == scores(b)
    assert a["buckets"] == b["buckets"] and a["summary"] == b["summary"]
    judged = [g for g in a["tasks"][0]["trials"][0]["grades"] if g["name"] == "llm_judge"]
    assert judged == [{"name": "llm_judge", "config": {"rubric": "Concise?", "path": "state.pkm"},
                       "score": 0.5, "passed": False, "rationale": "judge: ok"}]  # fmt: skip
    compared = runner.invoke(app, ["eval", "compare", str(tmp_path / "a" / "report.json"),
                                   str(tmp_path / "b" / "report.json")])  # fmt: skip
    assert compared.exit_code == 0, compared.output

    # The prompt changes: the replay names the stale case and skill, and replays nothing.
    skill_md = skills / "notes" / "SKILL.md"
    skill_md.write_text(skill_md.read_text("utf-8") + "\nKeep notes short.\n", "utf-8")
    runner.invoke(app, [*base, "--model", f"scripted:{tmp_path / 'tape.yaml'}",
                                "--out", str(tmp_path / "c")])  # fmt: skip
    c = json.loads((tmp_path / "c" / "report.json").read_text("utf-8"))
    for task in c["tasks"]:
        error = task["trials"][0]["error"]
        assert error["code"] == "MODEL_ERROR", error
        assert "StaleCassetteError" in error["message"] and "stale recording" in error["message"]
        assert f"case {task['id']!r}, skill 'notes', call 0" in error["message"]
        assert task["trials"][0]["tool_calls"] == []


def test_the_builtin_litigation_suite_ships_the_matter_it_reads(tmp_path: Path) -> None:
    """`eval run --skill litigation-intake` needs no fixtures of its own: the bundle's
    fixtures hold the demo matter (it once ran on an empty folder and "read" nothing)."""
    from skilldeck.evals.suites import suite_for_skill

    report = run_suite(suite_for_skill("litigation-intake"), out=tmp_path / "o",
                       model=f"scripted:{DEMO_SCRIPT}")  # fmt: skip
    trials = {t["id"]: t["trials"][0] for t in report["tasks"]}
    assert all(t["passed"] for t in trials.values()), {k: t["error"] for k, t in trials.items()}
    parsed = [c for c in trials["intake_complete_after_answers"]["tool_calls"]
              if c["name"] == "file__parse"]  # fmt: skip
    assert parsed and all(c["ok"] for c in parsed)


def test_a_suite_with_a_repeated_task_id_runs_nothing(
    skills: Path, cassette: Path, tmp_path: Path
) -> None:
    """cases.yaml refuses a repeated id when it loads; a suite built in code is checked too
    (two trials would share one workspace and one report row)."""
    suite = suite_for_skill("notes", [skills])
    suite = dataclasses.replace(suite, tasks=(*suite.tasks, suite.tasks[0]))
    with pytest.raises(EvalConfigError, match="append_sleep appear more than once"):
        run_suite(suite, out=tmp_path / "o", model=f"scripted:{cassette}")
    assert not (tmp_path / "o" / "workspaces").exists()
