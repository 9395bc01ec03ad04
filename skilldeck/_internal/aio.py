"""One compiled graph per event loop, for a deck's async API.

Async checkpointers (``AsyncSqliteSaver``, ``AsyncPostgresSaver`` on an async pool) belong to
the event loop they were opened in, so a deck used from several loops (``asyncio.run`` twice,
a test per loop) needs one async persistence per loop. They are opened on first use in a loop
and closed by ``aclose()`` in that loop, or by ``close()`` from synchronous code.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from skilldeck.checkpoints.open import AsyncPersistence

__all__ = ["LoopGraphs"]

Opened = tuple[Any, AsyncPersistence | None]

# Seconds to wait for a loop's connections to close from synchronous code.
_CLOSE_TIMEOUT_S = 10.0


class LoopGraphs:
    """The compiled graph of each event loop, opened by ``open`` on first use in a loop."""

    def __init__(self, open: Callable[[], Awaitable[Opened]]) -> None:
        self._open = open
        self._tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[Opened]] = {}
        self._lock = threading.Lock()

    async def get(self) -> Any:
        """The current loop's graph; concurrent first calls share one opening."""
        loop = asyncio.get_running_loop()
        with self._lock:
            task = self._tasks.get(loop)
            if task is None:
                task = self._tasks[loop] = loop.create_task(self._open_async())
            dead = [old for old in self._tasks if old.is_closed()]
            stale = [self._tasks.pop(old) for old in dead]
        for old in stale:
            await _aclose_opened(old)
        try:
            graph, _ = await asyncio.shield(task)
        except BaseException:
            with self._lock:
                if self._tasks.get(loop) is task and task.done():
                    del self._tasks[loop]  # a failed opening is retried by the next call
            raise
        return graph

    async def _open_async(self) -> Opened:
        return await self._open()

    async def aclose(self) -> None:
        """Close the current loop's persistence (call it before the loop ends)."""
        with self._lock:
            task = self._tasks.pop(asyncio.get_running_loop(), None)
        if task is not None:
            with contextlib.suppress(Exception):
                await task
            await _aclose_opened(task)

    def close(self) -> None:
        """Close every loop's persistence from synchronous code, in a helper thread's loop.

        aiosqlite connections close from any loop; a pool whose loop has ended cannot be
        awaited any more and is left to the garbage collector.
        """
        with self._lock:
            tasks, self._tasks = list(self._tasks.values()), {}
        if not tasks:
            return

        async def close_all() -> None:
            for task in tasks:
                await asyncio.wait_for(_aclose_opened(task), _CLOSE_TIMEOUT_S)

        def runner() -> None:
            with contextlib.suppress(Exception):
                asyncio.run(close_all())

        # A helper thread, because close() may be called where a loop is already running.
        thread = threading.Thread(target=runner, name="skilldeck-aclose", daemon=True)
        thread.start()
        thread.join(_CLOSE_TIMEOUT_S + 1)


async def _aclose_opened(task: asyncio.Task[Opened]) -> None:
    """Close what an opening task opened; an unfinished opening (its loop ended) is skipped."""
    if task.done() and not task.cancelled() and task.exception() is None:
        persistence = task.result()[1]
        if persistence is not None:
            with contextlib.suppress(Exception):
                await persistence.aclose()
