"""Public types of skilldeck: what runs return and what cards look like."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    from langchain_core.callbacks import BaseCallbackHandler

    from skilldeck.checkpoints.threads import ThreadRecord
    from skilldeck.graph.records import RunError

__all__ = [
    "Card",
    "CardEvent",
    "CardOption",
    "CardQuestion",
    "Continue",
    "DeltaEvent",
    "DoneEvent",
    "ErrorEvent",
    "Event",
    "InputType",
    "Problem",
    "PruneReport",
    "Resume",
    "RouteCandidate",
    "RouteDecision",
    "RouteStrategy",
    "RunOptions",
    "RunRequest",
    "RunResult",
    "SkillResultEvent",
    "StepEvent",
    "ThreadStatus",
    "ThreadSummary",
    "ToolCallEvent",
]

ThreadStatus = Literal[
    "new", "running", "resumable", "interrupted", "finished", "failed", "no_skill"
]
"""Where a thread stands: ``new`` (created over HTTP, never run), ``running`` (a run goes on),
``resumable`` (its run stopped before its end and no live run holds it, e.g. its process died:
``SkillDeck.run(Continue(thread_id))`` goes on from its last checkpoint), ``interrupted`` (a card
waits), ``finished``, ``failed`` (``error`` says why) or ``no_skill`` (no skill could run:
``error.skills`` says why for each)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem of a skill bundle: the file, the JSON path in it, and what is wrong.

    ``severity`` is ``error`` (the bundle does not load) or ``warning`` (it loads; ``skilldeck
    check --strict`` fails on it). ``rule`` names the rule a warning is about, if any.
    """

    file: str
    json_path: str
    message: str
    severity: Literal["error", "warning"] = "error"
    rule: str | None = None

    def __str__(self) -> str:
        return f"{self.file}: {self.json_path}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


RouteStrategy = Literal["forced", "priority", "conditions", "order", "model", "lexical", "none"]
"""What decided a routing, in the order of the chain: ``forced`` (``next_skill``), ``priority``
(one candidate has the highest ``priority``), ``conditions`` (one skill's triggers and requires
hold), ``model`` or ``lexical`` (routing by description among tied candidates, or in context
``auto``), ``order`` (tied candidates and nothing to route by: load order), ``none``."""


@dataclass(frozen=True, slots=True)
class RouteCandidate:
    """One skill in a routing decision: whether it was a candidate and why (not); with its
    lexical ``score``, its ``coverage`` of the request and the request's words its name and
    description match (``matched``) when the lexical ranker ran."""

    skill: str
    candidate: bool
    reason: str
    score: float | None = None
    coverage: float | None = None
    matched: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Which skill a request goes to (``None``: none), the strategy that decided it and why,
    and every skill's standing (``skills``, best first). ``model``: the routing model asked."""

    skill: str | None
    strategy: RouteStrategy
    reason: str
    skills: tuple[RouteCandidate, ...] = ()
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CardOption(TypedDict):
    label: str
    value: str | int | float | bool


InputType = Literal["text", "select", "multi_select", "boolean", "file_ids", "number", "integer"]
"""What a card question's answer is: a string (``text``), one or several option values
(``select``, ``multi_select``), ``true``/``false`` (``boolean``), a list of file ids
(``file_ids``), or a number (``number``; ``integer``: a whole number) within ``minimum`` and
``maximum`` when they are given."""


class CardQuestion(TypedDict):
    """One question of an ask_user card (seed 004, section 4). ``minimum``/``maximum`` bound a
    ``number`` or ``integer`` answer; ``error_message`` is said to the person instead of the
    validator's words when the answer is not valid."""

    question: str
    field_key: str
    input_type: InputType
    required: bool
    options: NotRequired[list[CardOption]]
    minimum: NotRequired[float]
    maximum: NotRequired[float]
    error_message: NotRequired[str]


class Card(TypedDict):
    """The ``event=card`` payload a paused run emits; answer it with ``SkillDeck.resume``."""

    event: Literal["card"]
    thread_id: str
    skill: str
    review_type: str
    questions: list[CardQuestion]
    interrupt_id: str
    #: JSON Schema of the answers ``{field_key: value}``: each of its question's type, and
    #: valid for the field it writes.
    answers_schema: NotRequired[dict[str, Any]]
    errors: NotRequired[list[dict[str, str]]]


@dataclass(frozen=True, slots=True)
class RunResult:
    """Where a thread stands after ``run``/``resume``, or when read with ``get_thread``.

    ``status`` is ``interrupted`` (``card`` is set), ``finished``, ``failed`` (``error`` is set),
    ``no_skill`` (no skill could run; ``error`` lists each skill and why it was not a
    candidate), ``running`` (a run goes on) or ``resumable`` (a run stopped mid-way and nothing
    runs it: ``deck.run(Continue(thread_id))`` goes on from its last checkpoint).
    """

    status: ThreadStatus
    thread_id: str
    state: dict[str, Any]
    card: Card | None = None
    #: Why the run ended ``failed`` or ``no_skill``, or stopped ``resumable``.
    error: RunError | None = None
    checkpoint_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-native dict, as the CLI's ``--json`` prints it."""
        return {
            "status": self.status,
            "thread_id": self.thread_id,
            "state": self.state,
            "card": self.card,
            "error": None if self.error is None else self.error.dump(),
            "checkpoint_id": self.checkpoint_id,
        }


@dataclass(frozen=True, slots=True)
class Resume:
    """A run request that answers the pending card of ``thread_id``:
    ``deck.run(Resume(thread_id, {field_key: value}))``. ``interrupt_id`` (the card's) makes
    sure the answers go to the card the person saw: a card answered meanwhile is refused."""

    thread_id: str
    answers: Mapping[str, Any]
    interrupt_id: str | None = None


@dataclass(frozen=True, slots=True)
class Continue:
    """A run request that goes on with a ``resumable`` thread from its last checkpoint, with
    no new input and no answers: ``deck.run(Continue(thread_id))``. For a thread whose run
    stopped before its end (its process died, or its model endpoint stayed away)."""

    thread_id: str


RunRequest = Mapping[str, Any] | str | Resume | Continue | None
"""What ``SkillDeck.run`` and ``stream`` take: a new turn's input (a mapping, or a string
request that routing by description reads; ``None``: an empty input), a :class:`Resume` or a
:class:`Continue`."""


class RunOptions(TypedDict, total=False):
    """The options of ``SkillDeck.run`` and ``stream``. A new turn needs ``context`` and may
    name its thread (a new one by default), identity and first skill, and set the thread's
    time-to-live (``ttl``: seconds, ``"30d"``-style, or ``"never"``; by default
    ``settings.thread_ttl``); a :class:`Resume` or :class:`Continue` goes on with the thread's
    own, and takes only ``metadata`` and ``callbacks`` (which go into the run's LangChain
    config)."""

    context: str
    thread_id: str | None
    user_id: str | None
    matter_id: str | None
    next_skill: str | None
    metadata: Mapping[str, Any] | None
    callbacks: Sequence[BaseCallbackHandler] | None
    ttl: float | str | None


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one prune did (``SkillDeck.prune``, ``skilldeck prune``), or would do (``dry_run``).

    Attributes:
        expired: threads expired when the prune started (none whose card waits).
        deleted: threads deleted, each with its checkpoints, transcripts, index row and claims.
        busy: expired threads left alone because a run (or another prune) held them.
        pending: expired threads left alone because a card of theirs waits (their index row
            was behind their checkpoint).
        finished: finished threads whose checkpoints were not thinned since their last run
            (counted with ``thin`` only).
        thinned: of those, the threads thinned to their last checkpoint.
        checkpoints_removed: the checkpoints thinning removed.
        seconds: how long the prune took.
        dry_run: nothing was deleted: ``deleted`` and ``thinned`` say what would be.
    """

    expired: int = 0
    deleted: int = 0
    busy: int = 0
    pending: int = 0
    finished: int = 0
    thinned: int = 0
    checkpoints_removed: int = 0
    seconds: float = 0.0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One row of ``SkillDeck.threads()``."""

    thread_id: str
    status: ThreadStatus
    user_id: str | None
    last_skill: str | None
    steps: int
    updated_at: str | None
    created_at: str | None = None
    matter_id: str | None = None
    model: str | None = None
    #: The first words of the thread's input, or of its response.
    title: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: ThreadRecord) -> ThreadSummary:
        """The summary of a thread index row."""
        return cls(
            thread_id=record.thread_id,
            status=record.status,  # type: ignore[arg-type]
            user_id=record.user_id,
            last_skill=record.skill,
            steps=record.steps,
            updated_at=record.updated_at,
            created_at=record.created_at,
            matter_id=record.matter_id,
            model=record.model,
            title=record.title,
        )


# -- stream events ----------------------------------------------------------------------------
# ``SkillDeck.stream`` yields these. Every stream ends with exactly one terminal event: ``card``
# (the run paused), ``done`` (it ended without a card) or ``error`` (it failed).


class _Event:
    __slots__ = ()
    event: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-native dict with the event name first (the SSE ``data`` of the event)."""
        return {"event": self.event, **asdict(self)}  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class StepEvent(_Event):
    """A graph node finished a step; its writes are checkpointed.

    ``skill`` is the skill the step worked for; ``status`` is set when the step changed the
    thread's status.
    """

    event: ClassVar[Literal["step"]] = "step"
    thread_id: str
    node: str
    skill: str | None = None
    status: ThreadStatus | None = None


@dataclass(frozen=True, slots=True)
class ToolCallEvent(_Event):
    """A tool call of a skill ran (``status`` ok or error) or was refused (not allowed)."""

    event: ClassVar[Literal["tool_call"]] = "tool_call"
    thread_id: str
    skill: str
    name: str
    call_id: str
    status: str
    args: dict[str, Any] | None = None
    ms: float | None = None


@dataclass(frozen=True, slots=True)
class SkillResultEvent(_Event):
    """A skill attempt ended: accepted (``action`` continue, finish or ask_user, with the data
    fields and profile increment it merged) or rejected (``validation_errors``; retried)."""

    event: ClassVar[Literal["skill_result"]] = "skill_result"
    thread_id: str
    skill: str
    action: str
    attempt: int
    response: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    validation_errors: list[dict[str, str]] = field(default_factory=list)
    model: str | None = None


@dataclass(frozen=True, slots=True)
class CardEvent(_Event):
    """The run paused on a card (terminal); ``to_dict()`` is the seed's ``event=card`` payload.

    Answer it with ``SkillDeck.run(Resume(thread_id, answers, interrupt_id=...))``.
    """

    event: ClassVar[Literal["card"]] = "card"
    thread_id: str
    skill: str
    review_type: str
    questions: list[CardQuestion]
    interrupt_id: str
    errors: list[dict[str, str]] = field(default_factory=list)
    answers_schema: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The card payload; ``errors`` only when a previous answer was refused, as in
        :attr:`RunResult.card`."""
        body = _Event.to_dict(self)
        if not self.errors:
            del body["errors"]
        if self.answers_schema is None:
            del body["answers_schema"]
        return body

    @property
    def card(self) -> Card:
        """The card as :attr:`RunResult.card` holds it."""
        return self.to_dict()  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class ErrorEvent(_Event):
    """The run failed, or no skill could run (terminal): ``code`` and ``message`` say why;
    ``details`` has the rest (a skill's last ``errors``; for ``NO_SKILL``, ``skills``: each
    skill and why it was not a candidate)."""

    event: ClassVar[Literal["error"]] = "error"
    thread_id: str
    code: str
    message: str
    skill: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeltaEvent(_Event):
    """Text a skill's model is generating, as it comes (only when a stream asks for deltas:
    ``deltas=True``). The validated result still arrives in ``skill_result``."""

    event: ClassVar[Literal["delta"]] = "delta"
    thread_id: str
    skill: str
    attempt: int | None
    text: str


@dataclass(frozen=True, slots=True)
class DoneEvent(_Event):
    """The run ended without a card (terminal); ``status`` is the thread's status."""

    event: ClassVar[Literal["done"]] = "done"
    thread_id: str
    status: ThreadStatus
    response: str | None = None
    checkpoint_id: str | None = None


Event = (
    StepEvent | DeltaEvent | ToolCallEvent | SkillResultEvent | CardEvent | ErrorEvent | DoneEvent
)
"""Any event of a run's stream; match on the class or on ``event.event``."""
