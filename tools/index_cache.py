"""The in-memory search indexes of a process, in one LRU bounded by bytes.

A serving process meets many users; each user's BM25 lexicon and vector copy is built on the
first search and reused after. Kept in plain dicts they would grow with every user the process
ever served; here they share one budget (``SKILLDECK_INDEX_CACHE_MB``) and the least recently
used are dropped first. Every cached index is a copy of what the stores hold (the message
store, Chroma, the knowledge base's SQLite), so an evicted one is rebuilt on its next use.

Entries are weighed by their ``nbytes`` (an estimate each index keeps up to date as it grows;
see the ``nbytes`` properties); an index that grew is weighed again with :meth:`reweigh`. An
index larger than the whole budget is used once and not kept.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any, Protocol

from cachetools import LRUCache

__all__ = ["DEFAULT_BUDGET_MB", "IndexCache", "Weighed", "shared_cache"]

DEFAULT_BUDGET_MB = 512.0
_MB = 1024 * 1024


class Weighed(Protocol):
    """A cached index: it knows its approximate size in memory."""

    @property
    def nbytes(self) -> int: ...


def _weight(value: Weighed) -> int:
    return max(1, int(value.nbytes))


class _Counting(LRUCache[Hashable, Any]):
    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize, getsizeof=_weight)
        self.evictions = 0

    def popitem(self) -> tuple[Hashable, Any]:
        self.evictions += 1
        return super().popitem()


class IndexCache:
    """An LRU of indexes by key, holding at most ``budget_mb`` megabytes (thread-safe)."""

    def __init__(self, budget_mb: float = DEFAULT_BUDGET_MB) -> None:
        self._lock = threading.Lock()
        self._cache = _Counting(self._bytes(budget_mb))
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _bytes(budget_mb: float) -> int:
        if budget_mb <= 0:
            raise ValueError("the index cache budget must be positive (megabytes)")
        return int(budget_mb * _MB)

    @property
    def budget_mb(self) -> float:
        return self._cache.maxsize / _MB

    def resize(self, budget_mb: float) -> None:
        """Set the budget; the least recently used entries go until the rest fits."""
        with self._lock:
            old = self._cache
            new = _Counting(self._bytes(budget_mb))
            new.evictions = old.evictions
            for key in list(old.keys()):  # least recently used first, as LRUCache iterates
                value = old[key]
                if _weight(value) <= new.maxsize:
                    new[key] = value
            self._cache = new

    def get(self, key: Hashable) -> Any | None:
        """The index under ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            value = self._cache.get(key)
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
            return value

    def peek(self, key: Hashable) -> Any | None:
        """The index under ``key``, or ``None``, without counting a hit or a miss: a builder
        looking again under its lock, after its own ``get`` missed."""
        with self._lock:
            return self._cache.get(key)

    def put(self, key: Hashable, value: Weighed) -> None:
        """Keep ``value`` under ``key``, dropping least recently used entries to fit."""
        with self._lock:
            if _weight(value) > self._cache.maxsize:
                self._cache.pop(key, None)  # too large to keep: used once by the caller
                return
            self._cache[key] = value

    def reweigh(self, key: Hashable, value: Weighed) -> None:
        """``value`` (cached under ``key``) grew: weigh it again, evicting others if needed."""
        with self._lock:
            if self._cache.get(key) is value:
                if _weight(value) > self._cache.maxsize:
                    self._cache.pop(key)
                else:
                    self._cache[key] = value

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._cache.pop(key, None)

    def stats(self) -> dict[str, Any]:
        """Entries, bytes held, the budget, hits, misses and evictions so far."""
        with self._lock:
            return {
                "entries": len(self._cache),
                "bytes": self._cache.currsize,
                "budget_bytes": self._cache.maxsize,
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self._cache.evictions,
            }


_shared = IndexCache()


def shared_cache() -> IndexCache:
    """The process's index cache: every memory, vector index and knowledge base uses it unless
    given its own, so their indexes share one budget."""
    return _shared
