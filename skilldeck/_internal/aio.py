"""Event loops: the synchronous API's private loops, and one compiled graph per loop.

The engine's driver is async. The synchronous API runs it on an event loop private to the
calling thread (:func:`run_sync`, :func:`iterate_sync`), with :data:`INLINE` set: there, work
that blocks (a sync node, a SQLite write, a claim) runs inline, since blocking that loop blocks
only its caller, and costs no thread hop. On a loop the application owns, :data:`INLINE` is
unset and blocking work goes to worker threads.

Async checkpointers (``AsyncSqliteSaver``, ``AsyncPostgresSaver`` on an async pool) belong to
the event loop they were opened in, so a deck used from several loops (``asyncio.run`` twice,
a test per loop) needs one async persistence per loop. They are opened on first use in a loop
and closed by ``aclose()`` in that loop, or by ``close()`` from synchronous code.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, TypeVar

from skilldeck.checkpoints.open import AsyncPersistence

__all__ = ["INLINE", "LoopGraphs", "blocking", "iterate_sync", "run_sync"]

T = TypeVar("T")

#: Set while the synchronous API drives a run on its private loop: blocking work runs inline.
INLINE: ContextVar[bool] = ContextVar("skilldeck_inline", default=False)
_local = threading.local()


def _private_loop() -> asyncio.AbstractEventLoop:
    """This thread's private event loop (made on first use)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
    return loop


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """The result of the coroutine ``make()`` run on this thread's private loop; from a thread
    whose own loop is running (a notebook's), on a helper thread's private loop."""
    if _loop_running():
        with ThreadPoolExecutor(1, thread_name_prefix="skilldeck-sync") as pool:
            return pool.submit(run_sync, make).result()

    async def inline() -> T:
        INLINE.set(True)  # in this task's own context
        return await make()

    return _private_loop().run_until_complete(inline())


def iterate_sync(make: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
    """The items of the async iterator ``make()``, produced on this thread's private loop (a
    helper thread's, from a thread whose loop is running). Leaving the loop early closes the
    async iterator, as leaving a ``for`` over a generator closes it."""
    if _loop_running():
        yield from _iterate_in_thread(make)
        return
    loop = _private_loop()
    token = INLINE.set(True)
    try:
        items = make()
        try:
            while True:
                try:
                    item = loop.run_until_complete(_next(items))
                except StopAsyncIteration:
                    return
                yield item
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                loop.run_until_complete(aclose())
    finally:
        INLINE.reset(token)


async def _next(items: AsyncIterator[T]) -> T:
    return await items.__anext__()


_DONE = object()


def _iterate_in_thread(make: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
    """:func:`iterate_sync` on a helper thread, handing items over a queue."""
    handed: queue.Queue[Any] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def offer(item: Any) -> bool:
        """Hand ``item`` over, unless the consumer has left; whether it was handed."""
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.05)
            except queue.Full:
                continue
            return True
        return False

    def produce() -> None:
        try:
            for item in iterate_sync(make):
                if not offer(item):
                    return  # closes the async iterator (iterate_sync's finally)
            offer(_DONE)
        except BaseException as exc:  # raised again in the consumer
            offer(exc)

    thread = threading.Thread(target=produce, name="skilldeck-sync", daemon=True)
    thread.start()
    try:
        while True:
            item = handed.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


async def blocking(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, work that blocks: inline on the synchronous API's private loop, in a
    worker thread on a loop the application owns."""
    if INLINE.get():
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


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
