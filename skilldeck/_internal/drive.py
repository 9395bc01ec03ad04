"""Drive a compiled graph with a checked request, on LangGraph's sync or async API.

The deck checks a request once (:class:`Request` is the outcome); how it then runs is the only
thing that differs between ``run``/``stream``/``resume`` and their async forms, so that part
lives here as two mirror-image drivers. A resume's card is claimed before the graph runs and the
claim is given back if the run fails or is abandoned, so the card can be answered again.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from skilldeck._internal.events import EventTranslator, terminal_event
from skilldeck._internal.postgres import connection_errors
from skilldeck.checkpoints.claims import InterruptClaims
from skilldeck.checkpoints.inspect import pending_card, thread_status
from skilldeck.errors import AlreadyResumedError, CheckpointError, ThreadNotFoundError
from skilldeck.settings import Settings
from skilldeck.types import Event, RunResult

__all__ = ["AsyncDriver", "Driver", "Request", "checkpoint_errors", "run_result"]

Claim = tuple[str, str]


class Request(NamedTuple):
    """A checked run or resume request."""

    payload: Any  # the update that starts a turn, or the Command that resumes a card
    config: RunnableConfig
    # The thread before the run: the event stream must not report its earlier tool calls again.
    snapshot: StateSnapshot | None
    claim: Claim | None = None  # (thread_id, interrupt_id) of the card a resume answers

    @property
    def thread_id(self) -> str:
        """The thread the request runs."""
        return str(self.config["configurable"]["thread_id"])


@dataclass(frozen=True)
class _Base:
    graph: Any
    settings: Settings
    data_keys: Mapping[str, frozenset[str]]
    claims: InterruptClaims

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
        """The thread as it stands now; :class:`ThreadNotFoundError` if it was never run."""
        return _found(thread_id, self.snapshot(thread_id))

    def invoke(self, request: Request) -> RunResult:
        """Run to a card or the end; the thread afterwards."""
        self._claim(request.claim)
        with self._releasing(request.claim):
            with checkpoint_errors():
                self.graph.invoke(request.payload, request.config, **self._run_options())
            return self.thread(request.thread_id)

    def events(self, request: Request) -> Iterator[Event]:
        """Claim the card now (a losing resume raises before any event), then stream."""
        self._claim(request.claim)
        return self._events(request)

    def _events(self, request: Request) -> Iterator[Event]:
        translator = self._translator(request)
        with self._releasing(request.claim), checkpoint_errors():
            for part in self.graph.stream(
                request.payload, request.config, stream_mode=["updates"], **self._run_options()
            ):
                yield from translator.feed(part)
        yield terminal_event(self.thread(request.thread_id))

    def _claim(self, claim: Claim | None) -> None:
        if claim is not None:
            with checkpoint_errors():
                _won(claim, self.claims.claim(*claim))

    @contextlib.contextmanager
    def _releasing(self, claim: Claim | None) -> Iterator[None]:
        try:
            yield
        except BaseException:  # also GeneratorExit: an abandoned stream gives its claim back
            if claim is not None:
                self.claims.release(*claim)
            raise


class AsyncDriver(_Base):
    """:class:`Driver` on LangGraph's async API, for the graph of the running event loop."""

    async def snapshot(self, thread_id: str) -> StateSnapshot | None:
        """The thread's latest snapshot, or ``None`` for a thread never run."""
        with checkpoint_errors():
            return _ran(await self.graph.aget_state(self.config(thread_id)))

    async def thread(self, thread_id: str) -> RunResult:
        """The thread as it stands now; :class:`ThreadNotFoundError` if it was never run."""
        return _found(thread_id, await self.snapshot(thread_id))

    async def invoke(self, request: Request) -> RunResult:
        """Run to a card or the end; the thread afterwards."""
        await self._claim(request.claim)
        try:
            with checkpoint_errors():
                await self.graph.ainvoke(request.payload, request.config, **self._run_options())
            return await self.thread(request.thread_id)
        except BaseException:
            await self._release(request.claim)
            raise

    async def events(self, request: Request) -> AsyncIterator[Event]:
        """Claim the card (a losing resume raises before any event), then stream."""
        await self._claim(request.claim)
        translator = self._translator(request)
        try:
            with checkpoint_errors():
                async for part in self.graph.astream(
                    request.payload, request.config, stream_mode=["updates"], **self._run_options()
                ):
                    for event in translator.feed(part):
                        yield event
        except BaseException:  # also GeneratorExit: an abandoned stream gives its claim back
            await self._release(request.claim)
            raise
        yield terminal_event(await self.thread(request.thread_id))

    async def _claim(self, claim: Claim | None) -> None:
        if claim is not None:
            with checkpoint_errors():
                _won(claim, await self.claims.aclaim(*claim))

    async def _release(self, claim: Claim | None) -> None:
        if claim is not None:
            await self.claims.arelease(*claim)


def _ran(snapshot: StateSnapshot) -> StateSnapshot | None:
    # LangGraph answers an unknown thread with an empty snapshot rather than an error.
    return snapshot if snapshot.created_at is not None else None


def _found(thread_id: str, snapshot: StateSnapshot | None) -> RunResult:
    if snapshot is None:
        raise ThreadNotFoundError(thread_id)
    return run_result(thread_id, snapshot)


def _won(claim: Claim, won: bool) -> None:
    if not won:
        raise AlreadyResumedError(*claim)


def run_result(thread_id: str, snapshot: StateSnapshot) -> RunResult:
    """A thread's :class:`RunResult` at ``snapshot``, with its pending card if it is paused."""
    status = thread_status(snapshot)
    return RunResult(
        status=status,
        thread_id=thread_id,
        state=dict(snapshot.values),
        card=pending_card(snapshot.interrupts[0]) if snapshot.interrupts else None,
        error=snapshot.values.get("error") if status == "failed" else None,
        checkpoint_id=snapshot.config["configurable"].get("checkpoint_id"),
    )


@contextlib.contextmanager
def checkpoint_errors() -> Iterator[None]:
    """Turn database failures into :class:`CheckpointError` with a hint."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise CheckpointError(
            f"checkpoint database unavailable ({exc}); if another process holds a write lock, "
            "retry or raise SKILLDECK_SQLITE_TIMEOUT_S"
        ) from exc
    except connection_errors() as exc:
        reason = " ".join(str(exc).split())  # libpq's messages span lines
        raise CheckpointError(
            f"checkpoint database unavailable ({type(exc).__name__}: {reason}); the server may "
            "be restarting: retry in a moment"
        ) from exc
