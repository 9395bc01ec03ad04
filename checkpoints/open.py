"""Open the checkpointer and the store a deck persists into, from one URL.

``memory://``
    in-process only (tests, notebooks).
``sqlite:///path/to/file.sqlite`` (the default, ``sqlite:///.skilldeck/checkpoints.sqlite``)
    LangGraph's ``SqliteSaver`` and ``SqliteStore`` in one file, in WAL mode.
``postgresql://user:pass@host/db``
    ``PostgresSaver`` and ``PostgresStore`` on a connection pool (``pip install
    'skilldeck[postgres]'``), for several app processes sharing runs.

Checkpoints are (de)serialised in LangGraph's strict msgpack mode: the state is JSON-native, so
loading a checkpoint can never rebuild arbitrary objects.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from skilldeck.errors import CheckpointError

__all__ = ["Persistence", "open_checkpointer", "open_persistence", "strict_serde"]


def strict_serde() -> JsonPlusSerializer:
    """A serializer that refuses to rebuild anything but JSON-like values and safe types."""
    return JsonPlusSerializer(allowed_msgpack_modules=None)


@dataclass
class Persistence:
    """A checkpointer and a store opened together; ``close()`` releases their connections."""

    url: str
    saver: BaseCheckpointSaver[Any]
    store: BaseStore
    _closers: list[Callable[[], None]] = field(default_factory=list, repr=False)

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


def _connect_sqlite(
    path: Path, timeout: float, must_exist: bool, *, autocommit: bool = False
) -> sqlite3.Connection:
    if must_exist and not path.is_file():
        raise CheckpointError(
            f"checkpoint database {str(path)!r} does not exist; check the path or "
            "SKILLDECK_CHECKPOINT_URL (runs create it on first use)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(
            path,
            timeout=timeout,
            check_same_thread=False,
            # SqliteStore issues its own BEGIN/COMMIT; Python's implicit transactions would
            # otherwise leave a write lock open between its calls.
            isolation_level=None if autocommit else "",  # type: ignore[arg-type]
        )
        # WAL lets readers (inspection, other processes) work while a run writes.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error as exc:
        raise CheckpointError(f"cannot open checkpoint database {str(path)!r}: {exc}") from None
    return conn


def open_persistence(
    url: str = "sqlite:///.skilldeck/checkpoints.sqlite",
    *,
    timeout: float = 5.0,
    must_exist: bool = False,
) -> Persistence:
    """Open a checkpointer and a store for ``url``; see the module docstring.

    Raises:
        CheckpointError: the URL is not understood, or the database cannot be opened.
    """
    if url in ("memory://", "memory:", ":memory:"):
        return Persistence(url, InMemorySaver(serde=strict_serde()), InMemoryStore())
    if url.startswith("sqlite:///"):
        from langgraph.store.sqlite import SqliteStore

        path = _sqlite_path(url)
        saver = _sqlite_saver(path, timeout, must_exist)
        store_conn = _connect_sqlite(path, timeout, must_exist, autocommit=True)
        store = SqliteStore(store_conn)
        _setup(store.setup, path, [saver.conn.close, store_conn.close])
        return Persistence(url, saver, store, [saver.conn.close, store_conn.close])
    if url.startswith(("postgresql://", "postgres://")):
        return _open_postgres(url, must_exist)
    raise CheckpointError(
        f"unsupported checkpoint URL {url!r}: use memory://, sqlite:///PATH or postgresql://..."
    )


def _setup(setup: Callable[[], None], path: Path, closers: list[Callable[[], None]]) -> None:
    try:
        setup()
    except sqlite3.OperationalError as exc:
        for close in closers:
            close()
        raise CheckpointError(
            f"checkpoint database {str(path)!r} is unavailable ({exc}); another process may "
            "hold a write lock: retry, or raise SKILLDECK_SQLITE_TIMEOUT_S"
        ) from None


def _sqlite_saver(path: Path, timeout: float, must_exist: bool) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = _connect_sqlite(path, timeout, must_exist)
    saver = SqliteSaver(conn, serde=strict_serde())
    _setup(saver.setup, path, [conn.close])
    return saver


def _open_postgres(url: str, must_exist: bool) -> Persistence:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError:
        raise CheckpointError(
            "PostgreSQL checkpoints need the postgres extra: pip install 'skilldeck[postgres]'"
        ) from None
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    pool = ConnectionPool(url, kwargs=kwargs, min_size=1, max_size=10, open=False)
    try:
        pool.open(wait=True, timeout=10)
    except Exception as exc:
        pool.close()
        raise CheckpointError(f"cannot connect to PostgreSQL: {exc}") from None
    saver = PostgresSaver(pool, serde=strict_serde())
    store = PostgresStore(pool)
    if not must_exist:
        saver.setup()
        store.setup()
    return Persistence(url, saver, store, [pool.close])


def open_checkpointer(
    url: str = "sqlite:///.skilldeck/checkpoints.sqlite", *, timeout: float = 5.0
) -> BaseCheckpointSaver[Any]:
    """Open only a checkpointer for ``url`` (see :func:`open_persistence`).

    The caller owns its connection: close ``saver.conn`` (SQLite) when done.
    """
    if url.startswith("sqlite:///"):
        return _sqlite_saver(_sqlite_path(url), timeout, False)  # type: ignore[no-any-return]
    return open_persistence(url, timeout=timeout).saver
