"""A thread has a title a list can show: the first words of its first run's input, or of its
response when the input has no text; kept in the thread index (SQLite and PostgreSQL), added
to an index from before titles, and given by ``GET /threads``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import output, write_bundle
from fastapi.testclient import TestClient

from skilldeck import SkillDeck
from skilldeck.checkpoints.threads import TITLE_CHARS, thread_title
from skilldeck.server import create_app, hash_key

pytestmark = pytest.mark.L2

KEY = "sdk_alice_title_key_0123456789"


def test_a_title_is_the_first_words_of_the_input_or_the_response() -> None:
    assert thread_title({"documents": ["complaint.txt"]}) == "complaint.txt"
    assert thread_title({"n": 1, "request": "file  my\nclaim", "note": "x"}) == "file my claim x"
    assert thread_title({"ids": [1, 2]}, "Filed under travel.") == "Filed under travel."
    assert thread_title({}, None) is None
    long = thread_title({"text": "word " * 40})
    assert long is not None and len(long) <= TITLE_CHARS and long.endswith("word…")


def test_the_index_keeps_each_threads_title(
    skills_dir: Path, make_deck: Callable[..., SkillDeck], database_url: str
) -> None:
    write_bundle(skills_dir, "note")
    finish = output(response="Nothing to file today.", action="finish")
    deck = make_deck(skills_dir, {"note": [finish] * 3}, checkpointer=database_url)
    deck.run({"text": "Lunch with the Lyon customer"}, context="ctx", thread_id="t-input")
    deck.run({"text": "A second run keeps the first title"}, context="ctx", thread_id="t-input")
    deck.run({}, context="ctx", thread_id="t-response")
    titles = {t.thread_id: t.title for t in deck.threads()}
    assert titles == {
        "t-input": "Lunch with the Lyon customer",
        "t-response": "Nothing to file today.",
    }


def test_get_threads_gives_the_titles(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "note")
    deck = make_deck(skills_dir, {"note": [output(action="finish")]})
    with TestClient(create_app(deck, api_keys={hash_key(KEY): "alice"})) as http:
        auth = {"Authorization": f"Bearer {KEY}"}
        thread = http.post("/threads", headers=auth).json()["thread_id"]
        body = {"input": {"text": "Taxi to the airport"}, "context": "ctx"}
        assert http.post(f"/threads/{thread}/runs", headers=auth, json=body).status_code == 200
        (row,) = http.get("/threads", headers=auth).json()["threads"]
        assert (row["title"], row["last_skill"]) == ("Taxi to the airport", "note")


def test_an_index_from_before_titles_gets_the_column(
    skills_dir: Path, make_deck: Callable[..., SkillDeck], tmp_path: Path
) -> None:
    database = tmp_path / "old.sqlite"
    with sqlite3.connect(database) as conn:  # the table as it shipped before titles
        conn.execute(
            "CREATE TABLE skilldeck_threads (thread_id TEXT PRIMARY KEY, user_id TEXT, "
            "matter_id TEXT, status TEXT NOT NULL, skill TEXT, steps INTEGER NOT NULL DEFAULT 0, "
            "created_at TEXT NOT NULL, updated_at TEXT NOT NULL, skills TEXT NOT NULL DEFAULT "
            "'{}', sources TEXT NOT NULL DEFAULT '[]', model TEXT)"
        )
        conn.execute(
            "INSERT INTO skilldeck_threads (thread_id, status, created_at, updated_at) "
            "VALUES ('old', 'finished', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')"
        )
    write_bundle(skills_dir, "note")
    deck = make_deck(
        skills_dir, {"note": [output(action="finish")]}, checkpointer=f"sqlite:///{database}"
    )
    deck.run({"text": "After the upgrade"}, context="ctx", thread_id="new")
    titles = {t.thread_id: t.title for t in deck.threads()}
    assert titles == {"old": None, "new": "After the upgrade"}
