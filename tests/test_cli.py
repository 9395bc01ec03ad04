"""The ``skilldeck`` command line, end to end on the demo's scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, write_bundle
from typer.testing import CliRunner, Result

from skilldeck.cli import app

pytestmark = [pytest.mark.L2, pytest.mark.cli]

CARD_KEYS = {"event", "thread_id", "skill", "review_type", "questions", "interrupt_id"}
RUN_INPUT = json.dumps({"documents": ["complaint.txt"]})
MODEL = f"scripted:{DEMO_SCRIPT}"


class Cli:
    """Invokes the app with one checkpoint database and the demo files root."""

    def __init__(self, tmp_path: Path) -> None:
        self.checkpoint = f"sqlite:///{tmp_path / 'c.sqlite'}"
        self.runner = CliRunner(env={"SKILLDECK_FILES_ROOT": str(DEMO_FILES)})

    def __call__(self, *args: str) -> Result:
        return self.runner.invoke(app, [*args, "--checkpoint", self.checkpoint])

    def json(self, *args: str, code: int = 0) -> Any:
        result = self(*args, "--json")
        assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
        return json.loads(result.stdout)

    def error(self, *args: str) -> dict[str, Any]:
        """Run a command that must fail; returns its ``error`` object."""
        body = self.json(*args, code=2)
        assert body["status"] == "error"
        assert set(body["error"]) >= {"code", "message"}
        assert body["error"]["message"]
        return body["error"]  # type: ignore[no-any-return]

    def touch(self) -> None:
        """Create the checkpoint database with a run that no skill can start (exit 1)."""
        body = self.json("run", "--context", "nothing", "--model", MODEL, code=1)
        assert body["status"] == "no_skill"

    def start(self) -> dict[str, Any]:
        """``run`` the demo matter until its card."""
        body = self.json(
            "run", "--context", "matter", "--matter", "demo-matter",
            "--input", RUN_INPUT, "--model", MODEL,
        )  # fmt: skip
        assert body["status"] == "interrupted", body
        return body  # type: ignore[no-any-return]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


# -- demo ---------------------------------------------------------------------------------


def test_demo_with_answers_json(cli: Cli) -> None:
    body = cli.json("demo", "--answers", json.dumps(DEMO_ANSWERS))

    assert body["status"] == "finished"
    assert len(body["steps"]) == 2
    first, last = body["steps"]
    assert first["status"] == "interrupted"
    card = first["card"]
    assert set(card) >= CARD_KEYS
    assert card["event"] == "card"
    assert card["skill"] == "litigation-intake"
    assert card["thread_id"] == body["thread_id"]
    assert {q["field_key"] for q in card["questions"]} == set(DEMO_ANSWERS)
    assert last["status"] == "finished"
    profile = body["state"]["profile"]
    assert profile["defendant"]["name"] == DEMO_ANSWERS["profile.defendant.name"]
    assert profile["intake_status"] == "completed"


def test_demo_human_output_labels_the_scripted_model(cli: Cli) -> None:
    result = cli("demo", "--answers", json.dumps(DEMO_ANSWERS))

    assert result.exit_code == 0, (result.output, result.exception)
    assert "scripted" in result.output
    assert "finished" in result.output
    assert "Acme Logistics Ltd." in result.output
    # It answered the card itself: nothing is left to resume.
    assert "answer with" not in result.output
    assert "resume with answers" in result.output


def test_demo_without_answers_and_without_a_tty_waits_and_resume_answers(cli: Cli) -> None:
    result = cli("demo")
    assert result.exit_code == 0, result.output
    assert "interrupted" in result.stdout
    assert "answer with: skilldeck resume" in result.stdout
    thread = result.stdout.split("answer with: skilldeck resume ", 1)[1].split()[0]

    # As its hint says, with no --model: the thread resumes on the model it started on.
    resumed = cli.json("resume", thread[:8], "--answers", json.dumps(DEMO_ANSWERS))
    assert resumed["status"] == "finished"
    assert resumed["state"]["profile"]["defendant"]["name"] == "Acme Logistics Ltd."


# -- run, resume, threads, show, graph ----------------------------------------------------


def test_run_resume_threads_show(cli: Cli) -> None:
    started = cli.start()
    thread = started["thread_id"]
    card = started["card"]
    assert set(card) >= CARD_KEYS
    assert card["thread_id"] == thread
    assert card["skill"] == "litigation-intake"

    resumed = cli.json("resume", thread, "--answers", json.dumps(DEMO_ANSWERS), "--model", MODEL)
    assert resumed["status"] == "finished"
    assert resumed["thread_id"] == thread
    assert resumed["state"]["profile"]["defendant"] == {
        "name": "Acme Logistics Ltd.",
        "type": "organisation",
    }
    assert resumed["state"]["matter_id"] == "demo-matter"

    rows = cli.json("threads")
    assert isinstance(rows, list)
    mine = [r for r in rows if r["thread_id"] == thread]
    assert len(mine) == 1
    assert mine[0]["status"] == "finished"
    assert mine[0]["last_skill"] == "litigation-intake"

    shown = cli.json("show", thread)
    assert shown["status"] == "finished"
    assert shown["thread_id"] == thread
    history = shown["history"]
    assert len(history) > 1
    assert all({"checkpoint_id", "step", "status", "skill"} <= set(r) for r in history)
    asked = [r for r in history if r["card"]]
    assert asked
    assert asked[0]["card"]["interrupt_id"] == card["interrupt_id"]
    assert history[-1]["status"] == "finished"


def test_graph_prints_mermaid() -> None:
    # graph compiles against an in-memory checkpoint: it has no --checkpoint option
    result = CliRunner().invoke(app, ["graph"])

    assert result.exit_code == 0, (result.output, result.exception)
    assert "graph TD" in result.stdout or "flowchart" in result.stdout
    assert "litigation-intake" in result.stdout

    body = json.loads(CliRunner().invoke(app, ["graph", "--json"]).stdout)
    assert "litigation-intake" in body["mermaid"]


# -- errors -------------------------------------------------------------------------------


def _run(cli: Cli, payload: str, *extra: str) -> dict[str, Any]:
    return cli.error(
        "run", "--context", "matter", "--matter", "demo-matter",
        "--input", payload, "--model", MODEL, *extra,
    )  # fmt: skip


def test_run_rejects_invalid_input_json(cli: Cli) -> None:
    error = _run(cli, "{not json")
    assert error["code"] == "INVALID_INPUT"
    assert "--input" in error["message"]


@pytest.mark.parametrize("payload", ["[1, 2]", '"text"', "3", "null"])
def test_run_rejects_input_that_is_not_an_object(cli: Cli, payload: str) -> None:
    error = _run(cli, payload)
    assert error["code"] == "INVALID_INPUT"
    assert "object" in error["message"]


@pytest.mark.parametrize("key", ["user_id", "matter_id"])
def test_run_rejects_input_carrying_identity(cli: Cli, key: str) -> None:
    cli.touch()
    before = cli.json("threads")

    error = _run(cli, json.dumps({"documents": ["complaint.txt"], key: "someone-else"}))

    assert error["code"] == "INVALID_INPUT"
    assert key in error["message"]
    assert cli.json("threads") == before


def test_resume_unknown_thread(cli: Cli) -> None:
    cli.touch()
    error = cli.error("resume", "no-such-thread", "--answers", "{}", "--model", MODEL)
    assert error["code"] == "THREAD_NOT_FOUND"
    assert "no-such-thread" in error["message"]


def test_resume_with_invalid_answers_leaves_the_card_pending(cli: Cli) -> None:
    started = cli.start()
    thread = started["thread_id"]
    bad = {"profile.defendant.name": "Acme", "profile.defendant.type": "company"}

    error = cli.error("resume", thread, "--answers", json.dumps(bad), "--model", MODEL)

    assert error["code"] == "INVALID_ANSWERS"
    assert [e["field_key"] for e in error["errors"]] == ["profile.defendant.type"]
    shown = cli.json("show", thread)
    assert shown["status"] == "interrupted"
    assert shown["card"]["interrupt_id"] == started["card"]["interrupt_id"]

    missing = cli.error("resume", thread, "--answers", "{}", "--model", MODEL)
    assert missing["code"] == "INVALID_ANSWERS"
    assert cli.json("show", thread)["status"] == "interrupted"

    not_json = cli.error("resume", thread, "--answers", "{oops", "--model", MODEL)
    assert not_json["code"] == "INVALID_INPUT"
    assert cli.json("show", thread)["status"] == "interrupted"

    a_list = cli.error("resume", thread, "--answers", '["Acme"]', "--model", MODEL)
    assert a_list["code"] == "INVALID_INPUT" and "JSON object" in a_list["message"]
    assert cli.json("show", thread)["status"] == "interrupted"


def test_resume_of_a_finished_thread(cli: Cli) -> None:
    thread = cli.start()["thread_id"]
    answers = json.dumps(DEMO_ANSWERS)
    assert cli.json("resume", thread, "--answers", answers, "--model", MODEL)["status"] == (
        "finished"
    )

    error = cli.error("resume", thread, "--answers", answers, "--model", MODEL)

    assert error["code"] == "NO_PENDING_CARD"
    assert "finished" in error["message"]


def test_malformed_skills_dir(cli: Cli, skills_dir: Path) -> None:
    write_bundle(skills_dir, "broken", meta={"priority": "high"})

    error = cli.error("run", "--context", "ctx", "--skills", str(skills_dir), "--model", MODEL)

    assert error["code"] == "INVALID_BUNDLE"
    assert "skill.meta.json" in error["file"]
    assert error["json_path"] == "$.priority"

    human = cli("run", "--context", "ctx", "--skills", str(skills_dir), "--model", MODEL)
    assert human.exit_code == 2
    assert "INVALID_BUNDLE" in human.stderr


def test_errors_in_human_mode_go_to_stderr(cli: Cli) -> None:
    cli.touch()
    result = cli("resume", "no-such-thread", "--answers", "{}")

    assert result.exit_code == 2
    assert "THREAD_NOT_FOUND" in result.stderr
    assert result.stdout == ""


def test_the_terminal_card_asks_numbers_again_until_the_card_takes_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from skilldeck.cli.runs import _ask
    from skilldeck.nodes import answers_schema

    questions: list[Any] = [
        {
            "question": "Amount?",
            "field_key": "amount",
            "input_type": "number",
            "required": True,
            "minimum": 0,
            "maximum": 500,
        },
        {
            "question": "Crates?",
            "field_key": "crates",
            "input_type": "integer",
            "required": False,
            "error_message": "Give a whole number of crates.",
        },
        {"question": "Size?", "field_key": "size", "input_type": "select", "required": True,
         "options": [{"label": "Small", "value": 1}, {"label": "Large", "value": 2}]},
        {"question": "Note?", "field_key": "note", "input_type": "text", "required": False},
    ]  # fmt: skip
    card: Any = {"questions": questions, "answers_schema": answers_schema(questions)}
    typed = iter(["lots", "900", "120.5", "2.5", "3", "2", ""])
    monkeypatch.setattr("builtins.input", lambda *_: next(typed))
    assert _ask(card) == {"amount": 120.5, "crates": 3, "size": 2}
    said = capsys.readouterr()
    assert "from 0 to 500" in said.out
    assert said.err.splitlines() == [
        "must be a number",
        "must be at most 500",
        "Give a whole number of crates.",
    ]


def test_an_error_names_the_extra_to_install_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """An error's text is printed as text: `skilldeck[service]` is not taken for a style and
    dropped, which left the newcomer without the one thing to install."""
    import typer

    from skilldeck.cli._shared import fail
    from skilldeck.errors import MissingExtraError

    with pytest.raises(typer.Exit):
        fail(MissingExtraError("the service's uvicorn", "service"))
    said = " ".join(capsys.readouterr().err.split())
    assert "skilldeck[service]" in said and "[MISSING_EXTRA]" in said, said
