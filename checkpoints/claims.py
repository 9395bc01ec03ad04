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
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from skilldeck.errors import CheckpointError

__all__ = [
    "DEFAULT_DEAD_OWNER_GRACE_S",
    "DEFAULT_LEASE_S",
    "RUN_LEASE",
    "InterruptClaims",
    "MemoryClaims",
    "PostgresClaims",
    "SqliteClaims",
    "owner_gone",
    "process_owner",
]

#: Seconds after which an unfinished claim may be taken over (its owner presumably died).
DEFAULT_LEASE_S = 300.0
#: Seconds after which a claim whose owner (session, process) is gone may be taken over.
DEFAULT_DEAD_OWNER_GRACE_S = 10.0
#: The key of a thread's run lease (interrupt ids are hex digests, never this).
RUN_LEASE = "run"

_TABLE = "skilldeck_interrupt_claims"
_CREATE = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    thread_id TEXT NOT NULL,
    interrupt_id TEXT NOT NULL,
    claimed_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (thread_id, interrupt_id)
)"""
# SQLite claims record the claiming process (see SqliteClaims). Insert, or take over a claim
# older than the lease, or older than the grace if its owner is gone; the row count says who won.
_SQLITE_OWNER_COLUMN = f"ALTER TABLE {_TABLE} ADD COLUMN owner TEXT"
_SQLITE_CLAIM = f"""
INSERT INTO {_TABLE} AS c (thread_id, interrupt_id, claimed_at, owner) VALUES (?, ?, ?, ?)
ON CONFLICT (thread_id, interrupt_id) DO UPDATE
SET claimed_at = excluded.claimed_at, owner = excluded.owner
WHERE c.claimed_at < excluded.claimed_at - ?
    OR (c.claimed_at < excluded.claimed_at - ? AND skilldeck_owner_gone(c.owner))"""
_SQLITE_RENEW = f"""
UPDATE {_TABLE} SET claimed_at = ? WHERE thread_id = ? AND interrupt_id = ? AND owner = ?"""
_RELEASE = f"DELETE FROM {_TABLE} WHERE thread_id = {{p}} AND interrupt_id = {{p}}"
# A claim is deleted when its request ends; only a process killed while holding one leaves
# it, and a later request on the thread takes it over. Claims of threads nobody touches again
# are swept once they are two leases old, every SWEEP_EVERY claims.
SWEEP_EVERY = 256
_SQLITE_SWEEP = f"DELETE FROM {_TABLE} WHERE claimed_at < ?"
_PG_SWEEP = f"DELETE FROM {_TABLE} WHERE claimed_at < extract(epoch from clock_timestamp()) - %s"

# PostgreSQL claims also record the claiming session (see PostgresClaims).
_PG_OWNER_COLUMNS = f"""
ALTER TABLE {_TABLE}
    ADD COLUMN IF NOT EXISTS owner_pid INTEGER,
    ADD COLUMN IF NOT EXISTS owner_start TIMESTAMPTZ"""
_PG_CLAIM = f"""
INSERT INTO {_TABLE} AS c (thread_id, interrupt_id, claimed_at, owner_pid, owner_start)
SELECT %s, %s, extract(epoch from clock_timestamp()), pid, backend_start
FROM pg_stat_activity WHERE pid = pg_backend_pid()
ON CONFLICT (thread_id, interrupt_id) DO UPDATE
SET claimed_at = excluded.claimed_at, owner_pid = excluded.owner_pid,
    owner_start = excluded.owner_start
WHERE c.claimed_at < excluded.claimed_at - %s
    OR (c.claimed_at < excluded.claimed_at - %s AND NOT EXISTS (
        SELECT 1 FROM pg_stat_activity a
        WHERE a.pid = c.owner_pid AND a.backend_start = c.owner_start))"""
# Renewing also moves a claim to this process's current session (its connection may have been
# replaced after a server restart), unless a live session took it over.
_PG_RENEW = f"""
UPDATE {_TABLE} AS c
SET claimed_at = extract(epoch from clock_timestamp()), owner_pid = me.pid,
    owner_start = me.backend_start
FROM pg_stat_activity me
WHERE me.pid = pg_backend_pid() AND c.thread_id = %s AND c.interrupt_id = %s
    AND ((c.owner_pid = me.pid AND c.owner_start = me.backend_start) OR NOT EXISTS (
        SELECT 1 FROM pg_stat_activity a
        WHERE a.pid = c.owner_pid AND a.backend_start = c.owner_start))"""

# With no lease, the takeover condition can never hold.
_NO_LEASE = 1e15


class InterruptClaims(ABC):
    """Claims on pending interrupts (and run leases); see the module docstring.

    Args:
        lease_s: seconds after which a claim may be taken over; ``None``: never.
        dead_owner_grace_s: seconds after which a claim whose owner is known to be gone may be
            taken over (backends that can tell: PostgreSQL, SQLite on the owner's host).
    """

    def __init__(
        self,
        lease_s: float | None = DEFAULT_LEASE_S,
        dead_owner_grace_s: float = DEFAULT_DEAD_OWNER_GRACE_S,
    ) -> None:
        if lease_s is not None and lease_s <= 0:
            raise ValueError(f"lease_s must be positive or None, got {lease_s!r}")
        self.lease_s = lease_s
        self.dead_owner_grace_s = dead_owner_grace_s
        self._claims_made = 0

    @property
    def _lease(self) -> float:
        return _NO_LEASE if self.lease_s is None else self.lease_s

    def _sweep_due(self) -> bool:
        """Every :data:`SWEEP_EVERY` claims (never without a lease), sweep old claims."""
        self._claims_made += 1
        return self.lease_s is not None and self._claims_made % SWEEP_EVERY == 1

    @abstractmethod
    def claim(self, thread_id: str, interrupt_id: str) -> bool:
        """``True`` for exactly one caller per ``(thread_id, interrupt_id)`` (per lease)."""

    @abstractmethod
    def renew(self, thread_id: str, interrupt_id: str) -> bool:
        """Restart the lease of a claim this process holds; ``False`` if it is no longer ours."""

    @abstractmethod
    def release(self, thread_id: str, interrupt_id: str) -> None:
        """Give a claim back, so the interrupt can be resumed again (the resume failed)."""

    async def aclaim(self, thread_id: str, interrupt_id: str) -> bool:
        """:meth:`claim` off the event loop."""
        return await asyncio.to_thread(self.claim, thread_id, interrupt_id)

    async def arenew(self, thread_id: str, interrupt_id: str) -> bool:
        """:meth:`renew` off the event loop."""
        return await asyncio.to_thread(self.renew, thread_id, interrupt_id)

    async def arelease(self, thread_id: str, interrupt_id: str) -> None:
        """:meth:`release` off the event loop."""
        await asyncio.to_thread(self.release, thread_id, interrupt_id)

    def close(self) -> None:  # noqa: B027 - optional hook: most backends own nothing
        """Release connections this object owns (none by default)."""


class MemoryClaims(InterruptClaims):
    """Claims within one process (``memory://`` checkpoints, tests); their owner is alive."""

    def __init__(self, lease_s: float | None = DEFAULT_LEASE_S) -> None:
        super().__init__(lease_s)
        self._lock = threading.Lock()
        self._claimed: dict[tuple[str, str], float] = {}

    def claim(self, thread_id: str, interrupt_id: str) -> bool:
        now = time.monotonic()
        with self._lock:
            since = self._claimed.get((thread_id, interrupt_id))
            if since is not None and since >= now - self._lease:
                return False
            self._claimed[thread_id, interrupt_id] = now
            return True

    def renew(self, thread_id: str, interrupt_id: str) -> bool:
        with self._lock:
            if (thread_id, interrupt_id) not in self._claimed:
                return False
            self._claimed[thread_id, interrupt_id] = time.monotonic()
            return True

    def release(self, thread_id: str, interrupt_id: str) -> None:
        with self._lock:
            self._claimed.pop((thread_id, interrupt_id), None)


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
    ) -> None:
        super().__init__(lease_s, dead_owner_grace_s)
        self._conn, self._lock = conn, lock
        try:
            with self._lock, self._conn:
                self._conn.create_function("skilldeck_owner_gone", 1, owner_gone)
                self._conn.execute(_CREATE)
                table = self._conn.execute(f"PRAGMA table_info({_TABLE})")
                if "owner" not in {row[1] for row in table}:  # a file from before owners
                    with contextlib.suppress(sqlite3.OperationalError):  # another process did it
                        self._conn.execute(_SQLITE_OWNER_COLUMN)
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot create resume claims: {exc}") from None

    def claim(self, thread_id: str, interrupt_id: str) -> bool:
        if self._sweep_due():
            self._write(_SQLITE_SWEEP, (time.time() - 2 * self._lease,))
        params = (thread_id, interrupt_id, time.time(), process_owner())
        return self._write(_SQLITE_CLAIM, (*params, self._lease, self.dead_owner_grace_s)) == 1

    def renew(self, thread_id: str, interrupt_id: str) -> bool:
        params = (time.time(), thread_id, interrupt_id, process_owner())
        return self._write(_SQLITE_RENEW, params) == 1

    def release(self, thread_id: str, interrupt_id: str) -> None:
        self._write(_RELEASE.format(p="?"), (thread_id, interrupt_id))

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        """Run one statement in its own transaction; the rows it changed."""
        with self._lock, self._conn:  # commits, or rolls back on an error
            return self._conn.execute(sql, params).rowcount


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
    """

    def __init__(
        self,
        pool: Any,
        *,
        lease_s: float | None = DEFAULT_LEASE_S,
        dead_owner_grace_s: float = DEFAULT_DEAD_OWNER_GRACE_S,
    ) -> None:
        super().__init__(lease_s, dead_owner_grace_s)
        self._conninfo: str = pool.conninfo
        self._kwargs: dict[str, Any] = {**pool.kwargs, "autocommit": True}
        self._conn: Any = None
        self._lock = threading.Lock()

    @staticmethod
    def setup(conn: Any) -> None:
        """Create the claims table on ``conn`` (the caller holds the setup lock)."""
        conn.execute(_CREATE)
        conn.execute(_PG_OWNER_COLUMNS)

    def _execute(self, sql: str, params: tuple[Any, ...]) -> int:
        """Run ``sql`` on the claims connection (reconnecting once if it broke); its rowcount."""
        import psycopg

        with self._lock:
            for retry in (False, True):
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                try:
                    return int(self._conn.execute(sql, params).rowcount)
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

    def claim(self, thread_id: str, interrupt_id: str) -> bool:
        if self._sweep_due():
            self._execute(_PG_SWEEP, (2 * self._lease,))
        params = (thread_id, interrupt_id, self._lease, self.dead_owner_grace_s)
        return self._execute(_PG_CLAIM, params) == 1

    def renew(self, thread_id: str, interrupt_id: str) -> bool:
        return self._execute(_PG_RENEW, (thread_id, interrupt_id)) == 1

    def release(self, thread_id: str, interrupt_id: str) -> None:
        self._execute(_RELEASE.format(p="%s"), (thread_id, interrupt_id))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
