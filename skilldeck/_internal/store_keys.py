"""Namespaces of a thread's items in the LangGraph store.

Store namespace labels may not contain periods, and thread ids (chosen by apps) may: a thread's
label escapes them, reversibly, so two threads never share a namespace.
"""

from __future__ import annotations

__all__ = ["thread_label", "thread_namespace"]


def thread_namespace(kind: str, thread_id: str, *rest: str) -> tuple[str, ...]:
    """``("skilldeck", kind, <thread label>, *rest)``."""
    return ("skilldeck", kind, thread_label(thread_id), *rest)


def thread_label(thread_id: str) -> str:
    """``thread_id`` as a namespace label or key: periods escaped, reversibly."""
    return thread_id.replace("%", "%25").replace(".", "%2E")
