"""The ask_user card: a LangGraph interrupt that a person answers.

The node does nothing before :func:`~langgraph.types.interrupt` but read the state, so its
re-run on resume is harmless; the model call that asked for the card happened in the skill's
node, which is already checkpointed. Answers are validated against the card's questions and
written at each question's ``field_key``; invalid answers raise the card again, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema_rs import ValidationErrorKind
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, interrupt

from skilldeck._internal.paths import set_path
from skilldeck.graph.records import Interrupt, Issue
from skilldeck.graph.state import RunView
from skilldeck.nodes.context import CARD_NODE, ROUTER_NODE
from skilldeck.skills.contract import NUMBER_INPUTS, compile_schema, explain_error

__all__ = [
    "CardNode",
    "answers_schema",
    "apply_answers",
    "card_payload",
    "card_schema",
    "validate_answers",
]


def _value_schema(question: Mapping[str, Any]) -> dict[str, Any]:
    kind = question["input_type"]
    values = [o["value"] for o in question.get("options") or []]
    if kind == "select":
        return {"enum": values}
    if kind == "multi_select":
        return {"type": "array", "items": {"enum": values}, "uniqueItems": True}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "file_ids":
        return {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True}
    if kind in NUMBER_INPUTS:
        bounds = {k: question[k] for k in ("minimum", "maximum") if k in question}
        return {"type": kind, **bounds}
    schema: dict[str, Any] = {"type": "string"}
    if values:
        schema["enum"] = values
    return schema


def answers_schema(
    questions: Sequence[Mapping[str, Any]], fields: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """JSON Schema of the answers object ``{field_key: value}`` a card expects: each answer
    of its question's ``input_type``, and valid for the schema of the field it writes
    (``fields``: ``{field_key: schema}``, as the skill's output schema gives them)."""
    props = {q["field_key"]: _value_schema(q) for q in questions}
    for q in questions:
        if q["required"] and q["input_type"] in ("text", "multi_select", "file_ids"):
            props[q["field_key"]]["minLength" if q["input_type"] == "text" else "minItems"] = 1
    defs: dict[str, Any] = {}
    for key, field in (fields or {}).items():
        if key in props and field:
            field = dict(field)
            defs.update(field.pop("$defs", None) or {})
            props[key] = {"allOf": [props[key], field]} if field else props[key]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": [q["field_key"] for q in questions if q["required"]],
        "additionalProperties": False,
    }
    if defs:
        schema["$defs"] = defs
    return schema


def card_schema(card: Interrupt) -> dict[str, Any]:
    """The answers schema of a pending card."""
    return answers_schema(card.questions, card.fields)


def validate_answers(
    schema: Mapping[str, Any], answers: Any, questions: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, str]]:
    """Errors of ``answers`` against a card's :func:`answers_schema`, as ``{"field_key",
    "message"}``; empty when they are valid.

    Messages are for the person answering (:func:`~skilldeck.skills.contract.explain_error`:
    every allowed value, never a regex). A question of ``questions`` with an
    ``error_message`` has it said instead, once, for whatever is wrong with its answer."""
    if not isinstance(answers, Mapping):
        return [{"field_key": "$", "message": "answers must be an object {field_key: value}"}]
    own = {q["field_key"]: q["error_message"] for q in questions if q.get("error_message")}
    validator = compile_schema(schema)
    try:
        found = list(validator.iter_errors(dict(answers)))
    except ValueError as exc:  # jsonschema-rs reads JSON data only
        return _not_json(answers, str(exc))
    # Each error once per place and kind: an answer outside its options is usually outside
    # its field's enum too, and a question's own message covers all that is wrong with it.
    errors: dict[tuple[Any, ...], dict[str, str]] = {}
    for err in found:
        kind, path = err.kind, err.instance_path
        if not path and isinstance(kind, ValidationErrorKind.Required):
            key = str(kind.property)
            errors[key, "required"] = {"field_key": key, "message": "an answer is required"}
        elif not path and isinstance(kind, ValidationErrorKind.AdditionalProperties):
            for key in sorted(kind.unexpected):
                message = "this card did not ask for it"
                errors[key, "unasked"] = {"field_key": key, "message": message}
        elif path and str(path[0]) in own:
            key = str(path[0])
            errors.setdefault((key, "own"), {"field_key": key, "message": own[key]})
        else:
            key = str(path[0]) if path else "$"
            inside = ", ".join(f"item {p + 1}" if isinstance(p, int) else p for p in path[1:])
            said = explain_error(err)
            errors.setdefault(
                (*path, kind.name),
                {"field_key": key, "message": f"{inside}: {said}" if inside else said},
            )
    return list(errors.values())


def _not_json(answers: Mapping[Any, Any], reason: str) -> list[dict[str, str]]:
    """The answers that are not JSON data (a set, a date, an object, a key that is not a
    string), each named; ``reason`` if none can be singled out."""
    errors = []
    for key, value in answers.items():
        if not isinstance(key, str):
            errors.append({"field_key": str(key), "message": "field keys must be strings"})
            continue
        try:
            _ANYTHING.is_valid(value)
        except ValueError as exc:
            errors.append({"field_key": key, "message": f"not JSON data: {exc}"})
    return errors or [{"field_key": "$", "message": f"not JSON data: {reason}"}]


_ANYTHING = compile_schema({})


def apply_answers(answers: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, Any]:
    """The state update that writes each answer at its dot path."""
    update: dict[str, Any] = {}
    for key, value in answers.items():
        head, _, rest = key.partition(".")
        if head == "profile":
            set_path(update.setdefault("profile", {}), rest, value)
        elif rest:
            base = update.get(head, state.get(head))
            target = dict(base) if isinstance(base, Mapping) else {}
            set_path(target, rest, value)
            update[head] = target
        else:
            update[head] = value
    return update


def card_payload(card: Interrupt, thread_id: str) -> dict[str, Any]:
    """The interrupt value clients receive (``interrupt_id`` is added by the deck)."""
    payload: dict[str, Any] = {
        "event": "card",
        "thread_id": thread_id,
        "skill": card.skill,
        "review_type": card.review_type,
        "questions": list(card.questions),
        # Any client can render and check the answers without knowing skilldeck's types.
        "answers_schema": card_schema(card),
    }
    if card.errors:
        payload["errors"] = [{"field_key": e.path, "message": e.message} for e in card.errors]
    return payload


class CardNode:
    """Raises the pending card and applies its answers."""

    def __call__(self, state: dict[str, Any], config: RunnableConfig) -> Command[str]:
        card = RunView(state).card
        if card is None:
            return Command(goto=ROUTER_NODE)
        thread_id = str(config["configurable"]["thread_id"])
        schema = card_schema(card)
        answers = interrupt(card_payload(card, thread_id), response_schema=schema)
        errors = validate_answers(schema, answers, card.questions)
        if errors:
            refused = tuple(Issue(path=e["field_key"], message=e["message"]) for e in errors)
            again = card.model_copy(update={"errors": refused})
            return Command(goto=CARD_NODE, update={"card": again.dump()})
        return Command(
            goto=card.skill,
            update={
                **apply_answers(answers, state),
                "card": None,
                "turn": None,
                "status": "running",
            },
        )
