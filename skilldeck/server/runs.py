"""The runs of one service process, each streamed to its client from the thread's run log.

A run is driven by a worker thread, not by the response: a client that disconnects stops
receiving events, not the run, which goes on to its card or its end and checkpoints every step.
Runs wait for a worker in a queue per user, served in turn, within per-user limits
(:mod:`skilldeck.server.fairness`); their events go to the thread's run log
(:mod:`skilldeck.server.runlog`), which the response, and any client that reconnects, follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool

from skilldeck._internal.redact import log_error, safe_reason
from skilldeck.errors import SkillDeckError, ThreadBusyError
from skilldeck.server.fairness import RunQueue
from skilldeck.server.runlog import SKILLDECK_EVENTS, Protocol, RunLog, RunLogs
from skilldeck.server.sse import EventStreamResponse
from skilldeck.settings import Settings

__all__ = ["RunStart", "RunStreams"]

log = logging.getLogger(__name__)

#: Starts a run (its checks raise before any event) and gives its events; called in a worker
#: thread.
RunStart = Callable[[], Iterator[Any]]


class RunStreams:
    """The runs of one app: at most one at a time per thread, queued per user, logged per
    thread.

    Args:
        workers: how many runs may go on at once in this process.
        settings: the per-user limits (runs at once, runs waiting) and the run logs' budget
            (``run_log_mb``).
    """

    def __init__(self, workers: int, settings: Settings) -> None:
        self.queue = RunQueue(workers, settings.runs_per_user, settings.queued_runs_per_user)
        # Threads with a run in progress here; another run or resume of one of them is a 409.
        self.active: set[str] = set()
        # Each thread's latest run, numbered, for the client that started it and any that
        # reconnects (GET /threads/{id}/stream), within SKILLDECK_RUN_LOG_MB.
        self.logs = RunLogs(int(settings.run_log_mb * 1_000_000))

    async def stream(
        self,
        thread_id: str,
        user_id: str,
        start: RunStart,
        protocol: Protocol = SKILLDECK_EVENTS,
    ) -> EventStreamResponse:
        """Check and start a run of ``user_id`` with ``start`` (raises before the stream), then
        stream its events in ``protocol`` (skilldeck's events, or AG-UI's).

        The run waits in the user's queue for a worker, which drains it into the thread's run
        log, so it does not depend on the response: a client that goes away only stops reading
        the log. A user whose queue is full is refused (429) before anything is claimed.
        """
        run_log = await self.start(thread_id, user_id, start, protocol)
        return EventStreamResponse(run_log.follow())

    async def start(
        self,
        thread_id: str,
        user_id: str,
        start: RunStart,
        protocol: Protocol = SKILLDECK_EVENTS,
    ) -> RunLog:
        """Check and start a run as :meth:`stream` does; its log, which the caller follows
        (the MCP server reads its events from it)."""
        if thread_id in self.active:
            raise ThreadBusyError(thread_id)
        slot = self.queue.reserve(user_id)
        try:
            run_log = self.logs.open(thread_id, user_id, protocol)
        except BaseException:
            slot.cancel()
            raise
        self.active.add(thread_id)
        try:
            events = await run_in_threadpool(start)
        except BaseException:
            self.active.discard(thread_id)
            self.logs.drop(run_log)
            slot.cancel()
            raise
        self.logs.publish(run_log)
        slot.submit(partial(self._drain, events, run_log, asyncio.get_running_loop()))
        return run_log

    def _drain(
        self, events: Iterator[Any], run_log: RunLog, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Run the run (on a worker): append its events to ``run_log`` on the event loop, end
        it with an error event if it fails, and free its thread."""
        thread_id = run_log.thread_id
        error = run_log.protocol.error
        try:
            for event in events:
                _call_soon(loop, run_log.append, event)
        except SkillDeckError as exc:
            _call_soon(loop, run_log.append, error(thread_id, exc.code.value, safe_reason(exc)))
        except Exception as exc:
            frame = "internal error ({}); the details are in the server log"
            reason = log_error(log, f"run of thread {thread_id} failed", exc, frame=frame)
            _call_soon(loop, run_log.append, error(thread_id, "INTERNAL_ERROR", reason))
        finally:
            _call_soon(loop, run_log.close)
            _call_soon(loop, self.active.discard, thread_id)

    def shutdown(self) -> None:
        """Wait for the runs in progress (and those waiting) to reach their card or end."""
        self.queue.shutdown()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    # A closed loop (shutdown) has nobody listening; the run goes on regardless.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
