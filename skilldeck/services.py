"""The stores behind the built-in tools, opened from :class:`Settings` on first use.

Opening Chroma and loading an embedding model cost time, so a deck that never calls a memory
tool never opens them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from chromadb.api.types import Documents, EmbeddingFunction

from skilldeck.settings import Settings
from skilldeck.tools.knowledge import KnowledgeBase
from skilldeck.tools.memory import Memory
from skilldeck.tools.messages import MessageStore

__all__ = ["lazy", "open_knowledge", "open_memory"]

T = TypeVar("T")


def _embedding(settings: Settings) -> EmbeddingFunction[Documents] | None:
    """An OpenAI-compatible embeddings endpoint when configured; ``None`` means the offline
    default."""
    if not settings.embedding_model:
        return None
    from skilldeck.tools.embeddings import OpenAICompatibleEmbeddingFunction

    return OpenAICompatibleEmbeddingFunction(
        settings.embedding_model,
        base_url=settings.embedding_base_url or settings.base_url,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
    )


def open_memory(settings: Settings) -> Memory:
    """The message store and its indexes, as ``settings`` locate them."""
    from skilldeck.tools.vectors import VectorIndex, open_chroma

    client = open_chroma(settings.chroma_path, settings.chroma_url)
    return Memory(
        MessageStore(settings.messages_path),
        VectorIndex(client, embedding_function=_embedding(settings)),
    )


def open_knowledge(settings: Settings) -> KnowledgeBase:
    """The knowledge base behind ``rag_retrieve`` and ``table_rag_retrieve``."""
    from skilldeck.tools.vectors import open_chroma

    client = open_chroma(settings.chroma_path, settings.chroma_url)
    return KnowledgeBase(settings.knowledge_path, client, embedding_function=_embedding(settings))


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
