"""The caller's threads: create and list them, read one (its state, its checkpoints), and
follow the stream of its latest run (``GET /threads/{id}/stream``, the reconnect of a stream
that broke off). Another user's thread is answered like an unknown one (404)."""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from skilldeck._internal.ids import ID_MAX_LENGTH, ID_PATTERN
from skilldeck.server.dependencies import CurrentService, LastEventId, ThreadId, User
from skilldeck.server.errors import NotFound, responses
from skilldeck.server.schemas import (
    CreatedThread,
    History,
    ThreadList,
    ThreadRow,
    ThreadState,
    ThreadView,
)
from skilldeck.server.sse import EVENTS_RESPONSE, EventStreamResponse
from skilldeck.types import RunResult

__all__ = ["router"]

router = APIRouter(tags=["threads"], responses=responses(401))

#: Checkpoints per page of ``GET /threads/{id}/history``: by default, and at most. A page is
#: read from the checkpointer alone, so a long thread costs no more per request than a short one.
HISTORY_PAGE = 100
MAX_HISTORY_PAGE = 1000


@router.post(
    "/threads",
    status_code=201,
    response_model=CreatedThread,
    responses=responses(403, 408, 413, 429),
)
async def create_thread(user: User, service: CurrentService) -> CreatedThread:
    """Create a thread owned by the caller; start it with ``POST /threads/{id}/runs``.
    A user may create ``SKILLDECK_THREADS_PER_MINUTE`` threads a minute (then 429)."""
    return await run_in_threadpool(service.threads.create, user)


@router.get("/threads", response_model=ThreadList)
async def list_threads(
    user: User,
    service: CurrentService,
    status: Annotated[ThreadState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ThreadList:
    """The caller's threads (and no one else's), most recently run first."""
    deck = service.deck
    rows = await run_in_threadpool(deck.threads, user_id=user, status=status, limit=limit)
    return ThreadList(threads=[ThreadRow.model_validate(r.to_dict()) for r in rows])


@router.get(
    "/threads/{thread_id}",
    response_model=ThreadView,
    response_model_exclude_unset=True,
    responses=responses(404),
)
async def get_thread(thread_id: ThreadId, user: User, service: CurrentService) -> ThreadView:
    """The thread's state and status, and its pending card when it is ``interrupted``."""
    return _view(thread_id, await run_in_threadpool(service.threads.owned, thread_id, user))


@router.get(
    "/threads/{thread_id}/history",
    response_model=History,
    response_model_exclude_unset=True,
    responses=responses(404),
)
async def history(
    thread_id: ThreadId,
    user: User,
    service: CurrentService,
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY_PAGE)] = HISTORY_PAGE,
    before: Annotated[str | None, Query(max_length=ID_MAX_LENGTH, pattern=ID_PATTERN)] = None,
) -> History:
    """The thread's checkpoints, oldest first (one per step), a page at a time: the newest
    ``limit`` older than the checkpoint ``before``; ``next_before`` names the page of the
    older ones (absent on the first page of the thread)."""
    result = await run_in_threadpool(service.threads.owned, thread_id, user)
    rows: list[dict[str, Any]] = []
    if result is not None:
        rows = await run_in_threadpool(
            lambda: service.deck.history(thread_id, limit=limit, before=before)
        )
    page: dict[str, Any] = {"thread_id": thread_id, "checkpoints": rows}
    if rows and rows[0].get("parent_id") is not None:
        page["next_before"] = rows[0]["checkpoint_id"]
    return History.model_validate(page)


@router.get(
    "/threads/{thread_id}/stream",
    response_class=EventStreamResponse,
    responses={**EVENTS_RESPONSE, **responses(401, 404, stream=True)},
)
async def follow(
    thread_id: ThreadId,
    user: User,
    service: CurrentService,
    last_event_id: LastEventId = None,
) -> Any:
    """The events of the thread's latest run in this process: those after
    ``Last-Event-ID`` (all of them without it), then the live ones until the run's end.
    Reconnect here when a run's stream breaks off."""
    await run_in_threadpool(service.threads.owned, thread_id, user)
    run_log = service.runs.logs.get(thread_id)
    # A log is its run's user's: a thread id another user held before it was pruned (a client
    # names AG-UI threads) keeps that user's last log in this process until a new run's.
    if run_log is None or run_log.user_id != user:
        raise NotFound(
            "NO_RUN_STREAM",
            f"no run of thread {thread_id!r} has streamed in this server process; "
            f"GET /threads/{thread_id} shows where it stands",
        )
    return EventStreamResponse(run_log.follow(run_log.after(last_event_id)))


def _view(thread_id: str, result: RunResult | None) -> ThreadView:
    """A thread's view (``None``: created, not run yet)."""
    if result is None:
        return ThreadView(thread_id=thread_id, status="new", state={}, card=None, error=None)
    return ThreadView.model_validate(result.to_dict())
