"""Resume-once claims: of concurrent resumes of one interrupt, exactly one may proceed.

Two requests that answer the same card at once both see it pending in the checkpoint; without
a claim both would resume it and the answers would be applied twice. A claim is one row keyed
by ``(thread_id, interrupt_id)`` inserted with ``ON CONFLICT``: the database lets exactly one
caller insert it, across threads and processes. The loser answers 409.

A claim is never needed again once the resume has checkpointed (the interrupt is then no longer
pending), but a process killed between claiming and checkpointing would leave the card
unanswerable. So a claim older than ``lease_s`` may be taken over; a resume that fails cleanly
(invalid answers, nothing changed) should :meth:`~InterruptClaims.release` its claim at once.
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
    "DEFAULT_LEASE_S",
    "InterruptClaims",
    "MemoryClaims",
    "PostgresClaims",
    "SqliteClaims",
]

#: Seconds after which an unfinished claim may be taken over (its owner presumably died).
DEFAULT_LEASE_S = 300.0

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
    """Claims in a PostgreSQL table, on a connection pool the caller owns.

    The server's clock dates the claims, so app hosts with skewed clocks agree on leases.

    Args:
        pool: a ``psycopg_pool.ConnectionPool`` of autocommit connections.
        lease_s: see :class:`InterruptClaims`.
    """

    def __init__(self, pool: Any, *, lease_s: float | None = DEFAULT_LEASE_S) -> None:
        super().__init__(lease_s)
        self._pool = pool

    @staticmethod
    def setup(conn: Any) -> None:
        """Create the claims table on ``conn`` (the caller holds the setup lock)."""
        conn.execute(_CREATE)

    def claim(self, thread_id: str, interrupt_id: str) -> bool:
        sql = _CLAIM.format(p="%s", now="extract(epoch from clock_timestamp())")
        with self._pool.connection() as conn:
            cur = conn.execute(sql, (thread_id, interrupt_id, self._lease))
            return int(cur.rowcount) == 1

    def release(self, thread_id: str, interrupt_id: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(_RELEASE.format(p="%s"), (thread_id, interrupt_id))
