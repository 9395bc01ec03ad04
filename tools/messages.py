"""The message store: the source of truth for message memory.

One SQLite table of messages ``(id, user_id, thread_id, role, ts, text, meta)``; ``ts`` is UTC
ISO 8601 with ``Z``. The lexical and semantic indexes are derived from it and can be rebuilt
from it at any time. Inserts are idempotent: a message whose ``(user_id, id)`` is already stored
is skipped, so importing the same file twice changes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skilldeck.errors import ToolError

__all__ = ["Message", "MessageStore", "format_ts", "parse_ts"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    role TEXT NOT NULL,
    ts TEXT NOT NULL,
    ts_epoch REAL NOT NULL,
    text TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    UNIQUE (user_id, id)
);
CREATE INDEX IF NOT EXISTS messages_user_time ON messages (user_id, ts_epoch, seq);
CREATE INDEX IF NOT EXISTS messages_user_thread ON messages (user_id, thread_id, ts_epoch, seq);
CREATE INDEX IF NOT EXISTS messages_user_thread_seq ON messages (user_id, thread_id, seq);
"""
_COLUMNS = "seq, id, user_id, thread_id, role, ts, text, meta"


def parse_ts(value: str, *, name: str = "ts") -> datetime:
    """An ISO 8601 time (``Z`` allowed) as an aware UTC datetime; naive times are UTC."""
    try:
        parsed = datetime.fromisoformat(value.strip())
    except (ValueError, AttributeError):
        raise ToolError(
            f"{name} {value!r} is not an ISO 8601 time (e.g. 2026-01-01T00:00:00Z)"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def format_ts(moment: datetime) -> str:
    """UTC ISO 8601 with ``Z``, to the second (milliseconds when present)."""
    moment = moment.astimezone(UTC)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Message:
    """One stored message. ``seq`` is the store's insertion order (0 before insertion)."""

    id: str
    user_id: str
    thread_id: str
    role: str
    ts: str
    text: str
    meta: Mapping[str, Any] = field(default_factory=dict)
    seq: int = 0

    @property
    def ts_epoch(self) -> float:
        return parse_ts(self.ts).timestamp()

    def hit(self, score: float | None = None) -> dict[str, Any]:
        """The shape every memory tool returns for a message."""
        return {
            "message_id": self.id,
            "ts": self.ts,
            "role": self.role,
            "text": self.text,
            "score": score,
        }


def _row(row: Sequence[Any]) -> Message:
    seq, id_, user, thread, role, ts, text, meta = row
    return Message(id_, user, thread, role, ts, text, json.loads(meta), seq)


class MessageStore:
    """SQLite-backed messages of every user.

    Args:
        path: the database file (created with its folder), or ``":memory:"``.
    """

    def __init__(self, path: str | Path = ".skilldeck/messages.sqlite") -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # WAL with NORMAL survives a process crash; only an OS crash can lose the last commit.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._conn.close()

    def add(self, messages: Iterable[Message]) -> list[Message]:
        """Insert ``messages``; returns those that were new, with their ``seq``."""
        added = []
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for m in messages:
                    ts = format_ts(parse_ts(m.ts))
                    cur = self._conn.execute(
                        "INSERT OR IGNORE INTO messages "
                        "(id, user_id, thread_id, role, ts, ts_epoch, text, meta) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            m.id,
                            m.user_id,
                            m.thread_id,
                            m.role,
                            ts,
                            parse_ts(ts).timestamp(),
                            m.text,
                            json.dumps(dict(m.meta), ensure_ascii=False),
                        ),
                    )
                    if cur.rowcount:
                        added.append(
                            Message(
                                m.id,
                                m.user_id,
                                m.thread_id,
                                m.role,
                                ts,
                                m.text,
                                m.meta,
                                int(cur.lastrowid or 0),
                            )
                        )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return added

    def _query(self, sql: str, params: Sequence[Any]) -> list[Message]:
        with self._lock:
            return [_row(r) for r in self._conn.execute(sql, params).fetchall()]

    def get(self, user_id: str, ids: Sequence[str]) -> list[Message]:
        """The messages of ``ids`` that ``user_id`` owns, in the order of ``ids``."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        found = {
            m.id: m
            for m in self._query(
                f"SELECT {_COLUMNS} FROM messages WHERE user_id = ? AND id IN ({marks})",
                [user_id, *ids],
            )
        }
        return [found[i] for i in ids if i in found]

    def select(
        self,
        user_id: str,
        *,
        since: float | None = None,
        until: float | None = None,
        role: str | None = None,
        after: tuple[float, int] | None = None,
        limit: int = 50,
    ) -> list[Message]:
        """Messages in time order; ``since`` inclusive, ``until`` exclusive (epoch seconds).

        ``after`` is a ``(ts_epoch, seq)`` key: only messages after it are returned (paging).
        """
        sql = [f"SELECT {_COLUMNS} FROM messages WHERE user_id = ?"]
        params: list[Any] = [user_id]
        if since is not None:
            sql.append("AND ts_epoch >= ?")
            params.append(since)
        if until is not None:
            sql.append("AND ts_epoch < ?")
            params.append(until)
        if role not in (None, "any"):
            sql.append("AND role = ?")
            params.append(role)
        if after is not None:
            sql.append("AND (ts_epoch > ? OR (ts_epoch = ? AND seq > ?))")
            params += [after[0], after[0], after[1]]
        sql.append("ORDER BY ts_epoch, seq LIMIT ?")
        params.append(limit)
        return self._query(" ".join(sql), params)

    def neighbors(self, user_id: str, message_id: str, before: int, after: int) -> list[Message]:
        """Up to ``before`` messages before and ``after`` after ``message_id`` in its thread,
        with the anchor itself, in time order."""
        anchor = self.get(user_id, [message_id])
        if not anchor:
            raise ToolError(f"no message {message_id!r} for this user")
        a = anchor[0]
        key = (a.ts_epoch, a.seq)
        head = self._query(
            f"SELECT {_COLUMNS} FROM messages WHERE user_id = ? AND thread_id = ? "
            "AND (ts_epoch < ? OR (ts_epoch = ? AND seq < ?)) "
            "ORDER BY ts_epoch DESC, seq DESC LIMIT ?",
            [user_id, a.thread_id, key[0], key[0], key[1], before],
        )
        tail = self._query(
            f"SELECT {_COLUMNS} FROM messages WHERE user_id = ? AND thread_id = ? "
            "AND (ts_epoch > ? OR (ts_epoch = ? AND seq > ?)) "
            "ORDER BY ts_epoch, seq LIMIT ?",
            [user_id, a.thread_id, key[0], key[0], key[1], after],
        )
        return [*reversed(head), a, *tail]

    def previous_in_thread(self, user_id: str, thread_id: str, seq: int) -> Message | None:
        """The message stored just before ``seq`` in the same thread, if any."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM messages WHERE user_id = ? AND thread_id = ? AND seq < ? "
            "ORDER BY seq DESC LIMIT 1",
            [user_id, thread_id, seq],
        )
        return rows[0] if rows else None

    def iter_user(self, user_id: str, *, batch: int = 5000) -> Iterator[Message]:
        """Every message of ``user_id`` in insertion order (for rebuilding the indexes)."""
        last = 0
        while True:
            rows = self._query(
                f"SELECT {_COLUMNS} FROM messages WHERE user_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                [user_id, last, batch],
            )
            if not rows:
                return
            yield from rows
            last = rows[-1].seq

    def users(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT DISTINCT user_id FROM messages")]

    def count(self, user_id: str | None = None) -> int:
        sql, params = "SELECT COUNT(*) FROM messages", []
        if user_id is not None:
            sql, params = sql + " WHERE user_id = ?", [user_id]
        with self._lock:
            return int(self._conn.execute(sql, params).fetchone()[0])
