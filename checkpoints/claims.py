"""Resume-once claims: of concurrent resumes of one interrupt, exactly one may proceed.

Two requests that answer the same card at once both see it pending in the checkpoint; without
a claim both would resume it and the answers would be applied twice. A claim is one row keyed
by ``(thread_id, interrupt_id)`` inserted with ``ON CONFLICT``: the database lets exactly one
caller insert it, across threads and processes. The loser answers 409.

A claim is never needed again once the resume has checkpointed (the interrupt is then no longer
pending), but a process killed between claiming and checkpointing would leave the card
unanswerable. So a claim older than ``lease_s`` may be taken over; a resume that fails cleanly
(invalid answers, nothing changed) should :meth:`~InterruptClaims.release` its claim at once.
On PostgreSQL a claim also records the claiming server session, and the claim of a session
that is gone may be taken over after a short grace (see :class:`PostgresClaims`).
"""

from __future__ import annotations

import asyncio
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
    "InterruptClaims",
    "MemoryClaims",
    "PostgresClaims",
    "SqliteClaims",
]

#: Seconds after which an unfinished claim may be taken over (its owner presumably died).
DEFAULT_LEASE_S = 300.0
#: PostgreSQL: seconds after which a claim whose session is gone may be taken over.
DEFAULT_DEAD_OWNER_GRACE_S = 10.0

_TABLE = "skilldeck_interrupt_claims"
_CREATE = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    thread_id TEXT NOT NULL,
    interrupt_id TEXT NOT NULL,
    claimed_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (thread_id, interrupt_id)
)"""
# Insert, or take over a claim older than the lease; the row count says whether we won.
_CLAIM = f"""
INSERT INTO {_TABLE} (thread_id, interrupt_id, claimed_at) VALUES ({{p}}, {{p}}, {{now}})
ON CONFLICT (thread_id, interrupt_id) DO UPDATE SET claimed_at = excluded.claimed_at
WHERE {_TABLE}.claimed_at < {{now}} - {{p}}"""
_RELEASE = f"DELETE FROM {_TABLE} WHERE thread_id = {{p}} AND interrupt_id = {{p}}"

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

# With no lease, the takeover condition can never hold.
_NO_LEASE = 1e15


class InterruptClaims(ABC):
    """Claims on pending interrupts; see the module docstring.

    Args:
        lease_s: seconds after which a claim may be taken over; ``None``: never.
    """

    def __init__(self, lease_s: float | None = DEFAULT_LEASE_S) -> None:
        if lease_s is not None and lease_s <= 0:
            raise ValueError(f"lease_s must be positive or None, got {lease_s!r}")
        self.lease_s = lease_s

    @property
    def _lease(self) -> float:
        return _NO_LEASE if self.lease_s is None else self.lease_s

    @abstractmethod
    def claim(self, thread_id: str, interrupt_id: str) -> bool:
        """``True`` for exactly one caller per ``(thread_id, interrupt_id)`` (per lease)."""

    @abstractmethod
    def release(self, thread_id: str, interrupt_id: str) -> None:
        """Give a claim back, so the interrupt can be resumed again (the resume failed)."""

    async def aclaim(self, thread_id: str, interrupt_id: str) -> bool:
        """:meth:`claim` off the event loop."""
        return await asyncio.to_thread(self.claim, thread_id, interrupt_id)

    async def arelease(self, thread_id: str, interrupt_id: str) -> None:
        """:meth:`release` off the event loop."""
        await asyncio.to_thread(self.release, thread_id, interrupt_id)

    def close(self) -> None:  # noqa: B027 - optional hook: most backends own nothing
        """Release connections this object owns (none by default)."""


class MemoryClaims(InterruptClaims):
    """Claims within one process (``memory://`` checkpoints, tests)."""

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

    def release(self, thread_id: str, interrupt_id: str) -> None:
        with self._lock:
            self._claimed.pop((thread_id, interrupt_id), None)


class SqliteClaims(InterruptClaims):
    """Claims in a table of the SQLite checkpoint file, shared by the processes using it.

    Args:
        path: the database file.
        timeout: seconds to wait for another process's write lock.
        lease_s: see :class:`InterruptClaims`.
    """

    def __init__(
        self, path: str | Path, *, timeout: float = 5.0, lease_s: float | None = DEFAULT_LEASE_S
    ) -> None:
        super().__init__(lease_s)
        try:
            self._conn = sqlite3.connect(
                path, timeout=timeout, check_same_thread=False, isolation_level=None
            )
            self._conn.execute(_CREATE)
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot open resume claims in {str(path)!r}: {exc}") from None
        self._lock = threading.Lock()

    def claim(self, thread_id: str, interrupt_id: str) -> bool:
        sql = _CLAIM.format(p="?", now="?")
        now = time.time()
        with self._lock:
            cur = self._conn.execute(sql, (thread_id, interrupt_id, now, now, self._lease))
            return cur.rowcount == 1

    def release(self, thread_id: str, interrupt_id: str) -> None:
        with self._lock:
            self._conn.execute(_RELEASE.format(p="?"), (thread_id, interrupt_id))

    def close(self) -> None:
        self._conn.close()


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
        dead_owner_grace_s: seconds after which a claim of a gone session may be taken over.
    """

    def __init__(
        self,
        pool: Any,
        *,
        lease_s: float | None = DEFAULT_LEASE_S,
        dead_owner_grace_s: float = DEFAULT_DEAD_OWNER_GRACE_S,
    ) -> None:
        super().__init__(lease_s)
        self._conninfo: str = pool.conninfo
        self._kwargs: dict[str, Any] = {**pool.kwargs, "autocommit": True}
        self.dead_owner_grace_s = dead_owner_grace_s
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
        params = (thread_id, interrupt_id, self._lease, self.dead_owner_grace_s)
        return self._execute(_PG_CLAIM, params) == 1

    def release(self, thread_id: str, interrupt_id: str) -> None:
        self._execute(_RELEASE.format(p="%s"), (thread_id, interrupt_id))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
