"""Which of a skill's worked examples a turn shows: the ones nearest to the run's input.

Examples are matched by meaning with the deck's embedding function (the offline multilingual
encoder by default), so a record in Chinese finds the example of its kind written in English.
Without the vectors extra, or when the embedding endpoint fails, they are matched by words
(BM25) instead: a turn never fails for its examples. The examples' vectors are computed once
per bundle version and embedding function, and shared by every deck of the process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from cachetools import LRUCache

from skilldeck._internal.paths import get_path
from skilldeck._internal.redact import log_error
from skilldeck.skills.examples import Example, Examples, example_text
from skilldeck.tools.bm25 import BM25Index
from skilldeck.tools.text import Tokenizer

__all__ = ["Embed", "ExampleMatcher"]

log = logging.getLogger(__name__)

#: Texts in, one vector per text out (Chroma's ``EmbeddingFunction`` is one).
Embed = Callable[[list[str]], Sequence[Any]]

_VECTORS: LRUCache[tuple[str, ...], npt.NDArray[np.float32]] = LRUCache(maxsize=64)
_VECTORS_LOCK = threading.Lock()
_TOKENIZER = Tokenizer()


def _normalised(vectors: Sequence[Any]) -> npt.NDArray[np.float32]:
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.asarray(matrix / np.where(norms == 0, 1, norms), dtype=np.float32)


class ExampleMatcher:
    """Picks a turn's examples from one skill's :class:`Examples`."""

    def __init__(self, examples: Examples, embed: Embed | None, *, key: str = "") -> None:
        """Args:
        examples: The skill's examples.
        embed: The embedding function; ``None`` matches by words.
        key: What identifies these examples and ``embed`` across decks (the bundle's
            fingerprint and the function's name), for the shared cache of vectors.
        """
        self.examples = examples
        self._embed = embed
        self._key = (key, *(e.text for e in examples.items))
        self._lexical: BM25Index | None = None
        self._lock = threading.Lock()

    def pick(self, state: Mapping[str, Any]) -> tuple[Example, ...]:
        """The examples to show for ``state``: the nearest ``shown`` to its text at the
        examples' ``match`` path, the nearest first; the first ``shown`` in file order when
        that text is empty.

        The nearest comes first because a small model copies the first example it reads: the
        0.5B model chose the first shown example's template in 12 of the 17 card-agent cases
        where the first and the last differed and it chose one of them (bench/RESULTS.md)."""
        items, shown = self.examples.items, self.examples.shown
        text = example_text(get_path(state, self.examples.match)).strip()
        if not text:
            return items[:shown]
        scores = self._scores(text)
        # A stable sort keeps file order among equal scores.
        order = sorted(range(len(items)), key=lambda i: -scores[i])[:shown]
        return tuple(items[i] for i in order)

    def _scores(self, text: str) -> npt.NDArray[np.float64]:
        if self._embed is not None:
            try:
                vectors = self._vectors()
                query = _normalised(self._embed([text]))[0]
                return np.asarray(vectors @ query, dtype=np.float64)
            except Exception as exc:  # an endpoint down or the extra missing: match by words
                what = "examples matched by words: embedding failed"  # its text may echo a key
                log_error(log, what, exc, level=logging.WARNING)
                self._embed = None
        return self._bm25().scores(_TOKENIZER.tokens(text))

    def _vectors(self) -> npt.NDArray[np.float32]:
        with _VECTORS_LOCK:
            cached = _VECTORS.get(self._key)
        if cached is None:
            assert self._embed is not None
            cached = _normalised(self._embed([e.text for e in self.examples.items]))
            with _VECTORS_LOCK:
                _VECTORS[self._key] = cached
        return cached

    def _bm25(self) -> BM25Index:
        with self._lock:
            if self._lexical is None:
                index = BM25Index()
                index.add_many(_TOKENIZER.tokens(e.text) for e in self.examples.items)
                self._lexical = index
            return self._lexical
