"""The scale-out path against a real PostgreSQL server and a real ``chroma run`` server.

Several app processes share one PostgreSQL database (checkpoints, the transcript store, resume
claims, messages) and one Chroma server; a run started in one process is resumed in another.
The fixtures (tests/servers.py) give every test a fresh database.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, MEMORY_TEXTS, FakeClock
from langgraph.graph import END, START, StateGraph
from servers import Services

from skilldeck import Resume, Settings, SkillDeck
from skilldeck.checkpoints import open_async_persistence, open_persistence
from skilldeck.checkpoints.claims import RUN_LEASE, InterruptClaims, MemoryClaims, PostgresClaims
from skilldeck.errors import CheckpointError, ErrorCode, ToolError
from skilldeck.nodes import transcript
from skilldeck.skills import builtin_skills_dir
from skilldeck.tools.messages import Message, MessageStore

pytestmark = pytest.mark.L2

DEMO_INPUT = {"documents": ["complaint.txt"]}


def _demo_deck(url: str, **settings: Any) -> SkillDeck:
    return SkillDeck(
        checkpointer=url,
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), **settings),
    )


def _run_to_card(deck: SkillDeck) -> str:
    result = deck.run(DEMO_INPUT, context="matter", matter_id="demo-matter", user_id="u")
    assert result.status == "interrupted", result.error
    return result.thread_id


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    """Another app process: the same package, its own connections."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# -- runs across processes -------------------------------------------------------------------------
RESUME_IN_A_CHILD = f"""
import json, sys
from skilldeck import Resume, Settings, SkillDeck
settings = Settings(model="scripted:{DEMO_SCRIPT}", files_root="{DEMO_FILES}")
with SkillDeck(checkpointer=sys.argv[1], settings=settings) as deck:
    done = deck.run(Resume(sys.argv[2], json.loads(sys.argv[3])))
    print(json.dumps({{"status": done.status, "error": done.to_dict()["error"]}}))
"""


@pytest.mark.subprocess
def test_a_run_paused_in_one_process_is_resumed_in_another(postgres_url: str) -> None:
    with _demo_deck(postgres_url) as deck:
        thread = _run_to_card(deck)
        paused = deck.get_thread(thread)
        assert paused.status == "interrupted" and paused.card is not None
        attempt = paused.state["attempt"]
        # Transcripts live in PostgresStore.
        assert transcript.read(deck.store, attempt["turn"], attempt["head"])

        child = _python(RESUME_IN_A_CHILD, postgres_url, thread, json.dumps(DEMO_ANSWERS))
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == {"status": "finished", "error": None}

        done = deck.get_thread(thread)  # this process sees the other's resume
        assert done.status == "finished" and done.card is None
        assert done.state["profile"]["defendant"]["name"] == "Acme Logistics Ltd."
        assert [t.thread_id for t in deck.threads()] == [thread]
        assert [row["status"] for row in deck.history(thread)][-1] == "finished"


def test_the_server_restarting_needs_no_manual_step(private_postgres: Services) -> None:
    url = private_postgres.env["SKILLDECK_TEST_POSTGRES_URL"]
    store = MessageStore(url)
    with _demo_deck(url) as deck:
        thread = _run_to_card(deck)
        store.add([Message("a", "u", "t", "user", "2026-01-01T00:00:00Z", "before")])

        private_postgres.restart_postgres()  # every pooled connection is now dead

        done = deck.run(Resume(thread, DEMO_ANSWERS))
        assert done.status == "finished", done.error
        _run_to_card(deck)
        assert deck.claims.claim(thread, "after-restart")
    store.add([Message("b", "u", "t", "user", "2026-01-01T00:00:01Z", "after")])
    assert [m.id for m in store.select("u")] == ["a", "b"]
    store.close()


# -- pools and errors ------------------------------------------------------------------------------
def test_pool_size_comes_from_settings(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with_arg = open_persistence(postgres_url, pool_size=3)
    assert with_arg.saver.conn.max_size == 3  # type: ignore[attr-defined]
    with_arg.close()
    monkeypatch.setenv("SKILLDECK_POSTGRES_POOL_SIZE", "2")
    from_env = open_persistence(postgres_url)
    assert from_env.saver.conn.max_size == 2  # type: ignore[attr-defined]
    from_env.close()
    with pytest.raises(CheckpointError, match="pool_size must be at least 1"):
        open_persistence(postgres_url, pool_size=0)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://postgres@127.0.0.1:1/x", "Connection refused"),
        ("postgresql://postgres@127.0.0.1:notaport/x", 'invalid integer value "notaport"'),
        ("postgres://bob:s3cret@127.0.0.1:1/x", r"at postgres://bob:\*\*\*@127\.0\.0\.1:1/x"),
    ],
    ids=["refused", "bad-port", "password-hidden"],
)
def test_an_unreachable_server_or_bad_url_is_a_clear_checkpoint_error(
    url: str, expected: str
) -> None:
    with pytest.raises(CheckpointError, match=expected) as caught:
        open_persistence(url)
    message = str(caught.value)
    assert message.startswith("cannot connect to PostgreSQL for checkpoints")
    assert "postgresql://user:password@host:port/database" in message and "s3cret" not in message
    assert caught.value.to_dict()["code"] == ErrorCode.CHECKPOINT_UNAVAILABLE
    with pytest.raises(CheckpointError, match=expected):
        asyncio.run(open_async_persistence(url))
    with pytest.raises(CheckpointError, match=expected):
        _demo_deck(url)
    with pytest.raises(ToolError, match=f"PostgreSQL for the message store.*{expected}"):
        MessageStore(url)


def test_a_missing_database_or_schema_is_named(postgres_url: str) -> None:
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(CheckpointError, match='database "no_such_db" does not exist'):
        open_persistence(missing)
    with pytest.raises(CheckpointError, match="no skilldeck checkpoints in postgresql://"):
        open_persistence(postgres_url, must_exist=True)
    open_persistence(postgres_url).close()  # creates the tables
    open_persistence(postgres_url, must_exist=True).close()


# -- resume claims ---------------------------------------------------------------------------------
@pytest.fixture(params=["memory", "sqlite", "postgres"])
def claims_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'claims.sqlite'}"
    return "memory://"


LEASE_S = 60.0


@pytest.fixture
def lease_clock(claims_url: str) -> Iterator[tuple[InterruptClaims, Callable[[float], None]]]:
    """Claims with a lease of ``LEASE_S`` and a function that lets time pass for them: a fake
    clock's (memory, SQLite), or on PostgreSQL, whose server dates the claims, the claims'
    dates moved back."""
    clock = FakeClock()
    persistence = open_persistence(claims_url, claim_lease_s=LEASE_S, claim_clock=clock)
    yield persistence.claims, lambda seconds: clock.elapse(claims_url, seconds)
    persistence.close()


@pytest.fixture
def claims(lease_clock: tuple[InterruptClaims, Callable[[float], None]]) -> InterruptClaims:
    return lease_clock[0]


def test_a_claim_is_won_once_released_or_taken_over_after_its_lease(
    lease_clock: tuple[InterruptClaims, Callable[[float], None]],
) -> None:
    claims, elapse = lease_clock
    assert claims.claim("t1", "i1") is True
    assert claims.claim("t1", "i1") is False
    assert claims.claim("t1", "i2") is True and claims.claim("t2", "i1") is True
    claims.release("t1", "i1")  # a resume that failed cleanly gives its claim back
    assert asyncio.run(claims.aclaim("t1", "i1")) is True
    assert asyncio.run(claims.aclaim("t1", "i1")) is False
    elapse(LEASE_S - 1)
    assert claims.claim("t1", "i1") is False  # the lease still holds
    elapse(2)  # the owner died: after the lease, one caller may take the claim over
    assert claims.claim("t1", "i1") is True
    assert claims.claim("t1", "i1") is False


def test_a_renewed_claim_outlives_its_first_lease(
    lease_clock: tuple[InterruptClaims, Callable[[float], None]],
) -> None:
    claims, elapse = lease_clock
    assert claims.claim("t1", RUN_LEASE)
    elapse(LEASE_S / 2)
    assert claims.renew("t1", RUN_LEASE)
    elapse(LEASE_S * 3 / 4)  # past the first lease, within the renewed one
    assert not claims.claim("t1", RUN_LEASE)
    assert asyncio.run(claims.arenew("t1", RUN_LEASE))
    assert not claims.renew("t1", "never-claimed")


def test_a_postgres_claim_is_renewed_only_by_its_live_session(postgres_url: str) -> None:
    one, two = open_persistence(postgres_url), open_persistence(postgres_url)
    try:
        assert one.claims.claim("t1", RUN_LEASE)
        assert not two.claims.renew("t1", RUN_LEASE)  # another process's, and it is alive
        one.claims.close()  # as after a server restart: its session ends, a new one follows
        deadline = time.monotonic() + 10
        while not one.claims.renew("t1", RUN_LEASE):  # once the old session is seen gone
            assert time.monotonic() < deadline, "the claim never moved to the new session"
            time.sleep(0.05)
        assert isinstance(two.claims, PostgresClaims)
        two.claims.dead_owner_grace_s = 0.0
        assert not two.claims.claim("t1", RUN_LEASE)  # its owner is the new, live session
    finally:
        one.close()
        two.close()


def test_concurrent_claims_in_threads_have_one_winner(claims: InterruptClaims) -> None:
    barrier = threading.Barrier(12)
    results: list[bool] = []

    def contend() -> None:
        barrier.wait()
        results.append(claims.claim("thread", "interrupt"))

    workers = [threading.Thread(target=contend) for _ in range(12)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(results) == [False] * 11 + [True]


CLAIM_IN_A_CHILD = """
import sys, time
from pathlib import Path
from skilldeck.checkpoints import open_persistence
persistence = open_persistence(sys.argv[1])
print("ready", flush=True)
while not Path(sys.argv[2]).exists():
    time.sleep(0.002)
print(persistence.claims.claim("thread", "interrupt"), flush=True)
persistence.close()
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_claims_in_processes_have_one_winner(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Three app processes open a fresh database at once (the schema setup must not race),
    then answer the same card at the same moment."""
    if backend == "postgres":
        url = str(request.getfixturevalue("postgres_url"))
    else:
        url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    go = tmp_path / "go"
    children = [_python(CLAIM_IN_A_CHILD, url, str(go)) for _ in range(3)]
    for child in children:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == "ready\n", child.communicate()[1]
    go.touch()
    outcomes = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        outcomes.append(out.strip())
    assert sorted(outcomes) == ["False", "False", "True"]


def test_claims_refuse_a_bad_lease() -> None:
    with pytest.raises(ValueError, match="lease_s must be positive"):
        MemoryClaims(lease_s=0)


# -- the async savers ------------------------------------------------------------------------------
class _Count(TypedDict):
    n: int


def _counter() -> StateGraph[_Count]:
    graph: StateGraph[_Count] = StateGraph(_Count)
    graph.add_node("bump", lambda state: {"n": state["n"] + 1})
    graph.add_edge(START, "bump")
    graph.add_edge("bump", END)
    return graph


def test_async_persistence_shares_the_sync_database(database_url: str) -> None:
    config: Any = {"configurable": {"thread_id": "t"}}

    async def run_async() -> None:
        persistence = await open_async_persistence(database_url, pool_size=2)
        graph = _counter().compile(checkpointer=persistence.saver, store=persistence.store)
        assert (await graph.ainvoke({"n": 1}, config)) == {"n": 2}
        await persistence.store.aput(("ns",), "k", {"v": 1})
        await persistence.aclose()

    asyncio.run(run_async())
    sync = open_persistence(database_url)
    graph = _counter().compile(checkpointer=sync.saver, store=sync.store)
    assert graph.get_state(config).values == {"n": 2}  # written by the async saver
    item = sync.store.get(("ns",), "k")
    assert item is not None and item.value == {"v": 1}
    sync.close()


def test_async_memory_persistence_shares_the_decks_objects() -> None:
    sync = open_persistence("memory://")
    shared = asyncio.run(open_async_persistence(sync))
    assert shared.saver is sync.saver and shared.store is sync.store
    fresh = asyncio.run(open_async_persistence("memory://"))
    assert fresh.saver is not sync.saver
    with pytest.raises(CheckpointError, match="unsupported checkpoint URL 'redis://u:\\*\\*\\*@h"):
        asyncio.run(open_async_persistence("redis://u:pw@h/0"))


# -- every store on a server -----------------------------------------------------------------------
def test_a_deck_with_every_store_on_a_server(postgres_url: str, chroma_url: str) -> None:
    """Checkpoints and messages in PostgreSQL, vectors on the Chroma server: what one app
    process writes, another's deck reads."""
    from skilldeck.services import open_memory
    from skilldeck.tools.vectors import VectorIndex, open_chroma

    user = f"u-{uuid.uuid4().hex}"  # the Chroma server is shared by the session
    settings = Settings(
        model=None,
        messages_path=postgres_url,
        chroma_url=chroma_url,
        chroma_path="/nonexistent/never-used",
    )
    importer = open_memory(settings)  # e.g. the process that imports a user's history
    importer.add(Message(i, user, "t1", role, ts, text) for i, role, ts, text in MEMORY_TEXTS)
    importer.close()
    assert VectorIndex(open_chroma(url=chroma_url)).count(user) == len(MEMORY_TEXTS)

    bundle = builtin_skills_dir() / "nomemory-recall"  # no model: the rule-based planner
    with SkillDeck(bundle, checkpointer=postgres_url, settings=settings) as deck:
        result = deck.run({"question": "What food do I avoid?"}, context="recall", user_id=user)
        assert result.status == "finished", result.error
        assert result.state["evidence"][0]["message_id"] == "m1"
        assert not Path("/nonexistent/never-used").exists()
