"""The card console: a small web app at ``/`` where people follow their runs and answer cards.

It is plain HTML, CSS and JavaScript shipped in this package: no build step, no library, and
nothing loaded from elsewhere (its Content-Security-Policy allows this origin only). It speaks
the service's own HTTP API with the user's API key, which it keeps in the page's memory only,
so a reload asks for the key again and then reconnects to a run in flight
(``GET /threads/{id}/stream``).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.responses import FileResponse
from starlette.staticfiles import StaticFiles

__all__ = ["STATIC", "mount_console"]

#: The console's files: ``index.html``, ``console.js`` and ``console.css``.
STATIC = Path(__file__).parent / "static"

# Only this origin: a model's text rendered by the console cannot pull in a script, a style or
# an image from elsewhere, and the page cannot be framed by another site.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def mount_console(app: FastAPI) -> None:
    """Serve the console on ``app``: the page at ``/``, its assets under ``/console/``."""

    @app.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers=_HEADERS)

    app.mount("/console", StaticFiles(directory=STATIC), name="console")
