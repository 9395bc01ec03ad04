"""``skilldeck knowledge index`` and the knowledge tools wired into a deck's registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skilldeck import Settings, SkillDeck
from skilldeck.cli import app

pytestmark = [pytest.mark.L2, pytest.mark.cli]

FIXTURES = Path(__file__).parent / "fixtures" / "knowledge"


def test_index_is_incremental_and_feeds_the_deck_tools(tmp_path: Path) -> None:
    env = {
        "SKILLDECK_KNOWLEDGE_PATH": str(tmp_path / "kb"),
        "SKILLDECK_CHROMA_PATH": str(tmp_path / "chroma"),
    }
    runner = CliRunner(env=env)
    first = runner.invoke(app, ["knowledge", "index", str(FIXTURES), "--json"])
    assert first.exit_code == 0, first.output
    counts = json.loads(first.stdout)
    assert counts["files"] == 5 and counts["chunks"] > 0 and counts["rows"] > 0
    assert "indexing" in first.stderr  # the progress bar
    again = json.loads(runner.invoke(app, ["knowledge", "index", str(FIXTURES), "--json"]).stdout)
    assert again["skipped"] == 5 and again["chunks"] == 0
    missing = runner.invoke(app, ["knowledge", "index", str(tmp_path / "nope"), "--json"])
    assert missing.exit_code == 2 and "no such folder" in missing.stdout

    settings = Settings(
        knowledge_path=str(tmp_path / "kb"),
        chroma_path=str(tmp_path / "chroma"),
        files_root=str(FIXTURES),
    )
    with SkillDeck(checkpointer="memory://", settings=settings) as deck:
        assert deck.tools.resolve("rag_retrieve") == "knowledge__rag_retrieve"
        assert deck.tools.resolve("table_rag_retrieve") == "knowledge__table_rag_retrieve"
        assert deck.tools.resolve("local_file_search") == "file__local_search"
        found = deck.tools.invoke("rag_retrieve", {"query": "install with pip", "top_k": 3}, {})
        assert found.ok and "docs/guide.md" in found.content
