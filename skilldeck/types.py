"""Public types of skilldeck: what runs return and what cards look like."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["Card", "CardOption", "CardQuestion", "RunResult", "ThreadStatus", "ThreadSummary"]

ThreadStatus = Literal["running", "interrupted", "finished", "failed"]


class CardOption(TypedDict):
    label: str
    value: str | int | float | bool


class CardQuestion(TypedDict):
    """One question of an ask_user card (seed 004, section 4)."""

    question: str
    field_key: str
    input_type: Literal["text", "select", "multi_select", "boolean", "file_ids"]
    required: bool
    options: NotRequired[list[CardOption]]


class Card(TypedDict):
    """The ``event=card`` payload a paused run emits; answer it with ``SkillDeck.resume``."""

    event: Literal["card"]
    thread_id: str
    skill: str
    review_type: str
    questions: list[CardQuestion]
    interrupt_id: str
    errors: NotRequired[list[dict[str, str]]]


@dataclass(frozen=True, slots=True)
class RunResult:
    """Where a thread stands after ``run``/``resume``, or when read with ``get_thread``.

    ``status`` is ``interrupted`` (``card`` is set), ``finished``, ``failed`` (``error`` is set)
    or ``running`` (a run was cut off; run the thread again to continue it).
    """

    status: ThreadStatus
    thread_id: str
    state: dict[str, Any]
    card: Card | None = None
    error: dict[str, Any] | None = None
    checkpoint_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-native dict, as the CLI's ``--json`` prints it."""
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
