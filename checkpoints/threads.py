"""The thread index: one row per thread, and who owns each matter, beside the checkpoints.

LangGraph's checkpoints are the truth about a thread's state; reading a thread from them means
loading LangGraph and decoding its latest checkpoint. The index keeps what listing, ownership
and resuming need without that: the thread's owner and matter, its status and last skill after
each run, when it was created and last run, and what it ran with (the deck's skills, each with
a fingerprint of its files, and the model override). So ``skilldeck threads`` answers from one
query with plain ``sqlite3`` (or psycopg), and thread ids can be abbreviated git-style.

The deck writes a row when a run starts (status ``running``) and when it stops (the status the
checkpoint then gives). A thread created by ``POST /threads`` and never run is ``new``. A
``running`` row whose run lease no live run holds (its process died mid-run) reads as
``resumable``: the index asks the claims (:attr:`ThreadIndex.leases`) as it reads.

Matters belong to users: an operator creates a matter for an owner (or, under the ``claim``
policy, the first user to name it owns it), and may grant it to others (``skilldeck matters``).
The HTTP service answers any other user's request on the matter as if it did not exist. What a
user may create over HTTP (threads, claimed matters) is counted against a quota, in the same
statement that inserts the row. A matter has a record, a JSON object beside the matters table
(its ``title``, its ``status`` and the fields skills write with ``matters__update``);
:meth:`ThreadIndex.update_matter_record` changes it in one transaction, so concurrent writers
never lose each other's fields.
Databases from before the index are filled from their checkpoints when a deck first opens them
(see :meth:`ThreadIndex.needs_backfill`).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from skilldeck.errors import (
    CheckpointError,
    QuotaExceededError,
    SkillDeckError,
    ThreadNotFoundError,
)

__all__ = [
    "BLANK_RECORD",
    "AmbiguousThreadError",
    "PendingCards",
    "PostgresThreadIndex",
    "SqliteThreadIndex",
    "ThreadIndex",
    "ThreadRecord",
    "memory_index",
    "now_iso",
    "open_index",
    "thread_title",
]

_Rows = list[Sequence[Any]]
#: Runs one statement inside :meth:`ThreadIndex._atomic`'s transaction: its rows, if any.
_Run = Callable[[str, tuple[Any, ...]], _Rows]
T = TypeVar("T")
_TABLE = "skilldeck_threads"
_COLUMNS = (
    "thread_id",
    "user_id",
    "matter_id",
    "status",
    "skill",
    "steps",
    "created_at",
    "updated_at",
    "skills",
    "sources",
    "model",
    "title",
    "ttl_s",
    "expires_at",
)
_CREATE = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    thread_id TEXT PRIMARY KEY,
    user_id TEXT,
    matter_id TEXT,
    status TEXT NOT NULL,
    skill TEXT,
    steps INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    skills TEXT NOT NULL DEFAULT '{{}}',
    sources TEXT NOT NULL DEFAULT '[]',
    model TEXT,
    title TEXT,
    ttl_s DOUBLE PRECISION,
    expires_at DOUBLE PRECISION,
    thinned INTEGER NOT NULL DEFAULT 0
)"""
_MATTERS = "skilldeck_matters"
_GRANTS = "skilldeck_matter_grants"
_RECORDS = "skilldeck_matter_records"
_SCHEMA = (
    f"CREATE INDEX IF NOT EXISTS {_TABLE}_user ON {_TABLE} (user_id, updated_at)",
    f"CREATE INDEX IF NOT EXISTS {_TABLE}_updated ON {_TABLE} (updated_at)",
    # The threads waiting for a card, by how long (the service's metrics read them per scrape).
    f"CREATE INDEX IF NOT EXISTS {_TABLE}_status ON {_TABLE} (status, updated_at)",
    # The prune's reads: the threads expired by now, and the finished ones not yet thinned.
    f"CREATE INDEX IF NOT EXISTS {_TABLE}_expires ON {_TABLE} (expires_at)",
    f"CREATE INDEX IF NOT EXISTS {_TABLE}_thin ON {_TABLE} (status, thinned)",
    f"""CREATE TABLE IF NOT EXISTS {_MATTERS} (
    matter_id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at TEXT NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {_GRANTS} (
    matter_id TEXT NOT NULL, user_id TEXT NOT NULL, PRIMARY KEY (matter_id, user_id))""",
    # A table of its own, created on every open: databases from before records get it too.
    f"""CREATE TABLE IF NOT EXISTS {_RECORDS} (
    matter_id TEXT PRIMARY KEY, record TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS {_MATTERS}_owner ON {_MATTERS} (owner)",
)
_NEW_MATTER = f"""INSERT INTO {_MATTERS} (matter_id, owner, created_at) VALUES ({{p}}, {{p}}, {{p}})
ON CONFLICT (matter_id) DO NOTHING"""
# A matter claimed by a user: only while they own fewer than {p} (the quota), in one statement.
_CLAIM_MATTER = f"""INSERT INTO {_MATTERS} (matter_id, owner, created_at)
SELECT {{p}}, {{p}}, {{p}} WHERE (SELECT count(*) FROM {_MATTERS} WHERE owner = {{p}}) < {{p}}
ON CONFLICT (matter_id) DO NOTHING"""
_MAY_USE = f"""SELECT 1 FROM {_MATTERS} m WHERE m.matter_id = {{p}} AND (m.owner = {{p}} OR EXISTS (
    SELECT 1 FROM {_GRANTS} g WHERE g.matter_id = m.matter_id AND g.user_id = {{p}}))"""
# {p} is the driver's placeholder: ? for sqlite3, %s for psycopg.
_INSERT = f"""
INSERT INTO {_TABLE} ({", ".join(_COLUMNS)}) VALUES ({", ".join(["{p}"] * len(_COLUMNS))})
ON CONFLICT (thread_id) DO NOTHING"""
# A new thread of a user: only while they own fewer than {p} (the quota), in one statement.
_INSERT_WITHIN = f"""
INSERT INTO {_TABLE} ({", ".join(_COLUMNS)}) SELECT {", ".join(["{p}"] * len(_COLUMNS))}
WHERE (SELECT count(*) FROM {_TABLE} WHERE user_id = {{p}}) < {{p}}
ON CONFLICT (thread_id) DO NOTHING"""
# A thread that was stored for a run which was then refused: gone, if it never ran.
_DISCARD = f"DELETE FROM {_TABLE} WHERE thread_id = {{p}} AND status = 'new' AND steps = 0"
# A run's start: the owner is the first user a thread had and never changes. The thread's
# time-to-live is the run's, or (the last {p}: 1) the thread keeps its own; it expires that long
# after now, its last activity. A new run makes new intermediate checkpoints: not thinned.
_STARTED = f"""
INSERT INTO {_TABLE} AS t ({", ".join(_COLUMNS)}) VALUES ({", ".join(["{p}"] * len(_COLUMNS))})
ON CONFLICT (thread_id) DO UPDATE SET
    user_id = COALESCE(t.user_id, excluded.user_id), matter_id = excluded.matter_id,
    status = excluded.status, updated_at = excluded.updated_at, skills = excluded.skills,
    sources = excluded.sources, model = excluded.model,
    title = COALESCE(t.title, excluded.title),
    ttl_s = CASE WHEN {{p}} = 1 THEN t.ttl_s ELSE excluded.ttl_s END,
    expires_at = CASE WHEN {{p}} = 1 THEN {{p}} + t.ttl_s ELSE excluded.expires_at END,
    thinned = 0"""
_STOPPED = f"""
UPDATE {_TABLE} SET status = {{p}}, skill = COALESCE({{p}}, skill), steps = {{p}},
    updated_at = {{p}}, title = COALESCE(title, {{p}}), expires_at = {{p}} + ttl_s
WHERE thread_id = {{p}}"""
# Columns added after the table first shipped, with their definitions, for older databases.
_ADDED = {
    "sources": "TEXT NOT NULL DEFAULT '[]'",
    "title": "TEXT",
    "ttl_s": "DOUBLE PRECISION",
    "expires_at": "DOUBLE PRECISION",
    "thinned": "INTEGER NOT NULL DEFAULT 0",
}
# The prune's statements (see skilldeck.checkpoints.retention). A thread whose card waits is
# never expired; the rest is decided under the thread's run lease. Threads are listed in pages
# by id, so those a prune leaves (busy ones) never hold the next ones back.
_EXPIRED = f"""SELECT thread_id FROM {_TABLE}
WHERE expires_at <= {{p}} AND status <> 'interrupted' AND thread_id > {{p}}
ORDER BY thread_id LIMIT {{p}}"""
_COUNT_EXPIRED = f"""SELECT count(*) FROM {_TABLE}
WHERE expires_at <= {{p}} AND status <> 'interrupted'"""
_FORGET = f"""DELETE FROM {_TABLE}
WHERE thread_id = {{p}} AND expires_at <= {{p}} AND status <> 'interrupted'"""
_UNTHINNED = f"""SELECT thread_id FROM {_TABLE}
WHERE status = 'finished' AND thinned = 0 AND thread_id > {{p}} ORDER BY thread_id LIMIT {{p}}"""
_COUNT_UNTHINNED = f"SELECT count(*) FROM {_TABLE} WHERE status = 'finished' AND thinned = 0"
_THINNED = f"UPDATE {_TABLE} SET thinned = 1 WHERE thread_id = {{p}} AND status = 'finished'"
_GET = f"SELECT {', '.join(_COLUMNS)} FROM {_TABLE} WHERE thread_id = {{p}}"
_PREFIX = f"SELECT thread_id FROM {_TABLE} WHERE thread_id LIKE {{p}} ESCAPE '\\' LIMIT 3"
#: The record of a matter nobody has written to yet.
BLANK_RECORD: Mapping[str, Any] = MappingProxyType({"title": None, "status": "open"})
# The record of a matter: no row if nobody owns it, NULL if nobody wrote to it yet.
_RECORD = f"""SELECT r.record FROM {_MATTERS} m LEFT JOIN {_RECORDS} r ON r.matter_id = m.matter_id
WHERE m.matter_id = {{p}}"""
_NEW_RECORD = f"""INSERT INTO {_RECORDS} (matter_id, record, updated_at)
VALUES ({{p}}, {{p}}, {{p}}) ON CONFLICT (matter_id) DO NOTHING"""
_SET_RECORD = f"UPDATE {_RECORDS} SET record = {{p}}, updated_at = {{p}} WHERE matter_id = {{p}}"


#: How long a thread's title may be, in characters (it is cut at a word, with an ellipsis).
TITLE_CHARS = 60


def thread_title(*sources: Any) -> str | None:
    """The first words of the first of ``sources`` that has text (an input: its strings, at
    any depth, ``request`` first; a response), at most :data:`TITLE_CHARS` characters."""
    for source in sources:
        words = " ".join(_strings(source)).split()
        if not words:
            continue
        text = " ".join(words)
        if len(text) > TITLE_CHARS:
            head = text[: TITLE_CHARS - 1]
            text = (head.rsplit(" ", 1)[0] if " " in head else head) + "…"
        return text
    return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        if isinstance(value.get("request"), str):
            yield value["request"]
        for key, item in value.items():
            if key != "request":
                yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def now_iso() -> str:
    """Now, as the index stores times: UTC, milliseconds, ``Z``."""
    return _iso(datetime.now(UTC))


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class PendingCards:
    """The threads whose card waits for answers (:meth:`ThreadIndex.pending_cards`).

    Attributes:
        count: how many.
        oldest_s: how long the oldest has waited, in seconds (``None``: none waits).
        within: for each age asked about, how many have waited at most that long.
    """

    count: int
    oldest_s: float | None
    within: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    """One thread as the index knows it.

    ``status`` is ``new`` (created, never run), ``running`` (a run is going on),
    ``resumable`` (a run was cut off and nothing runs it), ``interrupted``, ``finished``,
    ``failed`` or ``no_skill``. ``skills`` maps each skill
    of the deck the thread last ran on to a fingerprint of its files, and ``sources`` lists
    their bundle folders; ``model`` is the model override of that run (``None``: the skills'
    own models). ``title`` is what a list shows of the thread: the first words of the input of
    its first run, or of its response when the input has no text (:func:`thread_title`).
    ``ttl_s`` is its time-to-live in seconds (``None``: kept until deleted), and ``expires_at``
    when it expires (seconds since the epoch: ``ttl_s`` after its last activity), from when
    the prune may delete it (:mod:`skilldeck.checkpoints.retention`).
    """

    thread_id: str
    user_id: str | None
    matter_id: str | None
    status: str
    skill: str | None
    steps: int
    created_at: str
    updated_at: str
    skills: Mapping[str, str] = field(default_factory=dict)
    sources: Sequence[str] = ()
    model: str | None = None
    title: str | None = None
    ttl_s: float | None = None
    expires_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "skills": dict(self.skills), "sources": list(self.sources)}

    def _row(self) -> tuple[Any, ...]:
        values = self.to_dict()
        values["skills"] = json.dumps(values["skills"], sort_keys=True)
        values["sources"] = json.dumps(values["sources"])
        return tuple(values[c] for c in _COLUMNS)

    @classmethod
    def _from_row(cls, row: Sequence[Any]) -> ThreadRecord:
        values = dict(zip(_COLUMNS, row, strict=True))
        values["skills"] = json.loads(values["skills"] or "{}")
        values["sources"] = tuple(json.loads(values["sources"] or "[]"))
        values["steps"] = int(values["steps"] or 0)
        return cls(**values)


class AmbiguousThreadError(SkillDeckError):
    """A thread id prefix matches more than one thread."""

    def __init__(self, prefix: str, matches: Sequence[str]) -> None:
        self.prefix, self.matches = prefix, list(matches)
        shown = ", ".join(matches[:2]) + (", …" if len(matches) > 2 else "")
        super().__init__(
            f"thread id prefix {prefix!r} is ambiguous ({shown}); give more characters"
        )


class ThreadIndex(ABC):
    """The index of one checkpoint database; see the module docstring.

    Args:
        where: the database, as errors name it (a path, or a URL without its password).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        #: Whether the table was created by this object on a database that may already hold
        #: threads: the deck then fills it from the checkpoints (once).
        self.needs_backfill = False
        #: Which of some threads a live run holds (their run lease); ``None``: unknown, and
        #: ``running`` rows read as they are stored.
        self.leases: Callable[[Collection[str]], set[str]] | None = None

    # -- writes ---------------------------------------------------------------------------
    def create(
        self,
        thread_id: str,
        user_id: str | None,
        *,
        limit: int | None = None,
        ttl_s: float | None = None,
    ) -> ThreadRecord:
        """A new thread that has not run yet (``status`` ``new``); an existing one is kept.

        Args:
            limit: the most threads ``user_id`` may own: a new one past it is not stored.
            ttl_s: it expires that long from now unless it runs (``None``: never).

        Raises:
            QuotaExceededError: the thread is new and ``user_id`` already owns ``limit``.
        """
        at = time.time()
        now = _iso(datetime.fromtimestamp(at, UTC))
        expires = None if ttl_s is None else at + ttl_s
        record = ThreadRecord(
            thread_id, user_id, None, "new", None, 0, now, now, ttl_s=ttl_s, expires_at=expires
        )
        if limit is None:
            self._execute(_INSERT, record._row())
        else:
            self._execute(_INSERT_WITHIN, (*record._row(), user_id, limit))
        stored = self.get(thread_id)
        if stored is None:
            if limit is None:  # a backend that keeps nothing (read-only) says so itself
                return record
            raise QuotaExceededError(
                "threads", str(user_id), limit, "SKILLDECK_MAX_THREADS_PER_USER"
            )
        return stored

    def discard(self, thread_id: str) -> None:
        """Forget a thread that never ran (``new``): one stored for a run that was refused."""
        self._execute(_DISCARD, (thread_id,))

    def started(
        self,
        thread_id: str,
        *,
        user_id: str | None,
        matter_id: str | None,
        skills: Mapping[str, str],
        sources: Sequence[str],
        model: str | None,
        title: str | None = None,
        ttl_s: float | None = None,
        keep_ttl: bool = False,
    ) -> None:
        """A run of the thread starts (new threads get their owner here, and a thread without
        a title gets ``title``). The thread expires ``ttl_s`` from now (``None``: never); with
        ``keep_ttl`` (a resume) a known thread keeps its own time-to-live, counted from now,
        and only a new one gets ``ttl_s``."""
        at = time.time()
        now = _iso(datetime.fromtimestamp(at, UTC))
        expires = None if ttl_s is None else at + ttl_s
        record = ThreadRecord(
            thread_id, user_id, matter_id, "running", None, 0, now, now, dict(skills),
            tuple(sources), model, title, ttl_s, expires,
        )  # fmt: skip
        keep = int(keep_ttl)
        self._execute(_STARTED, (*record._row(), keep, keep, at))

    def stopped(
        self,
        thread_id: str,
        *,
        status: str,
        skill: str | None,
        steps: int,
        title: str | None = None,
    ) -> None:
        """A run of the thread stopped with ``status`` (what its checkpoint says now); a thread
        without a title gets ``title``. Its time-to-live counts from now."""
        at = time.time()
        now = _iso(datetime.fromtimestamp(at, UTC))
        self._execute(_STOPPED, (status, skill, steps, now, title, at, thread_id))

    def add(self, record: ThreadRecord) -> None:
        """Insert ``record`` unless the thread is known (filling the index from checkpoints)."""
        self._execute(_INSERT, record._row())

    # -- retention ------------------------------------------------------------------------
    def expired(self, now: float, limit: int, *, after: str = "") -> builtins.list[str]:
        """Up to ``limit`` threads expired by ``now`` (seconds since the epoch) whose ids sort
        after ``after``, by id; never one whose card waits."""
        return [str(r[0]) for r in self._query(_EXPIRED, (now, after, limit))]

    def count_expired(self, now: float) -> int:
        """How many threads :meth:`expired` would list without a limit."""
        return int(self._query(_COUNT_EXPIRED, (now,))[0][0])

    def forget(self, thread_id: str, now: float) -> bool:
        """Delete the thread's row if it is still expired by ``now`` and no card of it waits;
        whether it was."""
        sql = _FORGET + " RETURNING thread_id"
        return bool(self._atomic(lambda run: run(sql, (thread_id, now))))

    def unthinned(self, limit: int, *, after: str = "") -> builtins.list[str]:
        """Up to ``limit`` finished threads whose checkpoints were not thinned since their last
        run and whose ids sort after ``after``, by id."""
        return [str(r[0]) for r in self._query(_UNTHINNED, (after, limit))]

    def count_unthinned(self) -> int:
        """How many threads :meth:`unthinned` would list without a limit."""
        return int(self._query(_COUNT_UNTHINNED, ())[0][0])

    def mark_thinned(self, thread_id: str) -> None:
        """Record that the finished thread's checkpoints were thinned (its next run clears it)."""
        self._execute(_THINNED, (thread_id,))

    # -- reads ----------------------------------------------------------------------------
    def get(self, thread_id: str) -> ThreadRecord | None:
        """The thread's row, or ``None``."""
        rows = self._query(_GET, (thread_id,))
        return self._leased([ThreadRecord._from_row(rows[0])])[0] if rows else None

    def list(
        self, *, user_id: str | None = None, status: str | None = None, limit: int | None = None
    ) -> builtins.list[ThreadRecord]:
        """Threads, most recently run first; only ``user_id``'s or ``status``'s if given."""
        # A thread cut off mid-run is stored "running" (the lease says whether a run still holds
        # it) and one stopped on purpose "resumable": read both, then sort them out.
        leased = self.leases is not None and status in ("running", "resumable")
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if user_id is not None:
            where.append("user_id = {p}")
            params.append(user_id)
        if leased:
            where.append("status IN ({p}, {p})")
            params += ["running", "resumable"]
        elif status is not None:
            where.append("status = {p}")
            params.append(status)
        sql = f"SELECT {', '.join(_COLUMNS)} FROM {_TABLE}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, thread_id"
        if limit is not None and not leased:
            sql += f" LIMIT {int(limit)}"
        rows = self._leased([ThreadRecord._from_row(r) for r in self._query(sql, tuple(params))])
        if leased:
            rows = [r for r in rows if r.status == status][:limit]
        return rows

    def pending_cards(self, ages_s: Sequence[float] = ()) -> PendingCards:
        """How many threads wait for a card's answers and for how long (since the run that
        asked the card stopped), in one query whatever their number; every process sharing
        the database reads the same figures."""
        now = datetime.now(UTC)
        cuts = tuple(_iso(now - timedelta(seconds=age)) for age in ages_s)
        within = "".join(", SUM(CASE WHEN updated_at >= {p} THEN 1 ELSE 0 END)" for _ in cuts)
        sql = f"SELECT COUNT(*), MIN(updated_at){within} FROM {_TABLE} WHERE status = 'interrupted'"
        count, oldest, *counts = self._query(sql, cuts)[0]
        since = None if oldest is None else datetime.fromisoformat(oldest.replace("Z", "+00:00"))
        return PendingCards(
            count=int(count),
            oldest_s=None if since is None else max(0.0, (now - since).total_seconds()),
            within=tuple(int(n or 0) for n in counts),
        )

    def _leased(self, records: builtins.list[ThreadRecord]) -> builtins.list[ThreadRecord]:
        """``records`` with each ``running`` one that no live run holds as ``resumable``."""
        running = [r.thread_id for r in records if r.status == "running"]
        if self.leases is None or not running:
            return records
        live = self.leases(running)
        return [
            replace(r, status="resumable")
            if r.status == "running" and r.thread_id not in live
            else r
            for r in records
        ]

    # -- matters --------------------------------------------------------------------------
    def may_use_matter(
        self, user_id: str, matter_id: str, *, claim: bool = True, limit: int | None = None
    ) -> bool:
        """Whether ``user_id`` owns ``matter_id`` or was granted it. With ``claim``, a matter
        nobody owns yet becomes ``user_id``'s (atomically: of two first users, one wins),
        unless they own ``limit`` matters already.

        Raises:
            QuotaExceededError: ``claim`` would make ``user_id`` the owner of more than
                ``limit`` matters; nothing was stored.
        """
        if claim and limit is None:
            self._execute(_NEW_MATTER, (matter_id, user_id, now_iso()))
        elif claim and limit is not None:
            self._execute(_CLAIM_MATTER, (matter_id, user_id, now_iso(), user_id, limit))
            if self.matter(matter_id) is None:  # not even by another user: the quota held
                raise QuotaExceededError(
                    "matters", user_id, limit, "SKILLDECK_MAX_MATTERS_PER_USER"
                )
        return bool(self._query(_MAY_USE, (matter_id, user_id, user_id)))

    def add_matter(self, matter_id: str, owner: str) -> bool:
        """Create ``matter_id`` owned by ``owner``; ``False`` if it already exists."""
        if self.matter(matter_id) is not None:
            return False
        self._execute(_NEW_MATTER, (matter_id, owner, now_iso()))
        return self.matter(matter_id) == (owner, ())

    def grant(self, matter_id: str, user_id: str) -> None:
        """Let ``user_id`` use ``matter_id`` too.

        Raises:
            SkillDeckError: the matter does not exist.
        """
        if self.matter(matter_id) is None:
            raise SkillDeckError(f"no matter {matter_id!r}: create it first (matters add)")
        self._execute(
            f"INSERT INTO {_GRANTS} (matter_id, user_id) VALUES ({{p}}, {{p}}) "
            "ON CONFLICT DO NOTHING",
            (matter_id, user_id),
        )

    def revoke(self, matter_id: str, user_id: str) -> None:
        """Take ``user_id``'s grant of ``matter_id`` back (an owner stays the owner)."""
        self._execute(
            f"DELETE FROM {_GRANTS} WHERE matter_id = {{p}} AND user_id = {{p}}",
            (matter_id, user_id),
        )

    def matter(self, matter_id: str) -> tuple[str, tuple[str, ...]] | None:
        """``(owner, granted users)`` of ``matter_id``, or ``None`` if nobody owns it."""
        rows = self._query(f"SELECT owner FROM {_MATTERS} WHERE matter_id = {{p}}", (matter_id,))
        if not rows:
            return None
        grants = self._query(
            f"SELECT user_id FROM {_GRANTS} WHERE matter_id = {{p}} ORDER BY user_id",
            (matter_id,),
        )
        return str(rows[0][0]), tuple(str(g[0]) for g in grants)

    def matters(self) -> builtins.list[tuple[str, str, tuple[str, ...]]]:
        """Every matter: ``(matter_id, owner, granted users)``, by id."""
        owners = self._query(f"SELECT matter_id, owner FROM {_MATTERS} ORDER BY matter_id", ())
        grants: dict[str, builtins.list[str]] = {}
        for matter_id, user in self._query(
            f"SELECT matter_id, user_id FROM {_GRANTS} ORDER BY user_id", ()
        ):
            grants.setdefault(str(matter_id), []).append(str(user))
        return [(str(m), str(o), tuple(grants.get(str(m), []))) for m, o in owners]

    def matter_record(self, matter_id: str) -> dict[str, Any] | None:
        """The record of ``matter_id`` (:data:`BLANK_RECORD` until written), or ``None`` if
        nobody owns the matter."""
        rows = self._query(_RECORD, (matter_id,))
        if not rows:
            return None
        return json.loads(rows[0][0]) if rows[0][0] is not None else dict(BLANK_RECORD)

    def update_matter_record(
        self, matter_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Replace the record of ``matter_id`` with ``change(record)``, in one transaction that
        holds the row from the read to the write; the new record. An exception from ``change``
        writes nothing.

        Raises:
            SkillDeckError: nobody owns the matter (create it first).
        """

        def work(run: _Run) -> dict[str, Any]:
            if not run(f"SELECT 1 FROM {_MATTERS} WHERE matter_id = {{p}}", (matter_id,)):
                raise SkillDeckError(f"no matter {matter_id!r}: create it first (matters add)")
            blank = json.dumps(dict(BLANK_RECORD))
            run(_NEW_RECORD, (matter_id, blank, now_iso()))
            select = f"SELECT record FROM {_RECORDS} WHERE matter_id = {{p}}"
            found = run(self._locking(select), (matter_id,))
            record = change(json.loads(found[0][0]))
            text = json.dumps(record, ensure_ascii=False)
            run(_SET_RECORD, (text, now_iso(), matter_id))
            return record

        return self._atomic(work)

    def resolve(self, prefix: str) -> str:
        """The full id of the one thread whose id is or starts with ``prefix`` (git-style).

        Raises:
            ThreadNotFoundError: no thread matches (the error names this database).
            AmbiguousThreadError: several do.
        """
        if self.get(prefix) is not None:
            return prefix
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        matches = [r[0] for r in self._query(_PREFIX, (escaped + "%",))] if prefix else []
        if len(matches) == 1:
            return str(matches[0])
        if matches:
            raise AmbiguousThreadError(prefix, matches)
        raise ThreadNotFoundError(prefix, where=self.where)

    # -- backends -------------------------------------------------------------------------
    @abstractmethod
    def _execute(self, sql: str, params: tuple[Any, ...]) -> None:
        """Run one write (``{p}`` placeholders) in its own transaction."""

    @abstractmethod
    def _query(self, sql: str, params: tuple[Any, ...]) -> _Rows:
        """Rows of one read (``{p}`` placeholders)."""

    @abstractmethod
    def _atomic(self, work: Callable[[_Run], T]) -> T:
        """``work(run)`` in one transaction that excludes other writers of the rows it locks
        (see :meth:`_locking`); committed when it returns, rolled back when it raises."""

    def _locking(self, select: str) -> str:
        """``select`` as it locks the rows it reads until the transaction ends (PostgreSQL's
        ``FOR UPDATE``; a SQLite transaction holds the whole file from its start)."""
        return select

    def close(self) -> None:  # noqa: B027 - optional hook: most backends own nothing
        """Release connections this object owns (none by default)."""


class SqliteThreadIndex(ThreadIndex):
    """The index in a table of the SQLite checkpoint file.

    Args:
        conn: the checkpointer's connection (implicit transactions); each write commits on it.
        lock: the lock that serialises every transaction on ``conn``.
        where: the file, as errors name it.

    Raises:
        CheckpointError: the table cannot be created (another process holds a lock).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        lock: contextlib.AbstractContextManager[Any],
        where: str,
    ) -> None:
        super().__init__(where)
        self._conn, self._lock = conn, lock
        try:
            with self._lock, self._conn:
                exists = self._conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_TABLE,)
                ).fetchone()
                self._conn.execute(_CREATE)
                have = {row[1] for row in self._conn.execute(f"PRAGMA table_info({_TABLE})")}
                for column, definition in _ADDED.items():
                    if column not in have:
                        self._conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {column} {definition}")
                for sql in _SCHEMA:
                    self._conn.execute(sql)
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot create the thread index in {where}: {exc}") from None
        self.needs_backfill = exists is None

    def _execute(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._lock, self._conn:  # commits, or rolls back on an error
            self._conn.execute(sql.format(p="?"), params)

    def _query(self, sql: str, params: tuple[Any, ...]) -> _Rows:
        with self._lock:
            rows: _Rows = self._conn.execute(sql.format(p="?"), params).fetchall()
            return rows

    def _atomic(self, work: Callable[[_Run], T]) -> T:
        def run(sql: str, params: tuple[Any, ...]) -> _Rows:
            rows: _Rows = self._conn.execute(sql.format(p="?"), params).fetchall()
            return rows

        with self._lock:
            # IMMEDIATE takes the write lock now, not at the first write: another process's
            # read-then-write cannot slip between this one's read and write.
            self._conn.execute("BEGIN IMMEDIATE")
            with self._conn:  # commits, or rolls back on an error
                return work(run)


class PostgresThreadIndex(ThreadIndex):
    """The index in a table of the PostgreSQL checkpoint database, on the deck's pool.

    Args:
        pool: a ``psycopg_pool.ConnectionPool`` (dict rows are fine: rows are read by column).
        where: the database, as errors name it (no password).
    """

    def __init__(self, pool: Any, where: str) -> None:
        super().__init__(where)
        self._pool = pool

    @staticmethod
    def setup(conn: Any) -> bool:
        """Create the table on ``conn`` (the caller holds the setup lock); whether it is new."""
        found = conn.execute(f"SELECT to_regclass('{_TABLE}') IS NOT NULL AS ok").fetchone()
        conn.execute(_CREATE)
        for column, definition in _ADDED.items():
            conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN IF NOT EXISTS {column} {definition}")
        for sql in _SCHEMA:
            conn.execute(sql)
        exists = found["ok"] if isinstance(found, Mapping) else found[0]
        return not exists

    def _execute(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.format(p="%s"), params)

    def _query(self, sql: str, params: tuple[Any, ...]) -> _Rows:
        with self._pool.connection() as conn:
            return _tuples(conn.execute(sql.format(p="%s"), params).fetchall())

    def _atomic(self, work: Callable[[_Run], T]) -> T:
        with self._pool.connection() as conn, conn.transaction():

            def run(sql: str, params: tuple[Any, ...]) -> _Rows:
                cursor = conn.execute(sql.format(p="%s"), params)
                return _tuples(cursor.fetchall()) if cursor.description else []

            return work(run)

    def _locking(self, select: str) -> str:
        return f"{select} FOR UPDATE"


def _tuples(rows: Sequence[Any]) -> _Rows:
    """psycopg rows (dicts, with the deck's row factory) as tuples."""
    return [tuple(r.values()) if isinstance(r, Mapping) else tuple(r) for r in rows]


def memory_index(*, backfill: bool = False) -> ThreadIndex:
    """The index of ``memory://`` checkpoints, or of a saver a deck was given: an in-memory
    SQLite database. ``backfill``: the saver may already hold threads."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    index = SqliteThreadIndex(conn, threading.RLock(), "memory://")
    index.needs_backfill = backfill
    index.close = conn.close  # type: ignore[method-assign]
    return index


@contextlib.contextmanager
def open_index(url: str) -> Iterator[ThreadIndex | None]:
    """The index of the checkpoint database at ``url``, for reading, without LangGraph (the
    CLI's fast commands); ``None`` when it has none yet (a deck opening the database fills it
    in) or keeps none (``memory://``).

    Raises:
        CheckpointError: the database does not exist or cannot be read.
    """
    from skilldeck._internal.postgres import is_postgres_url

    if url.startswith("sqlite:///"):
        with _read_sqlite(Path(url.removeprefix("sqlite:///"))) as index:
            yield index
    elif is_postgres_url(url):
        with _read_postgres(url) as index:
            yield index
    else:
        yield None


@contextlib.contextmanager
def _read_sqlite(path: Path) -> Iterator[ThreadIndex | None]:
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint database {str(path)!r} does not exist; check the path, "
            "SKILLDECK_HOME or SKILLDECK_CHECKPOINT_URL (runs create it on first use)"
        )
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})")}
    except sqlite3.Error as exc:
        raise CheckpointError(f"cannot read checkpoint database {str(path)!r}: {exc}") from None
    try:
        # No table yet, or one from before a column was added: a deck updates it.
        yield _ReadOnly(conn, str(path), "?") if set(_COLUMNS) <= have else None
    finally:
        conn.close()


@contextlib.contextmanager
def _read_postgres(url: str) -> Iterator[ThreadIndex | None]:
    from skilldeck._internal.postgres import connect, redact

    with connect(url, timeout=5.0, error=CheckpointError, what="the thread index") as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", (_TABLE,)
        ).fetchall()
        # No table yet, or one from before a column was added: a deck updates it.
        have = {row[0] for row in rows}
        yield _ReadOnly(conn, redact(url), "%s") if set(_COLUMNS) <= have else None


class _ReadOnly(ThreadIndex):
    """An index read on one DB-API connection (``open_index``)."""

    def __init__(self, conn: Any, where: str, placeholder: str) -> None:
        from skilldeck.checkpoints.claims import live_leases

        super().__init__(where)
        self._conn, self._p = conn, placeholder
        self.leases = functools.partial(live_leases, conn)

    def _execute(self, sql: str, params: tuple[Any, ...]) -> None:
        raise CheckpointError(f"{self.where} is open for reading only")

    def _atomic(self, work: Callable[[_Run], T]) -> T:
        raise CheckpointError(f"{self.where} is open for reading only")

    def _query(self, sql: str, params: tuple[Any, ...]) -> _Rows:
        try:
            rows: _Rows = self._conn.execute(sql.format(p=self._p), params).fetchall()
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot read the thread index in {self.where}: {exc}") from None
        return rows
