"""Several ``skilldeck serve`` processes on one PostgreSQL database and one ``chroma run`` server,
configured as docs/operations.md ("Several processes") says: checkpoints, the thread index,
claims and the message store in PostgreSQL (``--checkpoint``, ``SKILLDECK_MESSAGES_PATH``), the
vectors on the Chroma server (``SKILLDECK_CHROMA_URL``).

A memory search on one process finds what another indexed into the shared Chroma server,
including vectors indexed after it had loaded the user's index; the knowledge base one process
indexed is searched by another; a process killed with ``kill -9`` in the middle of a run loses
nothing, and another, which read the thread meanwhile, continues and finishes it.
tests/test_service_faults.py has the two-process faults on the checkpoints alone (and a
PostgreSQL restart); ``bench/service.py`` measures them under load.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import (
    DEMO_FILES,
    MEMORY_TEXTS,
    own_matter,
    serve_command,
    write_serve_root,
)
from servers import fresh_database
from serving import SLOW_RUN, ServeProcess, free_port, sse
from test_service_faults import resume

from skilldeck.server import hash_key
from skilldeck.skills import builtin_skills_dir
from skilldeck.tools.messages import Message, MessageStore
from skilldeck.tools.vectors import VectorIndex, open_chroma

pytestmark = [pytest.mark.L2, pytest.mark.server]

KEY = "sdk_several_processes_key_0123456789"
#: The Chroma server is the session's: this module's user is its own.
USER = f"several-{uuid.uuid4().hex[:12]}"


@dataclass
class Cluster:
    """The shared stores and how to start one more process on them."""

    root: Path
    database: str
    chroma: str
    embedded: Path  # where an embedded Chroma would go: it must never appear

    def start(self, *, model: bool = True) -> ServeProcess:
        """One more process (``model=False``: without the scripted model, so that
        nomemory-recall plans by its rules)."""
        port = free_port()
        command = serve_command(self.root, port, self.database)
        if not model:
            at = command.index("--model")
            del command[at : at + 2]
        command += ["--skills", str(builtin_skills_dir() / "nomemory-recall")]
        env = {
            "SKILLDECK_FILES_ROOT": str(DEMO_FILES),
            "SKILLDECK_DURABILITY": "sync",
            "SKILLDECK_MESSAGES_PATH": self.database,
            "SKILLDECK_CHROMA_URL": self.chroma,
            "SKILLDECK_CHROMA_PATH": str(self.embedded),
        }
        return ServeProcess(command, port, self.root / f"server-{port}.log", env)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: str, chroma_url: str
) -> Iterator[Cluster]:
    root = write_serve_root(tmp_path_factory.mktemp("several"), {hash_key(KEY): USER}, 2.0)
    database = fresh_database(postgres_server)
    url = next(database)
    try:
        own_matter(url, "demo-matter", USER)
        yield Cluster(root, url, chroma_url, root / "embedded-chroma")
    finally:
        next(database, None)  # drops the database


def client(process: ServeProcess) -> httpx.Client:
    return httpx.Client(
        base_url=process.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
    )


def recall(process: ServeProcess, question: str) -> dict[str, Any]:
    """The nomemory-recall skill's run (no model: rule-based) for this module's user."""
    with client(process) as http:
        thread = http.post("/threads").json()["thread_id"]
        body = {"input": {"question": question}, "context": "recall"}
        name, end = sse(http.post(f"/threads/{thread}/runs", json=body).text)[-1]
        assert name == "done", end
        state: dict[str, Any] = http.get(f"/threads/{thread}").json()["state"]
        return state


def evidence(state: dict[str, Any]) -> list[str]:
    return [row["message_id"] for row in state["evidence"]]


@pytest.fixture(scope="module")
def modelless(cluster: Cluster) -> Iterator[list[ServeProcess]]:
    """Two processes without a model, for the recall skill's rules."""
    started = [cluster.start(model=False), cluster.start(model=False)]
    try:
        yield [process.wait() for process in started]
    finally:
        for process in started:
            process.stop()


def test_a_search_on_one_process_finds_what_another_indexed_into_the_shared_chroma(
    cluster: Cluster, modelless: list[ServeProcess]
) -> None:
    a, b = modelless
    shared = VectorIndex(open_chroma(url=cluster.chroma))
    # The product writes the user's messages to the shared store; nothing indexed them yet.
    store = MessageStore(cluster.database)
    try:
        store.add(Message(i, USER, "t1", role, ts, text) for i, role, ts, text in MEMORY_TEXTS)
    finally:
        store.close()
    assert shared.count(USER) == 0

    # A's first semantic search indexes them, into the Chroma server.
    assert evidence(recall(a, "What food do I avoid?"))[0] == "m1"
    assert shared.count(USER) == len(MEMORY_TEXTS)
    # B searches the same vectors (its check finds them indexed: it adds none).
    assert evidence(recall(b, "What food do I avoid?"))[0] == "m1"
    assert shared.count(USER) == len(MEMORY_TEXTS)

    # A new message, stored and indexed by a third process (an importer); B, which has loaded
    # the user's index already and never indexes this user again, finds it on the server.
    from skilldeck.services import open_memory
    from skilldeck.settings import Settings

    settings = Settings(
        model=None,
        messages_path=cluster.database,
        chroma_url=cluster.chroma,
        chroma_path=str(cluster.embedded),
    )
    importer = open_memory(settings)
    try:
        new = "My daughter starts violin lessons with Mrs Petit on Tuesdays."
        importer.add([Message("m8", USER, "t2", "user", "2026-04-01T10:00:00Z", new)])
    finally:
        importer.close()
    assert shared.count(USER) == len(MEMORY_TEXTS) + 1
    assert "m8" in evidence(recall(b, "When are my daughter's violin lessons?"))
    assert not cluster.embedded.exists()  # no process opened a Chroma of its own


@pytest.mark.timeout(180)
def test_a_process_killed_mid_run_loses_nothing_and_another_continues_the_thread(
    cluster: Cluster,
) -> None:
    """A run started on process A is read on B; A is killed (``kill -9``, by pid) in the
    middle of a step; B continues the thread from its last checkpoint and finishes it."""
    started = [cluster.start(), cluster.start()]
    try:
        a, b = (process.wait() for process in started)
        _kill_and_continue(a, b)
    finally:
        for process in started:
            process.stop()


def _kill_and_continue(a: ServeProcess, b: ServeProcess) -> None:
    with client(a) as on_a, client(b) as on_b:
        thread = on_a.post("/threads").json()["thread_id"]
        with on_a.stream("POST", f"/threads/{thread}/runs", json=SLOW_RUN) as response:
            next(response.iter_lines())
            deadline = time.monotonic() + 10
            # B sees the first step checkpointed while the slow one runs on A: kill A now.
            while len(on_b.get(f"/threads/{thread}/history").json()["checkpoints"]) < 3:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            os.kill(a.proc.pid, signal.SIGKILL)
            a.proc.wait(30)
        before = on_b.get(f"/threads/{thread}/history").json()["checkpoints"]
        assert on_b.get(f"/threads/{thread}").json()["status"] == "running"

        # B continues once the dead process's run lease is seen gone (its 10 s grace).
        deadline = time.monotonic() + 60
        while (view := on_b.get(f"/threads/{thread}").json())["status"] != "resumable":
            assert view["status"] == "running" and time.monotonic() < deadline, view
            time.sleep(0.5)
        name, card = sse(on_b.post(f"/threads/{thread}/continue").text)[-1]
        assert name == "card", card
        after = on_b.get(f"/threads/{thread}/history").json()["checkpoints"]
        assert after[: len(before)] == before  # from the last checkpoint: no step lost or redone
        assert [row["source"] for row in after].count("input") == 1
        done = resume(on_b, thread, {"note": "kept"}, card["interrupt_id"])
        assert sse(done.text)[-1][0] == "done"
        view = on_b.get(f"/threads/{thread}").json()
        assert view["status"] == "finished" and view["state"]["note"] == "kept"
        assert [r["answers"] for r in on_b.get(f"/threads/{thread}/history").json()[
            "checkpoints"] if r.get("answers")] == [{"note": "kept"}]  # fmt: skip


def test_the_knowledge_base_indexed_by_one_process_is_searched_by_another(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``skilldeck knowledge index`` in one process, ``rag_retrieve`` in another: the chunks in
    the shared knowledge folder, their vectors on the Chroma server."""
    from skilldeck.services import open_knowledge
    from skilldeck.settings import Settings

    settings = Settings(
        model=None,
        chroma_url=cluster.chroma,
        chroma_path=str(cluster.embedded),
        knowledge_path=str(tmp_path / "knowledge"),
    )
    indexer = open_knowledge(settings)
    try:
        indexer.index(Path(__file__).parent / "fixtures" / "knowledge")
    finally:
        indexer.close()
    searcher = open_knowledge(settings)  # its own Chroma client, as another process has
    try:
        # No word of the query is in the (Chinese) policy: only its vector on the server finds it.
        result = searcher.rag_retrieve("can I return an item I bought", top_k=3)
    finally:
        searcher.close()
    assert result["chunks"][0]["file_ref"] == "policies/after-sales.md#L5-L6"
    assert not cluster.embedded.exists()
