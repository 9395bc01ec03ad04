"""The one driver: runs a checked request on a compiled graph, async.

The deck checks a request once (:class:`Prepared` is the outcome: a new turn, a card's answers,
or going on with a stopped run); this module runs it. The synchronous API drives the same code
on an event loop private to the calling thread (:mod:`skilldeck._internal.aio`), where the
graph's savers and nodes run their blocking work inline; an application's own loop gets the
async savers and worker threads. So there is one way to run, and no mirror image to keep.

A resume's card is claimed before the graph runs and the claim is given back if the run fails
or is abandoned, so the card can be answered again. Every request takes the thread's run lease
(:data:`~skilldeck.checkpoints.claims.RUN_LEASE`), held (and renewed) until the graph stops, so
no two processes drive one thread at once. Claims are made in the request's own name (its
holder token), from the moment it is accepted to its last checkpoint. A stream may start long
after that (the service queues runs for a worker): when it does, the request confirms that it
still holds its claims and that the thread is still where it was checked, or gives up with
:class:`~skilldeck.errors.StaleRunError` having run nothing.

A request may carry a ``stop`` flag (a :class:`threading.Event`; the service sets it when it
drains before a restart): once it is set, the run ends after the step that is running, at its
checkpoint, with its claims given back, and the thread is ``resumable`` with the reason
``STOPPED``; continuing it goes on from there.

A model endpoint that stays away through every transport retry
(:class:`~skilldeck.errors.ModelUnavailableError`) stops the run at its last checkpoint: the
driver records the reason in the state and the thread is ``resumable``; continuing it retries
the step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, ParamSpec, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.errors import GraphBubbleUp, GraphRecursionError
from langgraph.types import Command, StateSnapshot

from skilldeck._internal.events import EventTranslator, terminal_event
from skilldeck._internal.postgres import connection_errors
from skilldeck._internal.redact import log_error
from skilldeck.checkpoints.claims import RUN_LEASE, Clock, InterruptClaims, new_holder
from skilldeck.checkpoints.inspect import pending_card, state_fields, thread_status
from skilldeck.checkpoints.threads import ThreadIndex, thread_title
from skilldeck.errors import (
    AlreadyResumedError,
    CheckpointError,
    ErrorCode,
    ModelUnavailableError,
    SkillDeckError,
    SkillNotLoadedError,
    StaleRunError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from skilldeck.graph.records import RunError
from skilldeck.graph.state import RunView
from skilldeck.nodes.context import ROUTER_NODE
from skilldeck.nodes.model_call import DEADLINE_KEY, RUN_TIMEOUT_KEY
from skilldeck.settings import Settings
from skilldeck.types import Continue, Event, Resume, RunResult

__all__ = [
    "Driver",
    "Prepared",
    "checkpoint_errors",
    "request_kind",
    "run_config",
    "run_result",
]

Claim = tuple[str, str]
P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger("skilldeck")


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked request: what the graph is given, and what the request claims."""

    #: The update that starts a turn, the ``Command`` that resumes a card, or ``None``: go on
    #: from the last checkpoint.
    payload: Any
    config: RunnableConfig
    #: The thread before the run: the event stream must not report its earlier tool calls
    #: again, and a thread that moved since is not run.
    before: StateSnapshot | None
    #: ``(thread_id, interrupt_id)`` of the card a resume answers.
    card: Claim | None = None
    #: Stream the models' text as it is generated (delta events).
    deltas: bool = False
    #: The token the request's claims are made in.
    holder: str = field(default_factory=new_holder)
    #: Once set, the run ends after the step that is running (see the module docstring).
    stop: threading.Event | None = None
    #: The thread's time-to-live from this run on, in seconds (``None``: never expires), or
    #: ``"keep"``: its own (a new thread's is the deck's default, ``settings.thread_ttl``).
    ttl: float | Literal["keep"] | None = "keep"

    @property
    def thread_id(self) -> str:
        return str(self.config["configurable"]["thread_id"])

    @property
    def modes(self) -> list[str]:
        """The LangGraph stream modes the request needs."""
        return ["updates", "messages"] if self.deltas else ["updates"]

    @property
    def lease(self) -> Claim:
        return self.thread_id, RUN_LEASE

    def takes(self) -> list[tuple[Claim, SkillDeckError]]:
        """What the request claims before the graph runs, in order, with the error of a loss:
        the card first, so of two resumes of one card the loser hears ``ALREADY_RESUMED``."""
        takes: list[tuple[Claim, SkillDeckError]] = []
        if self.card is not None:
            takes.append((self.card, AlreadyResumedError(*self.card)))
        return [*takes, (self.lease, ThreadBusyError(self.thread_id))]

    def overtaken(self) -> SkillDeckError:
        """The error of a request whose thread moved on after it was checked: a resume's card
        was answered by another request (whose claim is gone by now), else a run went on."""
        if self.card is not None:
            return AlreadyResumedError(*self.card)
        return ThreadBusyError(self.thread_id)

    def moved(self, latest: CheckpointTuple | None) -> bool:
        """Whether the thread's ``latest`` checkpoint is not the one the request was checked
        against (a run that ended between the check and the lease)."""
        return _checkpoint_id(self.before) != _checkpoint_id(latest)


def request_kind(request: object) -> Literal["run", "resume", "continue"]:
    """What a request to run does, as metrics and traces name it: a card's answers
    (``resume``), going on from the last checkpoint (``continue``), or a new turn (``run``)."""
    if isinstance(request, Resume):
        return "resume"
    return "continue" if isinstance(request, Continue) else "run"


def run_config(
    settings: Settings,
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
    # The run's deadline, for every model call: the host's, or a shorter one the request asks
    # for in its metadata (an eval task's timeout).
    limits = [settings.run_timeout_s, (metadata or {}).get(RUN_TIMEOUT_KEY)]
    timeout = min((float(t) for t in limits if t is not None), default=None)
    if timeout is not None:
        configurable[DEADLINE_KEY] = time.time() + timeout
    config: RunnableConfig = {"configurable": configurable, "recursion_limit": settings.max_steps}
    if metadata:
        config["metadata"] = dict(metadata)
    if callbacks:
        config["callbacks"] = list(callbacks)
    return config


@dataclass(frozen=True)
class Driver:
    """Runs prepared requests on ``graph`` (the deck's, for the loop it is used on)."""

    graph: Any
    settings: Settings
    data_keys: Mapping[str, frozenset[str]]
    claims: InterruptClaims
    index: ThreadIndex
    #: The deck's skills and their fingerprints, recorded with each run in the thread index.
    skills: Mapping[str, str]
    #: The bundle folders of the deck's skills (recorded too: a resume can reopen them).
    sources: Sequence[str]
    #: Call the claims and the thread index inline: the synchronous API's private loop, where
    #: blocking the loop blocks only its caller (as its savers do, see
    #: :mod:`skilldeck.checkpoints.inline`); else each call goes to a worker thread.
    inline: bool = False

    async def _io(self, call: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``call`` (blocking database I/O) inline or on a worker thread (see ``inline``): a
        thread hop costs more than one of these SQLite statements."""
        if self.inline:
            return call(*args, **kwargs)
        return await asyncio.to_thread(call, *args, **kwargs)

    # -- reading ------------------------------------------------------------------------
    async def snapshot(self, thread_id: str) -> StateSnapshot | None:
        """The thread's latest snapshot, or ``None`` for a thread never run."""
        with checkpoint_errors():
            found = await self.graph.aget_state(run_config(self.settings, thread_id))
        return found if found.created_at is not None else None

    async def _latest(self, thread_id: str) -> CheckpointTuple | None:
        # The saved checkpoint alone: a snapshot would also rebuild every channel and task.
        with checkpoint_errors():
            found: CheckpointTuple | None = await self.graph.checkpointer.aget_tuple(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            )
        return found

    # -- running ------------------------------------------------------------------------
    async def invoke(self, request: Prepared) -> RunResult:
        """Claim what ``request`` takes, then run to a card or the end; the thread afterwards."""
        await self.take(request)
        result = None
        # Taken just now: the run starts at once, with nothing to confirm.
        async with contextlib.aclosing(self._drive(request, confirm=False)) as drive:
            async for item in drive:
                result = item
        assert isinstance(result, RunResult)  # _drive ends with the thread
        return result

    async def events(self, request: Prepared) -> AsyncIterator[Event]:
        """The run's events, ending with exactly one ``card``, ``done`` or ``error`` event.
        The request's claims were :meth:`take`-n when it was accepted; the run, which may start
        later, confirms them first."""
        before = request.before.values if request.before is not None else None
        translator = EventTranslator(request.thread_id, self.data_keys, before)
        # Closed with the stream: a stream that is left gives its claims back at once.
        async with contextlib.aclosing(self._drive(request)) as drive:
            async for item in drive:
                if isinstance(item, RunResult):
                    yield terminal_event(item)
                else:
                    for event in translator.feed(item):
                        yield event

    async def take(self, request: Prepared) -> None:
        """Claim what ``request`` takes, and check it still fits the thread; on a failure
        give back what was claimed (a losing request raises here, before any event)."""
        async with contextlib.AsyncExitStack() as undo:
            for claim, lost in request.takes():
                with checkpoint_errors():
                    won = await self._io(self.claims.claim, *claim, request.holder)
                    for pause in _pauses(claim):
                        if won:
                            break
                        await asyncio.sleep(pause)
                        won = await self._io(self.claims.claim, *claim, request.holder)
                if not won:
                    raise lost
                undo.push_async_callback(self._release, claim, request.holder)
            latest = await self._latest(request.thread_id)
            if request.moved(latest):
                raise request.overtaken()
            self._check_fields(request.thread_id, latest)
            await self._io(self._started, request)
            undo.pop_all()

    async def _release(self, claim: Claim, holder: str) -> None:
        await self._io(self.claims.release, *claim, holder)

    async def _drive(self, request: Prepared, *, confirm: bool = True) -> AsyncGenerator[Any, None]:
        """The graph's stream parts, then the thread as the run left it (a
        :class:`RunResult`); the request's claims are given back however it ends. ``confirm``:
        check the claims first (a stream's run may start long after they were taken)."""
        lease = _Lease(self.claims, request.thread_id)
        stopped = False
        try:
            if confirm:
                await self._confirm(request)
            async with contextlib.aclosing(self._parts(request, lease)) as parts:
                async for part in parts:
                    yield part
                    # Only between steps: a step's update part comes once its writes are saved.
                    if request.stop is not None and request.stop.is_set() and _step_end(part):
                        stopped = True
                        break
            # Read before the lease goes, so the outcome is this run's and not a next one's.
            result = await self._stopped(request.thread_id, stopped)
        finally:
            # The card's claim goes either way: a failed or abandoned resume gives the card
            # back; a resume that ran has checkpointed the answers, and a later one finds the
            # card no longer pending. So claims never pile up. A claim that was taken over is
            # the new holder's: giving back ours leaves it alone.
            for claim in (request.card, request.lease):
                if claim is not None:
                    await self._give_back(claim, request.holder)
        # After the lease went: whoever sees the outcome (a card) may act on the thread at once.
        yield result

    async def _give_back(self, claim: Claim, holder: str) -> None:
        """Release a claim as a run ends. One that cannot be released (the database went
        away, or the deck was closed under an abandoned stream) runs out with its lease."""
        try:
            await self._io(self.claims.release, *claim, holder)
        except Exception as exc:
            log_error(log, f"claim {claim} not released", exc, level=logging.WARNING)

    async def _confirm(self, request: Prepared) -> None:
        """The request still holds what it claimed (renewed now; taken again if its row went,
        e.g. swept) and the thread is still at the checkpoint it was checked against; else
        :class:`StaleRunError`, nothing run."""
        with checkpoint_errors():
            for claim, _ in request.takes():
                renewed = await self._io(self.claims.renew, *claim, request.holder)
                if not renewed and not await self._io(self.claims.claim, *claim, request.holder):
                    raise StaleRunError(request.thread_id)
                if not renewed and claim == request.lease:
                    # The lease row went while the run waited (swept, or a prune deleted the
                    # expired thread with it): record the thread again as the run starts.
                    await self._io(self._started, request)
        if request.moved(await self._latest(request.thread_id)):
            raise StaleRunError(request.thread_id)

    async def _parts(self, request: Prepared, lease: _Lease) -> AsyncGenerator[Any, None]:
        """The graph's stream parts, renewing the run lease as it goes. A run that breaks on
        something the engine did not foresee ends ``failed``, never stuck ``running``; one
        whose model endpoint stayed away stops ``resumable``."""
        stream = self.graph.astream(
            request.payload,
            request.config,
            stream_mode=request.modes,
            durability=self.settings.durability,
            version="v2",
        )
        with checkpoint_errors():
            try:
                # Closed with this generator: a run stopped between steps lets LangGraph's loop
                # finish saving the last step's writes before the thread is read.
                async with contextlib.aclosing(stream):
                    async for part in stream:
                        if lease.due():
                            renewed = await self._io(
                                self.claims.renew, *request.lease, request.holder
                            )
                            lease.renewed(renewed)
                        yield part
            except ModelUnavailableError as exc:
                await self._stop_resumable(request, exc)
            except Exception as exc:
                if _foreseen(exc):
                    raise
                update = _broken(request, exc)
                await self.graph.aupdate_state(request.config, update, as_node=ROUTER_NODE)

    async def _stop_resumable(self, request: Prepared, exc: ModelUnavailableError) -> None:
        """Record why the run stopped at its last checkpoint, leaving its next step pending:
        the thread reads ``resumable`` (no live run holds it once this one lets go)."""
        state = await self.graph.aget_state(request.config)
        pending = list(state.next)
        if not pending:  # nothing to go on with: the step that failed was the last one
            return
        skill = next((n for n in pending if n in self.data_keys), None)
        error = RunError(code=exc.code.value, message=str(exc), skill=skill).dump()
        # Written as the step that would run, so it stays pending after the write.
        await self.graph.aupdate_state(
            request.config, Command(update={"error": error}, goto=pending), as_node=ROUTER_NODE
        )

    # -- the thread index -----------------------------------------------------------------
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

    def _started(self, request: Prepared) -> None:
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
                ttl_s=self.settings.thread_ttl if request.ttl == "keep" else request.ttl,
                keep_ttl=request.ttl == "keep",
            )

    async def _stopped(self, thread_id: str, asked: bool = False) -> RunResult:
        """Record in the thread index where the run left the thread; the thread (``asked``:
        the run was stopped between steps by its request's ``stop`` flag)."""
        snapshot = await self.snapshot(thread_id)
        if snapshot is None:
            raise ThreadNotFoundError(thread_id, where=self.index.where)
        result = run_result(thread_id, snapshot)
        view = RunView(result.state)
        if result.status == "running" and view.error is not None:
            # Stopped at its last checkpoint by the reason it records (the model endpoint
            # stayed away): nothing runs it now, it is resumable.
            result = replace(result, status="resumable", error=view.error)
        elif result.status == "running" and asked:
            result = replace(result, status="resumable", error=_STOPPED)
        with checkpoint_errors():
            await self._io(
                self.index.stopped,
                thread_id,
                status=result.status,
                skill=view.attempt.skill if view.attempt is not None else None,
                steps=int((snapshot.metadata or {}).get("step", -1)) + 1,
                title=thread_title(view.input, view.response),
            )
        return result


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


#: Why a run its request stopped is ``resumable`` (not recorded in the state: continuing it
#: simply goes on).
_STOPPED = RunError(
    code=ErrorCode.STOPPED.value,
    message="the run was stopped after its last step, at its checkpoint (its server is "
    "shutting down); the thread is resumable: continue it",
)


def _step_end(part: Mapping[str, Any]) -> bool:
    """Whether a stream part ends a step (a node's update), not a model's text chunk."""
    return part.get("type") == "updates"


def _foreseen(exc: Exception) -> bool:
    """Errors with a meaning of their own: requests refused, databases away, interrupts."""
    return isinstance(exc, (SkillDeckError, sqlite3.Error, GraphBubbleUp, *connection_errors()))


def _broken(request: Prepared, exc: Exception) -> dict[str, Any]:
    """The update that ends a run broken by ``exc`` as ``failed``; the details go to the log,
    which may hold what a client must not see."""
    if isinstance(exc, GraphRecursionError):
        code, message = "STEP_LIMIT", "the run took more steps than SKILLDECK_MAX_STEPS allows"
    else:
        reason = log_error(log, f"run of thread {request.thread_id} broke", exc)
        code = "INTERNAL_ERROR"
        message = f"the run stopped on an internal error ({reason}); see the log"
    error = RunError(code=code, message=message).dump()
    return {"status": "failed", "error": error, "turn": None}


def _pauses(claim: Claim) -> Iterator[float]:
    """Pauses before asking again for a busy run lease, about 2 s in all: a run that reached
    its card (or end) gives its lease back a moment after checkpointing it, so a client that
    saw the card by polling the thread may already answer. A card claim is never waited for."""
    if claim[1] == RUN_LEASE:
        yield from (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8)


def _checkpoint_id(found: StateSnapshot | CheckpointTuple | None) -> str | None:
    return None if found is None else found.config["configurable"].get("checkpoint_id")


def resumable(result: RunResult, live: set[str]) -> RunResult:
    """A ``running`` thread that no live run holds stopped mid-way (its process died, its
    stream was abandoned, or its model endpoint stayed away): it is ``resumable``."""
    if result.status != "running" or result.thread_id in live:
        return result
    view = RunView(result.state)
    return replace(result, status="resumable", error=view.error)


def run_result(thread_id: str, snapshot: StateSnapshot) -> RunResult:
    """A thread's :class:`RunResult` at ``snapshot``, with its pending card if it is paused."""
    status = thread_status(snapshot)
    view = RunView(snapshot.values)
    return RunResult(
        status=status,
        thread_id=thread_id,
        state=dict(snapshot.values),
        card=pending_card(snapshot.interrupts[0]) if snapshot.interrupts else None,
        error=view.error if status in ("failed", "no_skill") else None,
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
