"""Against a real OpenAI-compatible endpoint (``SKILLDECK_BASE_URL``, ``SKILLDECK_MODEL``).

A small local model may not follow the contract every time; what must hold is that the engine
either produces a contract-valid result or fails the run cleanly with the errors, never merging
invalid output.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES

from skilldeck import Resume, Settings, SkillDeck

pytestmark = pytest.mark.integration


def test_litigation_intake_with_a_real_model(tmp_path: Path) -> None:
    settings = Settings(files_root=str(DEMO_FILES), model=os.environ.get("SKILLDECK_MODEL"))
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings) as deck:
        result = deck.run(
            {"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter"
        )
        if result.status == "interrupted":
            assert result.card is not None and result.card["questions"]
            answers = {
                q["field_key"]: DEMO_ANSWERS.get(
                    q["field_key"], q.get("options", [{}])[0].get("value", "n/a")
                )
                for q in result.card["questions"]
            }
            result = deck.run(Resume(result.thread_id, answers))
        assert result.status in ("finished", "failed", "interrupted")
        if result.status == "failed":
            assert result.error and result.error.code in ("CONTRACT_VIOLATION", "LOOP_GUARD")
        else:
            assert not result.state["attempt"]["model"].startswith("scripted:")
            assert result.state["attempt"]["validation_errors"] == []


def test_recall_and_rag_with_a_real_model(tmp_path: Path) -> None:
    """Both seed skills end in a contract-valid result or a clean failure with a real model."""
    from skilldeck.tools.messages import Message

    settings = Settings(
        model=os.environ.get("SKILLDECK_MODEL"),
        messages_path=str(tmp_path / "m.sqlite"),
        chroma_path=str(tmp_path / "chroma"),
        knowledge_path=str(tmp_path / "kb"),
        files_root=str(Path(__file__).parent / "fixtures" / "knowledge"),
    )
    with SkillDeck(checkpointer="memory://", settings=settings) as deck:
        from skilldeck.services import open_memory

        store = open_memory(settings)
        store.add(
            [
                Message("a", "u", "t", "user", "2026-01-01T10:00:00Z", "I'm allergic to peanuts."),
                Message("b", "u", "t", "user", "2026-01-02T10:00:00Z", "I love hiking."),
            ]
        )
        store.close()
        recall = deck.run({"question": "What should I never eat?"}, context="recall", user_id="u")
        assert recall.status in ("finished", "failed")
        if recall.status == "finished":
            cited = {
                eid
                for items in recall.state["memory_view"].values()
                for item in items
                for eid in item["evidence"]
            }
            assert cited <= {e["message_id"] for e in recall.state["evidence"]}
        rag = deck.run({"question": "How do I install it?"}, context="knowledge", user_id="u")
        assert rag.status in ("finished", "failed")
