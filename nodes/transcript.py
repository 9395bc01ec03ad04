"""Conversations and tool results, kept in the LangGraph store and referred to by turn id.

Checkpoints keep only the turn id, so a thread's checkpoints do not grow with its messages. A
skill's system prompt (its SKILL.md, references and contract, the same for every turn) is stored
once, under its content hash, and each turn's row refers to it.
"""

from __future__ import annotations

import functools
import hashlib
import re
import weakref
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict
from langgraph.store.base import BaseStore, PutOp

from skilldeck._internal.store_keys import thread_namespace
from skilldeck.errors import CheckpointError

__all__ = ["PROMPTS", "append_messages", "namespace", "read_messages"]

#: Where system prompts are stored, keyed by the sha256 of their text.
PROMPTS = ("skilldeck", "prompts")
_MAX_MESSAGES = 10_000
_REF = "prompt_ref"
# The prompts each store is known to hold, so a turn writes only its own row.
_stored: weakref.WeakKeyDictionary[BaseStore, set[str]] = weakref.WeakKeyDictionary()


def namespace(thread_id: str, turn_id: str) -> tuple[str, ...]:
    return thread_namespace("transcript", thread_id, turn_id)


def read_messages(store: BaseStore, thread_id: str, turn_id: str) -> list[BaseMessage]:
    """The messages of one turn, in order.

    Raises:
        CheckpointError: the turn refers to a system prompt the store does not hold.
    """
    items = store.search(namespace(thread_id, turn_id), limit=_MAX_MESSAGES)
    items.sort(key=lambda item: item.key)
    rows = [m for item in items for m in item.value["messages"]]
    return messages_from_dict([_prompt(store, m["key"]) if m["type"] == _REF else m for m in rows])


_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(value: Any) -> Any:
    """``value`` with lone UTF-16 surrogates (a model may send them as JSON escapes) replaced:
    no store can encode them. The contract check sees the message as it came."""
    if isinstance(value, str):
        return (
            value.encode("utf-8", "replace").decode("utf-8") if _SURROGATE.search(value) else value
        )
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def append_messages(
    store: BaseStore, thread_id: str, turn_id: str, start: int, messages: Sequence[BaseMessage]
) -> int:
    """Write ``messages`` at positions ``start, start+1, ...``; returns the next position.

    One store item per call, keyed by its first position: a node re-run writes the same key
    again (idempotent), and a step costs one row, not one per message. A system prompt the store
    may not hold yet is written in the same batch.
    """
    known = _stored.setdefault(store, set())
    ops: list[PutOp] = []
    rows: list[dict[str, Any]] = []
    for message in map(_storable, messages_to_dict(list(messages))):
        if not _plain_system(message):
            rows.append(message)
            continue
        key = _digest(message["data"]["content"])
        if key not in known:
            ops.append(PutOp(PROMPTS, key, {"message": message}))
        rows.append({"type": _REF, "key": key})
    ops.append(PutOp(namespace(thread_id, turn_id), f"{start:06d}", {"messages": rows}))
    store.batch(ops)
    known.update(op.key for op in ops[:-1])
    return start + len(messages)


def _plain_system(message: dict[str, Any]) -> bool:
    """A system message with only text, which its hash identifies."""
    data = message["data"]
    extras = ("additional_kwargs", "response_metadata", "name", "id")
    return (
        message["type"] == "system"
        and isinstance(data["content"], str)
        and not any(data.get(k) for k in extras)
    )


@functools.lru_cache(maxsize=256)
def _digest(text: str) -> str:
    # A runner passes the same prompt string every turn: its hash is computed once.
    return hashlib.sha256(text.encode()).hexdigest()


def _prompt(store: BaseStore, key: str) -> dict[str, Any]:
    item = store.get(PROMPTS, key)
    if item is None:
        raise CheckpointError(
            f"a transcript refers to system prompt {key} that the store does not hold; the "
            "store was not copied with the checkpoints"
        )
    message: dict[str, Any] = item.value["message"]
    return message
