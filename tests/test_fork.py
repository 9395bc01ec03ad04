"""Time travel: fork a thread from an earlier checkpoint; per-run metadata and callbacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEMO_ANSWERS, DEMO_FILES, output, write_bundle
from langchain_core.callbacks import BaseCallbackHandler

from skilldeck import (
    CheckpointError,
    ModelConfigError,
    SkillDeck,
    SkillDeckError,
    ThreadNotFoundError,
)
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

    done = demo_deck.resume(forked.thread_id, DEMO_ANSWERS)
    assert done.status == "finished"
    assert done.state["profile"]["defendant"]["name"] == "Acme Logistics Ltd."
    # The source thread still waits for its own answers.
    assert demo_deck.get_thread(thread).status == "interrupted"
    assert demo_deck.history(thread) == rows


def test_fork_with_an_update_changes_only_the_fork(demo_deck: SkillDeck) -> None:
    thread = _paused(demo_deck)
    finished = demo_deck.resume(thread, DEMO_ANSWERS)
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
