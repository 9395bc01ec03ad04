"""Part R of ``bench/scale.py`` (``--only retention``): the database under retention.

Demo threads (the litigation-intake demo on the scripted provider: a run to its card, the
answers, the run to its end) are created one after another for ``--threads`` threads, each
with a time-to-live of ``--ttl`` seconds, while a prune runs every ``--prune-every`` seconds on
a connection of its own (as the service's background prune does beside its runs). The
database's size is sampled every second: the file (SQLite: the file and its WAL; PostgreSQL:
``pg_database_size``) and its live data (SQLite: pages not on the free list). After the load,
one last prune deletes what has expired since.

Reported: the creation rate (threads/s), the size (MB: the database, its live data) at the
start, the largest under load, at the end of the load (before the last prune) and after the
last prune, every prune's time (p50 / p95 / max) and deletion rate, and the stated bound: the
threads alive at once (sampled from the thread index) stay within the threads created in any
window of ``ttl + prune_every + 2 × the longest prune`` (+ 1 s, the sampling), so the live
data stays within that many threads' rows (one thread's: the live data at the end of the load
over the threads then). A SQLite file does not
shrink by itself (its free pages are reused), so its live size is what follows the threads,
and the file stays at its largest; ``VACUUM`` gives the space back.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import err, log
from rich.table import Table

from skilldeck import Resume, Settings, SkillDeck, demo

__all__ = ["add_arguments", "bench_retention", "print_retention"]

MB = 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=10_000, help="part R: demo threads")
    parser.add_argument("--ttl", type=float, default=30.0, help="part R: their ttl, seconds")
    parser.add_argument(
        "--prune-every", type=float, default=5.0, help="part R: seconds between prunes"
    )
    parser.add_argument(
        "--checkpoint", default=None, help="part R: checkpoint URL (default: a new SQLite file)"
    )


def _sizes(url: str) -> Callable[[], tuple[float, float]]:
    """``() -> (database MB, live MB)`` for the checkpoint database at ``url``."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))

        def sqlite_sizes() -> tuple[float, float]:
            wal = path.with_name(path.name + "-wal")
            size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
                pages, free, page = (
                    conn.execute(f"PRAGMA {p}").fetchone()[0]
                    for p in ("page_count", "freelist_count", "page_size")
                )
            return size / MB, (pages - free) * page / MB

        return sqlite_sizes
    import psycopg

    def postgres_sizes() -> tuple[float, float]:
        with psycopg.connect(url) as conn:
            found = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        size = float(found[0]) / MB if found else 0.0
        return size, size

    return postgres_sizes


def _demo_deck(url: str, ttl: float) -> SkillDeck:
    return SkillDeck(
        checkpointer=url,
        settings=Settings(
            model=f"scripted:{demo.SCRIPT}", files_root=str(demo.FILES), thread_ttl=ttl
        ),
    )


def _one_thread(deck: SkillDeck) -> None:
    paused = deck.run(demo.INPUT, context=demo.CONTEXT, matter_id=demo.MATTER_ID)
    done = deck.run(Resume(paused.thread_id, demo.ANSWERS))
    assert done.status == "finished", done.status


def bench_retention(
    tmp: Path, threads: int, ttl: float, prune_every: float, url: str | None
) -> dict[str, Any]:
    url = url or f"sqlite:///{tmp / 'retention.sqlite'}"
    writer, pruner = _demo_deck(url, ttl), _demo_deck(url, ttl)  # a connection each
    sizes = _sizes(url)
    try:
        start_mb = sizes()
        # (seconds, database MB, live MB, threads in the index, threads created so far)
        samples: list[tuple[float, float, float, int, int]] = []
        created = [0]
        prunes: list[dict[str, float]] = []
        done = threading.Event()
        began = time.monotonic()

        def sample() -> None:
            while not done.wait(1.0):
                alive = len(pruner.index.list())
                samples.append((time.monotonic() - began, *sizes(), alive, created[0]))

        def prune() -> None:
            while not done.wait(prune_every):
                report = pruner.prune()
                prunes.append({"seconds": report.seconds, "deleted": report.deleted})

        helpers = [threading.Thread(target=f, daemon=True) for f in (sample, prune)]
        for helper in helpers:
            helper.start()
        for n in range(threads):
            _one_thread(writer)
            created[0] = n + 1
            if (n + 1) % 1000 == 0:
                log(f"{n + 1} threads, {sizes()[0]:.1f} MB, {len(prunes)} prunes")
        load_s = time.monotonic() - began
        done.set()
        for helper in helpers:
            helper.join()
        end_mb = sizes()
        alive_end = len(writer.index.list())
        time.sleep(ttl)
        final = pruner.prune()
        after_mb = sizes()
    finally:
        writer.close()
        pruner.close()
    rate = threads / load_s
    times = sorted(p["seconds"] for p in prunes) or [0.0]
    longest = max(times)
    # A thread lives its run, its ttl, then until the prune after the one that started before
    # it expired: at most ttl + prune_every + two prunes (+ 1 s of sampling). So the threads
    # alive at a sample are at most those created in the window that long before it.
    window = ttl + prune_every + 2 * longest + 1.0
    bound_threads = max(
        (s[4] - max((e[4] for e in samples if e[0] <= s[0] - window), default=0) for s in samples),
        default=threads,
    )
    # What one thread's rows take: the live data at the end of the load over the threads then.
    per_thread_mb = (end_mb[1] - start_mb[1]) / max(alive_end, 1)
    peak_alive = max((s[3] for s in samples), default=alive_end)
    deleted = sum(p["deleted"] for p in prunes)
    return {
        "checkpoint": url.split("@")[-1],
        "threads": threads,
        "ttl_s": ttl,
        "prune_every_s": prune_every,
        "load_s": round(load_s, 1),
        "threads_per_s": round(rate, 1),
        "per_thread_kb": round(per_thread_mb * 1024, 1),
        "start_mb": [round(v, 1) for v in start_mb],
        "peak_mb": [round(max(s[i] for s in samples), 1) for i in (1, 2)] if samples else None,
        "end_of_load_mb": [round(v, 1) for v in end_mb],
        "after_last_prune_mb": [round(v, 1) for v in after_mb],
        "peak_threads_alive": peak_alive,
        "threads_alive_at_end": alive_end,
        "bound_threads": round(bound_threads),
        "bound_live_mb": round(start_mb[1] + bound_threads * per_thread_mb, 1),
        "within_bound": peak_alive <= bound_threads,
        "without_retention_live_mb": round(start_mb[1] + threads * per_thread_mb, 1),
        "prunes": len(prunes),
        "prune_s_p50": round(statistics.median(times), 3),
        "prune_s_p95": round(times[min(len(times) - 1, int(0.95 * len(times)))], 3),
        "prune_s_max": round(longest, 3),
        "deleted_under_load": int(deleted),
        "prune_deleted_per_s": round(deleted / max(sum(p["seconds"] for p in prunes), 1e-9), 1),
        "last_prune": {"deleted": final.deleted, "seconds": round(final.seconds, 3)},
        "samples": [[round(v, 2) for v in s] for s in samples],
    }


def print_retention(part: dict[str, Any]) -> None:
    table = Table(title=f"retention: {part['threads']} demo threads, ttl {part['ttl_s']} s")
    table.add_column("measure")
    table.add_column("value")
    rows = {k: v for k, v in part.items() if k not in ("samples", "threads", "ttl_s")}
    for key, value in rows.items():
        table.add_row(key, str(value))
    err.print(table)
