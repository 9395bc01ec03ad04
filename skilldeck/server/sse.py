"""Server-Sent Events: the wire format of a run's stream.

Each event is ``id: <id>`` (a run's events are numbered: see :mod:`skilldeck.server.runlog`),
``event: <name>`` and ``data: <one-line JSON>``, ended by a blank line; the JSON is the event's
``to_dict()``, so its ``event`` key repeats the name for clients that only read data.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import StreamingResponse

from skilldeck.types import Event

__all__ = ["EVENTS_RESPONSE", "MEDIA_TYPE", "EventStreamResponse", "format_event", "format_sse"]

MEDIA_TYPE = "text/event-stream"

#: The OpenAPI entry of a route that streams a run's events.
EVENTS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `step`, `tool_call`, `skill_result` (and `delta`, "
        "the models' text, with `stream_deltas`), then exactly one `card`, `done` or `error`. "
        "Each event has an `id`; each `data` line is the event as JSON.",
        "content": {
            MEDIA_TYPE: {
                "schema": {"type": "string"},
                "example": "id: 1f2e3d4c5b6a-8\nevent: card\n"
                'data: {"event": "card", "thread_id": "..."}\n\n',
            }
        },
    }
}


def format_sse(name: str, data: Any, id: str | None = None) -> bytes:
    """One SSE message; ``json.dumps`` escapes newlines, so ``data`` is a single line."""
    head = f"id: {id}\n" if id is not None else ""
    body = json.dumps(data, ensure_ascii=False, default=str)
    return f"{head}event: {name}\ndata: {body}\n\n".encode()


def format_event(event: Event, id: str | None = None) -> bytes:
    """The SSE message of a stream event."""
    return format_sse(event.event, event.to_dict(), id)


class EventStreamResponse(StreamingResponse):
    """A streaming ``text/event-stream`` response that proxies do not buffer."""

    media_type = MEDIA_TYPE

    def __init__(self, content: Any, status_code: int = 200, **kwargs: Any) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(content, status_code, headers=headers, media_type=MEDIA_TYPE, **kwargs)
