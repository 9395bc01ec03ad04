"""The AG-UI protocol: a deck run as an AG-UI agent, so AG-UI clients drive it unchanged.

``POST /agui`` takes AG-UI's ``RunAgentInput`` and streams AG-UI events. A run starts from the
last user message (the request, ``input.request``, routed by description in context ``auto``)
or from ``forwardedProps`` (``input``, ``context``, ``matter_id``); a card is the run's interrupt
outcome (``RUN_FINISHED`` with ``outcome.type = "interrupt"``, the card's questions and the
answers' JSON Schema as ``responseSchema``), and a ``resume`` entry answers it.

The event types and the encoder are the maintained ``ag-ui-protocol`` package's. The mapping
is skilldeck's own, from its typed events: ``ag-ui-langgraph`` drives a compiled graph
directly, which would bypass what a deck checks before a run (identity, the thread's owner,
card claims, routing), so it is not used.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from pydantic import Field, field_validator

from skilldeck._internal.ids import Identifier, check_id, id_problem
from skilldeck.errors import SkillDeckError
from skilldeck.nodes.router import AUTO_CONTEXT
from skilldeck.server.runlog import Protocol
from skilldeck.types import (
    CardEvent,
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    StepEvent,
    ToolCallEvent,
)

__all__ = [
    "AGUI_EVENTS",
    "AguiInput",
    "AguiRefusal",
    "AguiRequest",
    "AguiResume",
    "AguiRun",
    "agui_events",
    "agui_request",
    "encode_agui",
    "refused",
]

_ENCODER = EventEncoder()


def encode_agui(event: BaseEvent, id: str) -> bytes:
    """One AG-UI event as an SSE message, with its id (for ``Last-Event-ID``)."""
    return f"id: {id}\n{_ENCODER.encode(event)}".encode()


#: How a run's AG-UI events go on the wire; a failed run ends with ``RUN_ERROR``.
AGUI_EVENTS = Protocol(
    encode_agui, lambda thread_id, code, reason: RunErrorEvent(message=str(reason), code=code)
)


#: The longest ``forwardedProps.context``, as in a run request's ``context``.
MAX_CONTEXT = 200


class AguiInput(RunAgentInput):
    """AG-UI's ``RunAgentInput``, whose ids a client chooses (the thread's, the run's, the
    messages' and tool calls', the interrupts') held to the ids a deck accepts
    (:mod:`skilldeck._internal.ids`): each is repeated in the run's events, and the thread id
    names a stored thread."""

    thread_id: Identifier = Field(alias="threadId")
    run_id: Identifier = Field(alias="runId")
    parent_run_id: Identifier | None = Field(default=None, alias="parentRunId")

    @field_validator("messages")
    @classmethod
    def _message_ids(cls, messages: list[Any]) -> list[Any]:
        for i, message in enumerate(messages):
            named = {
                "id": message.id,
                "subagentRunId": getattr(message, "subagent_run_id", None),
                "toolCallId": getattr(message, "tool_call_id", None),
            }
            for j, call in enumerate(getattr(message, "tool_calls", None) or ()):
                named[f"toolCalls[{j}].id"] = call.id
            _check_ids(f"messages[{i}]", named)
        return messages

    @field_validator("resume")
    @classmethod
    def _interrupt_ids(cls, resume: list[Any] | None) -> list[Any] | None:
        for i, entry in enumerate(resume or ()):
            _check_ids(f"resume[{i}]", {"interruptId": entry.interrupt_id})
        return resume


def _check_ids(where: str, named: Mapping[str, Any]) -> None:
    for name, value in named.items():
        problem = None if value is None else id_problem(value)
        if problem is not None:
            raise ValueError(f"{where}.{name} {problem}")


@dataclass(frozen=True)
class AguiRun:
    """An AG-UI input that starts a run: its input, the context it runs in, its matter."""

    input: dict[str, Any]
    context: str
    matter_id: str | None


@dataclass(frozen=True)
class AguiResume:
    """An AG-UI input that answers the thread's pending card."""

    answers: dict[str, Any]
    interrupt_id: str | None


@dataclass(frozen=True)
class AguiRefusal:
    """An AG-UI input that is valid AG-UI but asks nothing a deck can do: the run ends with
    ``RUN_ERROR`` (``code``, ``message``) and nothing changes."""

    code: str
    message: str


#: What an AG-UI input asks of the deck.
AguiRequest = AguiRun | AguiResume | AguiRefusal


def agui_request(body: RunAgentInput) -> AguiRequest:
    """What an AG-UI input asks of the deck: a run, the answers to its card, or nothing it
    can do (a refusal).

    Raises:
        SkillDeckError: ``forwardedProps.matter_id`` is not an id, or ``forwardedProps.context``
            is not a short string (answered 422 before anything is stored or claimed).
    """
    if body.resume:
        return _resume_request(body.resume[0])
    props = body.forwarded_props if isinstance(body.forwarded_props, Mapping) else {}
    given = props.get("input")
    if given is not None and not isinstance(given, Mapping):
        return AguiRefusal("INVALID_INPUT", "forwardedProps.input must be an object")
    run_input = dict(given or {})
    said = [m for m in body.messages if getattr(m, "role", None) == "user"]
    if said and "request" not in run_input:
        run_input["request"] = _text(said[-1].content)
    if not run_input:
        return AguiRefusal(
            "NOTHING_TO_RUN", "nothing to run: send a user message, or forwardedProps.input"
        )
    matter_id = props.get("matter_id")
    if matter_id is not None:
        check_id("forwardedProps.matter_id", matter_id)
    context = props.get("context") or AUTO_CONTEXT
    if not isinstance(context, str) or len(context) > MAX_CONTEXT:
        raise SkillDeckError(
            f"forwardedProps.context must be a string of at most {MAX_CONTEXT} characters "
            f"(a context the skills run in, or {AUTO_CONTEXT!r})"
        )
    return AguiRun(run_input, context, matter_id)


def _resume_request(entry: ResumeEntry) -> AguiResume | AguiRefusal:
    """The answers of a ``resume`` entry, or a refusal of one that carries none."""
    if entry.status != "resolved":
        return AguiRefusal(
            "RESUME_CANCELLED",
            f"the card {entry.interrupt_id!r} was not answered (status {entry.status!r}); it "
            "stays pending: resume it with status 'resolved' and the answers as the payload",
        )
    if not isinstance(entry.payload, Mapping):
        return AguiRefusal(
            "INVALID_ANSWERS", "a resume payload is the card's answers: {field_key: value}"
        )
    return AguiResume(dict(entry.payload), entry.interrupt_id)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return " ".join(str(getattr(p, "text", "")) for p in parts if getattr(p, "text", None))


#: Reads the thread's state when its run ends (for ``STATE_SNAPSHOT``).
ReadState = Callable[[], dict[str, Any]]


def refused(thread_id: str, run_id: str, refusal: AguiRefusal) -> Iterator[BaseEvent]:
    """The AG-UI events of an input that asks nothing a deck can do: nothing ran."""
    yield RunStartedEvent(thread_id=thread_id, run_id=run_id)
    yield RunErrorEvent(message=refusal.message, code=refusal.code)


def agui_events(
    thread_id: str, run_id: str, events: Iterator[Event], state: ReadState
) -> Iterator[BaseEvent]:
    """The AG-UI events of a run's skilldeck events; ``state()`` is the thread's state at the
    end (its ``STATE_SNAPSHOT``)."""
    yield RunStartedEvent(thread_id=thread_id, run_id=run_id)
    replies = _Replies(run_id)
    for event in events:
        yield from replies.add(event)
        if isinstance(event, StepEvent):
            yield StepStartedEvent(step_name=event.node)
            yield StepFinishedEvent(step_name=event.node)
        elif isinstance(event, ToolCallEvent):
            yield from _tool_call(event)
        elif isinstance(event, CardEvent | DoneEvent | ErrorEvent):
            yield from _end(thread_id, run_id, event, state)
    yield from replies.end()


class _Replies:
    """The text messages of a run's model replies, one per reply: a reply's deltas come
    together, and any other event (a tool call, a step) ends the reply they belong to."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.count = 0
        self.message: str | None = None  # the message open now, and the reply it is of
        self.source: tuple[str, int | None] | None = None

    def add(self, event: Event) -> Iterator[BaseEvent]:
        """End the open message unless ``event`` goes on with it; a delta's text."""
        here = (event.skill, event.attempt) if isinstance(event, DeltaEvent) else None
        if here != self.source:
            yield from self.end()
        if isinstance(event, DeltaEvent):
            if self.message is None:
                self.count += 1
                self.message, self.source = f"{self.run_id}-reply-{self.count}", here
                yield TextMessageStartEvent(message_id=self.message, role="assistant")
            yield TextMessageContentEvent(message_id=self.message, delta=event.text)

    def end(self) -> Iterator[BaseEvent]:
        """End the open message, if any."""
        if self.message is not None:
            yield TextMessageEndEvent(message_id=self.message)
        self.message = self.source = None


def _tool_call(event: ToolCallEvent) -> Iterator[BaseEvent]:
    yield ToolCallStartEvent(tool_call_id=event.call_id, tool_call_name=event.name)
    yield ToolCallArgsEvent(tool_call_id=event.call_id, delta=json.dumps(event.args or {}))
    yield ToolCallEndEvent(tool_call_id=event.call_id)
    yield ToolCallResultEvent(
        message_id=f"{event.call_id}-result",
        tool_call_id=event.call_id,
        content=event.status,
        role="tool",
    )


def _end(
    thread_id: str, run_id: str, event: CardEvent | DoneEvent | ErrorEvent, state: ReadState
) -> Iterator[BaseEvent]:
    if isinstance(event, ErrorEvent):
        yield RunErrorEvent(message=event.message, code=event.code)
        return
    yield StateSnapshotEvent(snapshot=state())
    if isinstance(event, CardEvent):
        questions = [q.get("question") for q in event.questions]
        interrupt = Interrupt(
            id=event.interrupt_id,
            reason=event.review_type,
            message="; ".join(str(q) for q in questions if q),
            response_schema=event.answers_schema,
            metadata={"skill": event.skill, "questions": event.questions},
        )
        outcome: Any = RunFinishedInterruptOutcome(interrupts=[interrupt])
        yield RunFinishedEvent(thread_id=thread_id, run_id=run_id, outcome=outcome)
        return
    yield RunFinishedEvent(
        thread_id=thread_id,
        run_id=run_id,
        result={"status": event.status, "response": event.response},
        outcome=RunFinishedSuccessOutcome(),
    )
