"""Conversations and tool results, kept in the LangGraph store and referred to by turn id.

Checkpoints keep only the turn id, so a thread's checkpoints do not grow with its messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict
from langgraph.store.base import BaseStore

__all__ = ["append_messages", "namespace", "read_messages"]

_MAX_MESSAGES = 10_000


def namespace(thread_id: str, turn_id: str) -> tuple[str, ...]:
    # Store namespace labels may not contain periods; thread ids (chosen by apps) may.
    label = thread_id.replace("%", "%25").replace(".", "%2E")
    return ("skilldeck", "transcript", label, turn_id)


def read_messages(store: BaseStore, thread_id: str, turn_id: str) -> list[BaseMessage]:
    """The messages of one turn, in order."""
    items = store.search(namespace(thread_id, turn_id), limit=_MAX_MESSAGES)
    items.sort(key=lambda item: item.key)
    return messages_from_dict([m for item in items for m in item.value["messages"]])


def append_messages(
    store: BaseStore, thread_id: str, turn_id: str, start: int, messages: Sequence[BaseMessage]
) -> int:
    """Write ``messages`` at positions ``start, start+1, ...``; returns the next position.

    One store item per call, keyed by its first position: a node re-run writes the same key
    again (idempotent), and a step costs one row, not one per message.
    """
    value = {"messages": messages_to_dict(list(messages))}
    store.put(namespace(thread_id, turn_id), f"{start:06d}", value)
    return start + len(messages)
