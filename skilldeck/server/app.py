"""The HTTP service: threads, runs and card answers over JSON and Server-Sent Events.

``create_app(deck)`` returns a FastAPI app; serve it with ``skilldeck serve`` or mount it in an
existing app (``parent.mount("/skilldeck", create_app(deck, api_keys=...))``). The card flow of
seed 004: ``POST /threads/{id}/runs`` streams events until ``event: card``; the front end shows
the card and posts the answers to ``POST /threads/{id}/resume``, which streams on to ``done``.

Requests are checked before a stream starts, so every bad request is a real HTTP status with a
JSON body ``{"error": {"code", "message"}}``. A run is driven by a worker thread, not by the
response: a client that disconnects stops receiving events, not the run, which goes on to its
card or its end and checkpoints every step. Every event has an ``id``; a client that reconnects
to ``GET /threads/{id}/stream`` with ``Last-Event-ID`` gets the events it missed, then the live
ones (:mod:`skilldeck.server.runlog`). Runs wait for a worker in a queue per user, served in
turn, within per-user limits (:mod:`skilldeck.server.fairness`). A thread whose run died with
its process reads ``resumable``; ``POST /threads/{id}/continue`` goes on with it.

Where things are: the routes, one router per concern, in :mod:`skilldeck.server.routers`; what
they share (the deck, the keys, :class:`~skilldeck.server.threads.Threads` for ownership and
matters, :class:`~skilldeck.server.runs.RunStreams` for the runs) in one
:class:`~skilldeck.server.service.Service` per app, which they get through FastAPI dependencies
(:mod:`skilldeck.server.dependencies`); the body limit and the API key of a request with a body
are checked before the app reads it (:mod:`skilldeck.server.limits`).

Operations (``docs/operations.md``): ``/livez`` and ``/readyz`` for an orchestrator's probes;
Prometheus metrics with ``SKILLDECK_METRICS`` (:mod:`skilldeck.server.metrics`); when the app
stops, its runs are drained: each stops after its step, at its checkpoint, within
``SKILLDECK_DRAIN_TIMEOUT_S`` (``skilldeck serve`` drains on SIGTERM while it still answers, so
``/readyz`` turns 503 first, see :mod:`skilldeck.server.shutdown`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from skilldeck.deck import SkillDeck
from skilldeck.server.console import mount_console
from skilldeck.server.errors import install_error_handlers
from skilldeck.server.keys import ApiKeys
from skilldeck.server.limits import BodyLimit
from skilldeck.server.metrics import Metrics
from skilldeck.server.retention import BackgroundPrune
from skilldeck.server.routers import ROUTERS
from skilldeck.server.routers.info import metrics_router
from skilldeck.server.runs import RunStreams
from skilldeck.server.service import Service, service_version
from skilldeck.server.threads import MatterCheck, Threads

__all__ = ["create_app"]


def create_app(
    deck: SkillDeck,
    *,
    api_keys: ApiKeys | Mapping[str, str] | str | Path | None = None,
    max_body_bytes: int = 1_000_000,
    matter_check: MatterCheck | None = None,
    workers: int = 32,
    docs: bool = False,
    console: bool = True,
) -> FastAPI:
    """The HTTP service of ``deck`` as a FastAPI app (mountable in another app).

    Args:
        deck: an open deck; the caller closes it after the app stops.
        api_keys: :class:`~skilldeck.server.keys.ApiKeys`, ``{sha256: user_id}``, a key file,
            or ``None`` for ``SKILLDECK_API_KEYS``.
        max_body_bytes: larger request bodies are refused with 413.
        matter_check: ``(user_id, matter_id) -> bool``: which matters a user may run on.
            By default (``settings.matter_policy="granted"``) a user may name only the
            matters an operator made for them or granted them (``skilldeck matters``); with
            ``"claim"`` (one tenant), also a matter nobody owns yet, which becomes theirs
            (at most ``settings.max_matters_per_user``). A refused matter is answered like an
            unknown one (404).
        workers: runs that may go on at once in this process (all users together; per user,
            ``deck.settings`` limits them: ``runs_per_user``, ``queued_runs_per_user`` and
            ``threads_per_minute``, see :mod:`skilldeck.server.fairness`).
        docs: serve ``/docs`` and ``/redoc``, whose pages load their scripts from a CDN (off by
            default: deployments are often offline); ``/openapi.json`` is always served.
        console: serve the card console, a web app for people, at ``/`` (its assets ship in
            the package; it loads nothing from elsewhere).

    Raises:
        SkillDeckError: no API keys are configured, or the key file is malformed.
    """
    keys = api_keys if isinstance(api_keys, ApiKeys) else ApiKeys.load(api_keys)
    app = FastAPI(
        title="skilldeck",
        version=service_version(),
        summary="Run agent skills; stream their events; answer their cards.",
        lifespan=_lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    settings = deck.settings
    runs = RunStreams(workers, settings)
    metrics_on = settings.metrics or settings.metrics_address is not None
    metrics = Metrics(runs.queue, deck.index) if metrics_on else None
    app.state.service = Service(
        deck=deck,
        keys=keys,
        threads=Threads(deck, matter_check),
        runs=runs,
        metrics=metrics,
    )
    app.add_middleware(
        BodyLimit, max_bytes=max_body_bytes, keys=keys, timeout_s=deck.settings.body_timeout_s
    )
    if deck.traced:
        from skilldeck.server.tracing import TraceContext

        app.add_middleware(TraceContext)  # outermost: the body limit's refusals are traced too
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    if metrics is not None and settings.metrics_address is None:
        app.include_router(metrics_router)
    if console:
        mount_console(app)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Serve the metrics at their own address while the app runs, if so configured, and prune
    expired threads every ``SKILLDECK_PRUNE_INTERVAL_S`` (:mod:`skilldeck.server.retention`);
    when the app stops, drain its runs (each stops after its step, at its checkpoint, within
    ``SKILLDECK_DRAIN_TIMEOUT_S``; already done if ``skilldeck serve`` drained on SIGTERM)."""
    service: Service = app.state.service
    settings = service.deck.settings
    exporter = None
    if service.metrics is not None and settings.metrics_address is not None:
        exporter = _serve_metrics(service.metrics, settings.metrics_address)
    pruning = None
    if settings.prune_interval_s > 0:
        pruning = BackgroundPrune(service.deck, settings.prune_interval_s)
        pruning.start()
    try:
        yield
    finally:
        if pruning is not None:
            await pruning.stop()
        await service.runs.drain(settings.drain_timeout_s)
        await run_in_threadpool(service.runs.close)
        if exporter is not None:
            exporter.shutdown()
            exporter.server_close()


def _serve_metrics(metrics: Metrics, address: str) -> Any:
    """``prometheus_client``'s own HTTP server for ``metrics`` on ``address`` (HOST:PORT), in
    a thread of its own; the server, to shut down."""
    from prometheus_client import start_http_server

    host, _, port = address.rpartition(":")
    server, _thread = start_http_server(int(port), host.strip("[]"), registry=metrics.registry)
    return server
