"""Message memory: ``messages_list``, ``lexical_search``, ``semantic_search``, ``neighbors``.

The tools of seed 001, over the :class:`~skilldeck.tools.messages.MessageStore`. ``user_id`` is
always bound by the runtime. The explicit-filter rules are enforced here, by the tools: listing
and searching need a ``role`` (``any`` allowed) and at least one of ``since``/``until``.

Each user's lexical index (BM25) is built from the store on first use and kept up to date by
:meth:`Memory.add`; the semantic index lives in Chroma. Role and time filters are applied before
ranking, never after truncation.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from skilldeck.errors import ToolError
from skilldeck.tools.bm25 import BM25Index
from skilldeck.tools.fusion import RRF_K, rrf
from skilldeck.tools.index_cache import IndexCache, shared_cache
from skilldeck.tools.messages import Message, MessageStore, parse_ts
from skilldeck.tools.snapshots import SNAPSHOT_MIN, joined, split
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


@dataclass
class _Lexicon:
    """One user's BM25 index and the columns its filters need, aligned by document index."""

    index: BM25Index = field(default_factory=BM25Index)
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    roles: _Column = field(default_factory=lambda: _Column(np.int32))
    ts: _Column = field(default_factory=lambda: _Column(np.float64))
    role_codes: dict[str, int] = field(default_factory=dict)
    _string_bytes: int = 0

    @property
    def nbytes(self) -> int:
        """Estimated memory: the BM25 index, the ids and texts, the filter columns."""
        columns = len(self.ids) * (8 + 4 + 2 * 8)  # ts, role code, two list slots
        return self.index.nbytes + self._string_bytes + columns

    #: Bumped when the snapshot layout or what is indexed changes: older snapshots are ignored.
    SNAPSHOT_VERSION = 1

    def to_bytes(self) -> bytes:
        """The lexicon as one ``.npz`` blob (no pickle): numpy arrays, and each list of strings
        as one NUL-joined UTF-8 array (see :func:`~skilldeck.tools.snapshots.joined`)."""
        terms, arrays = self.index.to_arrays()
        out = io.BytesIO()
        named: dict[str, Any] = {
            "terms": joined(terms),
            "ids": joined(self.ids),
            "texts": joined(self.texts),
            "roles": self.roles.view(),
            "ts": self.ts.view(),
            "role_names": joined(sorted(self.role_codes, key=self.role_codes.__getitem__)),
            "counts": np.array([len(terms), len(self.ids), len(self.role_codes)], dtype=np.int64),
            **{f"bm25_{k}": v for k, v in arrays.items()},
        }
        np.savez(out, **named)
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> _Lexicon:
        """The lexicon :meth:`to_bytes` saved."""
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            arrays = {k[5:]: saved[k] for k in saved.files if k.startswith("bm25_")}
            terms, docs, roles = (int(n) for n in saved["counts"])
            lexicon = cls(
                index=BM25Index.from_arrays(split(saved["terms"], terms), arrays),
                ids=split(saved["ids"], docs),
                texts=split(saved["texts"], docs),
                roles=_Column.of(saved["roles"]),
                ts=_Column.of(saved["ts"]),
                role_codes={r: i for i, r in enumerate(split(saved["role_names"], roles))},
            )
        lexicon._string_bytes = sum(len(i) + 100 for i in lexicon.ids) + sum(
            len(t.encode()) for t in lexicon.texts
        )
        return lexicon

    def add(self, message: Message, tokens: Sequence[str]) -> None:
        self.index.add(tokens)
        self.ids.append(message.id)
        self.texts.append(message.text)
        # A str costs about 50 bytes besides its characters (more for non-ASCII).
        self._string_bytes += len(message.id) + len(message.text.encode()) + 100
        self.roles.append(self.role_codes.setdefault(message.role, len(self.role_codes)))
        self.ts.append(message.ts_epoch)

    def mask(self, flt: SearchFilter, limit: int) -> np.ndarray:
        keep = np.zeros(len(self.ids), dtype=bool)
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
        snapshots: Save a user's large lexicon in the store and load it on a cold start,
            rather than re-reading every message (``False``: always re-read).
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
        # A user's store writes and lexicon updates, and the rebuild of their lexicon, hold
        # the user's stripe: a rebuild never reads a message that its add then indexes again.
        self._stripes = [threading.Lock() for _ in range(64)]

    def close(self) -> None:
        """Finish pending index writes and close the store."""
        if self.vectors is not None:
            self.vectors.close()
        self.store.close()

    # -- writing ------------------------------------------------------------------------------
    def add(self, messages: Iterable[Message]) -> list[Message]:
        """Store ``messages`` and index the new ones; returns the new ones."""
        by_user: dict[str, list[Message]] = {}
        for m in messages:
            by_user.setdefault(m.user_id, []).append(m)
        added: list[Message] = []
        for user, given in by_user.items():
            with self._stripe(user):
                new = self.store.add(given)
                pairs = self._in_context(user, new, seeded=True)
                lexicon = self._cache.get((self._space, user))
                if lexicon is not None:
                    for m, text in pairs:
                        lexicon.add(m, self.tokenizer.tokens(text))
                    self._cache.reweigh((self._space, user), lexicon)
            self._index_vectors(user, pairs)
            added += new
        return added

    def _stripe(self, user_id: str) -> threading.Lock:
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
        """Rebuild both indexes of ``user_id`` from the store."""
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
        key = (self._space, user_id)
        lexicon: _Lexicon | None = self._cache.get(key)
        if lexicon is not None:
            return lexicon
        with self._stripe(user_id):
            lexicon = self._cache.peek(key)  # built by another thread meanwhile
            if lexicon is None:
                lexicon = self._load(user_id)
                self._cache.put(key, lexicon)
            return lexicon

    @property
    def _snapshot_version(self) -> str:
        """What a snapshot must have been made with to be used: its layout, the tokenizer and
        how a turn's indexed text is made."""
        return f"{_Lexicon.SNAPSHOT_VERSION}/{self.tokenizer!r}/{CONTEXT_GAP_S}"

    def _load(self, user_id: str, *, fresh: bool = False) -> _Lexicon:
        """The user's lexicon from its snapshot and the messages stored after it, or built from
        every message (``fresh``: always); a snapshot is (re)written when that saves a later
        cold start work."""
        lexicon: _Lexicon | None = None
        upto = 0
        saved = None if fresh or not self.snapshots else self.store.load_snapshot(user_id)
        if saved is not None and saved[2] == self._snapshot_version:
            upto, _, _, data = saved
            lexicon = _Lexicon.from_bytes(data)
        base = len(lexicon.ids) if lexicon is not None else 0
        newer = list(self.store.iter_user(user_id, after=upto))
        if lexicon is not None and base + len(newer) != self.store.count(user_id):
            # A message below ``upto`` that the snapshot lacks (a write committed out of seq
            # order on PostgreSQL, or a store edited by hand): start again from the store.
            lexicon, base, newer = None, 0, list(self.store.iter_user(user_id))
        if lexicon is None:
            lexicon = _Lexicon()
        for m, text in self._in_context(user_id, newer, seeded=base > 0):
            lexicon.add(m, self.tokenizer.tokens(text))
        rewrite = fresh or len(newer) >= SNAPSHOT_MIN // 2
        if self.snapshots and newer and len(lexicon.ids) >= SNAPSHOT_MIN and rewrite:
            self.store.save_snapshot(
                user_id,
                upto=newer[-1].seq,
                count=len(lexicon.ids),
                version=self._snapshot_version,
                data=lexicon.to_bytes(),
            )
        return lexicon

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
        lexicon = self._lexicon(user_id)
        key = _query_key(user_id, query_text, flt.role, flt.since, flt.until)
        offset, limit = 0, len(lexicon.ids)
        if cursor:
            payload = _decode_cursor(cursor, "lex", key)
            offset, limit = int(payload["o"]), int(payload["n"])
        mask = lexicon.mask(flt, limit)
        for phrase in query.phrases:
            phrase_ok = np.zeros_like(mask)
            for doc in lexicon.index.docs_with_all(phrase):
                if mask[doc] and _contains(self.tokenizer.tokens(lexicon.texts[doc]), phrase):
                    phrase_ok[doc] = True
            mask &= phrase_ok
        total = lexicon.index.count_matches(query.terms, mask=mask)
        ranked = lexicon.index.top(query.terms, page_size, mask=mask, offset=offset)
        found = {m.id: m for m in self.store.get(user_id, [lexicon.ids[d] for d, _ in ranked])}
        hits = [found[lexicon.ids[d]].hit(round(s, 6)) for d, s in ranked]
        next_cursor = None
        if offset + page_size < total:
            page = {"k": "lex", "q": key, "o": offset + page_size, "n": limit}
            next_cursor = _encode_cursor(page)
        return {"hits": hits, "total": total, "next_cursor": next_cursor}

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
        lexicon = self._lexicon(user_id)
        lexical: list[str] = []
        query = parse_query(query_text, self.tokenizer)
        if query.terms:
            mask = lexicon.mask(flt, len(lexicon.ids))
            lexical = [lexicon.ids[d] for d, _ in lexicon.index.top(query.terms, depth, mask=mask)]
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
