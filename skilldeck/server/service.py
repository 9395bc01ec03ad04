"""What the routes of one app share: the :class:`Service`, which ``create_app`` keeps in
``app.state.service``, and the dependency that gives it to a route (:data:`CurrentService`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Unpack

from fastapi import Depends, Request

from skilldeck._internal.driver import request_kind
from skilldeck.deck import SkillDeck
from skilldeck.server.keys import ApiKeys
from skilldeck.server.metrics import Metrics
from skilldeck.server.runs import RunStreams
from skilldeck.server.threads import Threads
from skilldeck.types import Event, RunOptions, RunRequest

__all__ = ["CurrentService", "Service", "current_service", "service_version"]


@dataclass(frozen=True)
class Service:
    """The objects one app's routes work with.

    Attributes:
        deck: the deck runs go to (the caller keeps it open while the app serves).
        keys: the API keys, each naming its user.
        threads: who owns which thread, and who may use which matter.
        runs: the runs going on or waiting, and their logs.
        metrics: the app's Prometheus metrics, when they are on.
    """

    deck: SkillDeck
    keys: ApiKeys
    threads: Threads
    runs: RunStreams
    metrics: Metrics | None = None

    def stream(
        self, request: RunRequest, *, deltas: bool = False, **options: Unpack[RunOptions]
    ) -> Iterator[Event]:
        """The deck's stream of ``request`` as the service runs it (call it in a worker
        thread: the request is checked and its claims taken here): stopped after its step
        when the process drains, and counted by the metrics when they are on."""
        if self.metrics is None:
            return self.deck.stream(request, deltas=deltas, stop=self.runs.stopping, **options)
        options["callbacks"] = [*(options.get("callbacks") or ()), self.metrics.model_calls_handler]
        events = self.deck.stream(request, deltas=deltas, stop=self.runs.stopping, **options)
        return self.metrics.watch(events, request_kind(request))


def current_service(request: Request) -> Service:
    """The :class:`Service` of the app that serves ``request`` (the mounted app's own, when
    the service is mounted in another app)."""
    service: Service = request.app.state.service
    return service


#: A route's parameter of this type gets the app's :class:`Service`.
CurrentService = Annotated[Service, Depends(current_service)]


def service_version() -> str:
    """The installed skilldeck's version (``"0"`` in a checkout that is not installed)."""
    try:
        return version("skilldeck")
    except PackageNotFoundError:
        return "0"
