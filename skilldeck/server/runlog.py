"""The events of a thread's run, kept for whoever reads them: the request that started the run,
and any client that reconnects (``GET /threads/{id}/stream`` with ``Last-Event-ID``).

Every event gets an id, ``<run>-<n>``: a client that lost the connection sends the last id it
saw and gets the rest of that run's events, then the live ones. The log of a thread's latest
run stays in this process after the run ends, so a client that reconnects late still gets the
end.

The logs are bounded by bytes, not by runs (``SKILLDECK_RUN_LOG_MB``): the events every kept
log holds, as sent on the wire, plus room for one last event of each run still going, never
exceed the budget. Room is made by dropping finished runs' logs, oldest first (a client still
reading one sees its stream end; ``GET /threads/{id}`` has the outcome). A run whose events do
not fit even then is cut off: its log ends with a ``RUN_LOG_FULL`` error event and keeps nothing
more, while the run goes on to its card or its end. A run that cannot even get that room (the
running ones fill the budget) is refused before it starts, with ``503 RUN_LOG_FULL``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from skilldeck._internal.redact import PublicReason, safe_reason
from skilldeck.errors import ErrorCode, SkillDeckError
from skilldeck.server.sse import format_event
from skilldeck.types import ErrorEvent

__all__ = ["SKILLDECK_EVENTS", "Protocol", "RunLog", "RunLogs"]

# The largest event number a cut-off event is sized for: a log never gets near it.
_MAX_N = 10**12


class Protocol(NamedTuple):
    """How a run's events go on the wire: each event's SSE message, and the event of an error
    that ends a run (its text is a :class:`~skilldeck._internal.redact.PublicReason`: an
    exception's own text cannot end up in an event)."""

    encode: Callable[[Any, str], bytes]
    error: Callable[[str, str, PublicReason], Any]


SKILLDECK_EVENTS = Protocol(
    format_event, lambda thread_id, code, reason: ErrorEvent(thread_id, code, str(reason))
)


class RunLog:
    """One run's numbered SSE messages; written and read on the server's event loop. Its bytes
    are counted by the :class:`RunLogs` that opened it."""

    def __init__(self, logs: RunLogs, thread_id: str, protocol: Protocol) -> None:
        self.run_id = uuid.uuid4().hex[:12]
        self.thread_id = thread_id
        self.protocol = protocol
        self.messages: list[bytes] = []
        self.size = 0  # bytes of ``messages``
        self.done = False
        self.cut = False  # it outgrew the budget: it holds nothing more
        self._logs = logs
        self._changed = asyncio.Event()
        #: The room kept for the event that cuts the log off, while it runs.
        self.reserve = len(self._cut_off(_MAX_N))

    def _cut_off(self, n: int) -> bytes:
        reason = safe_reason(
            SkillDeckError(
                f"this run's events outgrew the service's run log (SKILLDECK_RUN_LOG_MB), so its "
                f"stream ends here; the run goes on: GET /threads/{self.thread_id} shows where "
                "it stands",
                code=ErrorCode.RUN_LOG_FULL,
            )
        )
        event = self.protocol.error(self.thread_id, ErrorCode.RUN_LOG_FULL.value, reason)
        return self.protocol.encode(event, f"{self.run_id}-{n}")

    def append(self, event: Any) -> None:
        """Number and encode ``event`` (a skilldeck event, or an AG-UI one); past the budget,
        end the log with the ``RUN_LOG_FULL`` event instead."""
        if self.cut or self.done:
            return
        n = len(self.messages)
        data = self.protocol.encode(event, f"{self.run_id}-{n}")
        if not self._logs._grow(self, len(data)):
            data = self._cut_off(n)
            self.cut = True
            self._logs._spend_reserve(self, len(data))
        self.messages.append(data)
        self.size += len(data)
        self._wake()

    def close(self) -> None:
        if not self.done:
            self.done = True
            self._logs._closed(self)
        self._wake()

    def release(self) -> None:
        """Let go of the messages (the log was dropped): a reader still on it stops."""
        self.messages, self.size, self.done = [], 0, True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def after(self, last_event_id: str | None) -> int:
        """Where a reader that last saw ``last_event_id`` resumes: after it, if it is an id of
        this run; from the start otherwise (a new run began since)."""
        run, _, n = (last_event_id or "").rpartition("-")
        return int(n) + 1 if run == self.run_id and n.isdigit() else 0

    async def follow(self, start: int = 0) -> AsyncIterator[bytes]:
        """The messages from ``start`` on, as they come, until the run's last."""
        i = start
        while True:
            changed = self._changed
            while i < len(self.messages):
                yield self.messages[i]
                i += 1
            if self.done:
                return
            await changed.wait()


class RunLogs:
    """Each thread's latest run log, within ``budget`` bytes (see the module docstring)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        #: Bytes the logs hold: their messages, and the reserve of each running one.
        self.held = 0
        self._logs: dict[str, RunLog] = {}
        self._finished: OrderedDict[RunLog, None] = OrderedDict()  # oldest first

    def open(self, thread_id: str, protocol: Protocol = SKILLDECK_EVENTS) -> RunLog:
        """A log for a run of ``thread_id`` about to start, not yet shown to readers
        (:meth:`publish` it once the run started, :meth:`drop` it if it did not).

        Raises:
            SkillDeckError: ``RUN_LOG_FULL``: running logs fill the budget.
        """
        log = RunLog(self, thread_id, protocol)
        if not self._room(log.reserve):
            raise SkillDeckError(
                "the service's run logs are full of runs in progress (SKILLDECK_RUN_LOG_MB); "
                "retry in a moment",
                code=ErrorCode.RUN_LOG_FULL,
            )
        self.held += log.reserve
        return log

    def publish(self, log: RunLog) -> None:
        """Make ``log`` its thread's latest (the one before it is let go)."""
        old = self._logs.get(log.thread_id)
        self._logs[log.thread_id] = log
        if old is not None and old.done:
            self._forget(old)

    def drop(self, log: RunLog) -> None:
        """Let go of a log whose run never started."""
        if not log.done:
            log.done = True
            self.held -= log.reserve
        self._forget(log)

    def get(self, thread_id: str) -> RunLog | None:
        return self._logs.get(thread_id)

    # -- accounting (called by RunLog) -------------------------------------------------------
    def _room(self, n: int) -> bool:
        """Whether ``n`` more bytes fit, dropping finished logs, oldest first, until they do."""
        while self.held + n > self.budget and self._finished:
            self._forget(next(iter(self._finished)))
        return self.held + n <= self.budget

    def _grow(self, log: RunLog, n: int) -> bool:
        if not self._room(n):
            return False
        self.held += n
        return True

    def _spend_reserve(self, log: RunLog, n: int) -> None:
        self.held += n - log.reserve  # the cut-off event takes the room kept for it

    def _closed(self, log: RunLog) -> None:
        if not log.cut:
            self.held -= log.reserve
        if self._logs.get(log.thread_id) is log:
            self._finished[log] = None
        else:  # dropped, or replaced while it ran: nobody can ask for it
            self._forget(log)

    def _forget(self, log: RunLog) -> None:
        self._finished.pop(log, None)
        if self._logs.get(log.thread_id) is log:
            del self._logs[log.thread_id]
        self.held -= log.size
        log.release()
