"""PostgreSQL connections for the checkpointer, the store, resume claims and the message store.

Pools check each connection before lending it (``check_connection``), so connections broken by
a server restart are dropped and replaced by the pool's reconnect loop, with no manual step;
the first broken one found has the pool check all its idle connections at once.
A first, direct connection is made before any pool: its error (refused, unknown host, bad
password, missing database) names the problem at once instead of a pool timeout later.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

__all__ = [
    "POSTGRES_SCHEMES",
    "connect",
    "connection_errors",
    "is_postgres_url",
    "open_async_pool",
    "open_pool",
    "redact",
    "setup_lock",
]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")

# One advisory lock key for every skilldeck schema setup: two processes starting together
# against a fresh database would otherwise race on CREATE TABLE IF NOT EXISTS.
_SETUP_LOCK_KEY = 0x5C17DEC4

# How long a request waits for a pooled connection, e.g. while the server restarts.
POOL_WAIT_S = 30.0

# _PURGE: one connection that fails its check means a restart or a network drop took every
# connection of the pool. The pool would hand the waiting request the other dead ones one by
# one, sleeping 1, 2, 4... s after each (and LangGraph's savers hold their lock meanwhile, so
# the whole process stalls up to POOL_WAIT_S); ``pool.check()`` drops them all at once instead.


def is_postgres_url(url: str) -> bool:
    return url.startswith(POSTGRES_SCHEMES)


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``, for error messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def connection_errors() -> tuple[type[Exception], ...]:
    """The errors of a PostgreSQL server that cannot be reached right now (restarting, network
    down, every pooled connection busy); none without the postgres extra."""
    try:
        import psycopg
        from psycopg_pool import PoolTimeout
    except ImportError:
        return ()
    return (psycopg.OperationalError, PoolTimeout)


def _psycopg(error: type[Exception]) -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise error(
            "PostgreSQL needs the postgres extra: pip install 'skilldeck[postgres]'"
        ) from None


def _connect_failed(error: type[Exception], url: str, what: str, exc: Exception) -> Exception:
    reason = " ".join(str(exc).split())  # libpq's messages span lines
    return error(
        f"cannot connect to PostgreSQL for {what} at {redact(url)}: {reason}. Check the URL "
        "(postgresql://user:password@host:port/database) and that the server is running."
    )


def connect(
    url: str, *, timeout: float, error: type[Exception], what: str, **kwargs: Any
) -> psycopg.Connection[Any]:
    """One autocommit connection, or ``error`` with a message that says what to fix."""
    _psycopg(error)
    import psycopg

    try:
        return psycopg.connect(
            url, autocommit=True, connect_timeout=max(2, round(timeout)), **kwargs
        )
    except psycopg.Error as exc:
        raise _connect_failed(error, url, what, exc) from None


@contextmanager
def setup_lock(
    conn: psycopg.Connection[Any], *, error: type[Exception], wait_s: float = 120.0
) -> Iterator[None]:
    """Hold the schema-setup advisory lock on ``conn`` while creating tables."""
    from psycopg.rows import tuple_row

    # Poll instead of blocking in pg_advisory_lock: LangGraph's migrations run CREATE INDEX
    # CONCURRENTLY, which waits for every open transaction, a blocked lock call included: the
    # holder would wait for the waiter, which waits for the holder.
    def acquired() -> bool:
        with conn.cursor(row_factory=tuple_row) as cur:
            row = cur.execute("SELECT pg_try_advisory_lock(%s)", (_SETUP_LOCK_KEY,)).fetchone()
        return row == (True,)

    deadline = time.monotonic() + wait_s
    while not acquired():
        if time.monotonic() > deadline:
            raise error(
                f"another process has been creating the skilldeck tables for over {wait_s:g} s; "
                "check it (pg_locks), then retry"
            )
        time.sleep(0.05)
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))


def _pool_args(size: int, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "kwargs": {"autocommit": True, **kwargs},
        "min_size": 1,
        "max_size": size,
        "open": False,
        "timeout": POOL_WAIT_S,
        # A connection that idled through a server restart is dead; replace it rather than
        # fail the request that drew it.
        "max_idle": 300.0,
    }


def open_pool(
    url: str, *, size: int, timeout: float, error: type[Exception], what: str, **kwargs: Any
) -> ConnectionPool[Any]:
    """An opened pool of at most ``size`` autocommit connections with ``kwargs``."""
    connect(url, timeout=timeout, error=error, what=what).close()
    from psycopg_pool import ConnectionPool, PoolTimeout

    pools: list[ConnectionPool[Any]] = []

    def check(conn: Any) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            pools[0].check()  # see _PURGE
            raise

    pool: ConnectionPool[Any] = ConnectionPool(url, check=check, **_pool_args(size, kwargs))
    pools.append(pool)
    try:
        pool.open(wait=True, timeout=max(timeout, 2.0))
    except PoolTimeout as exc:
        pool.close()
        raise _connect_failed(error, url, what, exc) from None
    return pool


async def open_async_pool(
    url: str, *, size: int, timeout: float, error: type[Exception], what: str, **kwargs: Any
) -> AsyncConnectionPool[Any]:
    """The async twin of :func:`open_pool`; call it in the event loop that will use it."""
    _psycopg(error)
    import psycopg
    from psycopg_pool import AsyncConnectionPool, PoolTimeout

    try:
        probe = await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=max(2, round(timeout))
        )
    except psycopg.Error as exc:
        raise _connect_failed(error, url, what, exc) from None
    await probe.close()
    pools: list[AsyncConnectionPool[Any]] = []

    async def check(conn: Any) -> None:
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            await pools[0].check()  # see _PURGE
            raise

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, check=check, **_pool_args(size, kwargs)
    )
    pools.append(pool)
    try:
        await pool.open(wait=True, timeout=max(timeout, 2.0))
    except PoolTimeout as exc:
        await pool.close()
        raise _connect_failed(error, url, what, exc) from None
    return pool
