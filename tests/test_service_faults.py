"""The HTTP service under faults, on real ``skilldeck serve`` processes and a real PostgreSQL.

Two servers share one database: a run started on one is answered on the other; a server killed
with ``kill -9`` after a card, or in the middle of a run, loses nothing (a new process resumes
the card exactly once, and the same run request continues a run that stopped mid-way); a
PostgreSQL restart between a run and its resume needs no manual step. The engine-level pieces of
these recoveries (thread status between a step's writes and its checkpoint, continuing a stopped
run, claims of dead sessions and processes, run leases, the pool after a restart, 503 while
the database is gone) are tested here as well. ``bench/service.py`` measures the same faults
under load.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from conftest import (
    DEMO_ANSWERS,
    DEMO_FILES,
    DEMO_SCRIPT,
    FakeClock,
    output,
    own_matter,
    write_bundle,
    write_serve_root,
)
from fastapi.testclient import TestClient
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import StateSnapshot
from servers import Services
from serving import DEMO_RUN, SLOW_RUN, DemoServer, sse

import skilldeck._internal.postgres as pg_internal
from skilldeck import Continue, Resume, Settings, SkillDeck
from skilldeck.checkpoints import open_persistence
from skilldeck.checkpoints.claims import RUN_LEASE, owner_gone, process_owner
from skilldeck.checkpoints.inspect import thread_status
from skilldeck.checkpoints.open import strict_serde
from skilldeck.checkpoints.threads import open_index
from skilldeck.errors import (
    CheckpointError,
    ErrorCode,
    NoPendingCardError,
    NotResumableError,
    StaleRunError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from skilldeck.server import create_app, hash_key

pytestmark = [pytest.mark.L2, pytest.mark.server]

KEY = "sdk_faults_test_key_0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
SLOW_S = 2.0


# -- real server processes --------------------------------------------------------------------
@pytest.fixture(scope="module")
def serve_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keys, a scripted model and the ``slow`` context's skills (see ``write_serve_root``), so a
    server can be killed in the middle of a run; the demo skill comes from the built-in
    bundles."""
    return write_serve_root(tmp_path_factory.mktemp("faults"), {hash_key(KEY): "carol"}, SLOW_S)


@pytest.fixture
def serve(serve_root: Path) -> Iterator[Callable[..., list[DemoServer]]]:
    """``serve(url, n=1, options=())``: ``n`` servers on ``url``, started at once; stopped
    after the test."""
    started: list[DemoServer] = []

    def start(url: str, n: int = 1, options: Sequence[str] = ()) -> list[DemoServer]:
        own_matter(url, "demo-matter", "carol")
        durable = {"SKILLDECK_DURABILITY": "sync"}
        servers = [DemoServer(serve_root, url, KEY, options, durable) for _ in range(n)]
        started.extend(servers)
        return [server.wait() for server in servers]

    yield start
    for server in started:
        server.stop()


def run_to_card(http: httpx.Client, body: dict[str, Any] = DEMO_RUN) -> tuple[str, dict[str, Any]]:
    thread = http.post("/threads").json()["thread_id"]
    response = http.post(f"/threads/{thread}/runs", json=body)
    assert response.status_code == 200, response.text
    name, card = sse(response.text)[-1]
    assert name == "card", response.text
    return thread, card


def resume(http: httpx.Client, thread: str, answers: Any, interrupt_id: str) -> httpx.Response:
    body = {"answers": answers, "interrupt_id": interrupt_id}
    return http.post(f"/threads/{thread}/resume", json=body)


def answered_cards(http: httpx.Client, thread: str) -> list[dict[str, Any]]:
    rows = http.get(f"/threads/{thread}/history").json()["checkpoints"]
    return [row["answers"] for row in rows if row.get("answers")]


# -- two servers, one database ----------------------------------------------------------------
@pytest.mark.server
def test_a_run_on_one_server_is_answered_on_the_other(
    serve: Callable[..., list[DemoServer]], postgres_url: str
) -> None:
    one, two = serve(postgres_url, 2)
    with one.client() as first, two.client() as second:
        thread, card = run_to_card(first)
        assert second.get(f"/threads/{thread}").json()["card"] == card
        done = resume(second, thread, DEMO_ANSWERS, card["interrupt_id"])
        assert done.status_code == 200 and sse(done.text)[-1][0] == "done"
        view = first.get(f"/threads/{thread}").json()
        assert view["status"] == "finished"
        assert (
            view["state"]["profile"]["defendant"]["name"] == DEMO_ANSWERS["profile.defendant.name"]
        )
        again = resume(first, thread, DEMO_ANSWERS, card["interrupt_id"])
        assert again.status_code == 409 and again.json()["error"]["code"] == "NO_PENDING_CARD"
        assert answered_cards(first, thread) == [DEMO_ANSWERS]


@pytest.mark.server
def test_kill_9_after_a_card_then_a_new_server_resumes_it_exactly_once(
    serve: Callable[..., list[DemoServer]], postgres_url: str
) -> None:
    (first,) = serve(postgres_url)
    with first.client() as http:
        thread, card = run_to_card(http)
    first.kill()
    (second,) = serve(postgres_url)  # a new process: nothing of the first survives but the database
    with second.client() as http:
        assert http.get(f"/threads/{thread}").json()["status"] == "interrupted"
        done = resume(http, thread, DEMO_ANSWERS, card["interrupt_id"])
        assert done.status_code == 200 and sse(done.text)[-1][0] == "done"
        again = resume(http, thread, DEMO_ANSWERS, card["interrupt_id"])
        assert again.status_code == 409 and again.json()["error"]["code"] == "NO_PENDING_CARD"
        assert http.get(f"/threads/{thread}").json()["state"]["calls"] == {"litigation-intake": 5}
        assert answered_cards(http, thread) == [DEMO_ANSWERS]


def test_kill_9_mid_run_then_the_same_run_request_continues_it(
    serve: Callable[..., list[DemoServer]], database_url: str
) -> None:
    one, two = serve(database_url, 2)
    with one.client() as first, two.client() as second:
        thread = first.post("/threads").json()["thread_id"]
        with first.stream("POST", f"/threads/{thread}/runs", json=SLOW_RUN) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("id: ") and next(lines).startswith("event: step")
            # warm's step is checkpointed; slow's preprocess is sleeping: kill now.
            deadline = time.monotonic() + 10
            while len(second.get(f"/threads/{thread}/history").json()["checkpoints"]) < 3:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            one.kill()
        view = second.get(f"/threads/{thread}").json()
        assert view["status"] == "running"  # and nobody is running it: the process is gone
        before = second.get(f"/threads/{thread}/history").json()["checkpoints"]

        # The same request: the dead run's lease holds the thread until its owner is seen gone
        # for the grace (10 s), so a run that might still be live is never run twice.
        response = second.post(f"/threads/{thread}/runs", json=SLOW_RUN)
        assert response.status_code == 409 and response.json()["error"]["code"] == "THREAD_BUSY"
        assert second.get(f"/threads/{thread}/history").json()["checkpoints"] == before
        deadline = time.monotonic() + 30
        while response.status_code == 409:
            assert response.json()["error"]["code"] == "THREAD_BUSY"
            assert time.monotonic() < deadline, "the dead run's lease was never freed"
            time.sleep(0.5)
            response = second.post(f"/threads/{thread}/runs", json=SLOW_RUN)
        name, card = sse(response.text)[-1]
        assert name == "card", response.text
        after = second.get(f"/threads/{thread}/history").json()["checkpoints"]
        # Continued from the last checkpoint: no second input checkpoint, no step done twice.
        assert after[: len(before)] == before
        assert [row["source"] for row in after].count("input") == 1
        done = resume(second, thread, {"note": "kept"}, card["interrupt_id"])
        assert sse(done.text)[-1][0] == "done"
        assert second.get(f"/threads/{thread}").json()["state"]["note"] == "kept"


def _kill_mid_run(server: DemoServer, thread: str) -> list[dict[str, Any]]:
    """Start the slow run of ``thread`` on ``server`` and ``kill -9`` it (by pid) while the
    slow step runs, after the first step is checkpointed; the checkpoints it left."""
    path = f"/threads/{thread}/runs"
    with server.client() as http, http.stream("POST", path, json=SLOW_RUN) as response:
        next(response.iter_lines())
        deadline = time.monotonic() + 10
        while len(rows := http.get(f"/threads/{thread}/history").json()["checkpoints"]) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(30)
    return list(rows)


def test_kill_9_mid_run_then_restarted_the_thread_is_resumable_and_continue_finishes_it(
    serve: Callable[..., list[DemoServer]], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'resumable.sqlite'}"
    (first,) = serve(url)
    with first.client() as http:
        thread = http.post("/threads").json()["thread_id"]
    before = _kill_mid_run(first, thread)
    (second,) = serve(url)  # the restart: nothing of the first survives but the database
    with second.client() as http:
        # Once the dead run's lease is seen gone (its process is, for the 10 s grace), nothing
        # runs the thread any more, and it says so.
        deadline = time.monotonic() + 40
        while (view := http.get(f"/threads/{thread}").json())["status"] != "resumable":
            assert view["status"] == "running" and time.monotonic() < deadline, view
            time.sleep(0.5)
        rows = http.get("/threads", params={"status": "resumable"}).json()["threads"]
        assert [r["thread_id"] for r in rows] == [thread]
        assert http.get(f"/threads/{thread}/history").json()["checkpoints"] == before

        name, card = sse(http.post(f"/threads/{thread}/continue").text)[-1]
        assert name == "card", card
        after = http.get(f"/threads/{thread}/history").json()["checkpoints"]
        assert after[: len(before)] == before  # from the last checkpoint: no step done twice
        assert [row["source"] for row in after].count("input") == 1
        again = http.post(f"/threads/{thread}/continue")
        assert again.status_code == 409 and again.json()["error"]["code"] == "NOT_RESUMABLE"
        done = resume(http, thread, {"note": "kept"}, card["interrupt_id"])
        assert sse(done.text)[-1][0] == "done"
        assert http.get(f"/threads/{thread}").json()["state"]["note"] == "kept"


@pytest.mark.server
def test_a_postgres_restart_between_run_and_resume_needs_no_manual_step(
    serve: Callable[..., list[DemoServer]], private_postgres: Services
) -> None:
    url = private_postgres.env["SKILLDECK_TEST_POSTGRES_URL"]
    (server,) = serve(url)
    with server.client() as http:
        thread, card = run_to_card(http)
        private_postgres.restart_postgres()  # every pooled connection of the server is dead
        done = resume(http, thread, DEMO_ANSWERS, card["interrupt_id"])
        assert done.status_code == 200, done.text
        assert sse(done.text)[-1][0] == "done"
        assert http.get("/health").json()["status"] == "ok"
        thread, _ = run_to_card(http)  # and new threads work as before
        assert answered_cards(http, thread) == []


# -- issue 32, finding 6: slow clients ---------------------------------------------------------
GUARDS = ("--header-timeout", "2", "--body-timeout", "2", "--max-connections", "20")


@pytest.fixture
def guarded(serve: Callable[..., list[DemoServer]], tmp_path: Path) -> DemoServer:
    """A server whose clients have 2 s for their headers and 2 s for their body, and that
    keeps at most 20 connections."""
    (server,) = serve(f"sqlite:///{tmp_path / 'guarded.sqlite'}", options=GUARDS)
    return server


def _slow(server: DemoServer, head: bytes) -> socket.socket:
    """A connection that sent ``head`` and then nothing more."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(head)
    return sock


def _reply(sock: socket.socket) -> tuple[bytes, float]:
    """What the server sent until it closed the connection, and how long that took."""
    t0, got = time.monotonic(), b""
    with sock:
        while chunk := sock.recv(65536):
            got += chunk
    return got, time.monotonic() - t0


def _post_head(length: int, key: str | None) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST /threads/t/runs HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json"
        f"\r\nContent-Length: {length}\r\n\r\n{{"
    ).encode()


def test_a_slow_body_without_a_key_is_refused_before_it_is_read(guarded: DemoServer) -> None:
    for key in (None, "not-a-key"):
        got, took = _reply(_slow(guarded, _post_head(100_000, key)))
        assert got.startswith(b"HTTP/1.1 401") and b"UNAUTHORIZED" in got, got
        assert took < 1.5  # at once: not after the body deadline


def test_a_slow_body_with_a_key_gets_408_at_its_deadline(guarded: DemoServer) -> None:
    got, took = _reply(_slow(guarded, _post_head(100_000, KEY)))
    assert got.startswith(b"HTTP/1.1 408") and b"REQUEST_TIMEOUT" in got, got
    assert 1.5 < took < 8


def test_slow_headers_are_cut_off_and_connections_are_limited(guarded: DemoServer) -> None:
    got, took = _reply(_slow(guarded, b"POST /threads HTTP/1.1\r\nHost: x\r\n"))
    assert got == b"" and 1.5 < took < 8  # closed without a word at the header deadline
    idle = [_slow(guarded, b"GET /health HTTP/1.1\r\n") for _ in range(20)]
    try:
        time.sleep(0.2)
        full = httpx.get(f"{guarded.url}/health", timeout=5)
        assert full.status_code == 503  # over the limit: refused at once, not queued
        # The idle ones are cut off at their header deadline: the service is back by itself.
        deadline = time.monotonic() + 10
        while httpx.get(f"{guarded.url}/health", timeout=5).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert all(sock.recv(1) == b"" for sock in idle)  # closed by the server
    finally:
        for sock in idle:
            sock.close()


# -- the engine's side of the recoveries ------------------------------------------------------
def _snapshot(values: dict[str, Any], next: tuple[str, ...] = ()) -> StateSnapshot:
    return StateSnapshot(values, next, {}, None, "2026-01-01T00:00:00Z", None, (), ())


@pytest.mark.parametrize(
    ("values", "next", "status"),
    [
        ({"status": "running"}, ("router",), "running"),
        # A live read between a step's task writes and its checkpoint: LangGraph lists only the
        # unwritten tasks in ``next``, so nothing is left, yet the run has not ended.
        ({"status": "running"}, (), "running"),
        ({"status": "interrupted"}, (), "running"),
        ({"status": "finished"}, (), "finished"),
        ({"status": "failed"}, (), "failed"),
        ({}, (), "finished"),  # a thread of a graph that keeps no status
    ],
)
def test_thread_status_never_calls_an_unended_run_finished(
    values: dict[str, Any], next: tuple[str, ...], status: str
) -> None:
    assert thread_status(_snapshot(values, next)) == status


def _demo_deck(url: str) -> SkillDeck:
    deck = SkillDeck(
        checkpointer=url,
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES)),
    )
    own_matter(deck, "demo-matter", "carol")
    return deck


DEMO = {"context": "matter", "matter_id": "demo-matter", "user_id": "u"}
DEMO_INPUT = {"documents": ["complaint.txt"]}


def test_the_same_run_request_continues_a_run_that_stopped_mid_way(tmp_path: Path) -> None:
    with _demo_deck(f"sqlite:///{tmp_path / 'c.sqlite'}") as deck:
        events = deck.stream(DEMO_INPUT, thread_id="t1", **DEMO)
        for _, _ in zip(range(4), events, strict=False):
            pass
        events.close()  # the run stops after its current step, as if its process died
        assert deck.get_thread("t1").status == "resumable"
        steps = len(deck.history("t1"))

        result = deck.run(DEMO_INPUT, thread_id="t1", **DEMO)
        assert result.status == "interrupted"
        assert result.state["calls"] == {"litigation-intake": 3}  # no model turn done twice
        rows = deck.history("t1")
        assert [row["source"] for row in rows].count("input") == 1 and len(rows) > steps

        # Other input is a new turn, as on any thread (a card must be answered first, though).
        deck.run(Resume("t1", DEMO_ANSWERS))
        other = deck.run({"documents": []}, thread_id="t1", **DEMO)
        assert [row["source"] for row in deck.history("t1")].count("input") == 2
        assert other.state["input"] == {"documents": []}


# -- issue 32, finding 13: a thread whose run died goes on without a card ------------------------
def _stop_mid_run(deck: SkillDeck, thread_id: str) -> int:
    """Run the demo a few steps and stop, as a process that dies mid-run; its steps so far."""
    events = deck.stream(DEMO_INPUT, thread_id=thread_id, **DEMO)
    for _, _ in zip(range(4), events, strict=False):
        pass
    events.close()
    return len(deck.history(thread_id))


def test_a_stopped_run_is_resumable_and_continue_goes_on_from_its_last_checkpoint(
    database_url: str,
) -> None:
    with _demo_deck(database_url) as deck:
        steps = _stop_mid_run(deck, "c1")
        assert deck.get_thread("c1").status == "resumable"
        assert [t.thread_id for t in deck.threads(status="resumable")] == ["c1"]
        assert deck.threads(status="running") == []
        assert deck.index.get("c1").status == "resumable"  # type: ignore[union-attr]
        with open_index(database_url) as read_only:  # the CLI's fast path, without a deck
            assert read_only is not None
            assert [t.status for t in read_only.list(user_id="u")] == ["resumable"]

        paused = deck.run(Continue("c1"))
        assert paused.status == "interrupted"
        assert paused.state["calls"] == {"litigation-intake": 3}  # no model turn done twice
        rows = deck.history("c1")
        assert [row["source"] for row in rows].count("input") == 1 and len(rows) > steps
        # Only a thread that stopped mid-way goes on this way; anything else changes nothing.
        for thread, status in (("c1", "interrupted"), ("nowhere", None)):
            before = deck.history("c1")
            with pytest.raises((NotResumableError, ThreadNotFoundError)) as caught:
                deck.run(Continue(thread))
            if status is not None:
                assert caught.value.code == ErrorCode.NOT_RESUMABLE
                assert f"is {status!r}, not 'resumable'" in str(caught.value)
            assert deck.history("c1") == before
        assert deck.run(Resume("c1", DEMO_ANSWERS)).status == "finished"
        with pytest.raises(NotResumableError, match="'finished'"):
            deck.run(Continue("c1"))


def test_a_live_run_is_running_not_resumable_and_cannot_be_continued(tmp_path: Path) -> None:
    with _demo_deck(f"sqlite:///{tmp_path / 'c.sqlite'}") as deck:
        events = deck.stream(DEMO_INPUT, thread_id="c2", **DEMO)
        next(events)  # the run holds the thread
        assert deck.get_thread("c2").status == "running"
        assert [t.thread_id for t in deck.threads(status="running")] == ["c2"]
        with pytest.raises(ThreadBusyError):
            deck.run(Continue("c2"))
        assert list(events)[-1].event == "card"


def test_continue_has_an_async_twin(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    with _demo_deck(url) as deck:
        _stop_mid_run(deck, "c3")
        _stop_mid_run(deck, "c4")

    async def main() -> tuple[list[str], str]:
        async with _demo_deck(url) as deck:
            streamed = [e.event async for e in deck.astream(Continue("c3"))]
            invoked = await deck.arun(Continue("c4"))
            return streamed, invoked.status

    streamed, status = asyncio.run(main())
    assert streamed[-1] == "card" and status == "interrupted"


class DyingSaver(SqliteSaver):
    """The real SQLite saver, in a process that dies (``dying``) after a step's tasks saved
    their writes and before the step's checkpoint."""

    dying = False

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if self.dying:
            raise SystemExit("the process died")
        return super().put(config, checkpoint, metadata, new_versions)


def test_answers_saved_before_the_process_died_are_kept_by_the_same_run_request(
    tmp_path: Path,
) -> None:
    """Starting over with the same input would discard the unfinished card step's saved
    writes: the answers would be lost and the card asked again."""
    saver = DyingSaver(
        sqlite3.connect(tmp_path / "d.sqlite", check_same_thread=False), serde=strict_serde()
    )
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES))
    with SkillDeck(checkpointer=saver, settings=settings) as deck:
        assert deck.run(DEMO_INPUT, thread_id="t2", **DEMO).status == "interrupted"
        saver.dying = True
        with pytest.raises(SystemExit):
            deck.run(Resume("t2", DEMO_ANSWERS))
        saver.dying = False
        stopped = deck.get_thread("t2")
        assert stopped.status == "resumable" and stopped.card is None
        with pytest.raises(NoPendingCardError):
            deck.run(Resume("t2", DEMO_ANSWERS))

        done = deck.run(DEMO_INPUT, thread_id="t2", **DEMO)
        assert done.status == "finished", done.error
        assert done.state["profile"]["defendant"]["name"] == DEMO_ANSWERS["profile.defendant.name"]
        assert done.state["calls"] == {"litigation-intake": 5}
        assert [row["answers"] for row in deck.history("t2") if row["answers"]] == [DEMO_ANSWERS]
    saver.conn.close()


CLAIM_AND_DIE = """
import os, signal, sys
from skilldeck.checkpoints import open_persistence
claims = open_persistence(sys.argv[1]).claims
print(claims.claim("thread", "card"), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no release, no close: the process just dies
"""


CLAIM_AND_LIVE = """
import sys
from skilldeck.checkpoints import open_persistence
claims = open_persistence(sys.argv[1]).claims
print(claims.claim("thread", "live-card"), flush=True)
sys.stdin.read()  # alive until the test closes stdin
"""


@pytest.mark.subprocess
def test_the_claim_of_a_dead_process_is_taken_over_after_the_grace(database_url: str) -> None:
    """PostgreSQL sees the claiming session end; SQLite sees the claiming process gone."""
    dead = subprocess.run(
        [sys.executable, "-c", CLAIM_AND_DIE, database_url], capture_output=True, text=True
    )
    assert dead.returncode == -signal.SIGKILL and dead.stdout.strip() == "True", dead.stderr
    alive = subprocess.Popen(
        [sys.executable, "-c", CLAIM_AND_LIVE, database_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    clock = FakeClock()
    persistence = open_persistence(database_url, claim_clock=clock)
    try:
        assert alive.stdout is not None and alive.stdout.readline().strip() == "True"
        claims = persistence.claims
        assert not claims.claim("thread", "card")  # within the grace
        clock.elapse(database_url, claims.dead_owner_grace_s + 1)
        deadline = time.monotonic() + 10
        while not claims.claim("thread", "card"):  # once PostgreSQL sees the session gone
            assert time.monotonic() < deadline, "the dead process's claim was never freed"
            time.sleep(0.1)
        assert not claims.claim("thread", "card")  # now ours, and ours is alive
        assert not claims.claim("thread", "live-card")  # a live owner keeps it for the lease
    finally:
        alive.communicate("", timeout=30)
        persistence.close()


@pytest.mark.subprocess
def test_a_claim_is_not_taken_over_before_the_grace(database_url: str) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", CLAIM_AND_DIE, database_url], capture_output=True, text=True
    )
    assert dead.stdout.strip() == "True", dead.stderr
    persistence = open_persistence(database_url)
    try:
        assert not persistence.claims.claim("thread", "card")  # default grace: 10 s
    finally:
        persistence.close()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_sqlite_claim_of_a_reused_pid_counts_as_dead(tmp_path: Path) -> None:
    me = process_owner()
    host, pid, start = me.rsplit("/", 2)
    assert pid == str(os.getpid()) and start and not owner_gone(me)
    reused = f"{host}/{pid}/{start}0"  # this pid, but a process started at another time
    assert owner_gone(reused)
    # Another host, or an unknown start time, cannot be checked here: the lease rule.
    assert not owner_gone(f"other-host:/{pid}/{start}0") and not owner_gone(f"{host}/{pid}/")
    assert not owner_gone(None) and not owner_gone("not an owner")

    clock = FakeClock()
    persistence = open_persistence(f"sqlite:///{tmp_path / 'c.sqlite'}", claim_clock=clock)
    try:
        claims = persistence.claims
        assert claims.claim("thread", "card")
        with sqlite3.connect(tmp_path / "c.sqlite") as conn:
            conn.execute("UPDATE skilldeck_interrupt_claims SET owner = ?", (reused,))
        clock.advance(claims.dead_owner_grace_s - 1)
        assert not claims.claim("thread", "card")  # within the grace
        clock.advance(2)
        assert claims.claim("thread", "card")
        assert not claims.claim("thread", "card")
    finally:
        persistence.close()


def test_sqlite_claims_made_before_owners_were_recorded_still_work(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:  # the table as it was before the owner column
        conn.execute(
            "CREATE TABLE skilldeck_interrupt_claims (thread_id TEXT NOT NULL, interrupt_id "
            "TEXT NOT NULL, claimed_at DOUBLE PRECISION NOT NULL, "
            "PRIMARY KEY (thread_id, interrupt_id))"
        )
        conn.execute("INSERT INTO skilldeck_interrupt_claims VALUES ('t', 'old', 0)")
    persistence = open_persistence(f"sqlite:///{path}")
    try:
        assert persistence.claims.claim("t", "old")  # its lease is long over
        assert persistence.claims.claim("t", "new") and not persistence.claims.claim("t", "new")
    finally:
        persistence.close()


# -- run leases: one live run per thread, across processes ------------------------------------
GATE_RUN = """
import sys
from skilldeck import Settings, SkillDeck
settings = Settings(model=f"scripted:{sys.argv[2]}/script.yaml")
gate = sys.argv[2] + "/gate"
with SkillDeck(gate, checkpointer=sys.argv[1], settings=settings, trust=[gate]) as deck:
    print(deck.run({}, context="ctx", thread_id="busy").status, flush=True)
"""


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    """A skill whose preprocess waits while the file ``closed`` exists."""
    closed = tmp_path / "closed"
    write_bundle(
        tmp_path,
        "gate",
        scripts={
            "preprocess": "import os, time\n"
            "def preprocess(state):\n"
            f"    while os.path.exists({str(closed)!r}):\n"
            "        time.sleep(0.05)\n"
        },
    )
    script = {"skills": {"gate": [output(data={"note": "done"})]}}
    (tmp_path / "script.yaml").write_text(json.dumps(script), "utf-8")
    closed.touch()
    return tmp_path


@pytest.mark.subprocess
def test_a_live_run_holds_its_thread_until_its_process_dies(gate: Path, database_url: str) -> None:
    """Another process's run of the thread answers ThreadBusyError, changing nothing, while the
    run's process lives (past the grace too); once it is killed, the grace later the same
    request continues the run, from the last checkpoint."""
    child = subprocess.Popen(
        [sys.executable, "-c", GATE_RUN, database_url, str(gate)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    settings = Settings(model=f"scripted:{gate / 'script.yaml'}")
    folder = gate / "gate"
    with SkillDeck(folder, checkpointer=database_url, settings=settings, trust=[folder]) as deck:
        try:
            deadline = time.monotonic() + 60
            while deck._snapshot("busy") is None or len(deck.history("busy")) < 2:
                assert child.poll() is None and time.monotonic() < deadline, child.stderr
                time.sleep(0.05)  # the run's first step is checkpointed; the skill waits
            before = deck.history("busy")
            # The claims' clock starts now, after the child claimed the thread on the real one
            # (a loaded machine may take many seconds to start it).
            clock = FakeClock()
            deck.claims.clock = clock
            # past the grace (within the lease): a live owner keeps its lease
            clock.elapse(database_url, deck.claims.dead_owner_grace_s + 1)
            with pytest.raises(ThreadBusyError, match="'busy' is in progress") as caught:
                deck.run({}, context="ctx", thread_id="busy")
            assert caught.value.code == ErrorCode.THREAD_BUSY
            assert deck.history("busy") == before
        finally:
            child.kill()
            child.communicate(timeout=30)
        (gate / "closed").unlink()
        clock.elapse(database_url, deck.claims.dead_owner_grace_s + 1)  # the grace, once dead
        deadline = time.monotonic() + 15
        while True:
            try:
                done = deck.run({}, context="ctx", thread_id="busy")
                break
            except ThreadBusyError:
                assert time.monotonic() < deadline, "the dead run's lease was never freed"
                time.sleep(0.1)
        assert done.status == "finished" and done.state["note"] == "done"
        rows = deck.history("busy")
        assert rows[: len(before)] == before
        assert [row["source"] for row in rows].count("input") == 1


# -- issue 32, finding 5: a request accepted long before it runs -------------------------------
LEASE_S = 5.0
OTHER_ANSWERS = {**DEMO_ANSWERS, "profile.defendant.name": "Other Answer Ltd."}


@pytest.fixture
def two_decks(tmp_path: Path) -> Iterator[tuple[SkillDeck, SkillDeck, FakeClock]]:
    """Two decks (as two processes would) on one SQLite file, with a short lease on one clock."""
    clock = FakeClock()
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES))
    decks = [
        SkillDeck(
            checkpointer=open_persistence(url, claim_lease_s=LEASE_S, claim_clock=clock),
            settings=settings,
        )
        for _ in range(2)
    ]
    try:
        yield decks[0], decks[1], clock
    finally:
        for deck in decks:
            deck.close()


def test_a_resume_that_waited_past_its_lease_gives_up_when_another_answered(
    two_decks: tuple[SkillDeck, SkillDeck, FakeClock],
) -> None:
    one, two, clock = two_decks
    card = one.run(DEMO_INPUT, thread_id="t", **DEMO).card
    assert card is not None
    # Accepted (the card and the thread are claimed), but its worker is busy elsewhere.
    waiting = one.stream(Resume("t", DEMO_ANSWERS, interrupt_id=card["interrupt_id"]))
    clock.advance(LEASE_S + 1)
    done = two.run(Resume("t", OTHER_ANSWERS, interrupt_id=card["interrupt_id"]))  # takes them over
    assert done.status == "finished"
    before = two.history("t")

    with pytest.raises(StaleRunError) as caught:
        next(waiting)
    assert caught.value.code == ErrorCode.STALE_RUN
    # Nothing of the stale resume: no second turn, no tool call again, its answers not applied
    # and the other answers not dropped.
    assert two.history("t") == before
    thread = one.get_thread("t")
    assert thread.status == "finished" and thread.state["calls"] == {"litigation-intake": 5}
    assert thread.state["profile"]["defendant"]["name"] == "Other Answer Ltd."
    assert [row["answers"] for row in two.history("t") if row["answers"]] == [OTHER_ANSWERS]
    assert one.claims.claim("t", RUN_LEASE)  # and nothing of it holds the thread


def test_a_run_that_waited_past_its_lease_leaves_another_processes_card_alone(
    two_decks: tuple[SkillDeck, SkillDeck, FakeClock],
) -> None:
    one, two, clock = two_decks
    waiting = one.stream(DEMO_INPUT, thread_id="u", **DEMO)
    clock.advance(LEASE_S + 1)
    paused = two.run(DEMO_INPUT, thread_id="u", **DEMO)
    assert paused.status == "interrupted" and paused.card is not None
    before = two.history("u")

    with pytest.raises(StaleRunError):
        next(waiting)
    assert two.history("u") == before
    # The fresh card is still the pending one: answering it is no STALE_INTERRUPT.
    done = two.run(Resume("u", DEMO_ANSWERS, interrupt_id=paused.card["interrupt_id"]))
    assert done.status == "finished" and done.state["calls"] == {"litigation-intake": 5}
    assert [row["source"] for row in two.history("u")].count("input") == 1


def test_a_request_that_waited_past_its_lease_runs_when_nobody_took_over(
    two_decks: tuple[SkillDeck, SkillDeck, FakeClock],
) -> None:
    one, two, clock = two_decks
    card = one.run(DEMO_INPUT, thread_id="v", **DEMO).card
    assert card is not None
    waiting = one.stream(Resume("v", DEMO_ANSWERS, interrupt_id=card["interrupt_id"]))
    clock.advance(LEASE_S + 1)
    events = list(waiting)
    assert events[-1].event == "done" and two.get_thread("v").status == "finished"
    assert [row["answers"] for row in two.history("v") if row["answers"]] == [DEMO_ANSWERS]


def test_a_taken_over_claim_is_neither_renewed_nor_released_by_its_old_holder(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    one, two = (open_persistence(url, claim_lease_s=LEASE_S, claim_clock=clock) for _ in "12")
    try:
        assert one.claims.claim("t", RUN_LEASE, "old")
        clock.advance(LEASE_S + 1)
        assert two.claims.claim("t", RUN_LEASE, "new")  # the lease ran out: taken over
        assert not one.claims.renew("t", RUN_LEASE, "old")
        one.claims.release("t", RUN_LEASE, "old")  # leaves the new holder's claim alone
        assert not one.claims.claim("t", RUN_LEASE, "other")
        assert two.claims.renew("t", RUN_LEASE, "new")
    finally:
        one.close()
        two.close()


@pytest.mark.server
def test_after_a_restart_the_pool_drops_every_dead_connection_at_once(
    private_postgres: Services,
) -> None:
    url = private_postgres.env["SKILLDECK_TEST_POSTGRES_URL"]
    pool = pg_internal.open_pool(url, size=6, timeout=5, error=CheckpointError, what="test")
    try:
        held = [pool.getconn() for _ in range(6)]
        for conn in held:
            pool.putconn(conn)
        private_postgres.restart_postgres()  # six dead idle connections
        t0 = time.monotonic()
        with pool.connection() as conn:
            conn.execute("SELECT 1")
        # One at a time, the pool would sleep 1 + 2 + 4 + 8 + 16 s between dead connections.
        assert time.monotonic() - t0 < 5
    finally:
        pool.close()


@pytest.mark.server
def test_a_database_that_is_gone_answers_503_and_comes_back_by_itself(
    postgres_url: str, postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_internal, "POOL_WAIT_S", 1.0)
    name = postgres_url.rsplit("/", 1)[1]

    def allow(connections: bool) -> None:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(connections).lower()}')
            if not connections:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (name,),
                )

    deck = _demo_deck(postgres_url)
    try:
        with TestClient(create_app(deck, api_keys={hash_key(KEY): "carol"})) as http:
            thread = http.post("/threads", headers=AUTH).json()["thread_id"]
            response = http.post(f"/threads/{thread}/runs", headers=AUTH, json=DEMO_RUN)
            card = sse(response.text)[-1][1]
            allow(False)
            try:
                for response in (
                    http.get(f"/threads/{thread}", headers=AUTH),
                    http.post("/threads", headers=AUTH),
                ):
                    assert response.status_code == 503, response.text
                    assert response.json()["error"]["code"] == "CHECKPOINT_UNAVAILABLE"
                    assert response.headers["retry-after"] == "1"
                with pytest.raises(CheckpointError, match="unavailable") as caught:
                    deck.get_thread(thread)
                assert caught.value.code == ErrorCode.CHECKPOINT_UNAVAILABLE
            finally:
                allow(True)
            deadline = time.monotonic() + 30
            while (view := http.get(f"/threads/{thread}", headers=AUTH)).status_code != 200:
                assert time.monotonic() < deadline, view.text
                time.sleep(0.2)
            assert view.json()["status"] == "interrupted"
            body = {"answers": DEMO_ANSWERS, "interrupt_id": card["interrupt_id"]}
            done = http.post(f"/threads/{thread}/resume", headers=AUTH, json=body)
            assert sse(done.text)[-1][0] == "done"
    finally:
        deck.close()
