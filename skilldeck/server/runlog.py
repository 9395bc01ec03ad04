"""The events of a thread's run, kept for whoever reads them: the request that started the run,
and any client that reconnects (``GET /threads/{id}/stream`` with ``Last-Event-ID``).

Every event gets an id, ``<run>-<n>``: a client that lost the connection sends the last id it
saw and gets the rest of that run's events, then the live ones. The log of a thread's latest
run stays in this process after the run ends (the most recent :data:`FINISHED_LOGS` of them),
so a client that reconnects late still gets the end.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from skilldeck.server.sse import format_event

__all__ = ["FINISHED_LOGS", "RunLog", "RunLogs"]

#: How many finished runs' logs a process keeps for late readers.
FINISHED_LOGS = 256


class RunLog:
    """One run's numbered SSE messages; written and read on the server's event loop."""

    def __init__(self, encode: Callable[[Any, str], bytes] = format_event) -> None:
        self.run_id = uuid.uuid4().hex[:12]
        self.encode = encode
        self.messages: list[bytes] = []
        self.done = False
        self._changed = asyncio.Event()

    def append(self, event: Any) -> None:
        """Number and encode ``event`` (a skilldeck event, or an AG-UI one)."""
        self.messages.append(self.encode(event, f"{self.run_id}-{len(self.messages)}"))
        self._wake()

    def close(self) -> None:
        self.done = True
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
    """Each thread's latest run log: all running ones, and the latest finished ones."""

    def __init__(self) -> None:
        self._logs: OrderedDict[str, RunLog] = OrderedDict()

    def start(self, thread_id: str, encode: Callable[[Any, str], bytes] = format_event) -> RunLog:
        log = self._logs[thread_id] = RunLog(encode)
        self._logs.move_to_end(thread_id)
        finished = [t for t, lg in self._logs.items() if lg.done]
        for thread in finished[: max(len(finished) - FINISHED_LOGS, 0)]:
            del self._logs[thread]
        return log

    def get(self, thread_id: str) -> RunLog | None:
        return self._logs.get(thread_id)
