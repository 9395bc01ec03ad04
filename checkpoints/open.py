"""Open the checkpointer and the store a deck persists into, from one URL.

``memory://``
    in-process only (tests, notebooks).
``sqlite:///path/to/file.sqlite`` (the default: ``checkpoints.sqlite`` in ``SKILLDECK_HOME``)
    LangGraph's ``SqliteSaver`` and ``SqliteStore`` in one file, in WAL mode.
``postgresql://user:pass@host/db``
    ``PostgresSaver`` and ``PostgresStore`` on a connection pool of
    ``SKILLDECK_POSTGRES_POOL_SIZE`` connections (``pip install 'skilldeck[postgres]'``), for
    several app processes sharing runs. The pool checks connections before use and reconnects
    after a server restart by itself.

Each :class:`Persistence` also carries the resume claims (:mod:`skilldeck.checkpoints.claims`)
and the thread index (:mod:`skilldeck.checkpoints.threads`) in the same database.
:func:`open_async_persistence` opens the async savers for the same URL.

Checkpoints are (de)serialised in LangGraph's strict msgpack mode: the state is JSON-native, so
loading a checkpoint can never rebuild arbitrary objects.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from skilldeck._internal.home import state_home
from skilldeck._internal.postgres import (
    connect,
    is_postgres_url,
    open_async_pool,
    open_pool,
    redact,
    setup_lock,
)
from skilldeck.checkpoints.claims import (
    DEFAULT_LEASE_S,
    Clock,
    InterruptClaims,
    MemoryClaims,
    PostgresClaims,
    SqliteClaims,
)
from skilldeck.checkpoints.threads import (
    PostgresThreadIndex,
    SqliteThreadIndex,
    ThreadIndex,
    memory_index,
)
from skilldeck.errors import CheckpointError

__all__ = [
    "AsyncPersistence",
    "Persistence",
    "open_async_persistence",
    "open_checkpointer",
    "open_persistence",
    "strict_serde",
]

_MEMORY_URLS = ("memory://", "memory:", ":memory:")


def strict_serde() -> JsonPlusSerializer:
    """A serializer that refuses to rebuild anything but JSON-like values and safe types."""
    return JsonPlusSerializer(allowed_msgpack_modules=None)


@dataclass
class Persistence:
    """A checkpointer, a store, resume claims and the thread index opened together; ``close()``
    releases their connections. The index reads its threads' run leases from the claims.
    ``url`` is the database's (empty for :meth:`of_saver`)."""

    url: str
    saver: BaseCheckpointSaver[Any]
    store: BaseStore
    claims: InterruptClaims = field(default_factory=MemoryClaims)
    threads: ThreadIndex = field(default_factory=memory_index)
    _closers: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.threads.leases = self.claims.live

    @classmethod
    def of_saver(
        cls, saver: BaseCheckpointSaver[Any], store: BaseStore | None = None
    ) -> Persistence:
        """A LangGraph checkpointer an application opened, with ``store`` (default: in
        memory), claims in this process and a thread index rebuilt from the saver's threads.
        Its ``url`` is empty: it has no async twin to open, it is used as it is."""
        index = memory_index(backfill=True)  # the saver may already hold threads
        return cls("", saver, store or InMemoryStore(), MemoryClaims(), index, [index.close])

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


def _sqlite_path(url: str) -> Path:
    path = url.removeprefix("sqlite:///")
    if not path:
        raise CheckpointError(
            "sqlite URL has no path: use sqlite:///relative.sqlite or sqlite:////abs.sqlite"
        )
    return Path(path)


def _connect_sqlite(path: Path, timeout: float, must_exist: bool) -> sqlite3.Connection:
    if must_exist and not path.is_file():
        raise CheckpointError(
            f"checkpoint database {str(path)!r} does not exist; check the path or "
            "SKILLDECK_CHECKPOINT_URL (runs create it on first use)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # isolation_level="" (Python's implicit transactions) is what SqliteSaver expects;
        # SqliteStore's explicit BEGIN/COMMIT work on it too. typeshed omits "".
        conn: sqlite3.Connection = sqlite3.connect(  # type: ignore[call-overload]
            path, timeout=timeout, check_same_thread=False, isolation_level=""
        )
        # WAL lets readers (inspection, other processes) work while a run writes.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error as exc:
        raise CheckpointError(f"cannot open checkpoint database {str(path)!r}: {exc}") from None
    return conn


def open_persistence(
    url: str | None = None,
    *,
    timeout: float = 5.0,
    must_exist: bool = False,
    pool_size: int | None = None,
    claim_lease_s: float | None = DEFAULT_LEASE_S,
    claim_clock: Clock = time.time,
) -> Persistence:
    """Open a checkpointer, a store and resume claims for ``url``; see the module docstring.

    Args:
        url: ``memory://``, ``sqlite:///PATH`` or ``postgresql://...``; default
            ``checkpoints.sqlite`` in the state folder (``SKILLDECK_HOME``).
        timeout: seconds to wait for a SQLite write lock, or to connect to PostgreSQL.
        must_exist: refuse to create a missing database (inspection commands).
        pool_size: PostgreSQL connections at most (default ``SKILLDECK_POSTGRES_POOL_SIZE``).
        claim_lease_s: after how long a resume claim may be taken over (see
            :class:`~skilldeck.checkpoints.claims.InterruptClaims`).
        claim_clock: the time source the claims and run leases go by (tests inject one).

    Raises:
        CheckpointError: the URL is not understood, or the database cannot be opened.
    """
    url = url or _default_url()
    if url in _MEMORY_URLS:
        saver = InMemorySaver(serde=strict_serde())
        index = memory_index()
        return Persistence(
            url,
            saver,
            InMemoryStore(),
            MemoryClaims(claim_lease_s, claim_clock),
            index,
            [index.close],
        )
    if url.startswith("sqlite:///"):
        path = _sqlite_path(url)
        return _open_sqlite(url, path, timeout, must_exist, claim_lease_s, claim_clock)
    if is_postgres_url(url):
        return _open_postgres(url, must_exist, timeout, pool_size, claim_lease_s, claim_clock)
    raise CheckpointError(_unsupported(url))


def _default_url() -> str:
    return state_home().sqlite_url("checkpoints.sqlite")


def _unsupported(url: str) -> str:
    return (
        f"unsupported checkpoint URL {redact(url)!r}: use memory://, sqlite:///PATH or "
        "postgresql://user:password@host:port/database"
    )


def _locked(path: Path, exc: Exception) -> str:
    return (
        f"checkpoint database {str(path)!r} is unavailable ({exc}); another process may "
        "hold a write lock: retry, or raise SKILLDECK_SQLITE_TIMEOUT_S"
    )


def _setup(
    setup: Callable[[], None],
    conn: sqlite3.Connection,
    path: Path,
    timeout: float,
    closers: list[Callable[[], None]],
) -> None:
    """Run the store's schema setup on ``conn``, again while another process is migrating the
    same new database: LangGraph's store reads the schema version, then migrates and records
    each step, so two processes that open a new file at once both migrate it (a UNIQUE
    failure on the version, or a column added twice). Once the other one is done, the setup
    finds the schema current and does nothing."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            setup()
            return
        except sqlite3.Error as exc:
            conn.rollback()  # the failed step's implicit transaction
            raced = isinstance(exc, sqlite3.IntegrityError) or "duplicate column" in str(exc)
            if raced and time.monotonic() < deadline:
                time.sleep(0.01)
                continue
            for close in closers:
                close()
            raise CheckpointError(_locked(path, exc)) from None


def _open_sqlite(
    url: str,
    path: Path,
    timeout: float,
    must_exist: bool,
    claim_lease_s: float | None,
    claim_clock: Clock,
) -> Persistence:
    """The checkpointer, the store and the claims on one connection to ``path``.

    One connection, not one each: a SQLite connection drops its page cache whenever another
    connection commits to the file, so three connections taking turns on every step kept
    re-reading the same pages. Their transactions are serialised by one re-entrant lock (a
    caller iterating the checkpoint history may use the store on the same thread).
    """
    from langgraph.store.sqlite import SqliteStore

    saver = _sqlite_saver(path, timeout, must_exist)
    store = SqliteStore(saver.conn)
    store.lock = saver.lock
    closers = [saver.conn.close]
    _setup(store.setup, saver.conn, path, timeout, closers)
    try:
        claims = SqliteClaims(saver.conn, saver.lock, lease_s=claim_lease_s, clock=claim_clock)
        index = SqliteThreadIndex(saver.conn, saver.lock, str(path))
    except CheckpointError:
        saver.conn.close()
        raise
    return Persistence(url, saver, store, claims, index, closers)


def _sqlite_saver(path: Path, timeout: float, must_exist: bool) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = _connect_sqlite(path, timeout, must_exist)
    saver = SqliteSaver(conn, serde=strict_serde())
    # Re-entrant, and shared with the store and the claims: see _open_sqlite.
    saver.lock = threading.RLock()  # type: ignore[assignment]
    _setup(saver.setup, conn, path, timeout, [conn.close])
    return saver


def _pool_size(pool_size: int | None) -> int:
    if pool_size is None:
        from skilldeck.settings import Settings

        return Settings().postgres_pool_size
    if pool_size < 1:
        raise CheckpointError(f"pool_size must be at least 1, got {pool_size}")
    return pool_size


def _postgres_options() -> dict[str, Any]:
    """Connection options of the checkpoint database; fails clearly without the extra."""
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
        from psycopg.rows import dict_row
    except ImportError:
        raise CheckpointError(
            "PostgreSQL checkpoints need the postgres extra: pip install 'skilldeck[postgres]'"
        ) from None
    return {
        "error": CheckpointError,
        "what": "checkpoints (SKILLDECK_CHECKPOINT_URL)",
        # LangGraph's savers read dict rows; prepared statements break behind PgBouncer.
        "prepare_threshold": 0,
        "row_factory": dict_row,
    }


def _prepare_postgres(url: str, timeout: float, must_exist: bool) -> bool:
    """Check that the server answers and create the tables (one process at a time); whether
    the thread index is new (its threads must be filled in from the checkpoints)."""
    with connect(url, timeout=timeout, **_postgres_options()) as conn:
        if must_exist:
            found = conn.execute("SELECT to_regclass('checkpoints') IS NOT NULL AS ok").fetchone()
            if not (found and found["ok"]):
                raise CheckpointError(
                    f"no skilldeck checkpoints in {redact(url)}; check the database name or "
                    "SKILLDECK_CHECKPOINT_URL (runs create the tables on first use)"
                )
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore

        with setup_lock(conn, error=CheckpointError):
            if not must_exist:
                PostgresSaver(conn).setup()
                PostgresStore(conn).setup()
            PostgresClaims.setup(conn)
            return PostgresThreadIndex.setup(conn)


def _open_postgres(
    url: str,
    must_exist: bool,
    timeout: float,
    pool_size: int | None,
    lease_s: float | None,
    clock: Clock,
) -> Persistence:
    size = _pool_size(pool_size)
    new_index = _prepare_postgres(url, timeout, must_exist)
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    pool = open_pool(url, size=size, timeout=timeout, **_postgres_options())
    saver = PostgresSaver(pool, serde=strict_serde())
    store = PostgresStore(pool)
    claims = PostgresClaims(pool, lease_s=lease_s, clock=clock)
    index = PostgresThreadIndex(pool, redact(url))
    index.needs_backfill = new_index
    return Persistence(url, saver, store, claims, index, [pool.close, claims.close])


@dataclass
class AsyncPersistence:
    """The async twin of :class:`Persistence` for ``ainvoke``/``astream``; ``aclose()`` it.

    It has no claims: use the deck's :class:`Persistence` ``claims`` (``aclaim`` is async).
    """

    url: str
    saver: BaseCheckpointSaver[Any]
    store: BaseStore
    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list, repr=False)

    async def aclose(self) -> None:
        while self._closers:
            await self._closers.pop()()


async def open_async_persistence(
    source: str | Persistence,
    *,
    timeout: float = 5.0,
    must_exist: bool = False,
    pool_size: int | None = None,
) -> AsyncPersistence:
    """Open an async checkpointer and store on the same database as ``source``.

    Call it inside the event loop that will use it (async pools and connections belong to
    their loop). ``memory://`` shares the objects of a given :class:`Persistence`, so the sync
    and async APIs of one deck see the same threads; a bare ``memory://`` URL gets new ones.
    SQLite uses ``AsyncSqliteSaver``/``AsyncSqliteStore``; PostgreSQL ``AsyncPostgresSaver``/
    ``AsyncPostgresStore`` on an ``AsyncConnectionPool`` of ``pool_size`` connections
    (default ``SKILLDECK_POSTGRES_POOL_SIZE``).

    Raises:
        CheckpointError: the URL is not understood, or the database cannot be opened.
    """
    url = source.url if isinstance(source, Persistence) else source
    if url in _MEMORY_URLS:
        if isinstance(source, Persistence):
            return AsyncPersistence(url, source.saver, source.store)
        return AsyncPersistence(url, InMemorySaver(serde=strict_serde()), InMemoryStore())
    if url.startswith("sqlite:///"):
        return await _open_async_sqlite(url, _sqlite_path(url), timeout, must_exist)
    if is_postgres_url(url):
        return await _open_async_postgres(url, timeout, must_exist, _pool_size(pool_size))
    raise CheckpointError(_unsupported(url))


async def _open_async_sqlite(
    url: str, path: Path, timeout: float, must_exist: bool
) -> AsyncPersistence:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite import AsyncSqliteStore

    _connect_sqlite(path, timeout, must_exist).close()  # same checks and WAL as the sync side
    saver_conn = await aiosqlite.connect(path, timeout=timeout)
    # AsyncSqliteStore issues its own BEGIN/COMMIT, like the sync store.
    store_conn = await aiosqlite.connect(path, timeout=timeout, isolation_level=None)
    closers: list[Callable[[], Awaitable[None]]] = [saver_conn.close, store_conn.close]
    saver = AsyncSqliteSaver(saver_conn, serde=strict_serde())
    store = AsyncSqliteStore(store_conn)
    try:
        await store_conn.execute("PRAGMA synchronous=NORMAL")
        await saver.setup()
        await store.setup()
    except sqlite3.OperationalError as exc:
        for close in closers:
            await close()
        raise CheckpointError(_locked(path, exc)) from None
    return AsyncPersistence(url, saver, store, closers)


async def _open_async_postgres(
    url: str, timeout: float, must_exist: bool, size: int
) -> AsyncPersistence:
    # The tables are the sync savers' too: create them with the sync code, off the loop.
    await asyncio.to_thread(_prepare_postgres, url, timeout, must_exist)
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.store.postgres import AsyncPostgresStore

    pool = await open_async_pool(url, size=size, timeout=timeout, **_postgres_options())
    saver = AsyncPostgresSaver(pool, serde=strict_serde())
    return AsyncPersistence(url, saver, AsyncPostgresStore(pool), [pool.close])


def open_checkpointer(url: str | None = None, *, timeout: float = 5.0) -> BaseCheckpointSaver[Any]:
    """Open only a checkpointer for ``url`` (see :func:`open_persistence`).

    The caller owns its connection: close ``saver.conn`` (SQLite) when done.
    """
    url = url or _default_url()
    if url.startswith("sqlite:///"):
        return _sqlite_saver(_sqlite_path(url), timeout, False)  # type: ignore[no-any-return]
    return open_persistence(url, timeout=timeout).saver
