"""Drive a compiled graph with a checked request, on LangGraph's sync or async API.

The deck checks a request once (:class:`Request` is the outcome); how it then runs is the only
thing that differs between ``run``/``stream``/``resume`` and their async forms, so that part
lives here as two mirror-image drivers. A resume's card is claimed before the graph runs and the
claim is given back if the run fails or is abandoned, so the card can be answered again. Every
request then takes the thread's run lease (:data:`~skilldeck.checkpoints.claims.RUN_LEASE`),
held until the graph stops, so no two processes drive one thread at once.

Claims are made in the request's own name (its holder token), from the moment it is accepted to
its last checkpoint. A stream may start long after that (the service queues runs for a worker):
when it does, the request confirms that it still holds its claims and that the thread is still
where it was checked, or gives up with :class:`~skilldeck.errors.StaleRunError` having run
nothing, so a request that waited past its lease never runs over another process's turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.errors import GraphBubbleUp, GraphRecursionError
from langgraph.types import StateSnapshot

from skilldeck._internal.events import EventTranslator, terminal_event
from skilldeck._internal.postgres import connection_errors
from skilldeck._internal.redact import log_error
from skilldeck.checkpoints.claims import RUN_LEASE, Clock, InterruptClaims, new_holder
from skilldeck.checkpoints.inspect import (
    pending_card,
    read_history,
    read_snapshot,
    state_fields,
    thread_status,
)
from skilldeck.checkpoints.threads import ThreadIndex, thread_title
from skilldeck.errors import (
    AlreadyResumedError,
    CheckpointError,
    SkillDeckError,
    SkillNotLoadedError,
    StaleRunError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from skilldeck.nodes.context import ROUTER_NODE
from skilldeck.nodes.model_call import DEADLINE_KEY, RUN_TIMEOUT_KEY
from skilldeck.settings import Settings
from skilldeck.types import Event, RunResult

__all__ = ["AsyncDriver", "Driver", "Request", "checkpoint_errors", "run_result"]

Claim = tuple[str, str]
log = logging.getLogger("skilldeck")


class Request(NamedTuple):
    """A checked run or resume request."""

    payload: Any  # the update that starts a turn, or the Command that resumes a card
    config: RunnableConfig
    # The thread before the run: the event stream must not report its earlier tool calls again.
    snapshot: StateSnapshot | None
    claim: Claim | None = None  # (thread_id, interrupt_id) of the card a resume answers
    deltas: bool = False  # stream the models' text as it is generated (delta events)
    holder: str = ""  # the token the request's claims are made in (see Driver._take)

    @property
    def modes(self) -> list[str]:
        """The LangGraph stream modes the request needs."""
        return ["updates", "messages"] if self.deltas else ["updates"]

    @property
    def thread_id(self) -> str:
        """The thread the request runs."""
        return str(self.config["configurable"]["thread_id"])

    @property
    def lease(self) -> Claim:
        """The thread's run lease."""
        return self.thread_id, RUN_LEASE

    def takes(self) -> list[tuple[Claim, SkillDeckError]]:
        """What the request claims before the graph runs, in order, with the error of a loss:
        the card first, so of two resumes of one card the loser hears ``ALREADY_RESUMED``."""
        takes: list[tuple[Claim, SkillDeckError]] = []
        if self.claim is not None:
            takes.append((self.claim, AlreadyResumedError(*self.claim)))
        return [*takes, (self.lease, ThreadBusyError(self.thread_id))]

    def held(self) -> Request:
        """The request with a holder token of its own, for the claims it is about to make."""
        return self._replace(holder=new_holder())

    def overtaken(self) -> SkillDeckError:
        """The error of a request whose thread moved on after it was checked: a resume's card
        was answered by another request (whose claim is gone by now), else a run went on."""
        if self.claim is not None:
            return AlreadyResumedError(*self.claim)
        return ThreadBusyError(self.thread_id)

    def moved(self, latest: CheckpointTuple | None) -> bool:
        """Whether the thread's ``latest`` checkpoint is not the one the request was checked
        against (a run that ended between the check and the lease): check the request again."""
        return _checkpoint_id(self.snapshot) != _checkpoint_id(latest)


@dataclass(frozen=True)
class _Base:
    graph: Any
    settings: Settings
    data_keys: Mapping[str, frozenset[str]]
    claims: InterruptClaims
    index: ThreadIndex
    #: The deck's skills and their fingerprints, recorded with each run in the thread index.
    skills: Mapping[str, str]
    #: The bundle folders of the deck's skills (recorded too: a resume can reopen them).
    sources: Sequence[str]

    def config(
        self,
        thread_id: str,
        identity: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        callbacks: Sequence[BaseCallbackHandler] | None = None,
        checkpoint_id: str | None = None,
    ) -> RunnableConfig:
        """The LangGraph config of a thread (at ``checkpoint_id``), with the run's identity."""
        configurable = {"thread_id": thread_id, **(identity or {})}
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        # The run's deadline, for every model call: the host's, or a shorter one the request
        # asks for in its metadata (an eval task's timeout).
        limits = [self.settings.run_timeout_s, (metadata or {}).get(RUN_TIMEOUT_KEY)]
        timeout = min((float(t) for t in limits if t is not None), default=None)
        if timeout is not None:
            configurable[DEADLINE_KEY] = time.time() + timeout
        config: RunnableConfig = {
            "configurable": configurable,
            "recursion_limit": self.settings.max_steps,
        }
        if metadata:
            config["metadata"] = dict(metadata)
        if callbacks:
            config["callbacks"] = list(callbacks)
        return config

    def _run_options(self) -> dict[str, Any]:
        return {"durability": self.settings.durability, "version": "v2"}

    def _check_fields(self, thread_id: str, latest: CheckpointTuple | None) -> None:
        """Refuse a thread that holds state fields this deck's skills do not declare: a run
        here would checkpoint the state without them."""
        if latest is None:
            return
        stored = state_fields(latest.checkpoint["channel_values"])
        foreign = sorted(k for k in stored if k not in self.graph.channels)
        if foreign:
            record = self.index.get(thread_id)
            sources = record.sources if record is not None else ()
            raise SkillNotLoadedError(thread_id, fields=foreign, sources=sources)

    def _started(self, request: Request) -> None:
        """Record in the thread index that ``request``'s run starts (it holds the lease)."""
        identity = request.config["configurable"]
        given = request.payload.get("input") if isinstance(request.payload, Mapping) else None
        with checkpoint_errors():
            self.index.started(
                request.thread_id,
                user_id=identity.get("user_id"),
                matter_id=identity.get("matter_id"),
                skills=self.skills,
                sources=self.sources,
                model=self.settings.model,
                title=thread_title(given),
            )

    def _stopped(self, thread_id: str, snapshot: StateSnapshot | None) -> RunResult:
        """Record in the thread index where the run left the thread; the thread."""
        if snapshot is None:
            raise ThreadNotFoundError(thread_id, where=self.index.where)
        result = run_result(thread_id, snapshot)
        with checkpoint_errors():
            self.index.stopped(
                thread_id,
                status=result.status,
                skill=(result.state.get("attempt") or {}).get("skill"),
                steps=int((snapshot.metadata or {}).get("step", -1)) + 1,
                title=thread_title(result.state.get("input"), result.state.get("response")),
            )
        return result

    def _translator(self, request: Request) -> EventTranslator:
        state = request.snapshot.values if request.snapshot is not None else None
        return EventTranslator(request.thread_id, self.data_keys, state)


class Driver(_Base):
    """Runs requests on the graph compiled with the deck's sync checkpointer."""

    def snapshot(self, thread_id: str) -> StateSnapshot | None:
        """The thread's latest snapshot, or ``None`` for a thread never run."""
        with checkpoint_errors():
            return _ran(self.graph.get_state(self.config(thread_id)))

    def thread(self, thread_id: str) -> RunResult:
        """The thread as it stands now, with every state field any skill wrote (loaded here or
        not); ``resumable`` when its run stopped mid-way and no live run holds it.
        :class:`ThreadNotFoundError` if it was never run."""
        with checkpoint_errors():
            snapshot = _ran(read_snapshot(self.graph, self.config(thread_id)))
        result = _found(thread_id, snapshot, self.index.where)
        if result.status != "running":
            return result
        return _resumable(result, self.claims.live([thread_id]))

    def history(self, thread_id: str) -> list[StateSnapshot]:
        """The thread's snapshots, newest first, each with every state field it holds."""
        with checkpoint_errors():
            return read_history(self.graph, self.config(thread_id))

    def _latest(self, thread_id: str) -> CheckpointTuple | None:
        # The saved checkpoint alone: a snapshot would also rebuild every channel and task.
        with checkpoint_errors():
            found: CheckpointTuple | None = self.graph.checkpointer.get_tuple(
                _latest_config(thread_id)
            )
        return found

    def invoke(self, request: Request) -> RunResult:
        """Run to a card or the end; the thread afterwards."""
        request = request.held()
        self._take(request)
        with self._holding(request) as lease:
            for _ in self._parts(request, lease):
                pass
            return self._stopped(request.thread_id, self.snapshot(request.thread_id))

    def events(self, request: Request) -> Iterator[Event]:
        """Claim the card and the thread now (a losing request raises before any event), then
        stream; the stream confirms its claims when it starts (see the module docstring)."""
        request = request.held()
        self._take(request)
        return self._events(request)

    def _events(self, request: Request) -> Iterator[Event]:
        translator = self._translator(request)
        with self._holding(request) as lease:
            self._confirm(request)
            for part in self._parts(request, lease):
                yield from translator.feed(part)
            # Read before the lease goes, so the outcome is this run's and not a next one's.
            result = self._stopped(request.thread_id, self.snapshot(request.thread_id))
        yield terminal_event(result)

    def _parts(self, request: Request, lease: _Lease) -> Iterator[Any]:
        """The graph's updates, renewing the run lease as it goes; a run that breaks on
        something the engine did not foresee ends ``failed``, never stuck ``running``."""
        with checkpoint_errors():
            try:
                for part in self.graph.stream(
                    request.payload,
                    request.config,
                    stream_mode=request.modes,
                    **self._run_options(),
                ):
                    if lease.due():
                        lease.renewed(self.claims.renew(*request.lease, request.holder))
                    yield part
            except Exception as exc:
                if _foreseen(exc):
                    raise
                self.graph.update_state(request.config, _broken(request, exc), as_node=ROUTER_NODE)

    def _take(self, request: Request) -> None:
        """Claim what ``request`` takes, and check it still fits the thread; on a failure
        give back what was claimed."""
        with contextlib.ExitStack() as undo:
            for claim, lost in request.takes():
                with checkpoint_errors():
                    won = self.claims.claim(*claim, request.holder)
                    for pause in _pauses(claim):
                        if won:
                            break
                        time.sleep(pause)
                        won = self.claims.claim(*claim, request.holder)
                if not won:
                    raise lost
                undo.callback(self.claims.release, *claim, request.holder)
            latest = self._latest(request.thread_id)
            if request.moved(latest):
                raise request.overtaken()
            self._check_fields(request.thread_id, latest)
            self._started(request)
            undo.pop_all()

    def _confirm(self, request: Request) -> None:
        """Before a stream that was accepted earlier runs: the request still holds what it
        claimed (renewed now; taken again if its row went, e.g. swept) and the thread is still
        at the checkpoint it was checked against; else :class:`StaleRunError`, nothing run."""
        with checkpoint_errors():
            for claim, _ in request.takes():
                if not self.claims.renew(*claim, request.holder) and not self.claims.claim(
                    *claim, request.holder
                ):
                    raise StaleRunError(request.thread_id)
        if request.moved(self._latest(request.thread_id)):
            raise StaleRunError(request.thread_id)

    @contextlib.contextmanager
    def _holding(self, request: Request) -> Iterator[_Lease]:
        lease = _Lease(self.claims, request.thread_id)
        try:
            yield lease
        finally:
            # The card's claim goes either way: a failed or abandoned resume (GeneratorExit
            # too) gives the card back; a resume that ran has checkpointed the answers, and a
            # later one finds the card no longer pending. So claims never pile up. A claim
            # that was taken over is the new holder's: giving back ours leaves it alone.
            if request.claim is not None:
                self.claims.release(*request.claim, request.holder)
            self.claims.release(*request.lease, request.holder)


class AsyncDriver(_Base):
    """:class:`Driver` on LangGraph's async API, for the graph of the running event loop."""

    async def snapshot(self, thread_id: str) -> StateSnapshot | None:
        """The thread's latest snapshot, or ``None`` for a thread never run."""
        with checkpoint_errors():
            return _ran(await self.graph.aget_state(self.config(thread_id)))

    async def thread(self, thread_id: str) -> RunResult:
        """The thread as it stands now (see :meth:`Driver.thread`)."""
        result = _found(thread_id, await self.snapshot(thread_id), self.index.where)
        if result.status != "running":
            return result
        return _resumable(result, await asyncio.to_thread(self.claims.live, [thread_id]))

    async def _latest(self, thread_id: str) -> CheckpointTuple | None:
        with checkpoint_errors():
            found: CheckpointTuple | None = await self.graph.checkpointer.aget_tuple(
                _latest_config(thread_id)
            )
        return found

    async def invoke(self, request: Request) -> RunResult:
        """Run to a card or the end; the thread afterwards."""
        request = request.held()
        await self._take(request)
        async with self._holding(request) as lease:
            async for _ in self._parts(request, lease):
                pass
            snapshot = await self.snapshot(request.thread_id)
            return await asyncio.to_thread(self._stopped, request.thread_id, snapshot)

    async def events(self, request: Request) -> AsyncIterator[Event]:
        """Claim the card and the thread (a losing request raises before any event), then
        stream. The claims are made when the stream starts, so there is nothing to confirm."""
        request = request.held()
        await self._take(request)
        translator = self._translator(request)
        async with self._holding(request) as lease:
            async for part in self._parts(request, lease):
                for event in translator.feed(part):
                    yield event
            snapshot = await self.snapshot(request.thread_id)
            result = await asyncio.to_thread(self._stopped, request.thread_id, snapshot)
        yield terminal_event(result)

    async def _parts(self, request: Request, lease: _Lease) -> AsyncIterator[Any]:
        with checkpoint_errors():
            try:
                async for part in self.graph.astream(
                    request.payload,
                    request.config,
                    stream_mode=request.modes,
                    **self._run_options(),
                ):
                    if lease.due():
                        lease.renewed(await self.claims.arenew(*request.lease, request.holder))
                    yield part
            except Exception as exc:
                if _foreseen(exc):
                    raise
                update = _broken(request, exc)
                await self.graph.aupdate_state(request.config, update, as_node=ROUTER_NODE)

    async def _take(self, request: Request) -> None:
        async with contextlib.AsyncExitStack() as undo:
            for claim, lost in request.takes():
                with checkpoint_errors():
                    won = await self.claims.aclaim(*claim, request.holder)
                    for pause in _pauses(claim):
                        if won:
                            break
                        await asyncio.sleep(pause)
                        won = await self.claims.aclaim(*claim, request.holder)
                if not won:
                    raise lost
                undo.push_async_callback(self.claims.arelease, *claim, request.holder)
            latest = await self._latest(request.thread_id)
            if request.moved(latest):
                raise request.overtaken()
            await asyncio.to_thread(self._check_fields, request.thread_id, latest)
            await asyncio.to_thread(self._started, request)
            undo.pop_all()

    @contextlib.asynccontextmanager
    async def _holding(self, request: Request) -> AsyncIterator[_Lease]:
        lease = _Lease(self.claims, request.thread_id)
        try:
            yield lease
        finally:  # see Driver._holding
            if request.claim is not None:
                await self.claims.arelease(*request.claim, request.holder)
            await self.claims.arelease(*request.lease, request.holder)


class _Lease:
    """The pace of a request's renewals of its run lease: every third of the lease (on the
    claims' clock), so a live run keeps it however long it runs."""

    def __init__(self, claims: InterruptClaims, thread_id: str) -> None:
        self.thread_id = thread_id
        self.clock: Clock = claims.clock
        self.every = claims.lease_s / 3 if claims.lease_s is not None else None
        self.last = self.clock()

    def due(self) -> bool:
        """Whether to renew now (then it counts as renewed)."""
        now = self.clock()
        if self.every is None or now - self.last < self.every:
            return False
        self.last = now
        return True

    def renewed(self, still_ours: bool) -> None:
        """Stop the run if the lease is no longer ours: another process took it over (it found
        this one's owner gone, or the lease expired between renewals) and runs the thread now.
        The lease is then theirs (giving ours back leaves it alone)."""
        if not still_ours:
            raise ThreadBusyError(self.thread_id)


def _foreseen(exc: Exception) -> bool:
    """Errors with a meaning of their own: requests refused, databases away, interrupts."""
    return isinstance(exc, (SkillDeckError, sqlite3.Error, GraphBubbleUp, *connection_errors()))


def _broken(request: Request, exc: Exception) -> dict[str, Any]:
    """The update that ends a run broken by ``exc`` as ``failed``; the details go to the log,
    which may hold what a client must not see."""
    if isinstance(exc, GraphRecursionError):
        code, message = "STEP_LIMIT", "the run took more steps than SKILLDECK_MAX_STEPS allows"
    else:
        reason = log_error(log, f"run of thread {request.thread_id} broke", exc)
        code = "INTERNAL_ERROR"
        message = f"the run stopped on an internal error ({reason}); see the log"
    return {"status": "failed", "error": {"code": code, "message": message}, "turn": None}


def _pauses(claim: Claim) -> Iterator[float]:
    """Pauses before asking again for a busy run lease, about 2 s in all: a run that reached
    its card (or end) gives its lease back a moment after checkpointing it, so a client that
    saw the card by polling the thread may already answer. A card claim is never waited for."""
    if claim[1] == RUN_LEASE:
        yield from (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8)


def _latest_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _checkpoint_id(found: StateSnapshot | CheckpointTuple | None) -> str | None:
    return None if found is None else found.config["configurable"].get("checkpoint_id")


def _ran(snapshot: StateSnapshot) -> StateSnapshot | None:
    # LangGraph answers an unknown thread with an empty snapshot rather than an error.
    return snapshot if snapshot.created_at is not None else None


def _resumable(result: RunResult, live: set[str]) -> RunResult:
    """A ``running`` thread that no live run holds stopped mid-way (its process died, or its
    stream was abandoned): it is ``resumable``."""
    return result if result.thread_id in live else replace(result, status="resumable")


def _found(thread_id: str, snapshot: StateSnapshot | None, where: str) -> RunResult:
    if snapshot is None:
        raise ThreadNotFoundError(thread_id, where=where)
    return run_result(thread_id, snapshot)


def run_result(thread_id: str, snapshot: StateSnapshot) -> RunResult:
    """A thread's :class:`RunResult` at ``snapshot``, with its pending card if it is paused."""
    status = thread_status(snapshot)
    return RunResult(
        status=status,
        thread_id=thread_id,
        state=dict(snapshot.values),
        card=pending_card(snapshot.interrupts[0]) if snapshot.interrupts else None,
        error=snapshot.values.get("error") if status in ("failed", "no_skill") else None,
        checkpoint_id=snapshot.config["configurable"].get("checkpoint_id"),
    )


# SQLite's answers when another connection holds the lock past the busy timeout.
_LOCKED = ("SQLITE_BUSY", "SQLITE_LOCKED")


@contextlib.contextmanager
def checkpoint_errors() -> Iterator[None]:
    """Turn database failures into :class:`CheckpointError` with a hint; the database's own
    text (which may name its host, user or files) goes to the log."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        reason = log_error(log, "checkpoint database unavailable", exc, level=logging.WARNING)
        if getattr(exc, "sqlite_errorname", None) in _LOCKED:
            raise CheckpointError(
                f"checkpoint database is locked by another process ({reason}); retry, or raise "
                "SKILLDECK_SQLITE_TIMEOUT_S"
            ) from exc
        raise CheckpointError(
            f"checkpoint database unavailable ({reason}); the details are in the log"
        ) from exc
    except connection_errors() as exc:
        reason = log_error(log, "checkpoint database unavailable", exc, level=logging.WARNING)
        raise CheckpointError(
            f"checkpoint database unavailable ({reason}); the server may be restarting: retry "
            "in a moment; the details are in the log"
        ) from exc
