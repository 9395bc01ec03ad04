"""Retention: delete expired threads, and thin finished threads to their last checkpoint.

Every thread has a time-to-live (``settings.thread_ttl``, or the run's ``ttl``; unset: it is
kept until deleted), counted from its last activity (a run's start or stop), and the thread
index records when it expires (:class:`~skilldeck.checkpoints.threads.ThreadRecord`).
:func:`prune` deletes the threads expired by now, each with everything it owns:

- its checkpoints, in every namespace, with their pending writes (the saver's
  ``delete_thread``);
- its transcripts: the rows of each turn no other thread reaches (a fork that carries a turn
  keeps that turn's rows, :func:`~skilldeck.nodes.transcript.forget_thread`), and its turns'
  undo logs;
- its thread index row and its claims (the card claims and the run lease).

A thread whose card waits is never deleted, and neither is a thread a run holds: the prune
takes the thread's run lease (:data:`~skilldeck.checkpoints.claims.RUN_LEASE`) before it
touches it, as every run does, and checks again, under the lease, that the thread is still
expired and has no pending card. So two prunes at once (two processes on one database) never
delete a thread twice or fail: one holds the lease, the other passes by. A fork is a thread of
its own: its own time-to-live governs it, and it still reads the transcript rows it shares
with a deleted parent.

The candidates are read in batches of ``batch`` threads, and each thread is deleted in short
transactions of its own, so a prune never holds a write lock for long (a SQLite file, a
PostgreSQL table), whatever its size.

Thinning (``thin=True``, ``settings.thin_finished``) deletes every checkpoint of a finished
thread but its last one (with their pending writes; on PostgreSQL the channel values only they
referred to: LangGraph's own ``PostgresSaver.prune(strategy="keep_latest")``, which SQLite's
saver lacks, so the same is done here in three statements): the last one becomes the thread's
first (it has no parent). What the thread ended
with is kept, so reading it, ``history`` (one row), a fork at that checkpoint and a new turn of
the thread work as before; time travel to its earlier checkpoints ends (a fork at one of them
is refused: no such checkpoint). Its transcripts stay (a fork of the thread reads them). A
thread is thinned once per run: a new run clears the mark, and its next finish thins again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore, PutOp

import skilldeck.nodes.transcript as transcript
from skilldeck._internal.store_keys import thread_namespace
from skilldeck.checkpoints.claims import RUN_LEASE, new_holder
from skilldeck.checkpoints.open import Persistence
from skilldeck.errors import CheckpointError
from skilldeck.types import PruneReport

__all__ = ["DEFAULT_BATCH", "Progress", "prune"]

#: Threads read (and then deleted one by one) per batch.
DEFAULT_BATCH = 200
#: Called as a prune goes: ``(phase, done, total)``, phase ``"delete"`` or ``"thin"``.
Progress = Callable[[str, int, int], None]
_INTERRUPT = "__interrupt__"
_RESUME = "__resume__"
# The store items a thread owns outright (besides its turns' transcripts): undo logs.
_OWNED = ("undo",)
_ITEMS = 10_000  # a bound for one store search


def prune(
    persistence: Persistence,
    *,
    now: float | None = None,
    thin: bool = False,
    dry_run: bool = False,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> PruneReport:
    """Delete the threads expired by ``now`` (default: now), and with ``thin`` thin finished
    threads to their last checkpoint; see the module docstring.

    Args:
        persistence: the deck's checkpoints, store, claims and thread index.
        now: the time to expire threads by, in seconds since the epoch.
        thin: also thin finished threads (``settings.thin_finished``).
        dry_run: count what would be done; change nothing.
        batch: threads read per batch (at least 1).
        progress: called after each batch.
        stop: once set, the prune ends after the thread it is working on.

    Raises:
        CheckpointError: the database cannot be reached, or ``thin`` on a checkpointer it
            cannot thin (one an application opened itself).
        ValueError: ``batch`` is below 1.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    started = time.monotonic()
    now = time.time() if now is None else now
    index = persistence.threads
    report = PruneReport(
        expired=index.count_expired(now),
        finished=index.count_unthinned() if thin else 0,
        dry_run=dry_run,
    )
    if dry_run:
        report = replace(report, deleted=report.expired, thinned=report.finished)
    else:
        thinner = _thinner(persistence.saver) if thin else None
        report = _sweep(
            persistence,
            lambda after: index.expired(now, batch, after=after),
            lambda t: _delete(persistence, t, now),
            "delete",
            lambda r: r.expired,
            report,
            progress,
            stop,
        )
        if thinner is not None:
            report = _sweep(
                persistence,
                lambda after: index.unthinned(batch, after=after),
                lambda t: _thin(persistence, thinner, t),
                "thin",
                lambda r: r.finished,
                report,
                progress,
                stop,
            )
    return replace(report, seconds=time.monotonic() - started)


def _sweep(
    persistence: Persistence,
    page: Callable[[str], list[str]],
    act: Callable[[str], str | int | None],
    stage: str,
    total: Callable[[PruneReport], int],
    report: PruneReport,
    progress: Progress | None,
    stop: threading.Event | None,
) -> PruneReport:
    """``act`` on each thread of the pages ``page(after)`` lists (ids after ``after``, in order),
    each under its run lease (see :func:`_held`), until a page is empty or ``stop`` is set;
    ``progress(stage, done, total(report))`` after each page."""
    done, after = 0, ""
    while found := page(after):
        for thread_id in found:
            if stop is not None and stop.is_set():
                return report
            report = _count(report, _held(persistence, thread_id, act))
        done += len(found)
        after = found[-1]
        if progress is not None:
            progress(stage, min(done, total(report)), total(report))
    return report


def _count(report: PruneReport, outcome: str | int | None) -> PruneReport:
    if outcome == "busy":
        return replace(report, busy=report.busy + 1)
    if outcome == "pending":
        return replace(report, pending=report.pending + 1)
    if outcome == "deleted":
        return replace(report, deleted=report.deleted + 1)
    if isinstance(outcome, int):
        return replace(
            report,
            thinned=report.thinned + 1,
            checkpoints_removed=report.checkpoints_removed + outcome,
        )
    return report  # gone or moved on since it was listed (another prune, a new run)


def _held(
    persistence: Persistence, thread_id: str, work: Callable[[str], str | int | None]
) -> str | int | None:
    """``work(thread_id)`` holding the thread's run lease (``"busy"`` if a run or another
    prune holds it); the lease is given back after, if the work left it."""
    claims, holder = persistence.claims, new_holder()
    if not claims.claim(thread_id, RUN_LEASE, holder):
        return "busy"
    try:
        return work(thread_id)
    finally:
        claims.release(thread_id, RUN_LEASE, holder)


def _delete(persistence: Persistence, thread_id: str, now: float) -> str | None:
    """Delete the expired thread (its run lease held); ``None`` if it is no longer expired."""
    record = persistence.threads.get(thread_id)
    if record is None or record.status == "interrupted":
        return None
    if record.expires_at is None or record.expires_at > now:
        return None
    if _card_waits(persistence.saver, thread_id):
        return "pending"
    # The index row goes last: a prune cut off half-way leaves the thread listed, and the next
    # prune finishes deleting it.
    persistence.saver.delete_thread(thread_id)
    _forget_items(persistence.store, thread_id)
    if not persistence.threads.forget(thread_id, now):
        return None
    persistence.claims.forget(thread_id)
    return "deleted"


def _card_waits(saver: BaseCheckpointSaver[Any], thread_id: str) -> bool:
    """Whether the thread's last checkpoint has an interrupt nobody answered (the checkpoint
    is the truth; the index row may be behind it if its process died in between)."""
    latest = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    if latest is None:
        return False
    channels = {write[1] for write in latest.pending_writes or ()}
    return _INTERRUPT in channels and _RESUME not in channels


def _forget_items(store: BaseStore, thread_id: str) -> None:
    """The thread's transcripts (the rows no other thread reaches) and its undo logs."""
    transcript.forget_thread(store, thread_id)
    for kind in _OWNED:
        while items := store.search(thread_namespace(kind, thread_id), limit=_ITEMS):
            store.batch([PutOp(item.namespace, item.key, None) for item in items])


# -- thinning -------------------------------------------------------------------------------
Thinner = Callable[[str], int]


def _thin(persistence: Persistence, thinner: Thinner, thread_id: str) -> int | None:
    """Thin the finished thread (its run lease held): the checkpoints removed, or ``None`` if
    it is no longer finished."""
    record = persistence.threads.get(thread_id)
    if record is None or record.status != "finished":
        return None
    removed = thinner(thread_id)
    persistence.threads.mark_thinned(thread_id)
    return removed


def _thinner(saver: BaseCheckpointSaver[Any]) -> Thinner:
    """The function that thins one thread's checkpoints in ``saver``'s database.

    Raises:
        CheckpointError: a saver of another kind (opened by the application).
    """
    kind = type(saver).__name__
    if isinstance(saver, InMemorySaver):
        return lambda thread_id: _thin_memory(saver, thread_id)
    if kind == "SqliteSaver":
        return lambda thread_id: _thin_sqlite(saver, thread_id)
    if kind == "PostgresSaver":
        return lambda thread_id: _thin_postgres(saver, thread_id)
    raise CheckpointError(
        f"thinning checkpoints needs a deck opened from a checkpoint URL (memory://, "
        f"sqlite:///, postgresql://), not a {kind}; turn thin_finished off"
    )


def _thin_memory(saver: InMemorySaver, thread_id: str) -> int:
    namespaces = saver.storage.get(thread_id, {})
    removed = 0
    for checkpoints in namespaces.values():
        if not checkpoints:
            continue
        last = max(checkpoints)
        removed += len(checkpoints) - 1
        checkpoint, metadata, _parent = checkpoints[last]
        checkpoints.clear()
        checkpoints[last] = (checkpoint, metadata, None)
    kept = {(ns, max(c)) for ns, c in namespaces.items() if c}
    for key in [k for k in saver.writes if k[0] == thread_id and k[1:] not in kept]:
        del saver.writes[key]
    return removed


# The last checkpoint of each namespace is kept (checkpoint ids grow with time: LangGraph's
# uuid6), with its writes, and has no parent any more: as PostgresSaver.prune does.
_SQLITE_THIN = (
    """DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id < (
    SELECT max(m.checkpoint_id) FROM checkpoints m
    WHERE m.thread_id = checkpoints.thread_id AND m.checkpoint_ns = checkpoints.checkpoint_ns)""",
    """DELETE FROM writes WHERE thread_id = ? AND NOT EXISTS (
    SELECT 1 FROM checkpoints c WHERE c.thread_id = writes.thread_id
        AND c.checkpoint_ns = writes.checkpoint_ns AND c.checkpoint_id = writes.checkpoint_id)""",
    "UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ?",
)


def _thin_sqlite(saver: Any, thread_id: str) -> int:
    conn = saver.conn
    with saver.lock, conn:  # one short transaction: commits, or rolls back on an error
        removed = conn.execute(_SQLITE_THIN[0], (thread_id,)).rowcount
        for sql in _SQLITE_THIN[1:]:
            conn.execute(sql, (thread_id,))
    return int(removed)


_PG_COUNT = "SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s"


def _thin_postgres(saver: Any, thread_id: str) -> int:
    """LangGraph's own ``keep_latest`` prune (its blobs too); the checkpoints it removed."""

    def count() -> int:
        with saver.conn.connection() as conn:
            found = conn.execute(_PG_COUNT, (thread_id,)).fetchone()
        return int(found["n"] if isinstance(found, dict) else found[0])

    before = count()
    saver.prune([thread_id], strategy="keep_latest")
    return before - count()
