"""A first skill: ``skilldeck new`` writes one that runs and is evaluated at once, and
``skilldeck check`` reports every problem of a bundle at once, in words."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import output, write_bundle
from typer.testing import CliRunner, Result

from skilldeck.check import check_skills
from skilldeck.cli import app

pytestmark = pytest.mark.L2


def cli(tmp_path: Path, *args: str) -> Result:
    runner = CliRunner(env={"SKILLDECK_HOME": str(tmp_path / "home"), "COLUMNS": "200"})
    return runner.invoke(app, list(args))


def body(result: Result, code: int = 0) -> Any:
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    return json.loads(result.stdout)


def test_a_new_skill_runs_resumes_and_evaluates_at_once(tmp_path: Path) -> None:
    made = body(cli(tmp_path, "new", "note-taker", "--dir", str(tmp_path), "--json"))
    folder = Path(made["folder"])
    assert folder == tmp_path / "note-taker"
    assert {"SKILL.md", "skill.meta.json", "cases.yaml", "evals/scripted.yaml"} <= set(
        made["files"]
    )
    assert body(cli(tmp_path, "check", str(folder), "--json"))["ok"] is True

    run = body(cli(tmp_path, "run", "--skills", str(folder), "--context", "note-taker", "--json"))
    assert run["status"] == "interrupted"
    assert run["card"]["questions"][0]["field_key"] == "profile.topic"
    # No --skills: the thread remembers which skills it runs with.
    answers = json.dumps({"profile.topic": "the budget"})
    done = body(cli(tmp_path, "resume", run["thread_id"][:8], "--answers", answers, "--json"))
    assert done["status"] == "finished"
    assert done["state"]["profile"] == {"topic": "the budget"}
    assert done["state"]["summary"]

    report = tmp_path / "report"
    evaluated = cli(
        tmp_path, "eval", "run", "--skills", str(folder), "--skill", "note-taker",
        "--out", str(report), "--json",
    )  # fmt: skip
    assert body(evaluated)["summary"]["pass_rate"] == 1.0


def test_show_and_threads_read_a_new_skills_thread_without_its_skills(tmp_path: Path) -> None:
    """The reading commands never need --skills: a thread of one's own skill shows every state
    field the skill wrote (its data), as resume printed it."""
    folder = Path(
        body(cli(tmp_path, "new", "note-taker", "--dir", str(tmp_path), "--json"))["folder"]
    )
    run = body(cli(tmp_path, "run", "--skills", str(folder), "--context", "note-taker", "--json"))
    answers = json.dumps({"profile.topic": "the budget"})
    done = body(cli(tmp_path, "resume", run["thread_id"], "--answers", answers, "--json"))
    summary = done["state"]["summary"]

    shown = body(cli(tmp_path, "show", run["thread_id"], "--json"))
    assert shown["state"] == done["state"]
    human = cli(tmp_path, "show", run["thread_id"])
    assert human.exit_code == 0, human.output
    assert f'"summary": "{summary}"' in human.stdout
    listed = body(cli(tmp_path, "threads", "--json"))
    assert [(r["thread_id"], r["last_skill"]) for r in listed] == [(run["thread_id"], "note-taker")]


@pytest.mark.parametrize(
    ("name", "reason"),
    [("Note_Taker", "lowercase letters"), ("note-", "hyphen"), ("a" * 65, "1-64")],
)
def test_new_refuses_bad_names(tmp_path: Path, name: str, reason: str) -> None:
    result = cli(tmp_path, "new", name, "--dir", str(tmp_path), "--json")
    assert result.exit_code == 2
    assert reason in json.loads(result.stdout)["error"]["message"]
    assert list(tmp_path.iterdir()) == []


def test_new_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep me")
    result = cli(tmp_path, "new", "taken", "--dir", str(tmp_path), "--json")
    assert result.exit_code == 2
    assert "already exists" in json.loads(result.stdout)["error"]["message"]
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["mine.txt"]


def _broken(root: Path) -> None:
    """Two bundles with several problems each, in different files."""
    one = write_bundle(
        root,
        "one",
        meta={
            "colour": "red",
            "priority": "high",
            "tools": ["no_such_tool"],
            "triggers": {"contexts": ["ctx"], "state_conditions": ["state.x = 1"]},
        },
    )
    (one / "assets" / "output_schema.json").write_text(
        json.dumps({"properties": {"data": {"properties": {"n": {"type": "int"}}}}}), "utf-8"
    )
    two = write_bundle(root, "two", meta={"outputs": {"provides": ["summary"]}})
    (two / "cases.yaml").write_text("- id: x\n  input: {}\n  graders: []\n", "utf-8")


def test_check_reports_every_problem_at_once_in_words(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _broken(root)
    result = cli(tmp_path, "check", str(root), "--json")
    report = body(result, code=1)
    assert report["ok"] is False
    found = {(Path(p["file"]).name, p["json_path"]) for p in report["problems"]}
    assert ("skill.meta.json", "$") in found  # the unknown key
    assert ("skill.meta.json", "$.priority") in found
    assert ("output_schema.json", "$.properties.data.properties.n.type") in found
    assert ("skill.meta.json", "$.outputs.provides[0]") in found
    assert len(report["problems"]) >= 4
    messages = " ".join(p["message"] for p in report["problems"])
    # Words, not JSON Schema's vocabulary.
    for jargon in ("regexes", "is a required property", "is not of type", "does not match"):
        assert jargon not in messages, jargon
    assert "unknown key 'colour'" in messages
    assert "must be an integer, not a string" in messages
    assert "a provided field is a dot path under profile" in messages

    human = cli(tmp_path, "check", str(root))
    assert human.exit_code == 1
    assert "one" in human.stdout and "two" in human.stdout
    assert re.search(r"2 bundle\(s\): \d+ error\(s\)", human.stderr)


def test_check_finds_what_a_run_or_an_eval_would_trip_on(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = write_bundle(
        root,
        "alpha",
        meta={
            "tools": ["file__parse", "nope__tool"],
            "execution_config": {"provider": "scripted", "model": "turns.yaml"},
        },
    )
    turns = {"skills": {"alpha": [output(data={"note": 3}), {"text": "x", "invalid": True}]}}
    (folder / "turns.yaml").write_text(yaml.safe_dump(turns), "utf-8")
    (folder / "cases.yaml").write_text("- id: c\n  input: {}\n  graders: []\n", "utf-8")

    report = check_skills(root)
    shown = [str(p) for p in report.problems]
    assert any("$.tools[1]: tool 'nope__tool' is not registered" in p for p in shown), shown
    assert any("turns.yaml: $.skills.alpha[0].output.data.note" in p for p in shown), shown
    assert any("cases.yaml" in p and "graders must be a non-empty list" in p for p in shown)
    assert not any("alpha[1]" in p for p in shown)  # marked invalid: meant to be rejected
    assert not report.ok()


def _card(*questions: dict[str, Any]) -> dict[str, Any]:
    return output(action="ask_user", review_type="clarify", questions=list(questions))


def _ask(field_key: str, input_type: str = "text") -> dict[str, Any]:
    return {"question": "?", "field_key": field_key, "input_type": input_type, "required": True}


_OPTIONS = {"options": [{"label": "a", "value": "a"}]}


@pytest.mark.parametrize(
    ("turn", "settings"),
    [
        pytest.param(_card(_ask("profile.elsewhere")), {}, id="field_key-not-provided"),
        pytest.param(_card(_ask("nothing_declared")), {}, id="field_key-not-a-data-field"),
        pytest.param(_card(_ask("summary"), _ask("summary")), {}, id="duplicate-field_key"),
        pytest.param(_card(_ask("summary", "boolean")), {}, id="input_type-cannot-fit"),
        pytest.param(output(data={"summary": 3}), {}, id="data-schema"),
        pytest.param(
            _card({**_ask("profile.topic", "select"), **_OPTIONS}),
            {"max_output_depth": 4},
            id="host-limits",
        ),
    ],
)
def test_check_holds_a_cassette_to_the_rules_a_run_applies(
    tmp_path: Path, turn: dict[str, Any], settings: dict[str, Any]
) -> None:
    """A turn ``check`` passes never fails a run as a contract violation: both call the same
    contract, and check reports the run's own error, at the turn's path in the cassette."""
    from skilldeck import Settings, SkillDeck

    folder = Path(
        body(cli(tmp_path, "new", "note-taker", "--dir", str(tmp_path), "--json"))["folder"]
    )
    cassette = folder / "evals" / "scripted.yaml"
    script = yaml.safe_load(cassette.read_text("utf-8"))
    script["skills"]["note-taker"][0] = turn
    cassette.write_text(yaml.safe_dump(script), "utf-8")
    host = Settings(**settings)

    with SkillDeck(folder, checkpointer="memory://", settings=host) as deck:
        failed = deck.run(context="note-taker")
    assert failed.status == "failed"
    assert failed.error is not None and failed.error.code == "CONTRACT_VIOLATION"
    assert "skills.note-taker[0] is not a valid output" in failed.error.message
    ran = [(e["path"], e["message"]) for e in failed.error.dump()["errors"]]

    report = check_skills(folder, settings=host)
    prefix = "$.skills.note-taker[0].output"
    checked = [
        ("$" + p.json_path.removeprefix(prefix), p.message)
        for p in report.errors
        if p.file == str(cassette) and p.json_path.startswith(prefix)
    ]
    assert checked == ran
    assert not report.ok()


def test_a_worked_example_is_held_to_the_rules_a_run_applies(tmp_path: Path) -> None:
    folder = Path(
        body(cli(tmp_path, "new", "note-taker", "--dir", str(tmp_path), "--json"))["folder"]
    )
    final = _card(_ask("profile.elsewhere"))["output"]
    line = {"input": {"request": "note the budget"}, "reply": {"final": final}}
    (folder / "assets" / "examples.jsonl").write_text(json.dumps(line) + "\n", "utf-8")
    problems = [str(p) for p in check_skills(folder).errors]
    assert problems == [
        f"{folder / 'assets' / 'examples.jsonl'}: $[line 1]: the final output breaks the "
        "contract at $.control.questions[0].field_key: 'profile.elsewhere' is not under "
        "outputs.provides"
    ]


def test_a_bundle_error_names_every_problem(tmp_path: Path) -> None:
    from skilldeck.errors import BundleError
    from skilldeck.skills import load_skills

    root = tmp_path / "skills"
    _broken(root)
    with pytest.raises(BundleError) as info:
        load_skills(root)
    assert len(info.value.problems) >= 4
    assert "more problems: run skilldeck check" in str(info.value)
    assert "\n" not in str(info.value)
