"""Retention (issue 36): threads expire their time-to-live after their last activity; a prune
deletes them with every row they own (checkpoints, transcripts, index rows, claims) but never a
thread whose card waits, one a run holds, or a transcript row a fork still reads; thinning
keeps a finished thread's last checkpoint. SQLite and PostgreSQL (``database_url``)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
from conftest import (
    DEMO_ANSWERS,
    DEMO_FILES,
    DEMO_SCRIPT,
    own_matter,
    serve_command,
    write_serve_root,
)
from serving import ServeProcess, free_port, sse
from typer.testing import CliRunner

from skilldeck import CardEvent, Resume, Settings, SkillDeck
from skilldeck.checkpoints.claims import RUN_LEASE
from skilldeck.cli import app
from skilldeck.errors import CheckpointError, SkillDeckError
from skilldeck.server import hash_key

pytestmark = pytest.mark.L2

DEMO = {"context": "matter", "matter_id": "demo-matter"}
INPUT = {"documents": ["complaint.txt"]}
HOUR = 3600.0


def _deck(url: str, **settings: Any) -> SkillDeck:
    """The built-in skills on the demo's scripted model, on ``url``."""
    return SkillDeck(
        checkpointer=url,
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), **settings),
    )


@pytest.fixture
def deck(database_url: str) -> Iterator[SkillDeck]:
    with _deck(database_url, thread_ttl="1h") as opened:
        yield opened


def _paused(deck: SkillDeck, **options: Any) -> str:
    """A demo thread waiting at its card."""
    result = deck.run(INPUT, **DEMO, **options)
    assert result.status == "interrupted"
    return result.thread_id


def _finished(deck: SkillDeck, **options: Any) -> str:
    thread = _paused(deck, **options)
    assert deck.run(Resume(thread, DEMO_ANSWERS)).status == "finished"
    return thread


def _later(seconds: float = HOUR) -> float:
    """A time ``seconds`` (and a little more) from now: a prune then expires what ``seconds``
    of time-to-live kept."""
    return time.time() + seconds + 60


def _turns(deck: SkillDeck) -> set[str]:
    return {item.namespace[2] for item in deck.store.search(("skilldeck", "turns"), limit=10_000)}


def _rows(url: str, thread_id: str) -> dict[str, int]:
    """How many rows of each checkpoint table and of the claims the thread has."""
    if url.startswith("sqlite:///"):
        tables = ["checkpoints", "writes", "skilldeck_threads", "skilldeck_interrupt_claims"]
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return {
                t: conn.execute(
                    f"SELECT count(*) FROM {t} WHERE thread_id = ?", (thread_id,)
                ).fetchone()[0]
                for t in tables
            }
    import psycopg

    tables = ["checkpoints", "checkpoint_blobs", "checkpoint_writes", "skilldeck_threads"]
    tables.append("skilldeck_interrupt_claims")
    with psycopg.connect(url) as conn:
        return {
            t: conn.execute(
                f"SELECT count(*) FROM {t} WHERE thread_id = %s", (thread_id,)
            ).fetchone()[0]
            for t in tables
        }


# -- expiry -------------------------------------------------------------------------------
def test_an_expired_thread_is_deleted_with_every_row_it_owns(
    deck: SkillDeck, database_url: str
) -> None:
    """Checkpoints (every table), transcript rows and their references, the index row and the
    claims (a card claim a killed process left) all go; another thread's rows stay."""
    thread = _finished(deck)
    other = _finished(deck, ttl="never")
    assert deck.claims.claim(thread, "leftover-card", "a-killed-process")
    before = _rows(database_url, thread)
    assert before["checkpoints"] > 1 and before["skilldeck_threads"] == 1
    assert before["skilldeck_interrupt_claims"] == 1
    turns = _turns(deck)
    assert len(turns) == 4  # two turns (before and after the card) of each thread

    assert deck.prune(now=time.time() + 30).deleted == 0  # not expired yet: kept
    report = deck.prune(now=_later())
    assert (report.expired, report.deleted, report.busy, report.pending) == (1, 1, 0, 0)

    assert set(_rows(database_url, thread).values()) == {0}
    assert deck.index.get(thread) is None
    with pytest.raises(SkillDeckError):
        deck.get_thread(thread)
    assert len(_turns(deck)) == 2  # the other thread's two
    labels = {i.key for i in deck.store.search(("skilldeck", "turn_refs"), limit=100)}
    assert labels == {other}
    assert _rows(database_url, other)["checkpoints"] == before["checkpoints"]
    assert deck.get_thread(other).status == "finished"
    assert deck.prune(now=_later()).deleted == 0  # nothing left to delete


def test_expiry_counts_from_the_last_activity_and_a_waiting_card_is_never_deleted(
    deck: SkillDeck,
) -> None:
    """A thread at its card is kept however old (its index row says so, and the checkpoint
    says so too when the row is behind it), and its card can still be answered."""
    paused = _paused(deck)
    finished = _finished(deck)
    record = deck.index.get(finished)
    assert record is not None and record.ttl_s == HOUR and record.expires_at is not None
    stopped = time.time()
    assert stopped - 5 < record.expires_at - HOUR <= stopped  # an hour after its last stop
    # The index row of the paused thread says finished (its process died before it wrote the
    # card's status): the checkpoint still says a card waits.
    deck.index.stopped(paused, status="finished", skill=None, steps=1)

    report = deck.prune(now=_later())
    assert (report.deleted, report.pending) == (1, 1)
    assert deck.index.get(finished) is None
    assert deck.run(Resume(paused, DEMO_ANSWERS)).status == "finished"


def test_a_thread_a_run_holds_is_left_for_the_next_prune(deck: SkillDeck) -> None:
    thread = _finished(deck)
    assert deck.claims.claim(thread, RUN_LEASE, "a-running-request")
    report = deck.prune(now=_later())
    assert (report.expired, report.deleted, report.busy) == (1, 0, 1)
    assert deck.get_thread(thread).status == "finished"
    deck.claims.release(thread, RUN_LEASE, "a-running-request")
    assert deck.prune(now=_later()).deleted == 1


def test_two_prunes_at_once_delete_each_thread_once(database_url: str) -> None:
    """Two processes' prunes (two decks, each with its own connections) on one database."""
    with _deck(database_url, thread_ttl="1h") as one, _deck(database_url) as two:
        threads = [_finished(one) for _ in range(4)]
        start = threading.Barrier(2)
        reports: list[Any] = []

        def prune(deck: SkillDeck) -> None:
            start.wait()
            reports.append(deck.prune(now=_later(), batch=1))

        workers = [threading.Thread(target=prune, args=(d,)) for d in (one, two)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert len(reports) == 2  # neither failed
        assert sum(r.deleted for r in reports) == 4
        assert all(one.index.get(t) is None for t in threads)


# -- forks --------------------------------------------------------------------------------
def test_a_fork_keeps_the_rows_it_shares_and_runs_on_after_its_parent_is_pruned(
    deck: SkillDeck,
) -> None:
    parent = _finished(deck)
    mid = next(r for r in deck.history(parent) if r["node"] == "tools")  # inside turn one
    fork = deck.fork(parent, mid["checkpoint_id"], ttl="2h")
    assert fork.status == "interrupted"
    shared = _turns(deck)
    assert len(shared) == 2  # turn one (shared) and the parent's turn after its card

    report = deck.prune(now=_later(HOUR + 60))  # past the parent's hour, within the fork's two
    assert report.deleted == 1 and deck.index.get(parent) is None
    assert len(_turns(deck)) == 1 and _turns(deck) < shared
    # The fork reads its whole transcript: its history, a fork of it mid-turn, its card.
    fork_mid = next(r for r in deck.history(fork.thread_id) if r["node"] == "tools")
    again = deck.fork(fork.thread_id, fork_mid["checkpoint_id"], ttl="never")
    assert again.status == "interrupted"
    assert deck.run(Resume(fork.thread_id, DEMO_ANSWERS)).status == "finished"
    # The fork's own time-to-live governs it.
    record = deck.index.get(fork.thread_id)
    assert record is not None and record.ttl_s == 2 * HOUR
    assert deck.prune(now=_later(2 * HOUR)).deleted == 1
    assert deck.index.get(fork.thread_id) is None
    assert deck.index.get(again.thread_id) is not None  # never expires
    assert len(_turns(deck)) == 1  # the turn the last fork still carries


# -- time-to-live -------------------------------------------------------------------------
def test_a_run_sets_its_thread_ttl_and_a_resume_keeps_it(deck: SkillDeck) -> None:
    thread = _paused(deck, ttl="2h")
    record = deck.index.get(thread)
    assert record is not None and record.ttl_s == 2 * HOUR
    deck.run(Resume(thread, DEMO_ANSWERS))
    record = deck.index.get(thread)
    assert record is not None and record.ttl_s == 2 * HOUR
    assert deck.prune(now=_later()).deleted == 0  # the deck's hour is not the thread's

    kept = _finished(deck, ttl="never")
    never = deck.index.get(kept)
    assert never is not None and never.ttl_s is None and never.expires_at is None
    # A new turn without a ttl takes the deck's default again (the intake is complete: no
    # skill has anything left to do).
    assert deck.run(INPUT, thread_id=thread, **DEMO).status == "no_skill"
    record = deck.index.get(thread)
    assert record is not None and record.ttl_s == HOUR
    with pytest.raises(SkillDeckError, match="drop ttl"):
        deck.run(Resume(thread, DEMO_ANSWERS), ttl="1d")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "ttl",
    ["soon", "-5", "0", "1.5d", "05m", "NEVER", 0, -1.0, float("nan"), float("inf"), True, 10**400],
)
def test_a_bad_ttl_is_refused_and_changes_nothing(tmp_path: Path, ttl: Any) -> None:
    with _deck(f"sqlite:///{tmp_path / 'c.sqlite'}") as deck:
        with pytest.raises(SkillDeckError, match="ttl must be a positive number of seconds"):
            deck.run(INPUT, thread_id="t1", ttl=ttl, **DEMO)
        assert deck.index.get("t1") is None and deck.threads() == []
        with pytest.raises(SkillDeckError, match="ttl must be"):
            deck.fork("t1", "x", ttl=ttl)
    with pytest.raises(pydantic.ValidationError, match="thread_ttl must be"):
        Settings(thread_ttl=ttl if isinstance(ttl, str) else str(ttl))


def test_ttl_values_as_people_write_them(tmp_path: Path) -> None:
    expected = {"90": 90, "90s": 90, "15m": 900, "12h": 43_200, " 2d ": 172_800, "never": None}
    for text, seconds in expected.items():
        assert Settings(thread_ttl=text).thread_ttl == seconds
    assert Settings(thread_ttl="").thread_ttl is None
    assert Settings().thread_ttl is None  # off by default: threads are kept


# -- thinning -----------------------------------------------------------------------------
def test_thinning_keeps_a_finished_threads_last_checkpoint(
    deck: SkillDeck, database_url: str
) -> None:
    """What the thread ended with stays: its state, one history row, a fork at that
    checkpoint, a new turn. Forks at the removed checkpoints are refused; a thread at its card
    is not thinned; a new turn's checkpoints are thinned again once it finishes."""
    thread = _finished(deck, ttl="never")
    paused = _paused(deck, ttl="never")
    state = deck.get_thread(thread).state
    rows = deck.history(thread)
    paused_rows = deck.history(paused)
    checkpoints = _rows(database_url, thread)["checkpoints"]
    assert len(rows) > 5 and checkpoints >= len(rows)

    assert deck.prune(thin=True, dry_run=True).thinned == 1
    assert len(deck.history(thread)) == len(rows)  # a dry run changes nothing
    report = deck.prune(thin=True)
    assert (report.finished, report.thinned, report.deleted) == (1, 1, 0)
    assert report.checkpoints_removed == checkpoints - 1

    assert _rows(database_url, thread)["checkpoints"] == 1
    assert deck.get_thread(thread).state == state
    last = deck.history(thread)
    assert [r["checkpoint_id"] for r in last] == [rows[-1]["checkpoint_id"]]
    assert deck.history(paused) == paused_rows  # its card waits: not thinned
    with pytest.raises(CheckpointError, match="has no checkpoint"):
        deck.fork(thread, rows[2]["checkpoint_id"])
    fork = deck.fork(thread, last[0]["checkpoint_id"])
    assert fork.state["profile"] == state["profile"]
    # A new turn goes on from the kept checkpoint, as it would have from the full history.
    again = deck.run(INPUT, thread_id=thread, **DEMO)
    assert again.status == "no_skill" and again.state["profile"] == state["profile"]
    assert deck.get_thread(fork.thread_id).status == "finished"
    # The fork, which finished; not the thread, whose last run ended no_skill.
    assert deck.prune(thin=True).thinned == 1
    assert len(deck.history(fork.thread_id)) == 1 and len(deck.history(thread)) > 1


# -- the command line ---------------------------------------------------------------------
def test_skilldeck_prune_dry_run_then_prune(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    with _deck(url) as deck:
        short = [_finished(deck, ttl=0.2) for _ in range(2)]
        kept = _finished(deck)  # the default: never expires
    time.sleep(0.3)
    runner = CliRunner()
    dry = runner.invoke(app, ["prune", "--checkpoint", url, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout) | {"seconds": 0} == {
        "expired": 2, "deleted": 2, "busy": 0, "pending": 0, "finished": 0, "thinned": 0,
        "checkpoints_removed": 0, "seconds": 0, "dry_run": True,
    }  # fmt: skip
    done = runner.invoke(app, ["prune", "--checkpoint", url, "--batch", "1"])
    assert done.exit_code == 0, done.output
    assert "deleted 2 of 2 expired threads" in done.stdout
    assert "deleting expired threads" in done.stderr  # the progress bar
    with _deck(url) as deck:
        assert [deck.index.get(t) for t in short] == [None, None]
        assert deck.get_thread(kept).status == "finished"
    thin = runner.invoke(app, ["prune", "--checkpoint", url, "--thin", "--json"])
    assert json.loads(thin.stdout)["thinned"] == 1
    missing = runner.invoke(app, ["prune", "--checkpoint", f"sqlite:///{tmp_path / 'no'}"])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr


# -- the service --------------------------------------------------------------------------
KEY = "sdk_retention_test_key_0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.mark.server
def test_the_service_prunes_expired_threads_in_the_background(tmp_path: Path) -> None:
    """A real ``skilldeck serve`` with a short default time-to-live: the finished thread, and
    one created and never run, are deleted by its background prune; the one at its card and
    the one whose run asked for a longer time-to-live are kept; a bad ttl in a run body is a
    422."""
    root = write_serve_root(tmp_path / "root", {hash_key(KEY): "carol"}, 0.1)
    url = f"sqlite:///{root / 'serve.sqlite'}"
    own_matter(url, "demo-matter", "carol")
    port = free_port()
    env = {
        "SKILLDECK_FILES_ROOT": str(DEMO_FILES),
        "SKILLDECK_THREAD_TTL": "2",
        "SKILLDECK_PRUNE_INTERVAL_S": "0.2",
    }
    server = ServeProcess(serve_command(root, port, url), port, root / "serve.log", env)
    try:
        server.wait()
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
            run = {"input": INPUT, **DEMO}
            bad = http.post(f"/threads/{_new(http)}/runs", json={**run, "ttl": "soon"})
            assert bad.status_code == 422 and "ttl must be" in bad.text
            idle = _new(http)
            started = []
            for body in (run, run, {**run, "ttl": "1h"}):
                thread = _new(http)  # run at once: a new thread expires 2 s later too
                assert _last(http.post(f"/threads/{thread}/runs", json=body)) == "card"
                started.append(thread)
            finished, paused, long = started
            for thread in (finished, long):
                answered = http.post(f"/threads/{thread}/resume", json={"answers": DEMO_ANSWERS})
                assert _last(answered) == "done"
            _until(lambda: http.get(f"/threads/{finished}").status_code == 404)
            _until(lambda: http.get(f"/threads/{idle}").status_code == 404)  # never ran
            time.sleep(0.5)  # more prunes
            assert http.get(f"/threads/{paused}").json()["status"] == "interrupted"
            assert http.get(f"/threads/{long}").json()["status"] == "finished"
    finally:
        assert server.stop() == 0
    assert set(_rows(url, finished).values()) == {0}


def _new(http: httpx.Client) -> str:
    return str(http.post("/threads").json()["thread_id"])


def _last(response: httpx.Response) -> str:
    """The name of a run's last SSE event."""
    assert response.status_code == 200, response.text
    block = response.text.strip().split("\n\n")[-1].splitlines()
    return next(line.removeprefix("event: ") for line in block if line.startswith("event: "))


def _until(check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the background prune did not delete the thread"
        time.sleep(0.1)


def test_a_pruned_threads_run_log_is_not_replayed_to_the_next_user_of_its_id(
    tmp_path: Path,
) -> None:
    """A client names its AG-UI threads: once alice's thread is pruned, bob may take its id.
    The process still holds alice's last run log; ``GET /stream`` answers bob 404."""
    from fastapi.testclient import TestClient

    from skilldeck.server import create_app

    keys = {"alice": "sdk_alice_retention_key_0123456789", "bob": "sdk_bob_retention_key_0123456"}
    alice, bob = ({"Authorization": f"Bearer {keys[u]}"} for u in ("alice", "bob"))
    with _deck(f"sqlite:///{tmp_path / 'c.sqlite'}", thread_ttl=1, prune_interval_s=0) as deck:
        own_matter(deck, "demo-matter", "alice")
        app = create_app(deck, api_keys={hash_key(k): u for u, k in keys.items()})
        with TestClient(app) as http:
            app.state.service.threads.adopt("chat-1", "alice")  # as POST /agui does
            ran = http.post("/threads/chat-1/runs", headers=alice, json={"input": INPUT, **DEMO})
            _, card = sse(ran.text)[-1]
            answers = {"answers": DEMO_ANSWERS, "interrupt_id": card["interrupt_id"]}
            done = http.post("/threads/chat-1/resume", headers=alice, json=answers)
            assert done.status_code == 200 and "event: done" in done.text
            assert http.get("/threads/chat-1/stream", headers=alice).status_code == 200
            assert deck.prune(now=time.time() + 60).deleted == 1
            app.state.service.threads.adopt("chat-1", "bob")  # as POST /agui does for bob
            replay = http.get("/threads/chat-1/stream", headers=bob)
            assert replay.status_code == 404, replay.text[:300]
            assert replay.json()["error"]["code"] == "NO_RUN_STREAM"
            assert "Acme" not in replay.text


def test_a_queued_run_whose_thread_was_pruned_meanwhile_keeps_it_indexed(tmp_path: Path) -> None:
    """A run accepted with its lease, then left waiting past the lease while a prune deleted
    its (expired, empty) thread: when it starts it takes the lease again and records the
    thread in the index again, so its owner finds it and a later prune can reach it."""
    from conftest import FakeClock

    from skilldeck.checkpoints import open_persistence

    clock = FakeClock()
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES))
    with SkillDeck(
        checkpointer=open_persistence(url, claim_clock=clock), settings=settings
    ) as deck:
        own_matter(deck, "demo-matter", "alice")
        events = deck.stream(INPUT, thread_id="t1", ttl=60, user_id="alice", **DEMO)
        clock.advance(deck.claims.lease_s + 1)  # waited in the queue past its lease
        assert deck.prune(now=time.time() + 61).deleted == 1
        last = list(events)[-1]
        assert isinstance(last, CardEvent)
        record = deck.index.get("t1")
        assert record is not None and record.user_id == "alice"
        assert [t.thread_id for t in deck.threads(user_id="alice")] == ["t1"]
