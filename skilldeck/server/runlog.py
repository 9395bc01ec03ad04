"""The events of a thread's run, kept for whoever reads them: the request that started the run,
and any client that reconnects (``GET /threads/{id}/stream`` with ``Last-Event-ID``).

Every event gets an id, ``<run>-<n>``: a client that lost the connection sends the last id it
saw and gets the rest of that run's events, then the live ones. The log of a thread's latest
run stays in this process after the run ends, so a client that reconnects late still gets the
end.

The logs are bounded by bytes, not by runs (``SKILLDECK_RUN_LOG_MB``): the events every kept
log holds, as sent on the wire, a fixed overhead per log and per event (the Python objects that
hold them), plus room for one last event of each run still going, never exceed the budget.
Room is made by dropping finished runs' logs, oldest first (a client still reading one sees its
stream end; ``GET /threads/{id}`` has the outcome).

The running logs of one user hold at most a fair share of the budget: the budget divided by the
number of users with a run going (the user asking counted). A run whose events do not fit its
user's share, or the budget, is cut off: its log ends with a ``RUN_LOG_FULL`` error event and
keeps nothing more, while the run goes on to its card or its end. A cut log lets go of the
events its readers have read (a reconnecting client gets the ``RUN_LOG_FULL`` event). When a
user's run needs room that other users' running logs hold beyond their share, those logs are cut
off. A run that cannot even get room for its last event within its user's share is refused
before it starts, with ``503 RUN_LOG_FULL``: one user's runs never refuse another's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from skilldeck._internal.redact import PublicReason, safe_reason
from skilldeck.errors import ErrorCode, SkillDeckError
from skilldeck.server.sse import format_event
from skilldeck.types import ErrorEvent

__all__ = ["SKILLDECK_EVENTS", "Protocol", "RunLog", "RunLogs"]

# The largest event number a cut-off event is sized for: a log never gets near it.
_MAX_N = 10**12
#: Bytes counted for each log besides its events: the log, its wake-up event and the entries
#: that index it, as measured with tracemalloc (about 1.5 KB on CPython 3.11-3.13).
LOG_OVERHEAD = 1_500
#: Bytes counted for each event besides its text: the ``bytes`` object's header and its slot.
EVENT_OVERHEAD = 48


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

    def __init__(self, logs: RunLogs, thread_id: str, protocol: Protocol, user_id: str) -> None:
        self.run_id = uuid.uuid4().hex[:12]
        self.thread_id = thread_id
        self.protocol = protocol
        self.user_id = user_id
        self.messages: list[bytes] = []
        self.first = 0  # the number of ``messages[0]``: a cut log lets go of read ones
        self.size = LOG_OVERHEAD  # bytes counted for the log and its ``messages``
        self.done = False
        self.cut = False  # it outgrew the budget: it holds nothing more
        self._logs = logs
        self._changed = asyncio.Event()
        self._readers: dict[object, int] = {}  # each reader's next event number
        #: The room kept for the event that cuts the log off, while it runs.
        self.reserve = len(self._cut_off(_MAX_N)) + EVENT_OVERHEAD

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
        data = self.protocol.encode(event, f"{self.run_id}-{self.first + len(self.messages)}")
        if not self._logs._grow(self, len(data) + EVENT_OVERHEAD):
            self.cut_off()
            return
        self.messages.append(data)
        self.size += len(data) + EVENT_OVERHEAD
        self._wake()

    def cut_off(self) -> None:
        """End the log with the ``RUN_LOG_FULL`` event (in the room kept for it) and let go of
        what its readers have read; the run goes on."""
        if self.cut or self.done:
            return
        data = self._cut_off(self.first + len(self.messages))
        self.cut = True
        self._logs._spend_reserve(self, len(data) + EVENT_OVERHEAD)
        self.messages.append(data)
        self.size += len(data) + EVENT_OVERHEAD
        self._trim()
        self._wake()

    def _trim(self) -> None:
        """Of a cut log, let go of the events every reader has read, the last one excepted
        (a client that reconnects gets it)."""
        if not self.cut or not self.messages:
            return
        last = self.first + len(self.messages) - 1
        keep = min([last, *self._readers.values()])
        if keep > self.first:
            gone = self.messages[: keep - self.first]
            del self.messages[: keep - self.first]
            self.first = keep
            freed = sum(len(m) for m in gone) + EVENT_OVERHEAD * len(gone)
            self.size -= freed
            self._logs._freed(self, freed)

    def close(self) -> None:
        if not self.done:
            self.done = True
            self._logs._closed(self)
        self._wake()

    def release(self) -> None:
        """Let go of the messages (the log was dropped): a reader still on it stops."""
        self.first += len(self.messages)
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
        """The messages from ``start`` on, as they come, until the run's last (of a cut log,
        from the first it still holds)."""
        reader = object()
        i = max(start, self.first)
        self._readers[reader] = i
        try:
            while True:
                changed = self._changed
                while i < self.first + len(self.messages):
                    message = self.messages[max(i, self.first) - self.first]
                    i = max(i, self.first) + 1
                    self._readers[reader] = i
                    yield message
                    self._trim()
                if self.done:
                    return
                await changed.wait()
        finally:
            del self._readers[reader]
            self._trim()


class RunLogs:
    """Each thread's latest run log, within ``budget`` bytes (see the module docstring)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        #: Bytes the logs hold: their messages, and the reserve of each running one.
        self.held = 0
        self._logs: dict[str, RunLog] = {}
        self._finished: OrderedDict[RunLog, None] = OrderedDict()  # oldest first
        self._running: dict[RunLog, None] = {}
        #: Bytes the running logs of each user hold (messages and reserves).
        self._users: Counter[str] = Counter()

    def share(self, user_id: str) -> int:
        """The bytes ``user_id``'s running logs may hold: the budget divided by the users with
        a run going, ``user_id`` counted."""
        users = len(self._users.keys() | {user_id})
        return self.budget // users

    def open(self, thread_id: str, user_id: str, protocol: Protocol = SKILLDECK_EVENTS) -> RunLog:
        """A log for a run of ``user_id`` on ``thread_id`` about to start, not yet shown to
        readers (:meth:`publish` it once the run started, :meth:`drop` it if it did not).

        Raises:
            SkillDeckError: ``RUN_LOG_FULL``: the user's running logs fill their share.
        """
        log = RunLog(self, thread_id, protocol, user_id)
        need = log.size + log.reserve
        if self._users[user_id] + need > self.share(user_id) or not self._room(need, user_id):
            raise SkillDeckError(
                "your runs in progress fill your share of the service's run logs "
                "(SKILLDECK_RUN_LOG_MB); retry when one of them has ended",
                code=ErrorCode.RUN_LOG_FULL,
            )
        self._running[log] = None
        self._add(log, need)
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
            self._stopped(log)
        self._forget(log)

    def get(self, thread_id: str) -> RunLog | None:
        return self._logs.get(thread_id)

    # -- accounting (called by RunLog) -------------------------------------------------------
    def _room(self, n: int, user_id: str) -> bool:
        """Whether ``n`` more bytes of ``user_id`` fit: dropping finished logs, oldest first,
        then cutting off the running logs of users past their share, until they do."""
        while self.held + n > self.budget and self._finished:
            self._forget(next(iter(self._finished)))
        if self.held + n > self.budget:
            share = self.share(user_id)
            for log in [lg for lg in self._running if self._users[lg.user_id] > share]:
                if log.user_id != user_id:
                    log.cut_off()
        return self.held + n <= self.budget

    def _grow(self, log: RunLog, n: int) -> bool:
        if self._users[log.user_id] + n > self.share(log.user_id) or not self._room(n, log.user_id):
            return False
        self._add(log, n)
        return True

    def _add(self, log: RunLog, n: int) -> None:
        self.held += n
        if log in self._running:
            self._users[log.user_id] += n

    def _freed(self, log: RunLog, n: int) -> None:
        self._add(log, -n)

    def _spend_reserve(self, log: RunLog, n: int) -> None:
        self._add(log, n - log.reserve)  # the cut-off event takes the room kept for it

    def _stopped(self, log: RunLog) -> None:
        """``log``'s run ended: its reserve goes, and its bytes no longer count for its user
        (a finished log is dropped when room is needed)."""
        if not log.cut:
            self.held -= log.reserve
        if self._running.pop(log, 0) is None:
            left = self._users[log.user_id] - log.size - (0 if log.cut else log.reserve)
            if left > 0:
                self._users[log.user_id] = left
            else:
                del self._users[log.user_id]

    def _closed(self, log: RunLog) -> None:
        self._stopped(log)
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
