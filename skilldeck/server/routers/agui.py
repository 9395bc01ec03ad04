"""The deck as an AG-UI agent (``POST /agui``); the protocol's mapping is
:mod:`skilldeck.server.agui`.

The thread id is the client's: a thread nobody has yet becomes the caller's when a run on it
starts, and is forgotten again if the run is then refused. A resume is checked like
``POST /threads/{id}/resume`` (:meth:`~skilldeck.server.threads.Threads.authorize`).
"""

from collections.abc import Iterator
from typing import Any

from ag_ui.core import BaseEvent
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from skilldeck.server.agui import (
    AGUI_EVENTS,
    AguiInput,
    AguiRefusal,
    AguiRequest,
    AguiResume,
    AguiRun,
    agui_events,
    agui_request,
    refused,
)
from skilldeck.server.dependencies import CurrentService, User
from skilldeck.server.errors import responses
from skilldeck.server.service import Service
from skilldeck.server.sse import MEDIA_TYPE, EventStreamResponse
from skilldeck.server.threads import Threads, unknown_thread
from skilldeck.types import Resume

__all__ = ["router"]

router = APIRouter(tags=["agui"])

_AGUI_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events as Server-Sent Events: RUN_STARTED, then steps, "
        "TEXT_MESSAGE_*, TOOL_CALL_*, STATE_SNAPSHOT, and RUN_FINISHED (a card is its "
        "interrupt outcome) or RUN_ERROR. Each `data` line is one AG-UI event as JSON.",
        "content": {
            MEDIA_TYPE: {
                "schema": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "event": {"type": "string"},
                        "data": {"type": "string"},
                    },
                },
                "example": 'id: 1f2e3d4c5b6a-0\ndata: {"type": "RUN_STARTED", ...}\n\n',
            }
        },
    }
}


@router.post(
    "/agui",
    response_class=EventStreamResponse,
    responses={
        **_AGUI_RESPONSE,
        **responses(401, 403, 404, 408, 409, 413, 422, 429, 503, stream=True),
    },
)
async def agui(body: AguiInput, user: User, service: CurrentService) -> Any:
    """The deck as an AG-UI agent: ``RunAgentInput`` in, AG-UI events out. A run starts
    from the last user message (routed by description) or ``forwardedProps`` (``input``,
    ``context``, ``matter_id``); a card ends it with an interrupt outcome whose
    ``responseSchema`` is the answers' schema; a ``resume`` entry answers the card.

    The thread id is the client's: a thread nobody has yet becomes the caller's when a
    run on it starts (a refused request stores nothing)."""
    asked = agui_request(body)  # a malformed matter id or context: 422 first
    adopted = await _admit(service.threads, body.thread_id, user, asked)
    try:
        return await service.runs.stream(
            body.thread_id, user, lambda: _events(service, body, user, asked), AGUI_EVENTS
        )
    except BaseException:
        if adopted:  # the run was refused: the thread it would have started is not kept
            await run_in_threadpool(service.threads.abandon, body.thread_id)
        raise


async def _admit(threads: Threads, thread_id: str, user: str, asked: AguiRequest) -> bool:
    """Check that ``user`` may do on ``thread_id`` what ``asked`` asks (raises otherwise);
    ``True`` if the thread was nobody's and became the user's for the run.

    Raises:
        NotFound: the thread is another user's; a resume of a thread the user does not have;
            a matter the user may not use.
    """
    known = await run_in_threadpool(threads.mine_or_free, thread_id, user)
    if isinstance(asked, AguiResume):
        if not known:
            raise unknown_thread(thread_id)
        await run_in_threadpool(threads.authorize, thread_id, user)
    elif isinstance(asked, AguiRun):
        await run_in_threadpool(threads.check_matter, user, asked.matter_id)
        if not known:
            await run_in_threadpool(threads.adopt, thread_id, user)
            return True
    return False


def _events(
    service: Service, body: AguiInput, user: str, asked: AguiRequest
) -> Iterator[BaseEvent]:
    """Start what ``asked`` asks (in a worker thread; the deck's checks raise here, before the
    stream) and give its AG-UI events."""
    thread_id, run_id = body.thread_id, body.run_id
    deck = service.deck
    if isinstance(asked, AguiRefusal):
        return refused(thread_id, run_id, asked)
    if isinstance(asked, AguiRun):
        events = service.stream(
            asked.input,
            context=asked.context,
            thread_id=thread_id,
            user_id=user,
            matter_id=asked.matter_id,
            deltas=True,
        )
    else:
        answers = Resume(thread_id, asked.answers, interrupt_id=asked.interrupt_id)
        events = service.stream(answers, deltas=True)
    return agui_events(thread_id, run_id, events, lambda: deck.get_thread(thread_id).state)
