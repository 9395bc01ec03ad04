"""An incremental BM25 Okapi index whose scores equal ``rank_bm25.BM25Okapi``'s.

rank-bm25 rebuilds its statistics on every change and scans every document for every query
term. Here an inverted index keeps, per term, the documents that contain it and their term
frequencies in growable numpy buffers: adding a document appends to the postings of its terms,
and a query touches only the postings of its own terms. idf is computed at query time from the
document count and the term's document frequency, so nothing is ever rebuilt.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["BM25Index"]

_INITIAL_CAPACITY = 4  # most terms are rare (Zipf), so postings start small
# Estimated bytes of one vocabulary term besides its postings' entries: the term string, its
# dict slot, the _Postings object and its two small arrays.
_TERM_BYTES = 480
# Bytes per posting (int32 doc + int32 tf), with the slack of buffers that grow by doubling.
_POSTING_BYTES = 12

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_Item = TypeVar("_Item", bound=np.generic)


def _grown(buffer: npt.NDArray[_Item], needed: int) -> npt.NDArray[_Item]:
    """``buffer`` copied into one at least twice as large, holding ``needed`` items or more."""
    bigger = np.zeros(max(needed, 2 * len(buffer), _INITIAL_CAPACITY), dtype=buffer.dtype)
    bigger[: len(buffer)] = buffer
    return bigger


class _Postings:
    """The documents (ascending) that contain one term, with the term's frequency in each."""

    __slots__ = ("docs", "size", "tfs")

    def __init__(self) -> None:
        self.docs = np.empty(_INITIAL_CAPACITY, dtype=np.int32)
        self.tfs = np.empty(_INITIAL_CAPACITY, dtype=np.int32)
        self.size = 0

    @classmethod
    def of(cls, docs: npt.NDArray[np.int32], tfs: npt.NDArray[np.int32]) -> _Postings:
        postings = cls.__new__(cls)
        postings.docs, postings.tfs, postings.size = docs, tfs, len(docs)
        return postings

    def append(self, doc: int, tf: int) -> None:
        if self.size == len(self.docs):
            self.docs = _grown(self.docs, self.size + 1)
            self.tfs = _grown(self.tfs, self.size + 1)
        self.docs[self.size] = doc
        self.tfs[self.size] = tf
        self.size += 1


class BM25Index:
    """BM25 Okapi over an append-only list of tokenized documents.

    Scores equal ``rank_bm25.BM25Okapi(corpus).get_scores(terms)`` for the same token lists:
    a term in more than half of the documents (negative idf) gets ``epsilon`` times the mean
    idf of the whole vocabulary, as rank-bm25 does. Documents are numbered 0, 1, 2, ... in
    the order they are added. Not safe for concurrent ``add`` and queries without a lock.

    Args:
        k1: Term-frequency saturation.
        b: Document-length normalisation.
        epsilon: Floor factor for negative idf values.
    """

    def __init__(self, *, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        self._term_ids: dict[str, int] = {}
        # A term's postings; None for one loaded from a snapshot and not touched since: its
        # entries are the slice offsets[id]:offsets[id + 1] of the flat arrays in ``_flat``
        # (making 10^5 small objects at load would cost more than the rest of the load).
        self._postings: list[_Postings | None] = []
        self._flat: tuple[IntArray, npt.NDArray[np.int32], npt.NDArray[np.int32]] | None = None
        self._df: IntArray = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)  # by term id
        self._lengths: IntArray = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)  # by document
        self._count = 0
        self._total_length = 0
        self._postings_count = 0  # (term, document) pairs, for nbytes
        self._average_idf: float | None = None  # cached until the next add

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """An estimate of the index's memory, kept in O(1) (tested against tracemalloc)."""
        arrays = self._df.nbytes + self._lengths.nbytes
        return len(self._postings) * _TERM_BYTES + self._postings_count * _POSTING_BYTES + arrays

    def add(self, tokens: Sequence[str]) -> int:
        """Append a document and return its index."""
        if isinstance(tokens, str):
            raise TypeError("add() takes a sequence of tokens, not a string")
        doc = self._count
        term_ids: list[int] = []
        for term, tf in Counter(tokens).items():
            term_id = self._term_ids.get(term)
            if term_id is None:
                term_id = self._term_ids[term] = len(self._postings)
                self._postings.append(_Postings())
            self._get(term_id).append(doc, tf)
            term_ids.append(term_id)
        self._postings_count += len(term_ids)
        if len(self._postings) > len(self._df):
            self._df = _grown(self._df, len(self._postings))
        self._df[term_ids] += 1  # the ids are distinct, so a fancy-index add is exact
        if doc == len(self._lengths):
            self._lengths = _grown(self._lengths, doc + 1)
        self._lengths[doc] = len(tokens)
        self._total_length += len(tokens)
        self._count += 1
        self._average_idf = None
        return doc

    def to_arrays(self) -> tuple[list[str], dict[str, npt.NDArray[np.generic]]]:
        """The index as its vocabulary (in term-id order) and flat arrays, for a snapshot;
        :meth:`from_arrays` rebuilds an index that scores exactly as this one."""
        every = [self._get(i) for i in range(len(self._postings))]
        sizes = np.array([p.size for p in every], dtype=np.int64)
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        docs = np.empty(int(offsets[-1]), dtype=np.int32)
        tfs = np.empty(int(offsets[-1]), dtype=np.int32)
        for postings, start, end in zip(every, offsets[:-1], offsets[1:], strict=True):
            docs[start:end] = postings.docs[: postings.size]
            tfs[start:end] = postings.tfs[: postings.size]
        arrays: dict[str, npt.NDArray[np.generic]] = {
            "offsets": offsets,
            "docs": docs,
            "tfs": tfs,
            "df": self._df[: len(self._postings)].copy(),
            "lengths": self._lengths[: self._count].copy(),
            "params": np.array([self.k1, self.b, self.epsilon], dtype=np.float64),
        }
        return list(self._term_ids), arrays

    @classmethod
    def from_arrays(
        cls, terms: Sequence[str], arrays: Mapping[str, npt.NDArray[np.generic]]
    ) -> BM25Index:
        """The index :meth:`to_arrays` described."""
        k1, b, epsilon = (float(x) for x in arrays["params"])
        index = cls(k1=k1, b=b, epsilon=epsilon)
        offsets = arrays["offsets"].astype(np.int64)
        docs = arrays["docs"].astype(np.int32)
        tfs = arrays["tfs"].astype(np.int32)
        index._term_ids = {term: i for i, term in enumerate(terms)}
        index._postings = [None] * len(terms)
        index._flat = (offsets, docs, tfs)
        index._df = arrays["df"].astype(np.int64)
        index._lengths = arrays["lengths"].astype(np.int64)
        index._count = len(index._lengths)
        index._total_length = int(index._lengths.sum())
        index._postings_count = len(docs)
        return index

    def add_many(self, docs: Iterable[Sequence[str]]) -> range:
        """Append documents in order and return the range of their indexes."""
        start = self._count
        for tokens in docs:
            self.add(tokens)
        return range(start, self._count)

    def doc_length(self, doc: int) -> int:
        """The number of tokens of document ``doc``."""
        if not 0 <= doc < self._count:
            raise IndexError(f"document {doc} is not in an index of {self._count}")
        return int(self._lengths[doc])

    def scores(self, terms: Sequence[str]) -> FloatArray:
        """BM25 score of every document for the query ``terms`` (repeated terms count again).

        Unknown terms add nothing. Returns a new float64 array of ``len(self)``.
        """
        n = self._count
        scores = np.zeros(n, dtype=np.float64)
        if n == 0:
            return scores
        k1, b = self.k1, self.b
        avgdl = self._total_length / n
        parts: dict[str, tuple[npt.NDArray[np.int32], FloatArray]] = {}
        for term in terms:
            part = parts.get(term)
            if part is None:
                term_id = self._term_ids.get(term)
                if term_id is None:
                    continue
                postings = self._get(term_id)
                docs = postings.docs[: postings.size]
                tf = postings.tfs[: postings.size]
                lengths = self._lengths[docs]
                # Written exactly as rank-bm25 writes it, so the floating-point operations and
                # hence the scores are the same, bit for bit, whenever the idf is.
                weight = tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths / avgdl))
                part = parts[term] = (docs, self._idf(postings.size) * weight)
            # A term is added once per occurrence, in query order, as rank-bm25 adds it.
            scores[part[0]] += part[1]
        return scores

    def top(
        self,
        terms: Sequence[str],
        k: int,
        *,
        mask: BoolArray | None = None,
        offset: int = 0,
    ) -> list[tuple[int, float]]:
        """The best documents for ``terms`` as ``(doc, score)`` pairs.

        Only documents with a positive score that ``mask`` allows take part. They are ranked by
        score, descending, then by index, ascending; ranks ``offset`` to ``offset + k - 1`` are
        returned, so consecutive pages neither skip nor repeat a document.

        Args:
            terms: Query tokens.
            k: Page size.
            mask: Optional bool array of ``len(self)``; ``True`` allows a document.
            offset: Rank of the first document to return.
        """
        if k < 0 or offset < 0:
            raise ValueError(f"k and offset must be >= 0, got k={k}, offset={offset}")
        scores = self.scores(terms)
        candidates = np.flatnonzero(self._allowed(scores, mask))
        if k == 0 or offset >= candidates.size:
            return []
        needed = offset + k
        values = scores[candidates]
        if needed < candidates.size:
            # Keep every document scoring at least the needed-th best score: ties at that
            # score must be settled by index below, which argpartition alone would not do.
            nth = values[np.argpartition(-values, needed - 1)[needed - 1]]
            keep = values >= nth
            candidates, values = candidates[keep], values[keep]
        order = np.lexsort((candidates, -values))[offset:needed]
        return [(int(candidates[i]), float(values[i])) for i in order]

    def count_matches(self, terms: Sequence[str], *, mask: BoolArray | None = None) -> int:
        """How many documents that ``mask`` allows score above zero for ``terms``."""
        return int(np.count_nonzero(self._allowed(self.scores(terms), mask)))

    def docs_with_all(self, terms: Sequence[str]) -> IntArray:
        """Sorted indexes of the documents that contain every term (all documents if none)."""
        postings: list[_Postings] = []
        for term in set(terms):
            term_id = self._term_ids.get(term)
            if term_id is None:
                return np.zeros(0, dtype=np.int64)
            postings.append(self._get(term_id))
        if not postings:
            return np.arange(self._count, dtype=np.int64)
        # Rarest first: every intersection is then no larger than the rarest postings list.
        postings.sort(key=lambda p: p.size)
        docs = postings[0].docs[: postings[0].size].astype(np.int64)
        for other in postings[1:]:
            docs = np.intersect1d(docs, other.docs[: other.size], assume_unique=True)
        return docs.astype(np.int64, copy=False)

    def _get(self, term_id: int) -> _Postings:
        """The postings of ``term_id``, made from the snapshot's flat arrays on first use
        (views into them; a list that grows gets its own buffer then)."""
        postings = self._postings[term_id]
        if postings is None:
            assert self._flat is not None, "only a loaded index has postings to make"
            offsets, docs, tfs = self._flat
            start, end = int(offsets[term_id]), int(offsets[term_id + 1])
            postings = self._postings[term_id] = _Postings.of(docs[start:end], tfs[start:end])
        return postings

    def _idf(self, df: int) -> float:
        """rank-bm25's idf, with its floor for terms in more than half of the documents."""
        # math.log, like rank-bm25, rather than np.log, which may differ in the last bit.
        idf = math.log(self._count - df + 0.5) - math.log(df + 0.5)
        if idf < 0:
            return self.epsilon * self._mean_idf()
        return idf

    def _mean_idf(self) -> float:
        """The mean raw idf over the whole vocabulary, computed only when a floor needs it."""
        if self._average_idf is None:
            df = self._df[: len(self._postings)]
            idf = np.log(self._count - df + 0.5) - np.log(df + 0.5)
            self._average_idf = float(idf.mean())
        return self._average_idf

    def _allowed(self, scores: FloatArray, mask: BoolArray | None) -> BoolArray:
        """Documents with a positive score that ``mask`` (if any) allows."""
        allowed = scores > 0
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_ or mask.shape != scores.shape:
                raise ValueError(f"mask must be a bool array of shape ({self._count},)")
            allowed &= mask
        return allowed
