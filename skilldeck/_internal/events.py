"""Translate LangGraph ``updates`` (and ``messages``) stream parts into skilldeck's events.

Each node update becomes a :class:`~skilldeck.types.StepEvent`; the tools node's new call
records become :class:`~skilldeck.types.ToolCallEvent` (with the arguments the skill asked for,
remembered from its ``turn.pending``); a skill's attempt record becomes a
:class:`~skilldeck.types.SkillResultEvent`; a model's text chunk (``messages`` mode, when
deltas are asked for) becomes a :class:`~skilldeck.types.DeltaEvent`. The terminal event is
built from the thread's final state, so it is the same whether the run was streamed or not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

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
        turn = (state or {}).get("turn") or {}
        # The card node's steps work for the skill that asked the card.
        self._card_skill = ((state or {}).get("card") or {}).get("skill")
        self._args: dict[str, dict[str, Any]] = {}
        self._seen = {str(c["id"]) for c in turn.get("tool_calls", [])}
        self._remember(turn)

    def _remember(self, turn: Mapping[str, Any]) -> None:
        for call in turn.get("pending") or []:
            self._args[str(call["id"])] = dict(call.get("args") or {})

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
        turn = update.get("turn") or {}
        attempt = update.get("attempt") or {}
        if isinstance(update.get("card"), Mapping):
            self._card_skill = update["card"].get("skill")
        skill = node if node in self.data_keys else turn.get("skill") or attempt.get("skill")
        if node == CARD_NODE:
            skill = self._card_skill
        yield StepEvent(self.thread_id, node, skill, update.get("status"))
        self._remember(turn)
        for call in turn.get("tool_calls") or []:
            call_id = str(call["id"])
            if call_id in self._seen:
                continue
            self._seen.add(call_id)
            yield ToolCallEvent(
                thread_id=self.thread_id,
                skill=str(turn.get("skill")),
                name=str(call["name"]),
                call_id=call_id,
                status=str(call.get("status")),
                args=self._args.pop(call_id, None),
                ms=call.get("ms"),
            )
        if node in self.data_keys and attempt.get("action") in _RESULT_ACTIONS:
            accepted = attempt["action"] != "rejected"
            yield SkillResultEvent(
                thread_id=self.thread_id,
                skill=node,
                action=str(attempt["action"]),
                attempt=int(attempt.get("attempt") or 1),
                response=update.get("response") if accepted else None,
                data={k: v for k, v in update.items() if k in self.data_keys[node]},
                profile=dict(update.get("profile") or {}) if accepted else {},
                validation_errors=list(attempt.get("validation_errors") or []),
                model=attempt.get("model"),
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
    if result.status in ("failed", "no_skill"):
        error = dict(result.error or {})
        return ErrorEvent(
            thread_id=result.thread_id,
            code=str(error.pop("code", "RUN_FAILED")),
            message=str(error.pop("message", "the run failed")),
            skill=error.pop("skill", None),
            details=error,
        )
    return DoneEvent(
        thread_id=result.thread_id,
        status=result.status,
        response=result.state.get("response"),
        checkpoint_id=result.checkpoint_id,
    )
