"""Time travel: fork a thread from an earlier checkpoint; per-run metadata and callbacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, write_bundle
from endpoint import serve, settings_for, text
from langchain_core.callbacks import BaseCallbackHandler

from skilldeck import (
    CheckpointError,
    ModelConfigError,
    Resume,
    SkillDeck,
    SkillDeckError,
    ThreadNotFoundError,
)
from skilldeck.nodes import transcript
from skilldeck.scripted import load_script
from skilldeck.settings import Settings

pytestmark = pytest.mark.L2

DEMO = {"documents": ["complaint.txt"]}


def _paused(deck: SkillDeck) -> str:
    result = deck.run(DEMO, context="matter", matter_id="demo-matter", user_id="u")
    assert result.status == "interrupted"
    return result.thread_id


def test_fork_from_the_paused_checkpoint_leaves_the_original_alone(demo_deck: SkillDeck) -> None:
    thread = _paused(demo_deck)
    before = demo_deck.get_thread(thread)
    rows = demo_deck.history(thread)
    paused_at = rows[-1]["checkpoint_id"]

    forked = demo_deck.fork(thread, paused_at)
    assert forked.thread_id != thread
    assert forked.status == "interrupted" and forked.card is not None
    assert forked.state["profile"] == before.state["profile"]

    done = demo_deck.run(Resume(forked.thread_id, DEMO_ANSWERS))
    assert done.status == "finished"
    assert done.state["profile"]["defendant"]["name"] == "Acme Logistics Ltd."
    # The source thread still waits for its own answers.
    assert demo_deck.get_thread(thread).status == "interrupted"
    assert demo_deck.history(thread) == rows


def test_fork_with_an_update_changes_only_the_fork(demo_deck: SkillDeck) -> None:
    thread = _paused(demo_deck)
    finished = demo_deck.run(Resume(thread, DEMO_ANSWERS))
    last = demo_deck.history(thread)[-1]["checkpoint_id"]
    forked = demo_deck.fork(thread, last, {"profile": {"note": "forked"}}, new_thread_id="f-1")
    assert forked.thread_id == "f-1"
    assert forked.state["profile"]["note"] == "forked"
    assert forked.state["profile"]["defendant"] == finished.state["profile"]["defendant"]
    assert "note" not in demo_deck.get_thread(thread).state["profile"]


def test_fork_errors_change_nothing(demo_deck: SkillDeck) -> None:
    thread = _paused(demo_deck)
    checkpoint = demo_deck.history(thread)[-1]["checkpoint_id"]
    count = len(demo_deck.threads())
    with pytest.raises(ThreadNotFoundError):
        demo_deck.fork("nope", checkpoint)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        demo_deck.fork(thread, "1ef-not-a-checkpoint")
    with pytest.raises(SkillDeckError, match="unknown state keys: bogus"):
        demo_deck.fork(thread, checkpoint, {"bogus": 1})
    with pytest.raises(SkillDeckError, match="already exists"):
        demo_deck.fork(thread, checkpoint, new_thread_id=thread)
    assert len(demo_deck.threads()) == count


def test_cases_pick_per_run_turns_and_callbacks_see_the_metadata(
    tmp_path: Path, skills_dir: Path
) -> None:
    write_bundle(skills_dir, "echo", meta={"outputs": {"provides": []}})
    script = tmp_path / "cassette.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "skills": {"echo": [output(response="default")]},
                "cases": {"c1": {"skills": {"echo": [output(response="case one")]}}},
            }
        ),
        "utf-8",
    )
    seen: list[dict[str, Any]] = []

    class Spy(BaseCallbackHandler):
        def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
            seen.append(dict(kw.get("metadata") or {}))

    deck = SkillDeck(
        skills_dir,
        checkpointer="memory://",
        settings=Settings(model=f"scripted:{script}", files_root=str(DEMO_FILES)),
    )
    with deck:
        one = deck.run({}, context="ctx", metadata={"skilldeck_case": "c1"}, callbacks=[Spy()])
        other = deck.run({}, context="ctx", metadata={"skilldeck_case": "c2"})
    assert one.state["response"] == "case one"
    assert other.state["response"] == "default"  # an unknown case falls back to `skills`
    assert seen and seen[0]["skilldeck_case"] == "c1" and seen[0]["skilldeck_skill"] == "echo"


def test_bad_cases_section_is_a_clear_error() -> None:
    with pytest.raises(ModelConfigError, match=r"\$\.cases\.c1\.skills\.echo\[0\]"):
        load_script({"cases": {"c1": {"skills": {"echo": [{"oops": 1}]}}}})
    with pytest.raises(ModelConfigError, match=r"\$\.cases: must map"):
        load_script({"skills": {}, "cases": [1]})


# -- the checkpoint owns the run --------------------------------------------------------------
def _demo_turns() -> dict[bool, list[dict[str, Any]]]:
    """The demo cassette's model turns, before the card and after it."""
    turns = yaml.safe_load(DEMO_SCRIPT.read_text("utf-8"))["skills"]["litigation-intake"]
    return {False: turns[:3], True: turns[3:]}


def _as_the_demo_model(body: dict[str, Any]) -> dict[str, Any]:
    """The demo's model as an endpoint: each reply follows from the request alone (which turn,
    which round), so the same request always gets the same reply."""
    messages = body["messages"]
    after_card = "Acme Logistics" in str(messages[1]["content"])
    turn = _demo_turns()[after_card][(len(messages) - 2) // 2]
    if "output" in turn:
        return text(json.dumps({"final": turn["output"]}))
    (call,) = turn["tool_calls"]
    return text(json.dumps({"tool": call["name"], "arguments": call["args"]}))


def test_a_fork_at_any_checkpoint_sends_the_model_what_the_original_sent() -> None:
    """Mid-turn too: the fork reads the conversation its checkpoint holds, so each request it
    sends is byte for byte the one the original run sent from that point on."""
    with serve([_as_the_demo_model] * 200) as endpoint:
        settings = settings_for(endpoint, output_mode="schema", files_root=str(DEMO_FILES))
        with SkillDeck(checkpointer="memory://", settings=settings) as deck:
            thread = _paused(deck)
            assert deck.run(Resume(thread, DEMO_ANSWERS)).status == "finished"
            original = list(endpoint.raw)
            checkpoints = [r["checkpoint_id"] for r in deck.history(thread)]
            sent_by_fork = []
            for checkpoint in checkpoints:
                start = len(endpoint.raw)
                forked = deck.fork(thread, checkpoint)
                if forked.status == "interrupted":
                    forked = deck.run(Resume(forked.thread_id, DEMO_ANSWERS))
                assert forked.status == "finished", forked.error
                sent = endpoint.raw[start:]
                assert sent == original[len(original) - len(sent) :], checkpoint
                sent_by_fork.append(len(sent))
    assert sent_by_fork[0] == len(original)  # from the start: every call again
    assert sorted(sent_by_fork, reverse=True) == sent_by_fork
    # Forks in the middle of a turn (after a tool round) go on with its conversation: their
    # first call carries the rounds before it (it was an empty prompt before the redesign).
    firsts = [json.loads(original[-n]) for n in sent_by_fork if n]
    assert any(len(first["messages"]) > 2 for first in firsts)


def test_running_again_from_an_earlier_checkpoint_sees_no_later_message() -> None:
    with serve([_as_the_demo_model] * 50) as endpoint:
        settings = settings_for(endpoint, output_mode="schema", files_root=str(DEMO_FILES))
        with SkillDeck(checkpointer="memory://", settings=settings) as deck:
            thread = _paused(deck)
            deck.run(Resume(thread, DEMO_ANSWERS))
            original = list(endpoint.raw)
            rows = deck.history(thread)
            # The checkpoint after the first tool round: the next call is the original's second.
            after_tools = next(r for r in rows if r["node"] == "tools")
            at = {"thread_id": thread, "checkpoint_id": after_tools["checkpoint_id"]}
            # The run's identity is its config's (the tools' choices depend on it), as a
            # deck's replay passes it.
            config: Any = {"configurable": {**at, "user_id": "u", "matter_id": "demo-matter"}}
            start = len(endpoint.raw)
            deck.graph.invoke(None, config)
            again = endpoint.raw[start]
    assert again == original[1]


def _turns(deck: SkillDeck) -> set[str]:
    """The turns whose transcript rows the store holds."""
    return {item.namespace[2] for item in deck.store.search(("skilldeck", "turns"), limit=10_000)}


def test_forgetting_a_thread_keeps_the_turns_a_fork_still_reaches(demo_deck: SkillDeck) -> None:
    """A fork mid-way through the first turn shares that turn's rows: forgetting the original
    deletes only its later turn, and the fork still forks (its chain is whole); forgetting
    every thread leaves no row and no reference behind."""
    thread = _paused(demo_deck)
    assert demo_deck.run(Resume(thread, DEMO_ANSWERS)).status == "finished"
    first_turn = _turns(demo_deck)
    rows = demo_deck.history(thread)
    mid = next(r for r in rows if r["node"] == "tools")  # inside the first turn
    fork = demo_deck.fork(thread, mid["checkpoint_id"])
    assert fork.status == "interrupted"
    both = _turns(demo_deck)
    assert len(both) == 2  # the first turn (shared) and the original's turn after its card

    assert transcript.forget_thread(demo_deck.store, thread) == 1
    kept = _turns(demo_deck)
    assert len(kept) == 1 and kept < both
    # The fork's chain is whole: forking it again mid-turn reads every row up to there.
    fork_mid = next(r for r in demo_deck.history(fork.thread_id) if r["node"] == "tools")
    again = demo_deck.fork(fork.thread_id, fork_mid["checkpoint_id"])
    assert again.status == "interrupted"

    for other in (fork.thread_id, again.thread_id):
        transcript.forget_thread(demo_deck.store, other)
    assert _turns(demo_deck) == set()
    assert not demo_deck.store.search(("skilldeck", "turn_refs"), limit=10)
    assert not demo_deck.store.search(("skilldeck", "thread_turns"), limit=10)
    assert first_turn  # the run had written rows to begin with
