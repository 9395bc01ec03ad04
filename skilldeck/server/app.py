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
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from skilldeck.deck import SkillDeck
from skilldeck.server.console import mount_console
from skilldeck.server.errors import install_error_handlers
from skilldeck.server.keys import ApiKeys
from skilldeck.server.limits import BodyLimit
from skilldeck.server.routers import ROUTERS
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
        lifespan=_finish_runs_on_shutdown,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.state.service = Service(
        deck=deck,
        keys=keys,
        threads=Threads(deck, matter_check),
        runs=RunStreams(workers, deck.settings),
    )
    app.add_middleware(
        BodyLimit, max_bytes=max_body_bytes, keys=keys, timeout_s=deck.settings.body_timeout_s
    )
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    if console:
        mount_console(app)
    return app


@asynccontextmanager
async def _finish_runs_on_shutdown(app: FastAPI) -> AsyncIterator[None]:
    """When the app stops, wait for its runs in progress (and those waiting) to reach their
    card or end."""
    yield
    service: Service = app.state.service
    await run_in_threadpool(service.runs.shutdown)
