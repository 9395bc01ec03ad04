"""``skilldeck serve``'s graceful restart: on SIGTERM (or Ctrl-C) the process drains its runs
while it still answers, then lets uvicorn shut down, and exits 0.

uvicorn's own answer to SIGTERM stops listening at once and then waits, without a bound, for
the open responses (a run's stream lasts until its card): a load balancer's readiness probe gets
no answer, and a new run no clear refusal. :class:`DrainingServer` first drains
(:meth:`~skilldeck.server.runs.RunStreams.drain`): ``/readyz`` answers 503, new runs
``503 SHUTTING_DOWN`` with ``Retry-After``, and each run going on stops after its step, at its
checkpoint, within ``SKILLDECK_DRAIN_TIMEOUT_S``; only then does uvicorn close its sockets.
A second signal skips the rest of the drain (uvicorn's forced exit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import uvicorn

__all__ = ["SHUTDOWN_GRACE_S", "DrainingServer"]

log = logging.getLogger("skilldeck.server")

#: Seconds uvicorn waits for open responses once the runs are drained: their streams have ended
#: by then (a run that stopped, or that the drain gave up on, has its stream ended).
SHUTDOWN_GRACE_S = 5


class DrainingServer(uvicorn.Server):
    """A uvicorn server that runs ``drain`` when the first SIGTERM or SIGINT comes, and shuts
    down when it is done.

    Args:
        config: uvicorn's config.
        drain: drains the app (awaited on the server's event loop).
    """

    def __init__(self, config: uvicorn.Config, drain: Callable[[], Awaitable[Any]]) -> None:
        super().__init__(config)
        self._drain = drain
        self._asked = False
        self._draining: asyncio.Task[Any] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._asked:  # a second signal: uvicorn's own (forced) shutdown
            super().handle_exit(sig, frame)
            return
        # In a signal handler: only note it; the event loop starts the drain on its next tick.
        # Not recorded as uvicorn's captured signal, so the process exits 0 once drained.
        self._asked = True

    async def on_tick(self, counter: int) -> bool:
        if self._asked and self._draining is None:
            self._draining = asyncio.ensure_future(self._drain())
        if self._draining is not None and self._draining.done():
            if not self._draining.cancelled() and self._draining.exception() is not None:
                log.error("the drain failed", exc_info=self._draining.exception())
            self.should_exit = True
        return await super().on_tick(counter)
