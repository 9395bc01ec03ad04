"""The service's background prune: every ``SKILLDECK_PRUNE_INTERVAL_S`` the serving process
runs :meth:`SkillDeck.prune <skilldeck.SkillDeck.prune>` (expired threads; finished threads'
checkpoints with ``SKILLDECK_THIN_FINISHED``) in a worker thread.

Several processes on one database may all run it: a prune takes each thread's run lease before
it touches the thread, so two prunes never delete one thread twice, and a thread a run holds is
left for the next prune (see :mod:`skilldeck.checkpoints.retention`). A prune that fails (the
database is away) is logged and tried again at the next interval. When the app stops, the
prune stops after the thread it is deleting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from starlette.concurrency import run_in_threadpool

from skilldeck._internal.redact import log_error
from skilldeck.deck import SkillDeck

__all__ = ["BackgroundPrune"]

log = logging.getLogger("skilldeck.server")


class BackgroundPrune:
    """Prunes ``deck``'s database every ``interval_s`` seconds, from :meth:`start` (the first
    prune at once) to :meth:`stop`."""

    def __init__(self, deck: SkillDeck, interval_s: float) -> None:
        self.deck, self.interval_s = deck, interval_s
        self._stop = threading.Event()  # read by the prune between threads
        self._stopping = asyncio.Event()  # ends the wait between prunes
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="skilldeck-prune")

    async def stop(self) -> None:
        """Stop after the thread being deleted, if a prune is going on; wait for it."""
        self._stop.set()
        self._stopping.set()
        if self._task is not None:
            await self._task

    async def _loop(self) -> None:
        while not self._stop.is_set():
            await run_in_threadpool(self._once)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.interval_s)

    def _once(self) -> None:
        try:
            report = self.deck.prune(stop=self._stop)
        except Exception as exc:
            log_error(log, "the background prune failed", exc, level=logging.WARNING)
            return
        if report.deleted or report.thinned or report.pending:
            log.info("prune: %s", report.to_dict())
