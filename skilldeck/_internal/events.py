"""Translate LangGraph ``updates`` (and ``messages``) stream parts into skilldeck's events.

Each node update becomes a :class:`~skilldeck.types.StepEvent`; the call records a tools step
ran (``turn.ran``) become :class:`~skilldeck.types.ToolCallEvent` (with the arguments the skill
asked for, remembered from its ``turn.pending``); a skill's attempt record becomes a
:class:`~skilldeck.types.SkillResultEvent`; a model's text chunk (``messages`` mode, when
deltas are asked for) becomes a :class:`~skilldeck.types.DeltaEvent`. The terminal event is
built from the thread's final state, so it is the same whether the run was streamed or not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from skilldeck.graph.records import Turn
from skilldeck.graph.state import RunView
from skilldeck.nodes.context import CARD_NODE
from skilldeck.nodes.model_call import ATTEMPT_KEY
from skilldeck.nodes.route_model import ROUTER_KEY
from skilldeck.scripted import SKILL_KEY
from skilldeck.types import (
    CardEvent,
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    RunResult,
    SkillResultEvent,
    StepEvent,
    ToolCallEvent,
)

__all__ = ["EventTranslator", "terminal_event"]

# Attempt actions that end an attempt without a failure; "failed" is reported by the error event.
_RESULT_ACTIONS = ("continue", "finish", "ask_user", "rejected")


class EventTranslator:
    """Turns one run's stream parts into events.

    Args:
        thread_id: the run's thread.
        data_keys: each skill's data fields, by skill name.
        state: the thread's state before the run (to know calls already pending), if any.
    """

    def __init__(
        self,
        thread_id: str,
        data_keys: Mapping[str, frozenset[str]],
        state: Mapping[str, Any] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.data_keys = data_keys
        before = RunView(state or {})
        # The card node's steps work for the skill that asked the card.
        self._card_skill = before.card.skill if before.card is not None else None
        self._args: dict[str, dict[str, Any]] = {}
        # The calls of the last tools step, reported already: a step that carries the turn on
        # unchanged carries them too (a skill step clears them when it asks for more calls).
        self._seen = {c.id for c in before.turn.ran} if before.turn is not None else set()
        self._remember(before.turn)

    def _remember(self, turn: Turn | None) -> None:
        for call in turn.pending if turn is not None else ():
            self._args[call.id] = dict(call.args)

    def feed(self, part: Mapping[str, Any]) -> Iterator[Event]:
        """The events of one ``updates`` or ``messages`` stream part (``version="v2"``)."""
        if part.get("ns"):
            return
        if part.get("type") == "messages":
            yield from self._delta(*part["data"])
            return
        if part.get("type") != "updates":
            return
        for node, update in (part.get("data") or {}).items():
            if node.startswith("__") or not isinstance(update, Mapping):
                continue  # interrupts: the terminal card event reads them from the state
            yield from self._node(node, update)

    def _delta(self, chunk: Any, meta: Mapping[str, Any]) -> Iterator[Event]:
        """A skill's model text as it is generated (routing calls are not a skill's text)."""
        skill = meta.get(SKILL_KEY)
        text = getattr(chunk, "content", None)
        if skill and skill != ROUTER_KEY and isinstance(text, str) and text:
            attempt = meta.get(ATTEMPT_KEY)
            yield DeltaEvent(self.thread_id, str(skill), attempt, text)

    def _node(self, node: str, update: Mapping[str, Any]) -> Iterator[Event]:
        written = RunView(update)
        turn, attempt = written.turn, written.attempt
        if written.card is not None:
            self._card_skill = written.card.skill
        skill = node if node in self.data_keys else turn.skill if turn else None
        if skill is None and attempt is not None:
            skill = attempt.skill
        if node == CARD_NODE:
            skill = self._card_skill
        yield StepEvent(self.thread_id, node, skill, update.get("status"))
        self._remember(turn)
        for call in turn.ran if turn is not None else ():
            if call.id in self._seen:
                continue
            yield ToolCallEvent(
                thread_id=self.thread_id,
                skill=turn.skill if turn is not None else "",
                name=call.name,
                call_id=call.id,
                status=call.status,
                args=self._args.pop(call.id, None),
                ms=call.ms,
            )
        if turn is not None:
            self._seen = {c.id for c in turn.ran}
        if node in self.data_keys and attempt is not None and attempt.action in _RESULT_ACTIONS:
            accepted = attempt.action != "rejected"
            yield SkillResultEvent(
                thread_id=self.thread_id,
                skill=node,
                action=attempt.action,
                attempt=attempt.attempt,
                response=update.get("response") if accepted else None,
                data={k: v for k, v in update.items() if k in self.data_keys[node]},
                profile=dict(update.get("profile") or {}) if accepted else {},
                validation_errors=[
                    {"path": e.path, "message": e.message} for e in attempt.validation_errors
                ],
                model=attempt.model,
            )


def terminal_event(result: RunResult) -> CardEvent | ErrorEvent | DoneEvent:
    """The event that ends a stream, from the thread as it stands after the run."""
    if result.card is not None:
        card = result.card
        return CardEvent(
            thread_id=result.thread_id,
            skill=card["skill"],
            review_type=card["review_type"],
            questions=list(card["questions"]),
            interrupt_id=card["interrupt_id"],
            errors=list(card.get("errors", [])),
            answers_schema=card.get("answers_schema"),
        )
    if result.status in ("failed", "no_skill") or result.error is not None:
        error = result.error
        details = {} if error is None else error.dump()
        for key in ("code", "message", "skill"):
            details.pop(key, None)
        return ErrorEvent(
            thread_id=result.thread_id,
            code=error.code if error is not None else "RUN_FAILED",
            message=error.message if error is not None else "the run failed",
            skill=error.skill if error is not None else None,
            details=details,
        )
    return DoneEvent(
        thread_id=result.thread_id,
        status=result.status,
        response=result.state.get("response"),
        checkpoint_id=result.checkpoint_id,
    )
