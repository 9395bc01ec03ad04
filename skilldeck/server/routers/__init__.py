"""The service's routes, one :class:`~fastapi.APIRouter` per concern; ``create_app`` includes
:data:`ROUTERS` in their order.

- :mod:`~skilldeck.server.routers.info`: ``/health`` and ``/skills``;
- :mod:`~skilldeck.server.routers.threads`: create, list and read threads, and follow a run's
  stream (``GET /threads/{id}/stream``);
- :mod:`~skilldeck.server.routers.runs`: start, resume and continue a thread's run, streamed;
- :mod:`~skilldeck.server.routers.agui`: the deck as an AG-UI agent (``POST /agui``).

The routes get what they share through FastAPI dependencies
(:mod:`skilldeck.server.dependencies`), not from a closure: a router serves any app.
"""

from fastapi import APIRouter

from skilldeck.server.routers import agui, info, runs, threads

__all__ = ["ROUTERS"]

ROUTERS: tuple[APIRouter, ...] = (info.router, threads.router, runs.router, agui.router)
