"""An incremental BM25 Okapi index whose scores equal ``rank_bm25.BM25Okapi``'s.

rank-bm25 rebuilds its statistics on every change and scans every document for every query
term. Here an inverted index keeps, per term, the documents that contain it and their term
frequencies in growable numpy buffers: adding a document appends to the postings of its terms,
and a query touches only the postings of its own terms. idf is computed at query time from the
document count and the term's document frequency, so nothing is ever rebuilt.

An index also exists as a vocabulary (its terms in id order: the order in which they first
appeared) and :class:`IndexPart` runs of consecutive documents in flat arrays, keyed by term id
(what the message store keeps, see :mod:`skilldeck.tools.memory`). :func:`index_part` makes the
part of new documents given the vocabulary so far, :func:`merge_parts` merges adjacent parts,
and :meth:`BM25Index.from_parts` opens parts without copying their postings (a term's postings
are gathered from the parts the first time a query or an added document touches it). Terms keep
the ids they would get document by document, so an index opened from parts scores bit for bit
as one built document by document.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["BM25Index", "IndexPart", "index_part", "merge_parts"]

_INITIAL_CAPACITY = 4  # most terms are rare (Zipf), so postings start small
# Estimated bytes of one vocabulary term besides its postings' entries: the term string and its
# dict and list slots; then the _Postings object and its two small arrays, once made.
_TERM_BYTES = 150
_POSTINGS_OBJECT_BYTES = 330
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


@dataclass(frozen=True, slots=True)
class IndexPart:
    """Consecutive documents of an index as flat arrays, postings grouped by term (CSR).

    Attributes:
        term_ids: The ids, in the index's vocabulary, of the terms these documents hold,
            ascending.
        offsets: ``len(term_ids) + 1`` positions: the postings of ``term_ids[i]`` are
            ``docs[offsets[i]:offsets[i + 1]]`` (ascending) and the same slice of ``tfs``.
        docs: Document numbers, from 0 within the part (any integer type).
        tfs: The term's frequency in each of those documents (any integer type).
        lengths: The number of tokens of each document.
    """

    term_ids: npt.NDArray[np.integer]
    offsets: npt.NDArray[np.integer]
    docs: npt.NDArray[np.integer]
    tfs: npt.NDArray[np.integer]
    lengths: npt.NDArray[np.integer]

    def __post_init__(self) -> None:
        if len(self.offsets) != len(self.term_ids) + 1 or len(self.docs) != len(self.tfs):
            raise ValueError("an index part needs len(term_ids) + 1 offsets and a tf per posting")
        if len(self.docs) != int(self.offsets[-1]):
            raise ValueError("an index part's last offset must be its number of postings")
        if np.any(np.diff(self.term_ids) <= 0):
            raise ValueError("an index part's term ids must be ascending")

    @property
    def nbytes(self) -> int:
        arrays = (self.term_ids, self.offsets, self.docs, self.tfs, self.lengths)
        return sum(a.nbytes for a in arrays)

    def postings(self, term_id: int) -> tuple[int, int] | None:
        """Where the postings of ``term_id`` are in ``docs`` and ``tfs`` (None: not here)."""
        i = int(np.searchsorted(self.term_ids, term_id))
        if i == len(self.term_ids) or int(self.term_ids[i]) != term_id:
            return None
        return int(self.offsets[i]), int(self.offsets[i + 1])


def _grouped(term_ids: IntArray) -> tuple[IntArray, IntArray]:
    """The distinct values of the sorted ``term_ids`` and the CSR offsets of their runs."""
    if not len(term_ids):
        return term_ids, np.zeros(1, dtype=np.int64)
    starts = np.flatnonzero(np.diff(term_ids)) + 1
    offsets = np.concatenate([[0], starts, [len(term_ids)]]).astype(np.int64)
    return term_ids[offsets[:-1]], offsets


def index_part(
    docs: Iterable[Sequence[str]], vocabulary: Mapping[str, int], size: int
) -> tuple[IndexPart, list[str]]:
    """The part of ``docs`` in an index whose first ``size`` terms (ids below ``size``) are
    those of ``vocabulary``; other terms are new to it, numbered from ``size`` in order of
    first appearance, as :meth:`BM25Index.add` would number them.

    Returns:
        The part and its new terms, in id order.
    """
    new: dict[str, int] = {}
    term_column: list[int] = []
    doc_column: list[int] = []
    tf_column: list[int] = []
    lengths: list[int] = []
    for doc, tokens in enumerate(docs):
        lengths.append(len(tokens))
        for term, tf in Counter(tokens).items():
            found = vocabulary.get(term)
            if found is None or found >= size:
                found = new.setdefault(term, size + len(new))
            term_column.append(found)
            doc_column.append(doc)
            tf_column.append(tf)
    ids = np.array(term_column, dtype=np.int64)
    order = np.argsort(ids, kind="stable")  # a term's documents stay ascending
    term_ids, offsets = _grouped(ids[order])
    part = IndexPart(
        term_ids,
        offsets,
        np.array(doc_column, dtype=np.int32)[order],
        np.array(tf_column, dtype=np.int32)[order],
        np.array(lengths, dtype=np.int64),
    )
    return part, list(new)


def merge_parts(parts: Sequence[IndexPart]) -> IndexPart:
    """One part holding the documents of ``parts``, in order (vectorised: no loop over terms).

    Raises:
        ValueError: ``parts`` is empty.
    """
    if not parts:
        raise ValueError("merge_parts needs at least one part")
    term_ids = np.unique(np.concatenate([p.term_ids.astype(np.int64) for p in parts]))
    places = [np.searchsorted(term_ids, p.term_ids) for p in parts]
    sizes = np.zeros(len(term_ids), dtype=np.int64)
    for part, place in zip(parts, places, strict=True):
        sizes[place] += np.diff(part.offsets)  # a term is in a part once
    offsets = np.zeros(len(term_ids) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    cursor = offsets[:-1].copy()  # where each term's next postings go
    docs = np.empty(int(offsets[-1]), dtype=np.int32)
    tfs = np.empty(int(offsets[-1]), dtype=np.int32)
    base = 0
    for part, place in zip(parts, places, strict=True):
        local_sizes = np.diff(part.offsets).astype(np.int64)
        term_of = np.repeat(np.arange(len(place)), local_sizes)
        # A posting's destination: its term's cursor plus its rank among the term's postings.
        rank = np.arange(len(part.docs), dtype=np.int64) - part.offsets[:-1][term_of]
        dest = cursor[place][term_of] + rank
        docs[dest] = part.docs.astype(np.int64) + base
        tfs[dest] = part.tfs
        cursor[place] += local_sizes
        base += len(part.lengths)
    lengths = np.concatenate([p.lengths.astype(np.int64) for p in parts])
    return IndexPart(term_ids, offsets, docs, tfs, lengths)


@dataclass(frozen=True, slots=True)
class _Opened:
    """A part an index was opened from, and its first document's number in the index."""

    part: IndexPart
    base: int


class _Postings:
    """The documents (ascending) that contain one term, with the term's frequency in each.

    ``owned`` says whether the buffers are the index's own, or views of a part's arrays (read
    only, and counted with the part): the first append copies those.
    """

    __slots__ = ("docs", "owned", "size", "tfs")

    def __init__(self) -> None:
        self.docs = np.empty(_INITIAL_CAPACITY, dtype=np.int32)
        self.tfs = np.empty(_INITIAL_CAPACITY, dtype=np.int32)
        self.size = 0
        self.owned = True

    @classmethod
    def of(
        cls, docs: npt.NDArray[np.int32], tfs: npt.NDArray[np.int32], *, owned: bool
    ) -> _Postings:
        postings = cls.__new__(cls)
        postings.docs, postings.tfs, postings.size = docs, tfs, len(docs)
        postings.owned = owned
        return postings

    def append(self, doc: int, tf: int) -> int:
        """Append a posting; returns how many postings the index's own buffers gained."""
        gained = 1
        if self.size == len(self.docs):
            self.docs = _grown(self.docs, self.size + 1)
            self.tfs = _grown(self.tfs, self.size + 1)
            if not self.owned:
                gained, self.owned = self.size + 1, True
        self.docs[self.size] = doc
        self.tfs[self.size] = tf
        self.size += 1
        return gained


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
        # A term's postings; None for one opened from parts and not touched since: its entries
        # are slices of the parts' arrays (making 10^5 small objects when opening would cost
        # more than the rest of it).
        self._postings: list[_Postings | None] = []
        self._parts: list[_Opened] = []
        self._df: IntArray = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)  # by term id
        self._lengths: IntArray = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)  # by document
        self._count = 0
        self._total_length = 0
        # For nbytes: _Postings objects made, and postings in the index's own buffers.
        self._made = 0
        self._owned = 0
        self._average_idf: float | None = None  # cached until the next add

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """An estimate of the index's memory, kept in O(1) (tested against tracemalloc)."""
        arrays = self._df.nbytes + self._lengths.nbytes + sum(o.part.nbytes for o in self._parts)
        terms = len(self._postings) * _TERM_BYTES + self._made * _POSTINGS_OBJECT_BYTES
        return terms + self._owned * _POSTING_BYTES + arrays

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
                self._made += 1
            self._owned += self._get(term_id).append(doc, tf)
            term_ids.append(term_id)
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

    @property
    def vocabulary(self) -> Mapping[str, int]:
        """Each term's id: the order in which terms first appeared (read only)."""
        return MappingProxyType(self._term_ids)

    def to_part(self) -> IndexPart:
        """The whole index as one :class:`IndexPart` (a copy): with :attr:`vocabulary`, what
        :meth:`from_parts` opens as an index that scores exactly as this one."""
        every = [self._get(i) for i in range(len(self._postings))]
        sizes = np.array([p.size for p in every], dtype=np.int64)
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        docs = np.empty(int(offsets[-1]), dtype=np.int32)
        tfs = np.empty(int(offsets[-1]), dtype=np.int32)
        for postings, start, end in zip(every, offsets[:-1], offsets[1:], strict=True):
            docs[start:end] = postings.docs[: postings.size]
            tfs[start:end] = postings.tfs[: postings.size]
        lengths = self._lengths[: self._count].copy()
        return IndexPart(np.arange(len(every), dtype=np.int64), offsets, docs, tfs, lengths)

    @classmethod
    def from_parts(
        cls,
        vocabulary: Sequence[str],
        parts: Sequence[IndexPart],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
    ) -> BM25Index:
        """The index of the documents of ``parts``, in order, whose terms are ``vocabulary``
        (in id order), without copying the parts' postings: their arrays must not change while
        the index lives.

        Raises:
            ValueError: ``vocabulary`` repeats a term, or a part holds a term id past it.
        """
        index = cls(k1=k1, b=b, epsilon=epsilon)
        index._term_ids = dict(zip(vocabulary, range(len(vocabulary)), strict=True))
        if len(index._term_ids) != len(vocabulary):
            raise ValueError("an index's vocabulary cannot repeat a term")
        index._postings = [None] * len(vocabulary)
        index._df = np.zeros(max(len(vocabulary), 1), dtype=np.int64)
        base = 0
        for part in parts:
            if len(part.term_ids) and int(part.term_ids[-1]) >= len(vocabulary):
                raise ValueError("an index part holds a term id past the vocabulary")
            index._df[part.term_ids] += np.diff(part.offsets)
            index._parts.append(_Opened(part, base))
            base += len(part.lengths)
        lengths = [p.lengths.astype(np.int64) for p in parts]
        index._lengths = np.concatenate(lengths) if lengths else np.zeros(1, dtype=np.int64)
        index._count = base
        index._total_length = int(index._lengths[:base].sum())
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
        """The postings of ``term_id``, gathered from the parts the index was opened from on
        first use (views of the first part's arrays when only it has the term)."""
        postings = self._postings[term_id]
        if postings is None:
            docs: list[npt.NDArray[np.int32]] = []
            tfs: list[npt.NDArray[np.int32]] = []
            copied = False
            for opened in self._parts:
                found = opened.part.postings(term_id)
                if found is None:
                    continue
                start, end = found
                part_docs, part_tfs = opened.part.docs[start:end], opened.part.tfs[start:end]
                copied |= opened.base != 0 or part_docs.dtype != np.int32
                copied |= part_tfs.dtype != np.int32
                own = part_docs.astype(np.int32, copy=False)
                docs.append(np.add(own, opened.base, dtype=np.int32) if opened.base else own)
                tfs.append(part_tfs.astype(np.int32, copy=False))
            if not docs:  # a term of no document: only in a part made by hand
                postings = _Postings.of(*(np.empty(0, dtype=np.int32),) * 2, owned=True)
            elif len(docs) == 1:
                postings = _Postings.of(docs[0], tfs[0], owned=copied)
            else:  # in several parts: one copy of them all
                postings = _Postings.of(np.concatenate(docs), np.concatenate(tfs), owned=True)
            if postings.owned:
                self._owned += postings.size
            self._postings[term_id] = postings
            self._made += 1
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
