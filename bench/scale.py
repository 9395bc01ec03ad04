"""Scale benchmark: a serving process's memory as users grow, and cold-start search latency.

Usage::

    python bench/scale.py [--users 1000] [--messages 1000] [--budget-mb 512]
                          [--history 1000 10000 100000] [--semantic 1000 10000 100000]
                          [--reps 5] [--only users|history|semantic|processes] [--json]
    python bench/scale.py --only processes [--postgres URL] [--chroma URL] [--solo 100000]
    python bench/scale.py --only lexicon [--lexicon-users 300] [--lexicon-messages 1000]
                          [--lexicon-large 100000] [--lexicon-reps 20] [--lexicon-processes 20]
    python bench/scale.py --only retention [--threads 10000] [--ttl 30] [--prune-every 5]
                          [--checkpoint URL]

A. **Memory as users grow.** ``--users`` users with ``--messages`` messages each (30 words
   drawn from a Zipf vocabulary of 50,000 words; a thread per 20 turns) go into a SQLite
   message store; then one process opens :class:`~skilldeck.tools.memory.Memory` on it (no
   vector index: lexical search, as the issue's baseline) with an index cache of
   ``--budget-mb``, and each user searches once. The process's RSS (``/proc``) is sampled every
   25 users. Target: RSS after the last user ≤ the budget + 300 MB (the same run also prints
   the RSS before the first search, and the cache's own byte count).
B. **Cold and warm search by history size.** One user with each ``--history`` size: the first
   lexical search of a fresh ``Memory`` ``--reps`` times. The first time no snapshot exists
   (the lexicon is built from every message, then saved: ``first_build_ms``); every later time
   is a process restart that loads the snapshot (``cold_ms`` p50/p95). Then five warm searches
   per fresh ``Memory`` (``warm_ms`` p50).

C. **Cold semantic and hybrid search by history size** (``--semantic`` sizes; embedded Chroma,
   the offline USE model). One user's messages go into the store and, with random unit vectors
   of the model's width, into the user's Chroma collection. Each probe is a new Python process
   (a real restart: Chroma keeps an opened collection's index in its process) that loads the
   model, then times one first search (:data:`PROBES`), ``--reps`` processes for each: p50 and
   p95. The first probe of all (``semantic_first_ms``) copies the vectors out of Chroma and
   saves their snapshot in the message store; the later ones load it. A last process times
   warm filtered queries (:func:`probe_warm`): the size check through the message store
   against Chroma's count, alternated, and ``semantic_search`` itself.

D. **Two serving processes** (``--only processes``; ``--postgres URL --chroma URL``, by default
   ``.ci/services env``'s). ``--users`` × ``--messages`` go into a new database on the
   PostgreSQL server, and a ``--solo`` user's messages also into the Chroma server. Then two
   processes start at once, each with the ``--budget-mb`` cache: each of its half of the users
   searches once (lexical); then ``solo`` searches once (semantic) in each process, one
   process at a time; each reports its RSS once the model is loaded, after its users and after
   ``solo``. Both are then restarted (``--restarts`` times) and do the same
   again, now from the snapshots in PostgreSQL. Target: RSS after the users ≤ the budget +
   300 MB.

E. **A user's first search** (``--only lexicon``; issue 36 item 7). ``--lexicon-users`` users
   write ``--lexicon-messages`` messages each through :meth:`Memory.add` (batches of
   ``--lexicon-batch``), which stores each user's lexicon with the messages; then each user's
   first lexical search runs in a new ``Memory`` with its own store connection and index cache
   (what a process that never served the user has): p50/p95, the warm search after it, and,
   alternated user by user, the same first search ignoring the stored lexicon (every message
   tokenized, as a cold start did before). ``--lexicon-processes`` real new processes each time
   one first search too. A user with ``--lexicon-large`` messages (batches of 1,000) is timed
   ``--lexicon-reps`` times the same way. Each first search's top 10 is checked against
   rank-bm25's over the same tokens (50 users, and every query at the large size). Targets:
   p50 ≤ 100 ms at 1,000 messages, ≤ 200 ms at 100,000.

R. **The database under retention** (``--only retention``): demo threads with a short
   time-to-live created while prunes run; see ``bench/scale_retention.py``.

Plots (matplotlib, offline) go to ``bench/scale_rss.png`` and ``bench/scale_cold.png``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import numpy as np
from common import arguments, err, log, progress_bar, report_header, show_report
from rich.table import Table
from scale_retention import add_arguments, bench_retention, print_retention

from skilldeck.tools.index_cache import IndexCache
from skilldeck.tools.memory import Memory
from skilldeck.tools.messages import Message, MessageStore

HERE = Path(__file__).resolve().parent
VOCABULARY = 50_000
ALL = {"role": "any", "time_range": {"since": "2020-01-01T00:00:00Z"}}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


CUMULATIVE = list(itertools.accumulate(1 / (rank + 1) for rank in range(VOCABULARY)))


def messages(user: str, count: int, seed: int, start: int = 0) -> list[Message]:
    """Turns ``start`` to ``start + count`` of ``user``: 30 Zipf-distributed words each, 20
    turns a thread."""
    rng = random.Random(seed)
    words = rng.choices(range(VOCABULARY), cum_weights=CUMULATIVE, k=30 * count)
    out = []
    for i in range(start, start + count):
        k = i - start
        text = " ".join(f"w{w}" for w in words[30 * k : 30 * k + 30])
        day = f"2026-{1 + i // 40320 % 12:02d}-{1 + i // 1440 % 28:02d}"
        ts = f"{day}T{i // 60 % 24:02d}:{i % 60:02d}:00Z"
        role = "user" if i % 2 == 0 else "assistant"
        out.append(Message(f"{user}-{i}", user, f"{user}-t{i // 20}", role, ts, text))
    return out


def fill(store: MessageStore, users: Sequence[str], count: int) -> None:
    with progress_bar() as bar:
        task = bar.add_task("writing messages", total=len(users))
        for n, user in enumerate(users):
            store.add(messages(user, count, seed=n))
            bar.advance(task)


def bench_users(tmp: Path, users: int, count: int, budget_mb: float) -> dict[str, Any]:
    store_path = tmp / "users.sqlite"
    names = [f"user{i:05d}" for i in range(users)]
    fill(MessageStore(store_path), names, count)
    gc.collect()
    cache = IndexCache(budget_mb=budget_mb)
    memory = Memory(MessageStore(store_path), None, cache=cache)
    start_rss = rss_mb()
    samples: list[tuple[int, float, float]] = [(0, start_rss, 0.0)]
    first_ms: list[float] = []
    with progress_bar() as bar:
        task = bar.add_task("one search per user", total=users)
        for n, user in enumerate(names, start=1):
            started = time.perf_counter()
            memory.lexical_search(user, query_text="w17 w230 w4001", filter=ALL)
            first_ms.append((time.perf_counter() - started) * 1000)
            if n % 25 == 0 or n == users:
                samples.append((n, rss_mb(), cache.stats()["bytes"] / 2**20))
            bar.advance(task)
    memory.close()
    end = samples[-1][1]
    return {
        "users": users,
        "messages_per_user": count,
        "budget_mb": budget_mb,
        "rss_before_searches_mb": round(start_rss, 1),
        "rss_after_mb": round(end, 1),
        "rss_growth_mb": round(end - start_rss, 1),
        "cache_mb": round(samples[-1][2], 1),
        "cache": cache.stats(),
        "cold_first_search_ms_p50": round(statistics.median(first_ms), 1),
        "target_mb": budget_mb + 300,
        "pass": end <= budget_mb + 300,
        "samples": samples,
    }


def bench_history(tmp: Path, sizes: Sequence[int], reps: int) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        path = tmp / f"history-{size}.sqlite"
        store = MessageStore(path)
        log(f"history {size}: writing")
        for start in range(0, size, 10_000):
            store.add(messages("solo", min(10_000, size - start), seed=start, start=start))
        store.close()
        cold, warm = [], []
        for _ in range(reps):
            memory = Memory(MessageStore(path), None, cache=IndexCache())
            started = time.perf_counter()
            memory.lexical_search("solo", query_text="w17 w230 w4001", filter=ALL)
            cold.append((time.perf_counter() - started) * 1000)
            for _ in range(5):
                started = time.perf_counter()
                memory.lexical_search("solo", query_text="w18 w231 w4002", filter=ALL)
                warm.append((time.perf_counter() - started) * 1000)
            memory.close()
        restarts = cold[1:] or cold
        rows.append(
            {
                "messages": size,
                "first_build_ms": round(cold[0], 1),
                "cold_ms_p50": round(statistics.median(restarts), 1),
                "cold_ms_p95": round(sorted(restarts)[math.ceil(0.95 * (len(restarts) - 1))], 1),
                "warm_ms_p50": round(statistics.median(warm), 2),
            }
        )
        log(f"history {size}: {rows[-1]}")
    return rows


def _quantiles(values: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return (
        round(statistics.median(ordered), 1),
        round(ordered[math.ceil(0.95 * (len(ordered) - 1))], 1),
    )


def _open_memory(folder: Path) -> Memory:
    from skilldeck.tools.vectors import VectorIndex, open_chroma

    store = MessageStore(folder / "store.sqlite")
    vectors = VectorIndex(open_chroma(folder / "chroma"), cache=IndexCache(), snapshots=store)
    return Memory(store, vectors, cache=IndexCache())


#: The first searches a probe process may time: the memory tool's semantic search (its filter
#: is explicit, so the user's vectors are copied out of Chroma and filtered here), the same
#: ranking straight from Chroma's HNSW index (no filter), and the hybrid search.
PROBES = ("semantic", "hnsw", "hybrid")


def probe(folder: Path, kind: str) -> float:
    """The ms of one process's first ``kind`` search of ``solo`` (``scale.py --probe``)."""
    memory = _open_memory(folder)
    vectors = memory.vectors
    assert vectors is not None
    width = vectors.embed(["load the model first"]).shape[1]  # not history-dependent
    query = np.random.default_rng().standard_normal(width).tolist()
    searches = {
        "semantic": lambda: memory.semantic_search("solo", query_embedding=query, filter=ALL),
        "hnsw": lambda: vectors.query("solo", embedding=query, top_k=10),
        "hybrid": lambda: memory.hybrid_search("solo", "w17 w230 w4001", since=0.0),
    }
    started = time.perf_counter()
    searches[kind]()
    elapsed = (time.perf_counter() - started) * 1000
    memory.close()
    return elapsed


def probe_warm(folder: Path, rounds: int = 30) -> list[float]:
    """p50 ms of warm filtered vector queries that learn the user's size from the message
    store (``known``, as ``Memory`` asks), and of the same asking Chroma's count instead (as
    before snapshots), alternated in one process (``scale.py --probe warm``); then of
    ``semantic_search`` itself."""
    memory = _open_memory(folder)
    vectors = memory.vectors
    assert vectors is not None
    width = vectors.embed(["load the model first"]).shape[1]
    rng = np.random.default_rng()
    memory.semantic_search("solo", query_embedding=[1.0] * width, filter=ALL)  # the cold one
    store, chroma, product = [], [], []
    for _ in range(rounds):
        query = rng.standard_normal(width).tolist()
        for times, known in ((store, True), (chroma, False)):
            started = time.perf_counter()
            count = memory.store.count("solo") if known else None
            vectors.query("solo", embedding=query, role="user", since=0.0, known=count)
            times.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        memory.semantic_search("solo", query_embedding=query, filter=ALL)
        product.append((time.perf_counter() - started) * 1000)
    memory.close()
    return [statistics.median(times) for times in (store, chroma, product)]


def _probe_in_a_new_process(kind: str, folder: Path) -> list[float]:
    command = [sys.executable, str(Path(__file__)), "--probe", kind, str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return [float(x) for x in done.stdout.splitlines()[-1].split()]


def write_solo(memory: Memory, count: int) -> None:
    """``count`` messages of ``solo`` into the store and, with random unit vectors of the
    model's width, into the user's Chroma collection."""
    assert memory.vectors is not None
    width = memory.vectors.embed(["width"]).shape[1]
    rng = np.random.default_rng(count)
    for start in range(0, count, 5_000):
        batch = messages("solo", min(5_000, count - start), seed=start, start=start)
        memory.store.add(batch)
        memory.vectors.add(
            "solo",
            [m.id for m in batch],
            [m.text for m in batch],
            [m.role for m in batch],
            [m.ts_epoch for m in batch],
            [m.thread_id for m in batch],
            embeddings=rng.standard_normal((len(batch), width), dtype=np.float32),
        )


def bench_semantic(tmp: Path, sizes: Sequence[int], reps: int) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        folder = tmp / f"semantic-{size}"
        folder.mkdir()
        memory = _open_memory(folder)
        log(f"semantic {size}: writing")
        write_solo(memory, size)
        memory.lexical_search("solo", query_text="w1", filter=ALL)  # saves the BM25 snapshot
        memory.close()
        # The first filtered search ever copies every vector out of Chroma and saves the
        # snapshot that the later ones, each in a new process, load.
        row: dict[str, Any] = {
            "messages": size,
            "semantic_first_ms": round(_probe_in_a_new_process("semantic", folder)[0], 1),
        }
        for kind in PROBES:
            timings = [_probe_in_a_new_process(kind, folder)[0] for _ in range(reps)]
            row[f"{kind}_cold_ms_p50"], row[f"{kind}_cold_ms_p95"] = _quantiles(timings)
        warm = _probe_in_a_new_process("warm", folder)
        row["warm_query_store_count_ms_p50"] = round(warm[0], 2)
        row["warm_query_chroma_count_ms_p50"] = round(warm[1], 2)
        row["warm_semantic_search_ms_p50"] = round(warm[2], 2)
        rows.append(row)
        log(f"semantic {size}: {row}")
    return rows


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """An empty database on the PostgreSQL server of ``server_url``, dropped afterwards."""
    import psycopg

    name = f"scale_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _served_memory(database: str, chroma: str, prefix: str, budget_mb: float) -> Memory:
    from skilldeck.tools.vectors import VectorIndex, open_chroma

    store = MessageStore(database)
    cache = IndexCache(budget_mb=budget_mb)
    vectors = VectorIndex(open_chroma(url=chroma), prefix=prefix, cache=cache, snapshots=store)
    return Memory(store, vectors, cache=cache)


def worker(database: str, chroma: str, prefix: str, budget_mb: float, names: list[str]) -> None:
    """One serving process of part D (``scale.py --worker``): each of ``names`` searches once
    (lexical); then, when a line comes on stdin (the processes take turns, so that one user's
    cold search is not timed against the other process doing the same at that instant),
    ``solo`` searches semantically; prints a JSON line after each."""
    memory = _served_memory(database, chroma, prefix, budget_mb)
    assert memory.vectors is not None
    width = memory.vectors.embed(["load the model first"]).shape[1]
    start_rss = rss_mb()
    first = []
    for user in names:
        started = time.perf_counter()
        memory.lexical_search(user, query_text="w17 w230 w4001", filter=ALL)
        first.append((time.perf_counter() - started) * 1000)
    print(json.dumps({"rss_before_mb": start_rss, "rss_after_lexical_mb": rss_mb(),
                      "lexical_ms": first}), flush=True)  # fmt: skip
    sys.stdin.readline()
    query = np.random.default_rng().standard_normal(width).tolist()
    started = time.perf_counter()
    memory.semantic_search("solo", query_embedding=query, filter=ALL)
    semantic = (time.perf_counter() - started) * 1000
    print(json.dumps({"rss_after_mb": rss_mb(), "semantic_ms": semantic}), flush=True)
    memory.close()


def _spawn_worker(
    database: str, chroma: str, prefix: str, budget_mb: float, names: list[str]
) -> subprocess.Popen[str]:
    command = [sys.executable, str(Path(__file__)), "--worker", database, chroma, prefix]
    command += [str(budget_mb), ",".join(names)]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"a part D worker ended early (exit code {proc.wait()})")
    return cast(dict[str, Any], json.loads(line))


def bench_processes(
    server: str, chroma: str, users: int, count: int, solo: int, budget_mb: float, restarts: int
) -> dict[str, Any]:
    """Part D: two serving processes on one PostgreSQL and one Chroma server, started, then
    restarted ``restarts`` times."""
    prefix = f"scale_{uuid.uuid4().hex[:8]}"
    names = [f"user{i:05d}" for i in range(users)]
    with fresh_database(server) as database:
        memory = _served_memory(database, chroma, prefix, budget_mb)
        fill(memory.store, names, count)
        log(f"processes: solo user with {solo} messages")
        write_solo(memory, solo)
        memory.close()
        runs = []
        for label in ["first start"] + [f"restart {i + 1}" for i in range(restarts)]:
            halves = [names[: users // 2], names[users // 2 :]]
            procs = [_spawn_worker(database, chroma, prefix, budget_mb, half) for half in halves]
            outs = [_line(p) for p in procs]
            # One cold solo search at a time, each once the other process has ended (its exit
            # frees hundreds of MB, which would be timed too).
            for proc, out in zip(procs, outs, strict=True):
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                out.update(_line(proc))
                assert proc.wait() == 0
            lexical = [ms for out in outs for ms in out["lexical_ms"]]
            runs.append(
                {
                    "run": label,
                    "rss_before_mb": [round(out["rss_before_mb"], 1) for out in outs],
                    "rss_after_users_mb": [round(out["rss_after_lexical_mb"], 1) for out in outs],
                    "rss_after_mb": [round(out["rss_after_mb"], 1) for out in outs],
                    "lexical_first_ms_p50_p95": _quantiles(lexical),
                    "semantic_first_ms": [round(out["semantic_ms"], 1) for out in outs],
                }
            )
            log(f"processes, {label}: {runs[-1]}")
    later = runs[1:]
    return {
        "users": users,
        "messages_per_user": count,
        "solo_messages": solo,
        "budget_mb": budget_mb,
        "target_rss_mb": budget_mb + 300,
        "runs": runs,
        "after_restarts": {
            "rss_after_users_mb_max": max(mb for r in later for mb in r["rss_after_users_mb"]),
            "semantic_first_ms_p50_p95": _quantiles(
                [ms for r in later for ms in r["semantic_first_ms"]]
            ),
        },
    }


# -- E. A user's first search (--only lexicon; issue 36 item 7) ---------------------------------
#
# Self-contained: its own helpers, arguments (--lexicon-*) and report key ("lexicon").


def _lexicon_query(rng: random.Random) -> str:
    """Three words of the messages' Zipf vocabulary, as a user's query."""
    words = rng.choices(range(VOCABULARY), cum_weights=CUMULATIVE, k=3)
    return " ".join(f"w{w}" for w in words)


def _write_as_the_product(where: str, users: Sequence[str], count: int, batch: int) -> float:
    """Each user's ``count`` messages through :meth:`Memory.add` in batches of ``batch`` (which
    stores the lexicon's segments with them); returns the seconds it took."""
    memory = Memory(MessageStore(where), None, cache=IndexCache(budget_mb=64))
    started = time.perf_counter()
    with progress_bar() as bar:
        what = f"Memory.add, {len(users)} x {count} in batches of {batch}"
        task = bar.add_task(what, total=len(users) * count)
        for n, user in enumerate(users):
            for start in range(0, count, batch):
                size = min(batch, count - start)
                memory.add(messages(user, size, seed=n * count + start, start=start))
                bar.advance(task, size)
    memory.close()
    return time.perf_counter() - started


def _first_search(
    where: str, user: str, query: str, *, stored: bool = True
) -> tuple[float, float, list[str]]:
    """The ms of ``user``'s first lexical search in a new memory (its own store connection and
    index cache: what a process that never served the user has), then a warm search's ms and
    the first search's hits. ``stored=False`` ignores the stored lexicon (it tokenizes every
    message, as a cold start did before it was kept)."""
    memory = Memory(MessageStore(where), None, cache=IndexCache(), snapshots=stored)
    started = time.perf_counter()
    found = memory.lexical_search(user, query_text=query, filter=ALL, page_size=10)
    first = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    memory.lexical_search(user, query_text=query + " w1", filter=ALL, page_size=10)
    warm = (time.perf_counter() - started) * 1000
    memory.close()
    return first, warm, [h["message_id"] for h in found["hits"]]


def lexicon_probe(where: str, user: str, query: str) -> float:
    """The ms of one new process's first lexical search (``scale.py --lexicon-probe``)."""
    memory = Memory(MessageStore(where), None, cache=IndexCache())
    started = time.perf_counter()
    memory.lexical_search(user, query_text=query, filter=ALL, page_size=10)
    elapsed = (time.perf_counter() - started) * 1000
    memory.close()
    return elapsed


def _top10_identical(
    where: str, user: str, queries: Sequence[str], first: Sequence[list[str]]
) -> int:
    """How many of ``first`` (the tool's top 10 for ``queries``, from the stored lexicon) are
    rank-bm25's top 10 over the same tokens of the same indexed texts."""
    from rank_bm25 import BM25Okapi

    memory = Memory(MessageStore(where), None, cache=IndexCache(), snapshots=False)
    ordered = list(memory.store.iter_user(user))
    texts = memory._in_context(user, ordered, seeded=False)
    oracle = BM25Okapi([memory.tokenizer.tokens(text) for _, text in texts])
    same = 0
    for query, hits in zip(queries, first, strict=True):
        scores = oracle.get_scores(list(memory.tokenizer.tokens(query)))
        top = np.lexsort((np.arange(len(scores)), -scores))[:10]
        same += [ordered[i].id for i in top if scores[i] > 0] == hits
    memory.close()
    return same


def _stored_size(where: str, user: str) -> dict[str, Any]:
    store = MessageStore(where)
    rows = store._db.query(
        f"SELECT COUNT(*), SUM(LENGTH(data)), SUM(docs) FROM {store._table}_lexicon "
        "WHERE user_id = ?",
        [user],
    )
    store.close()
    segments, size, docs = (int(x or 0) for x in rows[0])
    return {"segments": segments, "bytes": size, "bytes_per_message": round(size / max(docs, 1))}


def bench_lexicon(
    tmp: Path, users: int, count: int, large: int, reps: int, processes: int, batch: int
) -> dict[str, Any]:
    """Part E: first searches at ``count`` messages (``users`` users) and at ``large``."""
    where = str(tmp / "lexicon.sqlite")
    names = [f"lex{i:04d}" for i in range(users)]
    report: dict[str, Any] = {"store": "SQLite", "batch": batch}
    report["write_s"] = round(_write_as_the_product(where, names, count, batch), 1)
    rng = random.Random(7)
    opened, built, warm, queries, hits = [], [], [], [], []
    with progress_bar() as bar:
        task = bar.add_task(f"first searches, {users} users", total=users)
        for n, user in enumerate(names):
            query = _lexicon_query(rng)
            # Alternate which goes first, so neither always finds the pages the other read.
            for stored in (n % 2 == 0, n % 2 == 1):
                ms, warm_ms, top = _first_search(where, user, query, stored=stored)
                (opened if stored else built).append(ms)
                if stored:
                    warm.append(warm_ms)
                    queries.append(query)
                    hits.append(top)
            bar.advance(task)
    checked = min(users, 50)
    same = sum(
        _top10_identical(where, user, queries[n : n + 1], hits[n : n + 1])
        for n, user in enumerate(names[:checked])
    )
    probes = []
    for n in range(processes):
        user, query = names[n * users // max(processes, 1)], _lexicon_query(rng)
        command = [sys.executable, str(Path(__file__)), "--lexicon-probe", where, user, query]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        probes.append(float(done.stdout.split()[-1]))
    report["small"] = {
        "messages": count,
        "users": users,
        "first_ms_p50_p95": _quantiles(opened),
        "first_ms_new_process_p50_p95": _quantiles(probes) if probes else None,
        "new_processes": processes,
        "warm_ms_p50": round(statistics.median(warm), 1),
        "built_from_every_message_ms_p50_p95": _quantiles(built),
        "top10_identical_to_rank_bm25": f"{same}/{checked}",
        "stored": _stored_size(where, names[0]),
        "target_ms": 100,
        "pass": _quantiles(opened)[0] <= 100 and same == checked,
    }
    log(f"lexicon, {count} messages: {report['small']}")

    where = str(tmp / "lexicon-large.sqlite")
    report["large_write_s"] = round(_write_as_the_product(where, ["big"], large, 1000), 1)
    queries = [_lexicon_query(rng) for _ in range(reps)]
    firsts, warm, hits = [], [], []
    for query in queries:
        ms, warm_ms, top = _first_search(where, "big", query)
        firsts.append(ms)
        warm.append(warm_ms)
        hits.append(top)
    built_ms = _first_search(where, "big", queries[0], stored=False)[0]
    same = _top10_identical(where, "big", queries, hits)
    report["large"] = {
        "messages": large,
        "reps": reps,
        "first_ms_p50_p95": _quantiles(firsts),
        "warm_ms_p50": round(statistics.median(warm), 1),
        "built_from_every_message_ms": round(built_ms, 1),
        "top10_identical_to_rank_bm25": f"{same}/{len(queries)}",
        "stored": _stored_size(where, "big"),
        "target_ms": 200,
        "pass": _quantiles(firsts)[0] <= 200 and same == len(queries),
    }
    log(f"lexicon, {large} messages: {report['large']}")
    return report


def print_lexicon(part: dict[str, Any]) -> None:
    table = Table(title=f"a user's first lexical search ({part['store']}), ms")
    columns = (
        "messages",
        "first p50 / p95",
        "new process p50 / p95",
        "warm p50",
        "built from every message",
        "top-10 = rank-bm25",
        "stored B/msg",
        "target",
        "pass",
    )
    for column in columns:
        table.add_column(column)
    for key in ("small", "large"):
        row = part[key]
        built = row.get("built_from_every_message_ms_p50_p95") or row.get(
            "built_from_every_message_ms"
        )
        probes = row.get("first_ms_new_process_p50_p95")
        table.add_row(
            f"{row['messages']:,}" + (f" x {row['users']} users" if "users" in row else ""),
            "{} / {}".format(*row["first_ms_p50_p95"]),
            "{} / {}".format(*probes) if probes else "",
            str(row["warm_ms_p50"]),
            " / ".join(map(str, built)) if isinstance(built, list | tuple) else str(built),
            row["top10_identical_to_rank_bm25"],
            str(row["stored"]["bytes_per_message"]),
            f"≤ {row['target_ms']}",
            "PASS" if row["pass"] else "FAIL",
        )
    err.print(table)


def plot(report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    users = report["users_run"]
    xs = [s[0] for s in users["samples"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(xs, [s[1] for s in users["samples"]], label="process RSS")
    ax.plot(xs, [s[2] for s in users["samples"]], label="index cache (estimated)")
    ax.axhline(users["target_mb"], linestyle="--", color="grey", label="budget + 300 MB")
    ax.set_xlabel("users that searched once")
    ax.set_ylabel("MB")
    ax.set_title(f"{users['messages_per_user']} messages a user, budget {users['budget_mb']:g} MB")
    ax.legend()
    fig.tight_layout()
    fig.savefig(HERE / "scale_rss.png", dpi=100)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    sizes = [r["messages"] for r in report["history"]]
    ax.loglog(sizes, [r["first_build_ms"] for r in report["history"]], marker="o",
              label="first search, no snapshot")  # fmt: skip
    ax.loglog(sizes, [r["cold_ms_p50"] for r in report["history"]], marker="o",
              label="first search after a restart (snapshot), p50")  # fmt: skip
    ax.loglog(sizes, [r["warm_ms_p50"] for r in report["history"]], marker="o", label="warm p50")
    semantic = report.get("semantic") or []
    for key, label in (
        ("semantic_cold_ms_p50", "semantic_search after a restart, p50"),
        ("hnsw_cold_ms_p50", "Chroma HNSW query after a restart, p50"),
        ("hybrid_cold_ms_p50", "hybrid after a restart, p50"),
    ):
        if semantic:
            ax.loglog([r["messages"] for r in semantic], [r[key] for r in semantic],
                      marker="s", linestyle="--", label=label)  # fmt: skip
    ax.set_xlabel("messages of the user")
    ax.set_ylabel("first search, ms")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "scale_cold.png", dpi=100)


def print_report(report: dict[str, Any]) -> None:
    if report.get("retention"):
        print_retention(report["retention"])
    if report.get("users_run"):
        err.print({k: v for k, v in report["users_run"].items() if k != "samples"})
    if report.get("history"):
        table = Table(title="lexical search by history size")
        keys = ("messages", "first_build_ms", "cold_ms_p50", "cold_ms_p95", "warm_ms_p50")
        for column in keys:
            table.add_column(column)
        for r in report["history"]:
            table.add_row(*(str(r[k]) for k in keys))
        err.print(table)
    if report.get("processes"):
        part = report["processes"]
        table = Table(title=f"two processes, {part['users']} users (PostgreSQL, Chroma server)")
        columns = ("run", "RSS: model loaded / users searched / solo searched, MB",
                   "first lexical p50 / p95 ms", "first semantic ms")  # fmt: skip
        for column in columns:
            table.add_column(column)
        for run in part["runs"]:
            lexical = "{} / {}".format(*run["lexical_first_ms_p50_p95"])
            rss = " ; ".join(
                f"{a} / {b} / {c}"
                for a, b, c in zip(
                    run["rss_before_mb"],
                    run["rss_after_users_mb"],
                    run["rss_after_mb"],
                    strict=True,
                )
            )
            table.add_row(run["run"], rss, lexical, str(run["semantic_first_ms"]))
        err.print(table)
        err.print({"after the restarts": part["after_restarts"]})
    if report.get("lexicon"):
        print_lexicon(report["lexicon"])
    if report.get("semantic"):
        table = Table(title="first semantic and hybrid search after a restart, ms (p50 / p95)")
        table.add_column("messages")
        table.add_column("first ever")
        for column in PROBES:
            table.add_column(column)
        for r in report["semantic"]:
            table.add_row(
                str(r["messages"]),
                str(r["semantic_first_ms"]),
                *(f"{r[f'{k}_cold_ms_p50']} / {r[f'{k}_cold_ms_p95']}" for k in PROBES),
            )
        err.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--budget-mb", type=float, default=512.0)
    parser.add_argument("--history", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--semantic", type=int, nargs="*", default=[1000, 10_000, 100_000])
    parser.add_argument(
        "--only",
        choices=("users", "history", "semantic", "processes", "lexicon", "retention"),
        help="Run one part (no plots); 'processes' is part D, which the full run leaves out.",
    )
    parser.add_argument("--postgres", default=os.environ.get("SKILLDECK_TEST_POSTGRES_URL"))
    parser.add_argument("--chroma", default=os.environ.get("SKILLDECK_TEST_CHROMA_URL"))
    parser.add_argument("--solo", type=int, default=100_000)
    parser.add_argument("--restarts", type=int, default=3, help="part D: restarts of both")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=2, metavar=("KIND", "FOLDER"), help=argparse.SUPPRESS)
    lexicon = parser.add_argument_group("part E (--only lexicon)")
    lexicon.add_argument("--lexicon-users", type=int, default=300)
    lexicon.add_argument("--lexicon-messages", type=int, default=1000)
    lexicon.add_argument("--lexicon-large", type=int, default=100_000)
    lexicon.add_argument("--lexicon-reps", type=int, default=20)
    lexicon.add_argument("--lexicon-processes", type=int, default=20)
    lexicon.add_argument("--lexicon-batch", type=int, default=20)
    lexicon.add_argument("--lexicon-probe", nargs=3, help=argparse.SUPPRESS)

    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.worker:
        database, chroma, prefix, budget, names = args.worker
        worker(database, chroma, prefix, float(budget), names.split(","))
        return 0
    if args.lexicon_probe:
        print(lexicon_probe(*args.lexicon_probe))
        return 0
    if args.probe:
        kind, folder = args.probe[0], Path(args.probe[1])
        print(*(probe_warm(folder) if kind == "warm" else [probe(folder, kind)]))
        return 0
    report = report_header(command=" ".join(["python bench/scale.py", *(argv or sys.argv[1:])]))
    with tempfile.TemporaryDirectory(prefix="skilldeck-scale-") as name:
        tmp = Path(name)
        # Part A first: its RSS figures must not hold what the other parts leave in this
        # process (their Chroma collections, the large users' indexes).
        if args.only in (None, "users"):
            report["users_run"] = bench_users(tmp, args.users, args.messages, args.budget_mb)
        if args.only in (None, "history"):
            report["history"] = bench_history(tmp, args.history, args.reps)
        if args.only in (None, "semantic"):
            report["semantic"] = bench_semantic(tmp, args.semantic, args.reps)
        if args.only == "lexicon":
            report["lexicon"] = bench_lexicon(
                tmp,
                args.lexicon_users,
                args.lexicon_messages,
                args.lexicon_large,
                args.lexicon_reps,
                args.lexicon_processes,
                args.lexicon_batch,
            )
        if args.only == "retention":
            report["retention"] = bench_retention(
                tmp, args.threads, args.ttl, args.prune_every, args.checkpoint
            )
        if args.only == "processes":
            if not (args.postgres and args.chroma):
                parser.error(
                    "--only processes needs --postgres URL and --chroma URL (or "
                    '`eval "$(.ci/services env)"` after `.ci/services start all`)'
                )
            report["processes"] = bench_processes(
                args.postgres,
                args.chroma,
                args.users,
                args.messages,
                args.solo,
                args.budget_mb,
                args.restarts,
            )
    if args.only is None:
        plot(report)
    return show_report(report, args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
