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

Every request that acts on a thread's run (resume, continue; AG-UI's resume) goes through
:meth:`Threads.authorize`: the caller must own the thread and may still use its matter, checked
at that moment, so revoking a grant stops a card that was already pending.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route annotations, which
# use names local to create_app.
import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any
from uuid import uuid4

from ag_ui.core import RunErrorEvent
from fastapi import Depends, FastAPI, Header, Query
from fastapi import Path as PathParam
from fastapi.types import DecoratedCallable
from langchain_core.runnables import RunnableConfig
from starlette.concurrency import run_in_threadpool

from skilldeck._internal.ids import ID_MAX_LENGTH, ID_PATTERN
from skilldeck._internal.redact import log_error, safe_reason
from skilldeck.checkpoints.threads import ThreadRecord
from skilldeck.deck import SkillDeck
from skilldeck.errors import (
    NoPendingCardError,
    NotResumableError,
    SkillDeckError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from skilldeck.server.agui import AguiInput, agui_events, agui_request, encode_agui, refused
from skilldeck.server.auth import current_user
from skilldeck.server.console import mount_console
from skilldeck.server.errors import NotFound, install_error_handlers, responses
from skilldeck.server.fairness import CreationRate, RunQueue
from skilldeck.server.keys import ApiKeys
from skilldeck.server.limits import BodyLimit
from skilldeck.server.runlog import SKILLDECK_EVENTS, Protocol, RunLog, RunLogs
from skilldeck.server.schemas import (
    ContinueRequest,
    CreatedThread,
    Health,
    History,
    ResumeRequest,
    RunRequest,
    SkillList,
    SkillRow,
    ThreadList,
    ThreadRow,
    ThreadState,
    ThreadView,
)
from skilldeck.server.sse import MEDIA_TYPE, EventStreamResponse
from skilldeck.settings import Settings
from skilldeck.types import RunResult

__all__ = ["create_app"]

log = logging.getLogger(__name__)

MatterCheck = Callable[[str, str], bool]

_SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
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


def _version() -> str:
    try:
        return version("skilldeck")
    except PackageNotFoundError:
        return "0"


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


AGUI_EVENTS = Protocol(
    encode_agui, lambda thread_id, code, reason: RunErrorEvent(message=str(reason), code=code)
)


class Threads:
    """Thread ownership and run streaming for one app; see the module docstring.

    Args:
        deck: the deck runs go to (the caller keeps it open while the app serves).
        matter_check: ``(user_id, matter_id) -> bool``: may the user run on the matter.
        workers: how many runs may go on at once in this process.
        settings: the per-user limits (runs at once, runs waiting, threads per minute).
    """

    def __init__(
        self, deck: SkillDeck, matter_check: MatterCheck, workers: int, settings: Settings
    ) -> None:
        self.deck = deck
        self.matter_check = matter_check
        self.queue = RunQueue(workers, settings.runs_per_user, settings.queued_runs_per_user)
        self.created = CreationRate(settings.threads_per_minute)
        # Threads with a run in progress here; another run or resume of one of them is a 409.
        self.active: set[str] = set()
        # Each thread's latest run, numbered, for the client that started it and any that
        # reconnects (GET /threads/{id}/stream), within SKILLDECK_RUN_LOG_MB.
        self.logs = RunLogs(int(deck.settings.run_log_mb * 1_000_000))

    # -- ownership (blocking: call in a worker thread) ------------------------------------
    def create(self, user_id: str) -> CreatedThread:
        self.created.take(user_id)
        record = self._new(uuid4().hex, user_id)
        return CreatedThread(thread_id=record.thread_id, created_at=record.created_at)

    def _new(self, thread_id: str, user_id: str) -> ThreadRecord:
        """Store a new thread of ``user_id``, within their quota (an existing one is kept)."""
        limit = self.deck.settings.max_threads_per_user
        return self.deck.index.create(thread_id, user_id, limit=limit)

    def owned(self, thread_id: str, user_id: str) -> RunResult | None:
        """The thread if ``user_id`` owns it (``None``: created, not run yet).

        Raises:
            NotFound: the thread is unknown or belongs to someone else (the same answer, so
                thread ids of other users cannot be probed).
        """
        record = self.deck.index.get(thread_id)
        if record is None or record.user_id != user_id:
            raise _unknown(thread_id)
        try:
            return self.deck.get_thread(thread_id)
        except ThreadNotFoundError:
            return None

    def mine_or_free(self, thread_id: str, user_id: str) -> bool:
        """Whether ``thread_id`` is a thread of ``user_id`` (``False``: nobody's yet: an
        AG-UI client names its threads).

        Raises:
            NotFound: it is another user's (the answer an unknown thread gets elsewhere).
        """
        record = self.deck.index.get(thread_id)
        if record is not None and record.user_id != user_id:
            raise _unknown(thread_id)
        return record is not None

    def authorize(self, thread_id: str, user_id: str) -> RunResult | None:
        """The thread, if ``user_id`` may act on its run now: owns it and may still use its
        matter. Every operation that goes on with a thread's run (resume, continue) asks this
        at the moment it is requested, so a revoked grant stops even a pending card.

        Raises:
            NotFound: the thread is not the user's (``THREAD_NOT_FOUND``), or its matter no
                longer is (``MATTER_NOT_FOUND``): the answers of unknown ones.
        """
        thread = self.owned(thread_id, user_id)
        if thread is not None:
            self.check_matter(user_id, thread.state.get("matter_id"))
        return thread

    def adopt(self, thread_id: str, user_id: str) -> None:
        """Make ``thread_id``, nobody's a moment ago, a thread of ``user_id`` (within their
        thread rate and quota); if another user's request took it meanwhile, 404."""
        self.created.take(user_id)
        self._new(thread_id, user_id)
        self.owned(thread_id, user_id)

    def abandon(self, thread_id: str) -> None:
        """Forget a thread :meth:`adopt` stored for a run that was then refused."""
        self.deck.index.discard(thread_id)

    def check_matter(self, user_id: str, matter_id: str | None) -> None:
        """Refuse a matter the user may not use, with the answer an unknown matter gets."""
        if matter_id is not None and not self.matter_check(user_id, matter_id):
            raise NotFound("MATTER_NOT_FOUND", f"matter {matter_id!r} not found for this API key")

    # -- streaming ------------------------------------------------------------------------
    async def stream(
        self,
        thread_id: str,
        user_id: str,
        start: Callable[[], Iterator[Any]],
        protocol: Protocol = SKILLDECK_EVENTS,
    ) -> Any:
        """Check and start a run of ``user_id`` with ``start`` (raises before the stream), then
        stream its events in ``protocol`` (skilldeck's events, or AG-UI's).

        The run waits in the user's queue for a worker, which drains it into the thread's run
        log, so it does not depend on the response: a client that goes away only stops reading
        the log. A user whose queue is full is refused (429) before anything is claimed.
        """
        if thread_id in self.active:
            raise ThreadBusyError(thread_id)
        slot = self.queue.reserve(user_id)
        try:
            run_log = self.logs.open(thread_id, user_id, protocol)
        except BaseException:
            slot.cancel()
            raise
        self.active.add(thread_id)
        try:
            events = await run_in_threadpool(start)
        except BaseException:
            self.active.discard(thread_id)
            self.logs.drop(run_log)
            slot.cancel()
            raise
        self.logs.publish(run_log)
        loop = asyncio.get_running_loop()
        slot.submit(lambda: self._drain(events, thread_id, loop, run_log))
        return EventStreamResponse(run_log.follow())

    def _drain(
        self,
        events: Iterator[Any],
        thread_id: str,
        loop: asyncio.AbstractEventLoop,
        events_log: RunLog,
    ) -> None:
        def post(callback: Callable[..., Any], *args: Any) -> None:
            # A closed loop (shutdown) has nobody listening; the run goes on regardless.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback, *args)

        error = events_log.protocol.error
        try:
            for event in events:
                post(events_log.append, event)
        except SkillDeckError as exc:
            post(events_log.append, error(thread_id, exc.code.value, safe_reason(exc)))
        except Exception as exc:
            frame = "internal error ({}); the details are in the server log"
            reason = log_error(log, f"run of thread {thread_id} failed", exc, frame=frame)
            post(events_log.append, error(thread_id, "INTERNAL_ERROR", reason))
        finally:
            post(events_log.close)
            post(self.active.discard, thread_id)

    def shutdown(self) -> None:
        """Wait for the runs in progress (and those waiting) to reach their card or end."""
        self.queue.shutdown()


def _unknown(thread_id: str) -> NotFound:
    return NotFound(
        "THREAD_NOT_FOUND",
        f"thread {thread_id!r} not found for this API key: create one with POST /threads",
    )


def _thread_view(thread_id: str, result: RunResult | None) -> ThreadView:
    if result is None:
        return ThreadView(thread_id=thread_id, status="new", state={}, card=None, error=None)
    return ThreadView.model_validate(result.to_dict())


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
    if matter_check is None:
        claim = deck.settings.matter_policy == "claim"
        limit = deck.settings.max_matters_per_user

        def matter_check(user_id: str, matter_id: str) -> bool:
            return deck.index.may_use_matter(user_id, matter_id, claim=claim, limit=limit)

    threads = Threads(deck, matter_check, workers, deck.settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(threads.shutdown)

    app = FastAPI(
        title="skilldeck",
        version=_version(),
        summary="Run agent skills; stream their events; answer their cards.",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.state.threads = threads
    app.add_middleware(
        BodyLimit, max_bytes=max_body_bytes, keys=keys, timeout_s=deck.settings.body_timeout_s
    )
    install_error_handlers(app)
    User = Annotated[str, Depends(current_user(keys))]
    ThreadId = Annotated[str, PathParam(min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_PATTERN)]

    @app.get("/health", response_model=Health, responses=responses(503), tags=["service"])
    async def health() -> Any:
        """Liveness and checkpoint database reachability (no API key needed)."""
        probe: RunnableConfig = {
            "configurable": {"thread_id": "__skilldeck_health__", "checkpoint_ns": ""}
        }
        try:
            await run_in_threadpool(deck.checkpointer.get_tuple, probe)
        except Exception as exc:
            from fastapi.responses import JSONResponse

            body = Health(status="unavailable", version=_version(), detail=type(exc).__name__)
            return JSONResponse(body.model_dump(), status_code=503)
        return Health(status="ok", version=_version())

    @app.post(
        "/threads",
        status_code=201,
        response_model=CreatedThread,
        responses=responses(401, 403, 408, 413, 429),
        tags=["threads"],
    )
    async def create_thread(user: User) -> CreatedThread:
        """Create a thread owned by the caller; start it with ``POST /threads/{id}/runs``.
        A user may create ``SKILLDECK_THREADS_PER_MINUTE`` threads a minute (then 429)."""
        return await run_in_threadpool(threads.create, user)

    @app.get("/threads", response_model=ThreadList, responses=responses(401), tags=["threads"])
    async def list_threads(
        user: User,
        status: Annotated[ThreadState | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> ThreadList:
        """The caller's threads (and no one else's), most recently run first."""
        rows = await run_in_threadpool(deck.threads, user_id=user, status=status, limit=limit)
        return ThreadList(threads=[ThreadRow.model_validate(r.to_dict()) for r in rows])

    @app.get("/skills", response_model=SkillList, responses=responses(401), tags=["service"])
    async def list_skills(user: User) -> SkillList:
        """The deck's skills: their descriptions, the contexts that run them, whether a run
        needs a matter, and the input a run that starts with the skill takes."""
        in_matter = set(await run_in_threadpool(deck.matter_skills))
        return SkillList(
            skills=[
                SkillRow(
                    name=b.name,
                    description=b.description,
                    contexts=list(b.contexts),
                    needs_matter=b.name in in_matter,
                    input_schema=None if b.input_schema is None else dict(b.input_schema),
                )
                for b in deck.bundles
            ]
        )

    # The routes of one thread share their documented errors: streams and reads each alike.
    def streamed(path: str) -> Callable[[DecoratedCallable], DecoratedCallable]:
        return app.post(
            path,
            response_class=EventStreamResponse,
            responses={
                **_SSE_RESPONSE,
                **responses(401, 403, 404, 408, 409, 413, 422, 429, 503, stream=True),
            },
            tags=["threads"],
        )

    def read(path: str, model: type[Any]) -> Callable[[DecoratedCallable], DecoratedCallable]:
        return app.get(
            path,
            response_model=model,
            response_model_exclude_unset=True,
            responses=responses(401, 404),
            tags=["threads"],
        )

    @streamed("/threads/{thread_id}/runs")
    async def start_run(thread_id: ThreadId, body: RunRequest, user: User) -> Any:
        """Run the thread and stream its events until a card, the end or an error."""
        await run_in_threadpool(threads.owned, thread_id, user)
        await run_in_threadpool(threads.check_matter, user, body.matter_id)
        return await threads.stream(
            thread_id,
            user,
            lambda: deck.stream(
                body.input,
                context=body.context,
                thread_id=thread_id,
                user_id=user,
                matter_id=body.matter_id,
                next_skill=body.next_skill,
                stream_deltas=body.stream_deltas,
            ),
        )

    @streamed("/threads/{thread_id}/resume")
    async def resume(thread_id: ThreadId, body: ResumeRequest, user: User) -> Any:
        """Answer the pending card and stream the run on. Of concurrent answers to one card
        exactly one is applied; the others get 409. The caller must still be allowed the
        thread's matter (else 404 ``MATTER_NOT_FOUND``, nothing changed)."""
        if await run_in_threadpool(threads.authorize, thread_id, user) is None:
            raise NoPendingCardError(thread_id, "new")
        return await threads.stream(
            thread_id,
            user,
            lambda: deck.stream_resume(
                thread_id,
                body.answers,
                interrupt_id=body.interrupt_id,
                stream_deltas=body.stream_deltas,
            ),
        )

    @streamed("/threads/{thread_id}/continue")
    async def continue_thread(
        thread_id: ThreadId, user: User, body: ContinueRequest | None = None
    ) -> Any:
        """Go on with a ``resumable`` thread (its run stopped mid-way, e.g. its server died)
        from its last checkpoint, and stream the run like a resume. Any other thread is a 409
        ``NOT_RESUMABLE``; a live run's is ``THREAD_BUSY``; nothing changes."""
        if await run_in_threadpool(threads.authorize, thread_id, user) is None:
            raise NotResumableError(thread_id, "new")
        deltas = body is not None and body.stream_deltas
        return await threads.stream(
            thread_id, user, lambda: deck.stream_continue(thread_id, stream_deltas=deltas)
        )

    @app.get(
        "/threads/{thread_id}/stream",
        response_class=EventStreamResponse,
        responses={**_SSE_RESPONSE, **responses(401, 404, stream=True)},
        tags=["threads"],
    )
    async def follow(
        thread_id: ThreadId,
        user: User,
        last_event_id: Annotated[
            str | None, Header(max_length=ID_MAX_LENGTH, pattern=ID_PATTERN)
        ] = None,
    ) -> Any:
        """The events of the thread's latest run in this process: those after
        ``Last-Event-ID`` (all of them without it), then the live ones until the run's end.
        Reconnect here when a run's stream breaks off."""
        await run_in_threadpool(threads.owned, thread_id, user)
        run_log = threads.logs.get(thread_id)
        if run_log is None:
            raise NotFound(
                "NO_RUN_STREAM",
                f"no run of thread {thread_id!r} has streamed in this server process; "
                f"GET /threads/{thread_id} shows where it stands",
            )
        return EventStreamResponse(run_log.follow(run_log.after(last_event_id)))

    @app.post(
        "/agui",
        response_class=EventStreamResponse,
        responses={
            **_AGUI_RESPONSE,
            **responses(401, 403, 404, 408, 409, 413, 422, 429, 503, stream=True),
        },
        tags=["agui"],
    )
    async def agui(body: AguiInput, user: User) -> Any:
        """The deck as an AG-UI agent: ``RunAgentInput`` in, AG-UI events out. A run starts
        from the last user message (routed by description) or ``forwardedProps`` (``input``,
        ``context``, ``matter_id``); a card ends it with an interrupt outcome whose
        ``responseSchema`` is the answers' schema; a ``resume`` entry answers the card.

        The thread id is the client's: a thread nobody has yet becomes the caller's when a
        run on it starts (a refused request stores nothing)."""
        thread_id = body.thread_id
        kind, asked = agui_request(body)  # a malformed matter id or context: 422 first
        known = await run_in_threadpool(threads.mine_or_free, thread_id, user)
        if kind == "resume" and not known:
            raise _unknown(thread_id)
        adopted = False
        if kind == "run":
            await run_in_threadpool(threads.check_matter, user, asked["matter_id"])
            if not known:
                await run_in_threadpool(threads.adopt, thread_id, user)
                adopted = True
        elif kind == "resume":
            await run_in_threadpool(threads.authorize, thread_id, user)

        def start() -> Iterator[Any]:
            if kind == "refuse":
                return refused(thread_id, body.run_id, asked["code"], asked["message"])
            if kind == "run":
                events = deck.stream(
                    asked["input"],
                    context=asked["context"],
                    thread_id=thread_id,
                    user_id=user,
                    matter_id=asked["matter_id"],
                    stream_deltas=True,
                )
            else:
                events = deck.stream_resume(
                    thread_id, asked["answers"], interrupt_id=asked["interrupt_id"],
                    stream_deltas=True,
                )  # fmt: skip

            def state() -> dict[str, Any]:
                return deck.get_thread(thread_id).state

            return agui_events(thread_id, body.run_id, events, state)

        try:
            return await threads.stream(thread_id, user, start, AGUI_EVENTS)
        except BaseException:
            if adopted:  # the run was refused: the thread it would have started is not kept
                await run_in_threadpool(threads.abandon, thread_id)
            raise

    @read("/threads/{thread_id}", ThreadView)
    async def get_thread(thread_id: ThreadId, user: User) -> ThreadView:
        """The thread's state and status, and its pending card when it is ``interrupted``."""
        return _thread_view(thread_id, await run_in_threadpool(threads.owned, thread_id, user))

    @read("/threads/{thread_id}/history", History)
    async def history(thread_id: ThreadId, user: User) -> History:
        """The thread's checkpoints, oldest first (one per step)."""
        result = await run_in_threadpool(threads.owned, thread_id, user)
        rows = [] if result is None else await run_in_threadpool(deck.history, thread_id)
        return History.model_validate({"thread_id": thread_id, "checkpoints": rows})

    if console:
        mount_console(app)
    return app
