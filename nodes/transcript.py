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
    return ("skilldeck", "transcript", thread_id, turn_id)


def read_messages(store: BaseStore, thread_id: str, turn_id: str) -> list[BaseMessage]:
    """The messages of one turn, in order."""
    items = store.search(namespace(thread_id, turn_id), limit=_MAX_MESSAGES)
    items.sort(key=lambda item: item.key)
    return messages_from_dict([item.value["message"] for item in items])


def append_messages(
    store: BaseStore, thread_id: str, turn_id: str, start: int, messages: Sequence[BaseMessage]
) -> int:
    """Write ``messages`` at positions ``start, start+1, ...``; returns the next position.

    Keys are positions, so writing the same messages again (a node re-run) is idempotent.
    """
    for offset, data in enumerate(messages_to_dict(list(messages))):
        store.put(namespace(thread_id, turn_id), f"{start + offset:06d}", {"message": data})
    return start + len(messages)
