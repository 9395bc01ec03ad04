"""The runs of one service process, each streamed to its client from the thread's run log.

A run is driven by a worker thread, not by the response: a client that disconnects stops
receiving events, not the run, which goes on to its card or its end and checkpoints every step.
Runs wait for a worker in a queue per user, served in turn, within per-user limits
(:mod:`skilldeck.server.fairness`); their events go to the thread's run log
(:mod:`skilldeck.server.runlog`), which the response, and any client that reconnects, follows.

Before a restart the runs are drained (:meth:`RunStreams.drain`): new runs are refused
(``503 SHUTTING_DOWN``), each run going on stops after the step it is in, at its checkpoint (its
stream ends with an ``error`` event ``STOPPED``, its claims are given back, its thread is
``resumable``), within a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool

from skilldeck._internal.redact import log_error, safe_reason
from skilldeck.errors import ErrorCode, SkillDeckError, ThreadBusyError
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
        #: Set when the process drains: each run stops after its step (the deck's ``stop``).
        self.stopping = threading.Event()
        self._drained: asyncio.Future[frozenset[str]] | None = None

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
            # One callback, the thread freed first: whoever sees the log end (the run's last
            # event read) may start the thread's next run at once (the MCP server answers a
            # card the moment its client replies).
            _call_soon(loop, self._finished, run_log)

    def _finished(self, run_log: RunLog) -> None:
        self.active.discard(run_log.thread_id)
        run_log.close()

    @property
    def draining(self) -> bool:
        """Whether the process drains (it accepts no run any more)."""
        return self.stopping.is_set()

    async def drain(self, timeout_s: float) -> frozenset[str]:
        """Refuse new runs, stop the runs going on (and those waiting) after their step, and
        wait for them, at most ``timeout_s``; the threads whose runs were still in a step then
        (their streams are ended here with ``SHUTTING_DOWN``; they keep their claims until the
        process is gone, so nothing runs their threads twice). Called again, the first
        call's outcome."""
        if self._drained is None:
            self._drained = asyncio.ensure_future(self._stop_runs(timeout_s))
        return await asyncio.shield(self._drained)

    async def _stop_runs(self, timeout_s: float) -> frozenset[str]:
        self.stopping.set()
        self.queue.close()
        if await run_in_threadpool(self.queue.wait_idle, timeout_s):
            return frozenset()
        left = frozenset(self.active)
        reason = safe_reason(
            SkillDeckError(
                f"this server process is shutting down and the run's step did not reach its "
                f"checkpoint within {timeout_s:g} s (SKILLDECK_DRAIN_TIMEOUT_S); the thread "
                "goes on from its last checkpoint: continue it once the process is gone",
                code=ErrorCode.SHUTTING_DOWN,
            )
        )
        for thread_id in left:
            run_log = self.logs.get(thread_id)
            if run_log is not None and not run_log.done:
                error = run_log.protocol.error(thread_id, ErrorCode.SHUTTING_DOWN.value, reason)
                run_log.append(error)
                run_log.close()
        log.warning(
            "%d run(s) did not reach a checkpoint within the drain timeout (%g s): %s",
            len(left),
            timeout_s,
            ", ".join(sorted(left)),
        )
        return left

    @property
    def abandoned(self) -> frozenset[str]:
        """The threads whose runs a finished drain gave up on (still in a step then)."""
        done = self._drained is not None and self._drained.done()
        return self._drained.result() if done and self._drained is not None else frozenset()

    def close(self) -> None:
        """Let the workers go: those of runs a drain gave up on are left to the process's
        exit (call after :meth:`drain`)."""
        self.queue.shutdown(timeout_s=0)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    # A closed loop (shutdown) has nobody listening; the run goes on regardless.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
