"""Event loops: the synchronous API's private loops, and one compiled graph per loop.

The engine's driver is async. The synchronous API runs it on an event loop private to the
calling thread (:func:`run_sync`, :func:`iterate_sync`). That loop's default executor runs what
it is given inline (:class:`InlineExecutor`): blocking work handed to a worker thread
(``asyncio.to_thread``, LangGraph's sync nodes, a sync saver's) runs in the calling thread, since
blocking that loop blocks only its caller, and costs no thread hop. A stream that must deliver
events while a step is still running (the models' text as it is generated) runs on a second
private loop of the thread, with real worker threads (``threads=True``). On a loop the
application owns, the same code hands blocking work to worker threads, as usual.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from skilldeck.checkpoints.open import AsyncPersistence

__all__ = ["InlineExecutor", "LoopGraphs", "iterate_sync", "on_private_loop", "run_sync"]

T = TypeVar("T")
Opened = tuple[Any, AsyncPersistence | None]
_local = threading.local()

# Seconds to wait for a loop's connections to close from synchronous code.
_CLOSE_TIMEOUT_S = 10.0


class InlineExecutor(ThreadPoolExecutor):
    """An executor that runs each call at once, in the thread that submits it (it starts no
    thread): the default executor of the synchronous API's private loops (asyncio takes only a
    ``ThreadPoolExecutor`` there)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to whoever awaits the call, as a thread would
            done.set_exception(exc)
        return done


def _private_loop(threads: bool) -> asyncio.AbstractEventLoop:
    """This thread's private event loop (made on first use): blocking work runs inline on it,
    or in worker threads (``threads``)."""
    name = "threaded" if threads else "inline"
    loop: asyncio.AbstractEventLoop | None = getattr(_local, name, None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        if not threads:
            loop.set_default_executor(InlineExecutor())
        setattr(_local, name, loop)
    return loop


def on_private_loop() -> bool:
    """Whether the running loop is one of the synchronous API's own (of this thread)."""
    running = asyncio.get_running_loop()
    return any(getattr(_local, n, None) is running for n in ("inline", "threaded"))


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_sync(make: Callable[[], Awaitable[T]], *, threads: bool = False) -> T:
    """The result of the coroutine ``make()`` run on this thread's private loop (see the module
    docstring for ``threads``); from a thread whose own loop is running (a notebook's), on a
    helper thread's private loop."""
    if _loop_running():
        with ThreadPoolExecutor(1, thread_name_prefix="skilldeck-sync") as pool:
            return pool.submit(lambda: run_sync(make, threads=threads)).result()

    async def run() -> T:
        return await make()

    return _complete(_private_loop(threads), run())


def _complete(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]) -> T:
    """``work`` run to its end on ``loop``. An interruption (Ctrl-C raises KeyboardInterrupt
    in the loop's thread) cancels it and lets it finish cancelling first, so its ``finally``
    blocks run: a run gives back its thread's claims before the process exits."""
    task = loop.create_task(work)
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        raise


def iterate_sync(make: Callable[[], AsyncIterator[T]], *, threads: bool = False) -> Iterator[T]:
    """The items of the async iterator ``make()``, produced on this thread's private loop (a
    helper thread's, from a thread whose loop is running). Leaving the loop early closes the
    async iterator, as leaving a ``for`` over a generator closes it."""
    if _loop_running():
        yield from _iterate_in_thread(make, threads)
        return
    loop = _private_loop(threads)
    items = make()
    try:
        while True:
            try:
                item = _complete(loop, _next(items))
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            loop.run_until_complete(aclose())


async def _next(items: AsyncIterator[T]) -> T:
    return await items.__anext__()


_DONE = object()


def _iterate_in_thread(make: Callable[[], AsyncIterator[T]], threads: bool) -> Iterator[T]:
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
            for item in iterate_sync(make, threads=threads):
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
