"""The run-inspection API (skilldeck.checkpoints.inspect) on every kind of checkpointer."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, write_bundle

from skilldeck import (
    CheckpointError,
    ModelConfigError,
    Resume,
    Settings,
    SkillDeck,
    SkillDeckError,
    ThreadNotFoundError,
)
from skilldeck.checkpoints.inspect import as_frame, diff, fork, list_threads, steps
from skilldeck.errors import MissingExtraError
from skilldeck.nodes import transcript

pytestmark = pytest.mark.L2

DEMO = {"documents": ["complaint.txt"]}


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.server)])
def deck(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SkillDeck]:
    """The demo deck on a memory, SQLite or PostgreSQL checkpointer."""
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'runs.sqlite'}",
    }.get(request.param) or request.getfixturevalue("postgres_url")
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES))
    with SkillDeck(checkpointer=url, settings=settings) as opened:
        yield opened


def _paused(deck: SkillDeck, user: str = "ann") -> str:
    result = deck.run(DEMO, context="matter", matter_id="demo-matter", user_id=user)
    assert result.status == "interrupted"
    return result.thread_id


def _finished(deck: SkillDeck, user: str = "ann") -> str:
    thread = _paused(deck, user)
    assert deck.run(Resume(thread, DEMO_ANSWERS)).status == "finished"
    return thread


def test_steps_tell_what_each_super_step_did(deck: SkillDeck) -> None:
    thread = _finished(deck)
    rows = steps(deck, thread)
    assert [r["node"] for r in rows] == [
        "input", "__start__",
        "litigation-intake", "tools", "litigation-intake", "tools", "litigation-intake",
        "card", "litigation-intake", "tools", "litigation-intake",
    ]  # fmt: skip
    assert [r["step"] for r in rows] == list(range(-1, 10))
    assert rows[0]["parent_id"] is None
    assert all(r["parent_id"] == p["checkpoint_id"] for p, r in pairwise(rows))
    asked, ran = rows[2]["tool_calls"], rows[3]["tool_calls"]
    assert asked == [
        {
            "name": "file__parse",
            "args": {"file_id": "complaint.txt"},
            "status": "requested",
            "ms": None,
        }
    ]
    assert ran[0]["name"] == "file__parse" and ran[0]["status"] == "ok" and ran[0]["ms"] >= 0
    assert ran[0]["args"] == {"file_id": "complaint.txt"}
    assert [r["in_skill"] for r in rows[2:]] == ["litigation-intake"] * 9
    assert rows[0]["in_skill"] is None and rows[1]["in_skill"] is None
    # The attempt that asked the card, the card answered, the attempt that finished.
    paused, answered, last = rows[6], rows[7], rows[10]
    assert (paused["skill"], paused["attempt"], paused["action"]) == (
        "litigation-intake",
        1,
        "ask_user",
    )
    assert paused["status"] == "interrupted" and paused["card"]["review_type"] == "clarify"
    assert paused["model"].startswith("scripted:") and paused["attempt_ms"] >= 0
    assert answered["answers"] == DEMO_ANSWERS and answered["card"] is None
    assert last["status"] == "finished" and last["action"] == "continue"
    assert all(r["elapsed_ms"] >= 0 for r in rows[1:]) and rows[0]["elapsed_ms"] is None
    # Rows describe only the step that made them: no attempt on the tool steps.
    assert rows[3]["skill"] is None and rows[3]["model"] is None
    assert rows == deck.history(thread)


def test_retries_and_failures_show_in_the_steps(skills_dir: Path, make_deck: Any) -> None:
    write_bundle(skills_dir, "intake", meta={"outputs": {"provides": []}})
    turns = [{"text": "not json", "invalid": True}, output(data={"note": "ok"})]
    deck = make_deck(skills_dir, {"intake": turns}, max_retries=1)
    rows = steps(deck, deck.run({}, context="ctx").thread_id)
    attempts = [(r["attempt"], r["action"]) for r in rows if r["skill"]]
    assert attempts == [(1, "rejected"), (2, "finish")]
    [rejected] = [r for r in rows if r["action"] == "rejected"]
    assert "not JSON" in rejected["validation_errors"][0]["message"]


def test_failed_step_carries_its_error(skills_dir: Path, make_deck: Any) -> None:
    write_bundle(skills_dir, "intake", meta={"outputs": {"provides": []}})
    deck = make_deck(skills_dir, {"intake": [{"text": "no", "invalid": True}]}, max_retries=0)
    thread = deck.run({}, context="ctx").thread_id
    rows = steps(deck, thread)
    [listed] = list_threads(deck, status="failed")
    assert rows[-1]["status"] == "failed"
    assert rows[-1]["error"]["code"] == "CONTRACT_VIOLATION"
    assert [r for r in rows if r["error"]] == [rows[-1]]
    assert listed["thread_id"] == thread and listed["last_skill"] == "intake"


def test_list_threads_filters_by_user_and_status(deck: SkillDeck) -> None:
    done = _finished(deck, "ann")
    paused = _paused(deck, "bob")
    rows = list_threads(deck)
    assert {r["thread_id"] for r in rows} == {done, paused}
    assert set(rows[0]) == {
        "thread_id", "user", "created", "updated", "status", "last_skill", "steps",
    }  # fmt: skip
    assert rows[0]["thread_id"] == paused  # newest first
    assert all(r["created"] <= r["updated"] for r in rows)
    [ann] = list_threads(deck, user="ann")
    assert (ann["thread_id"], ann["status"], ann["last_skill"]) == (
        done,
        "finished",
        "litigation-intake",
    )
    assert ann["steps"] == 10
    assert [r["thread_id"] for r in list_threads(deck, status="interrupted")] == [paused]
    assert list_threads(deck, user="bob", status="finished") == []
    assert list_threads(deck, user="nobody") == []


def test_diff_between_two_checkpoints_by_dot_path(deck: SkillDeck) -> None:
    thread = _finished(deck)
    rows = steps(deck, thread)
    paused = next(r["checkpoint_id"] for r in rows if r["card"])
    changes = {c["path"]: c for c in diff(deck, thread, paused, rows[-1]["checkpoint_id"])}
    name = changes["profile.defendant.name"]
    assert (name["change"], name["old"], name["new"]) == ("added", None, "Acme Logistics Ltd.")
    status = changes["status"]
    assert (status["change"], status["old"], status["new"]) == (
        "changed",
        "interrupted",
        "finished",
    )
    assert changes["card.review_type"]["change"] == "removed"
    assert "profile.plaintiff.name" not in changes  # unchanged paths are left out
    # b defaults to the latest checkpoint; a checkpoint against itself has no changes.
    assert diff(deck, thread, paused) == list(changes.values())
    assert diff(deck, thread, paused, paused) == []
    # Lists diff by index.
    first = diff(deck, thread, rows[0]["checkpoint_id"], paused)
    assert {"path": "profile.facts.0", "change": "added", "old": None} | {
        "new": "2024-03-01: written carriage agreement for 40 crates of ceramics."
    } in first


def test_bad_thread_or_checkpoint_is_a_clear_error(deck: SkillDeck) -> None:
    thread = _finished(deck)
    other = _paused(deck)
    checkpoint = steps(deck, thread)[-1]["checkpoint_id"]
    foreign = steps(deck, other)[-1]["checkpoint_id"]
    with pytest.raises(ThreadNotFoundError):
        steps(deck, "no-such-thread")
    with pytest.raises(ThreadNotFoundError):
        diff(deck, "no-such-thread", checkpoint)
    with pytest.raises(CheckpointError, match="has no checkpoint 'nope'"):
        diff(deck, thread, "nope")
    with pytest.raises(CheckpointError, match="has no checkpoint"):
        diff(deck, thread, checkpoint, foreign)
    with pytest.raises(SkillDeckError, match="unknown thread status 'done'"):
        list_threads(deck, status="done")  # type: ignore[arg-type]
    with pytest.raises(ThreadNotFoundError):
        fork(deck, "no-such-thread", checkpoint)
    with pytest.raises(CheckpointError):
        fork(deck, thread, "nope", model=f"scripted:{DEMO_SCRIPT}")
    assert len(list_threads(deck)) == 2


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.server)])
def test_reading_a_thread_needs_none_of_its_skills(
    store: str, skills_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A deck that did not load the thread's skill reads every field that skill wrote: in the
    state, in the history's card answers and in a diff."""
    url = (
        f"sqlite:///{tmp_path / 'runs.sqlite'}"
        if store == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    write_bundle(skills_dir, "asker", data={"note": {"type": "string"}, "tags": {"type": "array"}})
    ask = output(
        action="ask_user",
        review_type="clarify",
        questions=[{"question": "?", "field_key": "note", "input_type": "text", "required": True}],
    )
    script = tmp_path / "turns.yaml"
    done = output(data={"tags": ["a", "b"]})
    script.write_text(yaml.safe_dump({"skills": {"asker": [ask, done]}}), "utf-8")
    settings = Settings(model=f"scripted:{script}")
    with SkillDeck(skills_dir, checkpointer=url, settings=settings) as own:
        thread = own.run(context="ctx").thread_id
        assert own.run(Resume(thread, {"note": "hi"})).status == "finished"
        expected = own.get_thread(thread).state
    with SkillDeck(checkpointer=url, settings=settings) as builtin:  # no asker here
        state = builtin.get_thread(thread).state
        assert (state["note"], state["tags"]) == ("hi", ["a", "b"])
        assert state == expected
        rows = steps(builtin, thread)
        assert [r["answers"] for r in rows if r["answers"]] == [{"note": "hi"}]
        paused = next(r["checkpoint_id"] for r in rows if r["card"])
        changes = {c["path"]: c for c in diff(builtin, thread, paused)}
        assert changes["note"]["new"] == "hi"
        assert changes["tags.1"] == {"path": "tags.1", "change": "added", "old": None, "new": "b"}


def _rewritten_script(tmp_path: Path) -> Path:
    """The demo's turns with another closing response: what a different model would say."""
    turns: dict[str, Any] = yaml.safe_load(DEMO_SCRIPT.read_text("utf-8"))
    turns["skills"]["litigation-intake"][-1]["output"]["response"] = "Second opinion: complete."
    path = tmp_path / "other-model.yaml"
    path.write_text(yaml.safe_dump(turns), "utf-8")
    return path


def test_fork_with_another_model_leaves_the_source_alone(deck: SkillDeck, tmp_path: Path) -> None:
    thread = _finished(deck)
    before = steps(deck, thread)
    answered = next(r["checkpoint_id"] for r in before if r["answers"])
    other = _rewritten_script(tmp_path)

    # From just after the card was answered, the skill's closing turn runs on the other model.
    forked = fork(deck, thread, answered, model=f"scripted:{other}", new_thread_id="fork-1")
    assert (forked.status, forked.thread_id) == ("finished", "fork-1")
    assert forked.state["response"] == "Second opinion: complete."
    assert forked.state["profile"]["defendant"]["name"] == "Acme Logistics Ltd."
    assert forked.state["attempt"]["model"] == f"scripted:{other}"
    # The original thread and the deck that ran it are untouched and still usable.
    assert steps(deck, thread) == before
    assert deck.get_thread(thread).state["response"].startswith("Intake complete")
    # Without a model or skills, fork is the deck's own fork.
    same = fork(deck, thread, answered, {"profile": {"note": "x"}})
    assert same.status == "finished" and same.state["profile"]["note"] == "x"
    assert same.state["response"].startswith("Intake complete")


def test_fork_with_a_bad_model_forks_nothing(deck: SkillDeck) -> None:
    thread = _paused(deck)
    checkpoint = steps(deck, thread)[-1]["checkpoint_id"]
    with pytest.raises(ModelConfigError):
        fork(deck, thread, checkpoint, model="nosuchprovider:model")
    assert [r["thread_id"] for r in list_threads(deck)] == [thread]


def test_fork_with_edited_skills_tries_a_prompt_change(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    write_bundle(skills, "echo", meta={"outputs": {"provides": []}})
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"skills": {"echo": [output(response="one")] * 2}}), "utf-8")
    with SkillDeck(
        skills, checkpointer="memory://", settings=Settings(model=f"scripted:{script}")
    ) as deck:
        thread = deck.run({}, context="ctx").thread_id
        start = steps(deck, thread)[1]["checkpoint_id"]
        edited = tmp_path / "edited"
        write_bundle(
            edited,
            "echo",
            meta={"outputs": {"provides": []}},
            skill_md="---\nname: echo\ndescription: test\n---\nDo echo, differently.\n",
        )
        forked = fork(deck, thread, start, skills=edited)
        assert forked.status == "finished"
        [attempt] = [r for r in steps(deck, forked.thread_id) if r["skill"]]
        assert attempt["action"] == "finish"
        prompt = transcript.read(deck.store, *_turn(forked.state))[0]
        assert "Do echo, differently." in str(prompt.content)
        first = transcript.read(deck.store, *_turn(deck.get_thread(thread).state))
        assert "differently" not in str(first[0].content)


def test_frames_need_pandas(deck: SkillDeck, monkeypatch: pytest.MonkeyPatch) -> None:
    thread = _finished(deck)
    frame = steps(deck, thread, frame=True)
    assert isinstance(frame, pd.DataFrame) and len(frame) == 11
    assert {"node", "skill", "tool_calls", "elapsed_ms"} <= set(frame.columns)
    assert list(list_threads(deck, frame=True)["status"]) == ["finished"]
    assert isinstance(diff(deck, thread, frame["checkpoint_id"][0], frame=True), pd.DataFrame)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'skilldeck\[notebooks\]'"):
        as_frame([{"a": 1}])
    with pytest.raises(MissingExtraError):
        steps(deck, thread, frame=True)


def _turn(state: dict[str, Any]) -> tuple[str, str]:
    """The last attempt's turn and transcript head in ``state``."""
    return state["attempt"]["turn"], state["attempt"]["head"]


def test_history_reads_in_pages_that_join_into_the_whole(deck: SkillDeck) -> None:
    """Pages of any size, each read from the checkpointer alone, join into the whole history,
    every row as the whole history has it (a page's oldest row still says what its step did)."""
    thread = _finished(deck)
    whole = deck.history(thread)
    assert len(whole) > 5
    for size in (1, 2, 5):
        pages: list[list[dict[str, Any]]] = []
        before = None
        while True:
            page = deck.history(thread, limit=size, before=before)
            assert 0 < len(page) <= size
            pages.insert(0, page)
            if page[0]["parent_id"] is None:
                break
            before = page[0]["checkpoint_id"]
        assert [row for page in pages for row in page] == whole, size
    assert deck.history(thread, limit=len(whole) + 10) == whole
    with pytest.raises(SkillDeckError, match="limit must be 1 or more"):
        deck.history(thread, limit=0)
    with pytest.raises(SkillDeckError, match="before"):
        deck.history(thread, before="../x")
