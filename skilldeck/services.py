"""The stores behind the built-in tools, opened from :class:`Settings` on first use.

Opening Chroma and loading an embedding model cost time, so a deck that never calls a memory
tool never opens them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from skilldeck.settings import Settings
from skilldeck.tools.memory import Memory
from skilldeck.tools.messages import MessageStore

__all__ = ["lazy", "open_memory"]

T = TypeVar("T")


def open_memory(settings: Settings) -> Memory:
    """The message store and its indexes, as ``settings`` locate them."""
    from skilldeck.tools.embeddings import OpenAICompatibleEmbeddingFunction
    from skilldeck.tools.vectors import VectorIndex, open_chroma

    embedding = None
    if settings.embedding_model:
        embedding = OpenAICompatibleEmbeddingFunction(
            settings.embedding_model,
            base_url=settings.embedding_base_url or settings.base_url,
            api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        )
    client = open_chroma(settings.chroma_path, settings.chroma_url)
    return Memory(
        MessageStore(settings.messages_path),
        VectorIndex(client, embedding_function=embedding),
    )


def lazy(factory: Callable[[], T]) -> Callable[[], T]:
    """``factory()`` called once, on first use, thread-safely."""
    lock = threading.Lock()
    made: list[T] = []

    def get() -> T:
        with lock:
            if not made:
                made.append(factory())
            return made[0]

    return get
