"""The parameters the service's routes declare: the app's
:class:`~skilldeck.server.service.Service`, the caller, and the ids a client sends in a path or
a header (held to the one rule of :mod:`skilldeck._internal.ids`, so a bad one is a 422 before
anything is looked up)."""

from typing import Annotated

from fastapi import Depends, Header
from fastapi import Path as PathParam

from skilldeck._internal.ids import ID_MAX_LENGTH, ID_PATTERN
from skilldeck.server.auth import current_user
from skilldeck.server.service import CurrentService

__all__ = ["CurrentService", "LastEventId", "ThreadId", "User"]

#: The caller's user_id, from their API key (401 without a known one).
User = Annotated[str, Depends(current_user)]

#: The thread a route acts on.
ThreadId = Annotated[str, PathParam(min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_PATTERN)]

#: The id of the last event a reconnecting client saw (SSE's ``Last-Event-ID`` header).
LastEventId = Annotated[str | None, Header(max_length=ID_MAX_LENGTH, pattern=ID_PATTERN)]
