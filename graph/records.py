"""What a run is made of: small frozen records, kept JSON-native in the checkpoint.

A run's state holds, beside the skills' own fields, a few records of the engine's: the turn a
skill is in (:class:`Turn`: its attempt, tool round and transcript head), the last attempt's
outcome (:class:`Attempt`), the pending interrupt (:class:`Interrupt`, a card today), the
error a run ended with (:class:`RunError`) and the loop guard (:class:`Guard`). Each problem
anything found is an :class:`Issue` (``path``, ``message``, ``code``).

Records are pydantic models, frozen: a step makes new ones (``record.model_copy(update=...)``)
and writes them as JSON-native values (:meth:`Record.dump`), so checkpoints stay loadable in
LangGraph's strict msgpack mode. Nodes, the driver and the service read them by attribute,
through :class:`RunView` (:mod:`skilldeck.graph.state`), never by string key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
)

__all__ = [
    "Attempt",
    "AttemptAction",
    "Guard",
    "Interrupt",
    "Issue",
    "Record",
    "Route",
    "RunError",
    "SkillStanding",
    "Tokens",
    "ToolCall",
    "ToolStatus",
    "Turn",
    "Upgrade",
    "UpgradePolicy",
    "issues",
]

ToolStatus = Literal["pending", "ok", "error", "refused"]
AttemptAction = Literal["continue", "finish", "ask_user", "retry", "rejected", "failed"]
#: What a resume does when the skill of its pending card or turn changed since (see
#: :class:`Upgrade`): refuse, run the new version, or run the bundle's ``scripts/migrate.py``.
UpgradePolicy = Literal["refuse", "latest", "migrate"]


class Record(BaseModel):
    """A frozen record of a run; ``dump()`` is its JSON-native form in the checkpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    #: Whether ``dump()`` writes fields at their defaults. The records an application reads
    #: in ``RunResult.state`` (the attempt, the card, the error, the guard) keep every key;
    #: the turn, rewritten at each step, leaves defaults out so checkpoints stay small.
    keep_defaults: ClassVar[bool] = True

    def dump(self) -> dict[str, Any]:
        """The record as the checkpoint keeps it."""
        return self.model_dump(mode="json", exclude_defaults=not self.keep_defaults)

    @classmethod
    def load(cls, value: Mapping[str, Any] | Self) -> Self:
        """The record a checkpoint holds (or the record itself)."""
        return value if isinstance(value, cls) else cls.model_validate(value)


class Issue(Record):
    """One problem: where (a JSON path, or a card's ``field_key``), what, and a code when the
    problem has one."""

    path: str = "$"
    message: str
    code: str | None = None

    @model_serializer(mode="wrap")
    def _code_when_given(self, handler: SerializerFunctionWrapHandler) -> Any:
        """``{path, message}``, and ``code`` when the problem has one (inside any record)."""
        data = handler(self)
        if isinstance(data, dict) and data.get("code") is None:
            data.pop("code", None)
        return data


def issues(found: Sequence[Mapping[str, str] | Issue]) -> tuple[Issue, ...]:
    """``found`` as issues (from the ``{"path", "message"}`` dicts validators produce)."""
    return tuple(Issue.load(i) for i in found)


class Tokens(Record):
    """Token usage, summed over a turn's model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def plus(self, usage: Mapping[str, Any] | None) -> Tokens:
        """These tokens and a call's ``usage_metadata``."""
        if not usage:
            return self
        return Tokens(
            input_tokens=self.input_tokens + int(usage.get("input_tokens", 0)),
            output_tokens=self.output_tokens + int(usage.get("output_tokens", 0)),
            total_tokens=self.total_tokens + int(usage.get("total_tokens", 0)),
        )


class Route(Record):
    """How the router chose a skill: the strategy and its reason (see
    :class:`~skilldeck.types.RouteDecision`)."""

    strategy: str
    reason: str


class ToolCall(Record):
    """One tool call of a turn: asked (``pending``), then run (``ok``/``error``) or
    ``refused``. Its result stays in the transcript (``ref``); only the fields an output is
    pinned to are kept here (``returned``)."""

    id: str
    name: str
    args: dict[str, JsonValue] = Field(default_factory=dict)
    status: ToolStatus = "pending"
    ms: float | None = None
    #: The transcript message that holds the result: ``<row>/<index>``.
    ref: str | None = None
    #: How many files the call changed (staged until the attempt's output is accepted).
    wrote: int = 0
    returned: dict[str, JsonValue] | None = None

    @property
    def worked(self) -> bool:
        return self.status == "ok"


class Upgrade(Record):
    """A resume that went on with another version of a skill than the one its pending card
    or turn was made by: the policy that allowed it and both fingerprints (kept on the
    :class:`Attempt` records the checkpoint history holds)."""

    skill: str
    policy: Literal["latest", "migrate"]
    old: str
    new: str


class Turn(Record):
    """A skill's turn in flight: from its opening prompt to an accepted output (or the run's
    end), across attempts and tool rounds. The transcript's messages are immutable rows in the
    store; ``head`` names the last one this turn has seen (:mod:`skilldeck.nodes.transcript`),
    so any checkpoint of the turn reads exactly the conversation it had.

    The turn is checkpointed at every step, so it holds only what does not grow with its
    rounds: the calls of the round in flight, tallies by tool, never the turn's list of calls.
    The records of the calls it ran are in the transcript beside their results
    (:func:`skilldeck.nodes.transcript.history`)."""

    keep_defaults: ClassVar[bool] = False

    id: str
    skill: str
    #: The fingerprint of the skill's bundle the turn runs (:attr:`SkillBundle.fingerprint`).
    fingerprint: str | None = None
    #: The resume that moved the turn to another version of its skill, if one did.
    upgrade: Upgrade | None = None
    attempt: int = 1
    round: int = 0
    head: str | None = None
    #: Messages the transcript holds up to ``head``.
    length: int = 0
    #: The calls the model asked for in this round, for the tools node to run.
    pending: tuple[ToolCall, ...] = ()
    #: The calls the last tools step ran (streams report them as they run).
    ran: tuple[ToolCall, ...] = ()
    #: This attempt's calls that worked, counted by tool (``tool_limits``, ``tool_after``).
    worked: dict[str, int] = Field(default_factory=dict)
    #: Tools with calls of earlier attempts whose results still stand (they changed no file):
    #: they meet a ``tool_choice`` or ``tool_after`` as well.
    standing: tuple[str, ...] = ()
    started: float = 0.0
    route: Route | None = None
    tokens: Tokens | None = None
    #: The model repeated calls that worked: only the output may follow.
    narrow: bool = False
    #: The digest of the last rejected reply (a repeat is told so).
    rejected: str | None = None
    #: What an execution mode recorded of the turn (a planner's rounds, a retrieval's steps).
    trajectory: JsonValue = None
    #: An execution mode's own state between steps of the turn.
    mode_state: JsonValue = None
    #: Why the mode fell back from its model to its rules, if it did.
    model_error: str | None = None

    def counted(self, calls: Sequence[ToolCall]) -> dict[str, int]:
        """:attr:`worked` with those of ``calls`` that worked."""
        worked = dict(self.worked)
        for call in calls:
            if call.worked:
                worked[call.name] = worked.get(call.name, 0) + 1
        return worked


class Interrupt(Record):
    """What a run waits for a person for: a card's questions (``kind`` ``card``)."""

    id: str
    kind: Literal["card"] = "card"
    skill: str
    #: The fingerprint of the skill's bundle that asked (a resume checks it against its own).
    fingerprint: str | None = None
    review_type: str
    questions: tuple[dict[str, JsonValue], ...]
    #: The schema of the field each answer writes, by field key.
    fields: dict[str, JsonValue] = Field(default_factory=dict)
    #: Why the last answers were refused, if they were.
    errors: tuple[Issue, ...] = ()


class Attempt(Record):
    """The outcome of a skill's last attempt (the checkpoint history keeps every one);
    ``head`` is the turn's transcript as the attempt left it (see :class:`Turn`)."""

    skill: str
    turn: str
    attempt: int
    #: The fingerprint of the skill's bundle the attempt ran (:attr:`Turn.fingerprint`).
    fingerprint: str | None = None
    #: The resume that went on with another version of the skill than the one the turn (or
    #: the card it asked) was made by: set on the turn's attempts, or on the record of the
    #: attempt that asked the card.
    upgrade: Upgrade | None = None
    head: str | None = None
    action: AttemptAction
    model: str | None = None
    output_mode: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    validation_errors: tuple[Issue, ...] = ()
    route: Route | None = None
    tokens: Tokens | None = None
    trajectory: JsonValue = None
    started_at: str | None = None
    duration_ms: float | None = None


class SkillStanding(Record):
    """A skill and why it could not start a run (``NO_SKILL``)."""

    skill: str
    reason: str


class RunError(Record):
    """Why a run ended ``failed`` or ``no_skill``, or stopped ``resumable``: a stable code and
    a message safe to show (provider text never reaches it: see
    :mod:`skilldeck._internal.redact`)."""

    code: str
    message: str
    skill: str | None = None
    errors: tuple[Issue, ...] = ()
    skills: tuple[SkillStanding, ...] = ()


class Guard(Record):
    """The loop guard: the skill chosen last, a digest of the state it was chosen on, and how
    many times in a row; and how the router chose it."""

    skill: str
    fingerprint: str
    count: int = 1
    route: Route | None = None
