"""A thread's runs, each streamed until its card, its end or an error: start one, answer its
card (resume), or go on with one that stopped mid-way (continue).

Every request is checked before its stream starts, so a bad one gets a real HTTP status with
the JSON error body. Resume and continue go on with a run the thread already has, so they ask
:meth:`~skilldeck.server.threads.Threads.authorize` (the thread's owner, and its matter's grant
now); a new run checks the matter it names.
"""

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from skilldeck.errors import NoPendingCardError, NotResumableError
from skilldeck.server.dependencies import CurrentService, ThreadId, User
from skilldeck.server.errors import responses
from skilldeck.server.schemas import ContinueRequest, ResumeRequest, RunRequest
from skilldeck.server.sse import EVENTS_RESPONSE, EventStreamResponse
from skilldeck.types import Continue, Resume

__all__ = ["router"]

router = APIRouter(
    tags=["threads"],
    default_response_class=EventStreamResponse,
    responses={
        **EVENTS_RESPONSE,
        **responses(401, 403, 404, 408, 409, 413, 422, 429, 503, stream=True),
    },
)


@router.post("/threads/{thread_id}/runs")
async def start_run(
    thread_id: ThreadId, body: RunRequest, user: User, service: CurrentService
) -> Any:
    """Run the thread and stream its events until a card, the end or an error."""
    threads = service.threads
    await run_in_threadpool(threads.owned, thread_id, user)
    await run_in_threadpool(threads.check_matter, user, body.matter_id)
    return await service.runs.stream(
        thread_id,
        user,
        lambda: service.stream(
            body.input,
            context=body.context,
            thread_id=thread_id,
            user_id=user,
            matter_id=body.matter_id,
            next_skill=body.next_skill,
            ttl=body.ttl,
            deltas=body.stream_deltas,
        ),
    )


@router.post("/threads/{thread_id}/resume")
async def resume(
    thread_id: ThreadId, body: ResumeRequest, user: User, service: CurrentService
) -> Any:
    """Answer the pending card and stream the run on. Of concurrent answers to one card
    exactly one is applied; the others get 409. The caller must still be allowed the
    thread's matter (else 404 ``MATTER_NOT_FOUND``, nothing changed)."""
    if await run_in_threadpool(service.threads.authorize, thread_id, user) is None:
        raise NoPendingCardError(thread_id, "new")
    return await service.runs.stream(
        thread_id,
        user,
        lambda: service.stream(
            Resume(thread_id, body.answers, interrupt_id=body.interrupt_id),
            deltas=body.stream_deltas,
        ),
    )


@router.post("/threads/{thread_id}/continue")
async def continue_thread(
    thread_id: ThreadId, user: User, service: CurrentService, body: ContinueRequest | None = None
) -> Any:
    """Go on with a ``resumable`` thread (its run stopped mid-way, e.g. its server died)
    from its last checkpoint, and stream the run like a resume. Any other thread is a 409
    ``NOT_RESUMABLE``; a live run's is ``THREAD_BUSY``; nothing changes."""
    if await run_in_threadpool(service.threads.authorize, thread_id, user) is None:
        raise NotResumableError(thread_id, "new")
    deltas = body is not None and body.stream_deltas
    return await service.runs.stream(
        thread_id, user, lambda: service.stream(Continue(thread_id), deltas=deltas)
    )
