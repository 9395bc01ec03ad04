"""Message memory: ``messages_list``, ``lexical_search``, ``semantic_search``, ``neighbors``.

The tools of seed 001, over the :class:`~skilldeck.tools.messages.MessageStore`. ``user_id`` is
always bound by the runtime. The explicit-filter rules are enforced here, by the tools: listing
and searching need a ``role`` (``any`` allowed) and at least one of ``since``/``until``.

Role and time filters are applied before ranking, never after truncation. The semantic index
lives in Chroma (:mod:`skilldeck.tools.vectors`).

**The lexical index (BM25) is kept in the message store's database, written with the
messages.** :meth:`Memory.add` tokenizes the new messages (each after the previous turn of its
thread, :func:`indexed_text`) inside the transaction that stores them and appends one *segment*
to the user's lexicon (table ``<messages>_lexicon``): the BM25 postings of those messages as
flat arrays (:class:`~skilldeck.tools.bm25.IndexPart`, stored as one
:func:`~skilldeck.tools.snapshots.pack` blob) with their ``seq``, role and time. The transaction
holds the user's write lock (:meth:`MessageStore.transaction`), so a user's messages are
numbered in commit order and the segments, in ``seq`` order, always hold every message of the
user up to the last one's ``seq``. A segment merges with the newest stored ones while they
hold fewer than four times its messages, so a user's lexicon is a few segments (about
log4 of their messages) and each message is rewritten a few times in all.

A process's first search of a user opens those segments (no tokenizing: their postings are
read in place and a term's are gathered the first time a query touches it), then indexes the
messages stored after them, if any, and keeps the lexicon in its index cache
(:mod:`skilldeck.tools.index_cache`, bounded in bytes). Every search asks the store for the
user's last ``seq`` and first indexes what other processes stored since. Terms are numbered in
order of first appearance whatever the segments, so the scores are bit for bit those of an
index built message by message (equal to rank-bm25's ``BM25Okapi``). Segments are versioned
by the tokenizer and the indexed text: a store holding another version's (or none: messages
stored with ``snapshots=False``, or before this layout) is indexed from every message by the
first search, which replaces what the store held.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from skilldeck._internal.redact import log_error
from skilldeck.errors import ToolError
from skilldeck.tools.bm25 import BM25Index, IndexPart, index_part, merge_parts
from skilldeck.tools.fusion import RRF_K, rrf
from skilldeck.tools.index_cache import IndexCache, shared_cache
from skilldeck.tools.messages import LexiconSegment, Message, MessageStore, parse_ts
from skilldeck.tools.snapshots import joined, pack, split, unpack
from skilldeck.tools.text import Tokenizer, parse_query

if TYPE_CHECKING:  # chromadb is the vectors extra: imported where it is used
    from skilldeck.tools.vectors import VectorIndex

__all__ = ["CONTEXT_GAP_S", "HYBRID_WEIGHTS", "RRF_K", "Memory", "SearchFilter", "indexed_text"]

# A turn is read with the previous turn of its thread only if that came at most this long
# before: the same conversation, not yesterday's, nor an unrelated note in the same thread.
CONTEXT_GAP_S = 6 * 3600

# Lexical counts four times dense: with the offline USE model, dense is the weaker ranker, and
# 4:1 beat 1:1 on both LoCoMo (R@5 60.4 vs 54.3) and CMRC 2018 (R@1 92.3 vs 85.2).
HYBRID_WEIGHTS = (4.0, 1.0)

# Bumped when a stored segment's layout or what is indexed changes: others are not used.
_LEXICON_LAYOUT = 2
# A new segment merges with the stored one before it while that one holds fewer than this many
# times its messages (then with the one before, ...).
_MERGE_FACTOR = 4
# No segment holds more messages, so that a posting's document fits two bytes (a stored
# segment is about 3 bytes a posting, 150 bytes a 30-word message with its previous turn).
_SEGMENT_MAX_DOCS = 1 << 16

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """A validated filter: ``role`` (``None`` = any) and a time range in epoch seconds."""

    role: str | None
    since: float | None
    until: float | None

    @classmethod
    def parse(cls, tool: str, raw: Any, *, nested: bool) -> SearchFilter:
        """Check seed 001's explicit-filter rule and parse the times.

        ``nested`` is the search form ``{role, time_range: {since, until}}``; otherwise
        ``raw`` holds ``role``, ``since`` and ``until`` directly (``messages_list``).
        """
        prefix = "filter." if nested else ""
        if nested and not isinstance(raw, Mapping):
            raise ToolError(
                f"{tool} needs filter={{role, time_range: {{since, until}}}}: filters must be "
                "explicit (role may be 'any')"
            )
        if nested and set(raw) - {"role", "time_range"}:
            unknown = ", ".join(sorted(set(raw) - {"role", "time_range"}))
            raise ToolError(f"{tool}: unknown filter key(s) {unknown}; use role and time_range")
        role = raw.get("role")
        if not isinstance(role, str) or not role:
            raise ToolError(f"{tool} needs {prefix}role (use 'any' for every role)")
        times = raw.get("time_range") if nested else raw
        if nested and times is not None and not isinstance(times, Mapping):
            raise ToolError(f"{tool}: filter.time_range must be an object {{since, until}}")
        times = times or {}
        where = f"{prefix}time_range." if nested else ""
        if times.get("since") is None and times.get("until") is None:
            raise ToolError(
                f"{tool} needs {where}since or {where}until (ISO 8601, Z allowed): "
                "the time range must be explicit"
            )
        since = _epoch(times.get("since"), f"{where}since")
        until = _epoch(times.get("until"), f"{where}until")
        if since is not None and until is not None and since >= until:
            raise ToolError(f"{tool}: {where}since must be before {where}until")
        return cls(None if role == "any" else role, since, until)


def _epoch(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(f"{name} must be an ISO 8601 string")
    return parse_ts(value, name=name).timestamp()


def _encode_cursor(payload: Mapping[str, Any]) -> str:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, kind: str, query: str) -> dict[str, Any]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, TypeError):
        raise ToolError("cursor is not valid; pass a next_cursor from an earlier call") from None
    if not isinstance(payload, dict) or payload.get("k") != kind or payload.get("q") != query:
        raise ToolError("cursor belongs to another query; pass it with the same arguments")
    return payload


def _query_key(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class _Column:
    """A growable numpy column, so per-message filters are vectorised without copies."""

    def __init__(self, dtype: Any) -> None:
        self.data = np.empty(1024, dtype=dtype)
        self.size = 0

    def append(self, value: Any) -> None:
        if self.size == len(self.data):
            self.data = np.resize(self.data, 2 * len(self.data))
        self.data[self.size] = value
        self.size += 1

    def view(self) -> np.ndarray:
        return self.data[: self.size]

    @classmethod
    def of(cls, values: np.ndarray) -> _Column:
        column = cls(values.dtype)
        column.data, column.size = values.copy(), len(values)
        return column


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative integers in the smallest of uint8, uint16, int32 and int64 that holds them:
    most term frequencies fit a byte, which makes a stored segment smaller."""
    top = int(values.max()) if len(values) else 0
    for dtype in (np.uint8, np.uint16, np.int32):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype, copy=False)
    return values.astype(np.int64, copy=False)


def _codes(names: Sequence[str], codes: np.ndarray, into: dict[str, int]) -> np.ndarray:
    """Role ``codes`` numbered by ``names`` renumbered by ``into`` (extended in order)."""
    lookup = np.array([into.setdefault(name, len(into)) for name in names], dtype=np.int32)
    return lookup[codes] if len(codes) else np.empty(0, dtype=np.int32)


@dataclass(frozen=True, slots=True)
class _Segment:
    """A stored run of a user's lexicon: the BM25 postings of consecutive messages (in ``seq``
    order, every message of the user in its range), keyed by the lexicon's term ids, with the
    terms that first appear in it and their messages' ``seq``, role and time."""

    part: IndexPart
    first_term: int  # the id of new_terms[0]: how many terms the segments before it hold
    new_terms: Sequence[str]
    seqs: np.ndarray
    roles: np.ndarray  # codes into role_names
    role_names: Sequence[str]
    ts: np.ndarray

    @classmethod
    def of(
        cls,
        docs: Sequence[tuple[Message, Sequence[str]]],
        vocabulary: Mapping[str, int],
        size: int,
    ) -> _Segment:
        """The segment of messages and their tokens, after segments holding ``size`` terms,
        those of ``vocabulary`` with ids below ``size``."""
        part, new_terms = index_part((tokens for _, tokens in docs), vocabulary, size)
        names: dict[str, int] = {}
        return cls(
            part,
            size,
            new_terms,
            np.array([m.seq for m, _ in docs], dtype=np.int64),
            np.array([names.setdefault(m.role, len(names)) for m, _ in docs], dtype=np.int32),
            list(names),
            np.array([m.ts_epoch for m, _ in docs], dtype=np.float64),
        )

    @classmethod
    def merge(cls, segments: Sequence[_Segment]) -> _Segment:
        """One segment of consecutive ``segments``."""
        names: dict[str, int] = {}
        roles = [_codes(s.role_names, s.roles, names) for s in segments]
        return cls(
            merge_parts([s.part for s in segments]),
            segments[0].first_term,
            [term for s in segments for term in s.new_terms],
            np.concatenate([s.seqs for s in segments]),
            np.concatenate(roles),
            list(names),
            np.concatenate([s.ts for s in segments]),
        )

    def to_bytes(self) -> bytes:
        """The segment as one :func:`~skilldeck.tools.snapshots.pack` blob (no pickle)."""
        part = self.part
        counts = [len(self.new_terms), len(self.role_names), self.first_term]
        return pack(
            {
                "new_terms": joined(self.new_terms),
                "term_ids": _narrow(part.term_ids),
                "offsets": _narrow(part.offsets),
                "docs": _narrow(part.docs),
                "tfs": _narrow(part.tfs),
                "lengths": _narrow(part.lengths),
                "seqs": self.seqs,
                "roles": _narrow(self.roles),
                "role_names": joined(self.role_names),
                "ts": self.ts,
                "counts": np.array(counts, dtype=np.int64),
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> _Segment:
        """The segment :meth:`to_bytes` stored; its arrays are read-only views of ``data``."""
        saved = unpack(data)
        terms, roles, first_term = (int(n) for n in saved["counts"])
        arrays = ("term_ids", "offsets", "docs", "tfs", "lengths")
        part = IndexPart(*(saved[name] for name in arrays))
        names = split(saved["role_names"], roles)
        new_terms = split(saved["new_terms"], terms)
        return cls(part, first_term, new_terms, saved["seqs"], saved["roles"], names, saved["ts"])


@dataclass
class _Lexicon:
    """One user's BM25 index and the columns its filters need, aligned by document: one
    document per message, in ``seq`` order."""

    index: BM25Index = field(default_factory=BM25Index)
    seqs: _Column = field(default_factory=lambda: _Column(np.int64))
    roles: _Column = field(default_factory=lambda: _Column(np.int32))
    ts: _Column = field(default_factory=lambda: _Column(np.float64))
    role_codes: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.seqs.size

    @property
    def last_seq(self) -> int:
        """The ``seq`` of its last message (0: none)."""
        return int(self.seqs.data[self.seqs.size - 1]) if self.seqs.size else 0

    @property
    def nbytes(self) -> int:
        """Estimated memory: the BM25 index and the columns."""
        columns = self.seqs.data.nbytes + self.roles.data.nbytes + self.ts.data.nbytes
        return self.index.nbytes + columns

    @classmethod
    def from_segments(cls, segments: Sequence[_Segment]) -> _Lexicon:
        """The lexicon of consecutive segments (their postings are not copied).

        Raises:
            ValueError: the segments do not follow each other.
        """
        if not segments:
            return cls()
        vocabulary: list[str] = []
        for segment in segments:
            if segment.first_term != len(vocabulary):
                raise ValueError("the lexicon's segments do not follow each other")
            vocabulary += segment.new_terms
        codes: dict[str, int] = {}
        roles = [_codes(s.role_names, s.roles, codes) for s in segments]
        return cls(
            index=BM25Index.from_parts(vocabulary, [s.part for s in segments]),
            seqs=_Column.of(np.concatenate([s.seqs for s in segments])),
            roles=_Column.of(np.concatenate(roles)),
            ts=_Column.of(np.concatenate([s.ts for s in segments])),
            role_codes=codes,
        )

    def add(self, message: Message, tokens: Sequence[str]) -> None:
        self.index.add(tokens)
        self.seqs.append(message.seq)
        self.roles.append(self.role_codes.setdefault(message.role, len(self.role_codes)))
        self.ts.append(message.ts_epoch)

    def mask(self, flt: SearchFilter, limit: int) -> np.ndarray:
        keep = np.zeros(len(self), dtype=bool)
        keep[:limit] = True
        if flt.role is not None:
            keep &= self.roles.view() == self.role_codes.get(flt.role, -1)
        ts = self.ts.view()
        if flt.since is not None:
            keep &= ts >= flt.since
        if flt.until is not None:
            keep &= ts < flt.until
        return keep


def indexed_text(message: Message, previous: Message | None) -> str:
    """``"speaker: text"`` of the turn, after that of the previous turn when there is one."""
    own = f"{_speaker(message)}: {message.text}"
    return own if previous is None else f"{_speaker(previous)}: {previous.text}\n{own}"


def _speaker(message: Message) -> str:
    return str(message.meta.get("speaker") or message.role)


def _contains(tokens: Sequence[str], phrase: Sequence[str]) -> bool:
    n = len(phrase)
    return any(list(tokens[i : i + n]) == list(phrase) for i in range(len(tokens) - n + 1))


class Memory:
    """The memory tools over a message store, a BM25 index per user and a vector index.

    Args:
        store: the source of truth.
        vectors: the semantic index; ``None`` disables ``semantic_search``.
        tokenizer: how text becomes BM25 tokens (English with stemming and stop words, and
            Chinese, by default).
        cache: where users' lexicons are kept (default: the process's shared
            :class:`~skilldeck.tools.index_cache.IndexCache`).
        snapshots: Keep each user's lexicon in the store, written with the messages, and open
            it on a cold start (``False``: nothing is written or read; a user's first search
            in a process tokenizes every message of theirs).
    """

    def __init__(
        self,
        store: MessageStore,
        vectors: VectorIndex | None = None,
        *,
        tokenizer: Tokenizer | None = None,
        cache: IndexCache | None = None,
        snapshots: bool = True,
    ) -> None:
        self.store = store
        self.vectors = vectors
        self.snapshots = snapshots
        # Stemming and stop words: +5.6 R@5 on LoCoMo, SciFact nDCG@10 0.660 -> 0.697 (train).
        self.tokenizer = tokenizer or Tokenizer(stem=True, stopwords=True)
        # Lexicons live in the process's index cache (bounded by bytes, LRU): an evicted one
        # is rebuilt from the store on its next use.
        self._cache = cache or shared_cache()
        self._space = f"memory:{uuid.uuid4().hex}"  # this memory's keys in the shared cache
        self._backfilled: set[str] = set()
        self._lock = threading.RLock()
        # A user's store writes and lexicon updates, the loading of their lexicon and the
        # searches that read it hold the user's stripe: a lexicon is never read half updated,
        # and a load never reads a message that an add then indexes again.
        self._stripes = [threading.RLock() for _ in range(64)]

    def close(self) -> None:
        """Finish pending index writes and close the store."""
        if self.vectors is not None:
            self.vectors.close()
        self.store.close()

    # -- writing ------------------------------------------------------------------------------
    def add(self, messages: Iterable[Message]) -> list[Message]:
        """Store ``messages`` and index the new ones; returns the new ones.

        A user's messages and the segment of the stored lexicon that indexes them are written
        in one transaction (see the module's docstring)."""
        by_user: dict[str, list[Message]] = {}
        for m in messages:
            by_user.setdefault(m.user_id, []).append(m)
        added: list[Message] = []
        for user, given in by_user.items():
            key = (self._space, user)
            with self._stripe(user):
                # The lexicon so far: its vocabulary numbers the new segment's terms.
                lexicon = self._lexicon(user) if self.snapshots else self._cache.get(key)
                with self.store.transaction([user]):
                    before = self.store.last_seq(user)
                    if lexicon is not None and lexicon.last_seq < before:
                        self._catch_up(user, lexicon)  # what another process stored meanwhile
                    new = self.store.add(given)
                    pairs = self._in_context(user, new, seeded=True)
                    docs = [(m, self.tokenizer.tokens(text)) for m, text in pairs]
                    if lexicon is not None and self.snapshots and docs:
                        self._persist(user, docs, after=before, vocabulary=lexicon.index.vocabulary)
                # A lexicon ahead of the store (messages deleted meanwhile) is not extended:
                # the next search loads it again.
                if lexicon is not None and lexicon.last_seq == before:
                    for m, tokens in docs:
                        lexicon.add(m, tokens)
                    self._cache.reweigh(key, lexicon)
            self._index_vectors(user, pairs)
            added += new
        return added

    def _stripe(self, user_id: str) -> threading.RLock:
        return self._stripes[hash(user_id) % len(self._stripes)]

    def _in_context(
        self, user_id: str, messages: Iterable[Message], *, seeded: bool
    ) -> list[tuple[Message, str]]:
        """Each message with the text the indexes see: the turn after the previous turn of its
        thread, each with its speaker. A turn alone ("Yes, last May!") rarely says what it is
        about; its question does (+9.0 R@5 lexical and +19.1 dense on LoCoMo, bench/RESULTS.md).

        ``seeded`` looks up the previous turn of a thread's first message in the store; a full
        pass over the store in ``seq`` order already holds it.
        """
        last: dict[str, Message | None] = {}
        out = []
        for m in messages:
            if m.thread_id not in last and seeded:
                last[m.thread_id] = self.store.previous_in_thread(user_id, m.thread_id, m.seq)
            previous = last.get(m.thread_id)
            if previous is not None and m.ts_epoch - previous.ts_epoch > CONTEXT_GAP_S:
                previous = None  # a later session, or unrelated notes filed in one thread
            out.append((m, indexed_text(m, previous)))
            last[m.thread_id] = m
        return out

    def _index_vectors(self, user_id: str, pairs: Sequence[tuple[Message, str]]) -> None:
        if self.vectors is None or not pairs:
            return
        self.vectors.add(
            user_id,
            ids=[m.id for m, _ in pairs],
            texts=[text for _, text in pairs],
            roles=[m.role for m, _ in pairs],
            ts=[m.ts_epoch for m, _ in pairs],
            thread_ids=[m.thread_id for m, _ in pairs],
            new=True,  # the store inserted them just now, or a rebuild reset the index
        )

    def backfill(self, user_id: str) -> int:
        """Index the user's stored messages that the vector index lacks (a write lost to a
        crash, or messages stored by another path); returns how many. Checked once per user
        per process, before the first semantic query."""
        if self.vectors is None:
            return 0
        with self._lock:
            if user_id in self._backfilled:
                return 0
            self._backfilled.add(user_id)
        stored = self.store.count(user_id)
        if self.vectors.covers(user_id, stored) or self.vectors.count(user_id) >= stored:
            return 0
        indexed = self.vectors.ids(user_id)
        pairs = self._in_context(user_id, self.store.iter_user(user_id), seeded=False)
        missing = [(m, text) for m, text in pairs if m.id not in indexed]
        for start in range(0, len(missing), 1000):
            self._index_vectors(user_id, missing[start : start + 1000])
        self.vectors.flush(user_id)
        return len(missing)

    def rebuild(self, user_id: str) -> None:
        """Rebuild both indexes of ``user_id`` from the store (the stored lexicon too, which
        drops those another tokenizer made)."""
        with self._stripe(user_id):
            self._cache.put((self._space, user_id), self._load(user_id, fresh=True))
        if self.vectors is not None:
            with self._lock:
                self._backfilled.add(user_id)
            self.vectors.reset(user_id)
            pairs = self._in_context(user_id, self.store.iter_user(user_id), seeded=False)
            for start in range(0, len(pairs), 1000):
                self._index_vectors(user_id, pairs[start : start + 1000])

    def _lexicon(self, user_id: str) -> _Lexicon:
        """The user's lexicon, holding every message stored (by any process) until now."""
        key = (self._space, user_id)
        last = self.store.last_seq(user_id)
        lexicon: _Lexicon | None = self._cache.get(key)
        if lexicon is not None and lexicon.last_seq == last:
            return lexicon
        with self._stripe(user_id):
            lexicon = self._cache.peek(key)  # loaded or extended by another thread meanwhile
            if lexicon is None or lexicon.last_seq > last:  # (messages deleted: load again)
                lexicon = self._load(user_id)
            elif lexicon.last_seq < last:
                self._catch_up(user_id, lexicon)
            self._cache.put(key, lexicon)
            return lexicon

    def _catch_up(self, user_id: str, lexicon: _Lexicon) -> None:
        """Index the messages stored after ``lexicon``'s last (by another process, or another
        path), and store them if the stored lexicon lacks them."""
        head = lexicon.last_seq
        docs = self._tokenized(user_id, self.store.iter_user(user_id, after=head))
        for m, tokens in docs:
            lexicon.add(m, tokens)
        self._save(user_id, docs, after=head, vocabulary=lexicon.index.vocabulary)

    @property
    def _version(self) -> str:
        """What stored segments must have been made with to be used: their layout, the
        tokenizer and how a turn's indexed text is made."""
        return f"{_LEXICON_LAYOUT}/{self.tokenizer!r}/{CONTEXT_GAP_S}"

    def _tokenized(
        self, user_id: str, messages: Iterable[Message], *, seeded: bool = True
    ) -> list[tuple[Message, list[str]]]:
        pairs = self._in_context(user_id, messages, seeded=seeded)
        return [(m, self.tokenizer.tokens(text)) for m, text in pairs]

    def _load(self, user_id: str, *, fresh: bool = False) -> _Lexicon:
        """The user's lexicon from its stored segments and the messages stored after them, or
        from every message (``fresh``: always), whose segments then replace the stored ones."""
        lexicon = None if fresh or not self.snapshots else self._open(user_id)
        if lexicon is not None:
            self._catch_up(user_id, lexicon)
            return lexicon
        docs = self._tokenized(user_id, self.store.iter_user(user_id), seeded=False)
        if not self.snapshots:
            lexicon = _Lexicon()
            for m, tokens in docs:
                lexicon.add(m, tokens)
            return lexicon
        # From every message: its segments are made first, stored, then opened.
        vocabulary: dict[str, int] = {}
        segments = []
        for start in range(0, len(docs), _SEGMENT_MAX_DOCS):
            segment = _Segment.of(
                docs[start : start + _SEGMENT_MAX_DOCS], vocabulary, len(vocabulary)
            )
            vocabulary.update(zip(segment.new_terms, itertools.count(len(vocabulary))))
            segments.append(segment)
        try:
            with self.store.transaction([user_id]):
                self.store.clear_lexicon(user_id)
                for segment in segments:
                    self._put(user_id, [], segment)
        except Exception as exc:  # a search never fails for it: the next cold start stores it
            log_error(log, f"could not store the lexicon of {len(docs):,} messages", exc)
        return _Lexicon.from_segments(segments)

    def _open(self, user_id: str) -> _Lexicon | None:
        """The lexicon of the user's stored segments, if they can be trusted: they hold every
        message up to their end (``None``: none of this version, or they do not)."""
        stored = self.store.lexicon_data(user_id, self._version)
        if not stored:
            return None
        head = stored[-1][0].last_seq
        if sum(segment.docs for segment, _ in stored) != self.store.count(user_id, upto=head):
            # A message below the segments' end that they lack, or that is gone (a history
            # stored before the store numbered a user's messages in commit order, or one
            # edited by hand).
            return None
        try:
            return _Lexicon.from_segments([_Segment.from_bytes(data) for _, data in stored])
        except ValueError as exc:
            log_error(log, "the stored lexicon is inconsistent; indexing every message", exc)
            return None

    def _save(
        self,
        user_id: str,
        docs: Sequence[tuple[Message, Sequence[str]]],
        *,
        after: int,
        vocabulary: Mapping[str, int],
    ) -> None:
        """:meth:`_persist` what a search indexed, in a transaction of its own, unless there is
        nothing to store or snapshots are off. A search never fails for it."""
        if not self.snapshots or not docs:
            return
        try:
            with self.store.transaction([user_id]):
                self._persist(user_id, docs, after=after, vocabulary=vocabulary)
        except Exception as exc:
            log_error(log, f"could not store the lexicon of {len(docs):,} messages", exc)

    def _persist(
        self,
        user_id: str,
        docs: Sequence[tuple[Message, Sequence[str]]],
        *,
        after: int,
        vocabulary: Mapping[str, int],
    ) -> None:
        """Append the segment of ``docs`` (messages in ``seq`` order, with their tokens) to the
        user's stored lexicon, inside a transaction of the user.

        ``after`` is the ``seq`` of the message just before ``docs``: only the messages after
        the stored segments' end are appended, and only if it is ``after`` or one of
        ``docs``, so that the segments always hold every message up to their end.
        ``vocabulary`` numbers the terms the stored segments hold (a lexicon holding at least
        the messages up to their end). A new segment merges with the newest stored ones while
        they hold fewer than ``_MERGE_FACTOR`` times its messages: a user's lexicon stays a
        few segments, each message rewritten a few times in all.
        """
        version = self._version
        stored = self.store.lexicon_segments(user_id, version)
        head = stored[-1].last_seq if stored else 0
        seqs = [m.seq for m, _ in docs]
        if head != after:
            if head not in seqs:
                return  # a gap, or they hold these already
            docs = docs[seqs.index(head) + 1 :]
        size = sum(s.terms for s in stored)
        for start in range(0, len(docs), _SEGMENT_MAX_DOCS):
            segment = _Segment.of(docs[start : start + _SEGMENT_MAX_DOCS], vocabulary, size)
            if start + _SEGMENT_MAX_DOCS < len(docs):  # the next segment's terms know these
                vocabulary = {**vocabulary, **dict(zip(segment.new_terms, itertools.count(size)))}
            size += len(segment.new_terms)
            count, keep = len(segment.seqs), len(stored)
            while keep and stored[keep - 1].docs < _MERGE_FACTOR * count:
                if stored[keep - 1].docs + count > _SEGMENT_MAX_DOCS:
                    break
                keep -= 1
                count += stored[keep].docs
            older = stored[keep:]
            if older:
                found = self.store.lexicon_data(user_id, version, [o.first_seq for o in older])
                segment = _Segment.merge([*(_Segment.from_bytes(d) for _, d in found), segment])
            stored = [*stored[:keep], self._put(user_id, older, segment)]

    def _put(
        self, user_id: str, replaced: Sequence[LexiconSegment], segment: _Segment
    ) -> LexiconSegment:
        first, last = int(segment.seqs[0]), int(segment.seqs[-1])
        row = LexiconSegment(first, last, len(segment.seqs), len(segment.new_terms))
        drop = [r.first_seq for r in replaced]
        data = segment.to_bytes()
        self.store.replace_lexicon(user_id, self._version, drop=drop, segment=row, data=data)
        return row

    # -- the tools ------------------------------------------------------------------------------
    def messages_list(
        self,
        user_id: str,
        *,
        since: str | None = None,
        until: str | None = None,
        role: str | None = None,
        page_size: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """Messages in time order, filtered by role and time range, paged by cursor."""
        flt = SearchFilter.parse(
            "messages_list", {"role": role, "since": since, "until": until}, nested=False
        )
        key = _query_key(user_id, flt.role, flt.since, flt.until)
        after = None
        if cursor:
            payload = _decode_cursor(cursor, "list", key)
            after = (float(payload["t"]), int(payload["s"]))
        rows = self.store.select(
            user_id,
            since=flt.since,
            until=flt.until,
            role=flt.role,
            after=after,
            limit=page_size + 1,
        )
        page = rows[:page_size]
        next_cursor = None
        if len(rows) > page_size:
            last = page[-1]
            next_cursor = _encode_cursor({"k": "list", "q": key, "t": last.ts_epoch, "s": last.seq})
        return {"hits": [m.hit() for m in page], "next_cursor": next_cursor}

    def lexical_search(
        self,
        user_id: str,
        *,
        query_text: str,
        filter: Mapping[str, Any] | None = None,
        page_size: int = 20,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """BM25 over the user's messages; ``"quoted phrases"`` must match contiguously."""
        flt = SearchFilter.parse("lexical_search", filter, nested=True)
        query = parse_query(query_text, self.tokenizer)
        if not query.terms:
            raise ToolError("lexical_search: query_text has no searchable words")
        key = _query_key(user_id, query_text, flt.role, flt.since, flt.until)
        with self._stripe(user_id):
            lexicon = self._lexicon(user_id)
            offset, limit = 0, len(lexicon)
            if cursor:
                payload = _decode_cursor(cursor, "lex", key)
                offset, limit = int(payload["o"]), int(payload["n"])
            mask = lexicon.mask(flt, limit)
            for phrase in query.phrases:
                mask &= self._with_phrase(user_id, lexicon, phrase, mask)
            total = lexicon.index.count_matches(query.terms, mask=mask)
            ranked = lexicon.index.top(query.terms, page_size, mask=mask, offset=offset)
            seqs = [int(lexicon.seqs.data[d]) for d, _ in ranked]
        found = {m.seq: m for m in self.store.by_seq(user_id, seqs)}
        hits = [
            found[q].hit(round(s, 6)) for q, (_, s) in zip(seqs, ranked, strict=True) if q in found
        ]
        next_cursor = None
        if offset + page_size < total:
            page = {"k": "lex", "q": key, "o": offset + page_size, "n": limit}
            next_cursor = _encode_cursor(page)
        return {"hits": hits, "total": total, "next_cursor": next_cursor}

    def _with_phrase(
        self, user_id: str, lexicon: _Lexicon, phrase: Sequence[str], mask: np.ndarray
    ) -> np.ndarray:
        """Which documents ``mask`` allows hold ``phrase`` contiguously in their message's own
        text (read from the store: the lexicon keeps no texts)."""
        docs = lexicon.index.docs_with_all(phrase)
        docs = docs[mask[docs]]
        seqs = lexicon.seqs.view()[docs].tolist()
        texts = {m.seq: m.text for m in self.store.by_seq(user_id, seqs)}
        holding = np.zeros_like(mask)
        for doc, seq in zip(docs.tolist(), seqs, strict=True):
            text = texts.get(seq)
            holding[doc] = text is not None and _contains(self.tokenizer.tokens(text), phrase)
        return holding

    def semantic_search(
        self,
        user_id: str,
        *,
        query_text: str | None = None,
        query_embedding: Sequence[float] | None = None,
        filter: Mapping[str, Any] | None = None,
        top_k: int = 10,
        min_score: float | None = None,
    ) -> dict[str, Any]:
        """Nearest messages by embedding (cosine similarity), filtered before ranking."""
        flt = SearchFilter.parse("semantic_search", filter, nested=True)
        if (query_text is None) == (query_embedding is None):
            raise ToolError("semantic_search needs exactly one of query_text or query_embedding")
        if self.vectors is None:
            raise ToolError("semantic_search is not configured on this deployment")
        self.backfill(user_id)
        found = self.vectors.query(
            user_id,
            text=query_text,
            embedding=query_embedding,
            top_k=top_k,
            role=flt.role,
            since=flt.since,
            until=flt.until,
            min_score=min_score,
            known=self.store.count(user_id),
        )
        messages = {m.id: m for m in self.store.get(user_id, [h.id for h in found])}
        hits = [messages[h.id].hit(round(h.score, 6)) for h in found if h.id in messages]
        return {"hits": hits}

    def neighbors(
        self, user_id: str, *, message_id: str, before: int = 8, after: int = 0
    ) -> dict[str, Any]:
        """The anchor message with up to ``before``/``after`` messages around it, in order."""
        rows = self.store.neighbors(user_id, message_id, before, after)
        return {"anchor": message_id, "hits": [m.hit() for m in rows]}

    # -- retrieval for skills and benchmarks -------------------------------------------------------
    def hybrid_search(
        self,
        user_id: str,
        query_text: str,
        *,
        role: str | None = None,
        since: float | None = None,
        until: float | None = None,
        top_k: int = 10,
        depth: int = 50,
    ) -> list[tuple[Message, float]]:
        """BM25 and semantic rankings, fused by :func:`~skilldeck.tools.fusion.rrf`."""
        flt = SearchFilter(None if role in (None, "any") else role, since, until)
        query = parse_query(query_text, self.tokenizer)
        seqs: list[int] = []
        if query.terms:
            with self._stripe(user_id):
                lexicon = self._lexicon(user_id)
                mask = lexicon.mask(flt, len(lexicon))
                ranked = lexicon.index.top(query.terms, depth, mask=mask)
                seqs = [int(lexicon.seqs.data[d]) for d, _ in ranked]
        lexical = [m.id for m in self.store.by_seq(user_id, seqs)]
        dense: list[str] = []
        if self.vectors is not None:
            self.backfill(user_id)
            found = self.vectors.query(
                user_id,
                text=query_text,
                top_k=depth,
                role=flt.role,
                since=since,
                until=until,
                known=self.store.count(user_id),
            )
            dense = [hit.id for hit in found]
        best = rrf(lexical, dense, weights=HYBRID_WEIGHTS)[:top_k]
        messages = {m.id: m for m in self.store.get(user_id, [k for k, _ in best])}
        return [(messages[k], s) for k, s in best if k in messages]
