"""Resume-once claims: of concurrent resumes of one interrupt, exactly one may proceed.

Two requests that answer the same card at once both see it pending in the checkpoint; without
a claim both would resume it and the answers would be applied twice. A claim is one row keyed
by ``(thread_id, interrupt_id)`` inserted with ``ON CONFLICT``: the database lets exactly one
caller insert it, across threads and processes. The loser answers 409.

A claim is never needed again once the resume has checkpointed (the interrupt is then no longer
pending), but a process killed between claiming and checkpointing would leave the card
unanswerable. So a claim older than ``lease_s`` may be taken over; a resume that fails cleanly
(invalid answers, nothing changed) should :meth:`~InterruptClaims.release` its claim at once.
A claim also records its owner where the database can tell whether it is alive: on PostgreSQL
the claiming server session, on SQLite the claiming process (see :class:`SqliteClaims`). The
claim of an owner that is gone may be taken over after a short grace.

The same table holds each thread's *run lease*, the claim ``(thread_id, RUN_LEASE)``: a run or
resume holds it while it drives the graph, so a stopped run is never continued while it still
runs elsewhere. A long run renews it (:meth:`~InterruptClaims.renew`) so it never runs out.

Each claim records its *holder*, a token of the request that made it (by default one per
claims object): only the holder renews or releases it, so a request whose claim was taken over
(it waited past its lease) can neither keep the claim nor delete the new holder's. Leases are
dated by a clock that can be injected (:data:`Clock`; PostgreSQL dates them by the server's).
:meth:`~InterruptClaims.live` tells which threads a live run holds: a thread whose last run
stopped mid-way and is held by nobody is ``resumable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import sqlite3
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from skilldeck.errors import CheckpointError

__all__ = [
    "DEFAULT_DEAD_OWNER_GRACE_S",
    "DEFAULT_LEASE_S",
    "RUN_LEASE",
    "Clock",
    "InterruptClaims",
    "MemoryClaims",
    "PostgresClaims",
    "SqliteClaims",
    "live_leases",
    "new_holder",
    "owner_gone",
    "process_owner",
]

#: Seconds after which an unfinished claim may be taken over (its owner presumably died).
DEFAULT_LEASE_S = 300.0
#: Seconds after which a claim whose owner (session, process) is gone may be taken over.
DEFAULT_DEAD_OWNER_GRACE_S = 10.0
#: The key of a thread's run lease (interrupt ids are hex digests, never this).
RUN_LEASE = "run"

Clock = Callable[[], float]
"""A time source: seconds since the epoch (claims are compared across processes)."""

_TABLE = "skilldeck_interrupt_claims"
_CREATE = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    thread_id TEXT NOT NULL,
    interrupt_id TEXT NOT NULL,
    claimed_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (thread_id, interrupt_id)
)"""
# SQLite claims record the claiming process (see SqliteClaims) and their holder. A claim is
# live while it is younger than the lease, and younger than the grace or its owner is alive; a
# claim that is not live may be taken over (the row count says who won).
_SQLITE_COLUMNS = {"owner": "TEXT", "holder": "TEXT"}
_SQLITE_LIVE = """(c.claimed_at >= {now} - :lease
    AND NOT (c.claimed_at < {now} - :grace AND skilldeck_owner_gone(c.owner)))"""
_SQLITE_CLAIM = f"""
INSERT INTO {_TABLE} AS c (thread_id, interrupt_id, claimed_at, owner, holder)
VALUES (:thread, :key, :now, :owner, :holder)
ON CONFLICT (thread_id, interrupt_id) DO UPDATE
SET claimed_at = excluded.claimed_at, owner = excluded.owner, holder = excluded.holder
WHERE NOT {_SQLITE_LIVE.format(now="excluded.claimed_at")}"""
_SQLITE_RENEW = f"""
UPDATE {_TABLE} SET claimed_at = :now, owner = :owner
WHERE thread_id = :thread AND interrupt_id = :key AND holder = :holder"""
_SQLITE_LIVE_THREADS = f"""
SELECT c.thread_id FROM {_TABLE} c WHERE c.interrupt_id = :key AND c.thread_id IN ({{ids}})
    AND {_SQLITE_LIVE.format(now=":now")}"""
_RELEASE = f"""
DELETE FROM {_TABLE} WHERE thread_id = {{p}} AND interrupt_id = {{p}} AND holder = {{p}}"""
# A deleted thread's claims: its run lease (which the deleting request holds) and any card's.
_FORGET = f"DELETE FROM {_TABLE} WHERE thread_id = {{p}}"
# A claim is deleted when its request ends; only a process killed while holding one leaves
# it, and a later request on the thread takes it over. Claims of threads nobody touches again
# are swept once they are two leases old, every SWEEP_EVERY claims.
SWEEP_EVERY = 256
_SQLITE_SWEEP = f"DELETE FROM {_TABLE} WHERE claimed_at < ?"
_PG_SWEEP = f"DELETE FROM {_TABLE} WHERE claimed_at < extract(epoch from clock_timestamp()) - %s"

# PostgreSQL claims also record the claiming session (see PostgresClaims) and their holder.
_PG_OWNER_COLUMNS = f"""
ALTER TABLE {_TABLE}
    ADD COLUMN IF NOT EXISTS owner_pid INTEGER,
    ADD COLUMN IF NOT EXISTS owner_start TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS holder TEXT"""
_PG_NOW = "extract(epoch from clock_timestamp())"
_PG_LIVE = """(c.claimed_at >= {now} - %(lease)s AND NOT (
    c.claimed_at < {now} - %(grace)s AND NOT EXISTS (
        SELECT 1 FROM pg_stat_activity a
        WHERE a.pid = c.owner_pid AND a.backend_start = c.owner_start)))"""
_PG_CLAIM = f"""
INSERT INTO {_TABLE} AS c (thread_id, interrupt_id, claimed_at, owner_pid, owner_start, holder)
SELECT %(thread)s, %(key)s, {_PG_NOW}, pid, backend_start, %(holder)s
FROM pg_stat_activity WHERE pid = pg_backend_pid()
ON CONFLICT (thread_id, interrupt_id) DO UPDATE
SET claimed_at = excluded.claimed_at, owner_pid = excluded.owner_pid,
    owner_start = excluded.owner_start, holder = excluded.holder
WHERE NOT {_PG_LIVE.format(now="excluded.claimed_at")}"""
# Renewing also moves a claim to this process's current session (its connection may have been
# replaced after a server restart).
_PG_RENEW = f"""
UPDATE {_TABLE} AS c
SET claimed_at = {_PG_NOW}, owner_pid = me.pid, owner_start = me.backend_start
FROM pg_stat_activity me
WHERE me.pid = pg_backend_pid() AND c.thread_id = %(thread)s AND c.interrupt_id = %(key)s
    AND c.holder = %(holder)s"""
_PG_LIVE_THREADS = f"""
SELECT c.thread_id FROM {_TABLE} c
WHERE c.interrupt_id = %(key)s AND c.thread_id = ANY(%(ids)s) AND {_PG_LIVE.format(now=_PG_NOW)}"""

# With no lease, the takeover condition can never hold.
_NO_LEASE = 1e15


class InterruptClaims(ABC):
    """Claims on pending interrupts (and run leases); see the module docstring.

    Each method takes the claim's ``holder``: a token of the request that makes, renews or
    gives back the claim (:func:`new_holder`); by default this object's own.

    Args:
        lease_s: seconds after which a claim may be taken over; ``None``: never.
        dead_owner_grace_s: seconds after which a claim whose owner is known to be gone may be
            taken over (backends that can tell: PostgreSQL, SQLite on the owner's host).
        clock: the time claims are dated by (tests inject one to let a lease run out).
    """

    def __init__(
        self,
        lease_s: float | None = DEFAULT_LEASE_S,
        dead_owner_grace_s: float = DEFAULT_DEAD_OWNER_GRACE_S,
        clock: Clock = time.time,
    ) -> None:
        if lease_s is not None and lease_s <= 0:
            raise ValueError(f"lease_s must be positive or None, got {lease_s!r}")
        self.lease_s = lease_s
        self.dead_owner_grace_s = dead_owner_grace_s
        self.clock = clock
        #: The holder of the claims made through this object without one of their own.
        self.holder = new_holder()
        self._claims_made = 0

    @property
    def _lease(self) -> float:
        return _NO_LEASE if self.lease_s is None else self.lease_s

    def _sweep_due(self) -> bool:
        """Every :data:`SWEEP_EVERY` claims (never without a lease), sweep old claims."""
        self._claims_made += 1
        return self.lease_s is not None and self._claims_made % SWEEP_EVERY == 1

    @abstractmethod
    def claim(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        """``True`` for exactly one caller per ``(thread_id, interrupt_id)`` (per lease)."""

    @abstractmethod
    def renew(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        """Restart the lease of a claim ``holder`` holds; ``False`` if it is no longer theirs
        (it was taken over, or given back)."""

    @abstractmethod
    def release(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> None:
        """Give a claim of ``holder`` back, so the interrupt can be resumed again (the resume
        failed); a claim someone else holds now is left alone."""

    @abstractmethod
    def live(self, thread_ids: Collection[str], interrupt_id: str = RUN_LEASE) -> set[str]:
        """Which of ``thread_ids`` have a live claim ``interrupt_id`` (by default: which are
        held by a live run): one that may not be taken over now."""

    @abstractmethod
    def forget(self, thread_id: str) -> None:
        """Delete every claim of a deleted thread (call it holding its run lease, which goes
        too)."""

    async def aclaim(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        """:meth:`claim` off the event loop."""
        return await asyncio.to_thread(self.claim, thread_id, interrupt_id, holder)

    async def arenew(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        """:meth:`renew` off the event loop."""
        return await asyncio.to_thread(self.renew, thread_id, interrupt_id, holder)

    async def arelease(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> None:
        """:meth:`release` off the event loop."""
        await asyncio.to_thread(self.release, thread_id, interrupt_id, holder)

    def close(self) -> None:  # noqa: B027 - optional hook: most backends own nothing
        """Release connections this object owns (none by default)."""


def new_holder() -> str:
    """A new holder token: one per request that claims (see :class:`InterruptClaims`)."""
    return uuid.uuid4().hex


class MemoryClaims(InterruptClaims):
    """Claims within one process (``memory://`` checkpoints, tests); their owner is alive."""

    def __init__(self, lease_s: float | None = DEFAULT_LEASE_S, clock: Clock = time.time) -> None:
        super().__init__(lease_s, clock=clock)
        self._lock = threading.Lock()
        # (since, holder) of each claim.
        self._claimed: dict[tuple[str, str], tuple[float, str]] = {}

    def claim(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        now = self.clock()
        with self._lock:
            found = self._claimed.get((thread_id, interrupt_id))
            if found is not None and found[0] >= now - self._lease:
                return False
            self._claimed[thread_id, interrupt_id] = (now, holder or self.holder)
            return True

    def renew(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        with self._lock:
            found = self._claimed.get((thread_id, interrupt_id))
            if found is None or found[1] != (holder or self.holder):
                return False
            self._claimed[thread_id, interrupt_id] = (self.clock(), found[1])
            return True

    def release(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> None:
        with self._lock:
            found = self._claimed.get((thread_id, interrupt_id))
            if found is not None and found[1] == (holder or self.holder):
                del self._claimed[thread_id, interrupt_id]

    def forget(self, thread_id: str) -> None:
        with self._lock:
            for key in [k for k in self._claimed if k[0] == thread_id]:
                del self._claimed[key]

    def live(self, thread_ids: Collection[str], interrupt_id: str = RUN_LEASE) -> set[str]:
        since = self.clock() - self._lease
        with self._lock:
            return {
                t
                for t in thread_ids
                if (found := self._claimed.get((t, interrupt_id))) and found[0] >= since
            }


class SqliteClaims(InterruptClaims):
    """Claims in a table of the SQLite checkpoint file, shared by the processes using it.

    Each claim records its owner process as ``host/pid/start``: the host (its name and pid
    namespace), the pid, and when the process started, so a pid reused by a new process is not
    taken for the owner. A claim whose owner is gone from this host (``kill -9`` between
    claiming a card and checkpointing the answers) may be taken over after
    ``dead_owner_grace_s``; claims of other hosts, or where process start times cannot be read
    (no ``/proc``), keep the lease rule.

    Args:
        conn: the checkpointer's connection (Python's default, implicit transactions): each
            claim, renewal and release commits on it.
        lock: the lock that serialises every transaction on ``conn``.
        lease_s: see :class:`InterruptClaims`.
        dead_owner_grace_s: see :class:`InterruptClaims`.
        clock: see :class:`InterruptClaims`.

    Raises:
        CheckpointError: the claims table cannot be created (another process holds a lock).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        lock: contextlib.AbstractContextManager[Any],
        *,
        lease_s: float | None = DEFAULT_LEASE_S,
        dead_owner_grace_s: float = DEFAULT_DEAD_OWNER_GRACE_S,
        clock: Clock = time.time,
    ) -> None:
        super().__init__(lease_s, dead_owner_grace_s, clock)
        self._conn, self._lock = conn, lock
        try:
            with self._lock, self._conn:
                self._conn.create_function("skilldeck_owner_gone", 1, owner_gone)
                self._conn.execute(_CREATE)
                have = {row[1] for row in self._conn.execute(f"PRAGMA table_info({_TABLE})")}
                for column, kind in _SQLITE_COLUMNS.items():
                    if column not in have:  # a file from before owners (or holders)
                        with contextlib.suppress(sqlite3.OperationalError):  # another did it
                            self._conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {column} {kind}")
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot create resume claims: {exc}") from None

    def _rule(self) -> dict[str, float]:
        return {"now": self.clock(), "lease": self._lease, "grace": self.dead_owner_grace_s}

    def claim(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        rule = self._rule()
        if self._sweep_due():
            self._write(_SQLITE_SWEEP, (rule["now"] - 2 * self._lease,))
        params = {"thread": thread_id, "key": interrupt_id, "owner": process_owner()}
        return self._write(_SQLITE_CLAIM, {**params, **rule, "holder": holder or self.holder}) == 1

    def renew(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        params = {"thread": thread_id, "key": interrupt_id, "holder": holder or self.holder}
        return (
            self._write(_SQLITE_RENEW, {**params, "now": self.clock(), "owner": process_owner()})
            == 1
        )

    def release(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> None:
        self._write(_RELEASE.format(p="?"), (thread_id, interrupt_id, holder or self.holder))

    def forget(self, thread_id: str) -> None:
        self._write(_FORGET.format(p="?"), (thread_id,))

    def live(self, thread_ids: Collection[str], interrupt_id: str = RUN_LEASE) -> set[str]:
        with self._lock:
            return live_leases(self._conn, thread_ids, interrupt_id, **self._rule())

    def _write(self, sql: str, params: Any) -> int:
        """Run one statement in its own transaction; the rows it changed."""
        with self._lock, self._conn:  # commits, or rolls back on an error
            return self._conn.execute(sql, params).rowcount


def live_leases(
    conn: Any,
    thread_ids: Collection[str],
    interrupt_id: str = RUN_LEASE,
    *,
    now: float | None = None,
    lease: float = DEFAULT_LEASE_S,
    grace: float = DEFAULT_DEAD_OWNER_GRACE_S,
) -> set[str]:
    """Which of ``thread_ids`` hold a live claim ``interrupt_id`` in the claims table, read on
    ``conn``: a ``sqlite3`` connection (``now`` dates it; ``skilldeck_owner_gone`` is
    registered here) or a psycopg one (the server's clock dates it). No claims table: none."""
    ids = list(dict.fromkeys(thread_ids))
    if not ids:
        return set()
    if isinstance(conn, sqlite3.Connection):
        conn.create_function("skilldeck_owner_gone", 1, owner_gone)
        marks = ", ".join(f":id{i}" for i in range(len(ids)))
        params: dict[str, Any] = {f"id{i}": t for i, t in enumerate(ids)}
        params.update(key=interrupt_id, lease=lease, grace=grace)
        params["now"] = time.time() if now is None else now
        try:
            rows = conn.execute(_SQLITE_LIVE_THREADS.format(ids=marks), params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such" in str(exc):  # a file from before claims (or their owners)
                return set()
            raise
    else:
        params = {"key": interrupt_id, "ids": ids, "lease": lease, "grace": grace}
        rows = conn.execute(_PG_LIVE_THREADS, params).fetchall()
    return {str(r["thread_id"] if isinstance(r, dict) else r[0]) for r in rows}


@functools.cache
def _host() -> str:
    """This host: its name and pid namespace (containers on one host see different pids)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}:{namespace}"


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (boot id and clock ticks since boot); ``None`` if it is
    gone, a zombie, or this system has no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    # The fields after the command name (which may hold spaces and parentheses) start with the
    # state; the start time is field 22 of the whole line.
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else f"{boot}:{fields[19]}"


@functools.cache
def _owner(pid: int) -> str:
    return f"{_host()}/{pid}/{_process_start(pid) or ''}"


def process_owner() -> str:
    """The owner a SQLite claim made by this process records: ``host/pid/start``."""
    return _owner(os.getpid())  # per pid: a forked child is another owner


def owner_gone(owner: str | None) -> bool:
    """Whether the process that recorded ``owner`` (see :func:`process_owner`) is known to be
    gone: it ran on this host, and no process with its pid and start time runs now."""
    parts = (owner or "").rsplit("/", 2)
    if len(parts) != 3:
        return False
    host, pid, start = parts
    if not start or host != _host() or not pid.isdigit():
        return False
    return _process_start(int(pid)) != start


class PostgresClaims(InterruptClaims):
    """Claims in a PostgreSQL table, made on a connection of their own.

    That connection's server session stands for this process: each claim records it, and a
    claim whose session is gone (its process died, e.g. ``kill -9`` between claiming a card and
    checkpointing the answers) may be taken over after ``dead_owner_grace_s`` instead of the
    whole lease. The grace covers a live owner whose connection dropped (a server restart)
    and who still has to write. The server's clock dates the claims, so app hosts with skewed
    clocks agree on leases.

    Args:
        pool: a ``psycopg_pool.ConnectionPool``; the claims connect with its conninfo and options.
        lease_s: see :class:`InterruptClaims`.
        dead_owner_grace_s: see :class:`InterruptClaims`.
        clock: paces renewals only: the server's clock dates the claims.
    """

    def __init__(
        self,
        pool: Any,
        *,
        lease_s: float | None = DEFAULT_LEASE_S,
        dead_owner_grace_s: float = DEFAULT_DEAD_OWNER_GRACE_S,
        clock: Clock = time.time,
    ) -> None:
        super().__init__(lease_s, dead_owner_grace_s, clock)
        self._conninfo: str = pool.conninfo
        self._kwargs: dict[str, Any] = {**pool.kwargs, "autocommit": True}
        self._conn: Any = None
        self._lock = threading.Lock()

    @staticmethod
    def setup(conn: Any) -> None:
        """Create the claims table on ``conn`` (the caller holds the setup lock)."""
        conn.execute(_CREATE)
        conn.execute(_PG_OWNER_COLUMNS)

    def _execute(self, sql: str, params: Any) -> int:
        """Run ``sql`` on the claims connection; its rowcount."""
        return int(self._on_conn(lambda conn: conn.execute(sql, params).rowcount))

    def _on_conn(self, use: Callable[[Any], Any]) -> Any:
        """``use(conn)`` on the claims connection (reconnecting once if it broke)."""
        import psycopg

        with self._lock:
            for retry in (False, True):
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                try:
                    return use(self._conn)
                except psycopg.OperationalError:
                    # The server restarted or the network dropped: a new session, once.
                    self._conn.close()
                    self._conn = None
                    if retry:
                        raise
        raise AssertionError("unreachable")

    def _connect(self) -> Any:
        """A new connection, waiting for a restarting server like the pools do."""
        import psycopg

        from skilldeck._internal.postgres import POOL_WAIT_S

        deadline = time.monotonic() + POOL_WAIT_S
        while True:
            try:
                return psycopg.connect(self._conninfo, connect_timeout=5, **self._kwargs)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def claim(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        if self._sweep_due():
            self._execute(_PG_SWEEP, (2 * self._lease,))
        params = {"thread": thread_id, "key": interrupt_id, "holder": holder or self.holder}
        rule = {"lease": self._lease, "grace": self.dead_owner_grace_s}
        return self._execute(_PG_CLAIM, {**params, **rule}) == 1

    def renew(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> bool:
        params = {"thread": thread_id, "key": interrupt_id, "holder": holder or self.holder}
        return self._execute(_PG_RENEW, params) == 1

    def release(self, thread_id: str, interrupt_id: str, holder: str | None = None) -> None:
        params = (thread_id, interrupt_id, holder or self.holder)
        self._execute(_RELEASE.format(p="%s"), params)

    def forget(self, thread_id: str) -> None:
        self._execute(_FORGET.format(p="%s"), (thread_id,))

    def live(self, thread_ids: Collection[str], interrupt_id: str = RUN_LEASE) -> set[str]:
        rule = {"lease": self._lease, "grace": self.dead_owner_grace_s}
        found: set[str] = self._on_conn(
            lambda conn: live_leases(conn, thread_ids, interrupt_id, **rule)
        )
        return found

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
