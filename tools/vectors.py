"""Per-user semantic index of chat messages on Chroma, with fast role and time filters.

Each user has one Chroma collection (cosine space) whose items are message ids with the metadata
``role``, ``ts`` (epoch seconds) and ``thread_id``; texts live in the message store, not here.
Unfiltered queries go to Chroma's HNSW index. Queries filtered by role or time do not use
Chroma's ``where`` (about 150-200 ms at 100k vectors): they scan an in-process copy of the user's
vectors, which is exact (over the vectors at half precision) and costs a few milliseconds
whatever the filter keeps. The copy is loaded on the first filtered query and follows this
object's own ``add`` calls; when the collection's count shows that another process added items,
it fetches them before querying.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import chromadb
import numpy as np
import numpy.typing as npt
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.types import Documents, EmbeddingFunction
from chromadb.config import Settings
from chromadb.errors import NotFoundError

from skilldeck._internal.heap import release_free_memory
from skilldeck._internal.redact import log_error
from skilldeck.tools.embeddings import default_embedding_function
from skilldeck.tools.index_cache import IndexCache, shared_cache
from skilldeck.tools.snapshots import (
    SNAPSHOT_MAX_BYTES,
    SNAPSHOT_MIN,
    SnapshotStore,
    joined,
    pack,
    split,
    unpack,
)

__all__ = ["VectorHit", "VectorIndex", "open_chroma"]

Matrix = npt.NDArray[np.float32]
T = TypeVar("T")

_BATCH = 256  # texts per embedding call and per upsert
_PAGE = 5_000  # items per page when loading a user's vectors from Chroma
_SNAPSHOT_LAYOUT = "v3"  # bumped when the snapshot's arrays change

log = logging.getLogger(__name__)


def open_chroma(path: str | Path | None = None, url: str | None = None) -> ClientAPI:
    """Open a Chroma client with telemetry off.

    Args:
        path: Folder of an embedded (persistent) database; default ``chroma`` in the state
            folder (``SKILLDECK_HOME``).
        url: A ``chroma run`` server such as ``http://127.0.0.1:8000`` (the value of
            ``SKILLDECK_CHROMA_URL``); several app processes can share it. It wins over
            ``path``, so settings may always pass both.

    Returns:
        An HTTP client if ``url`` is given, else a persistent embedded client.
    """
    settings = Settings(anonymized_telemetry=False)
    if url is None:
        if path is None:
            from skilldeck._internal.home import state_home

            path = state_home().path / "chroma"
        return chromadb.PersistentClient(path=str(path), settings=settings)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"Chroma url must look like http://host:port, got {url!r}")
    if parts.path.strip("/"):
        raise ValueError(f"Chroma url must not have a path, got {url!r}")
    ssl = parts.scheme == "https"
    port = parts.port or (443 if ssl else 8000)
    return chromadb.HttpClient(host=parts.hostname, port=port, ssl=ssl, settings=settings)


@dataclass(frozen=True, slots=True)
class VectorHit:
    """One search result: a message id and its cosine similarity to the query."""

    id: str
    score: float  # cosine similarity in [-1, 1]


def _normalised(vectors: npt.ArrayLike) -> Matrix:
    """Rows as float32 unit vectors, so that a dot product is the cosine."""
    matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if matrix.size and not np.all(norms > 0):
        raise ValueError("cannot normalise a zero vector")
    # Rows of unit length already stay as they are, so normalising twice changes nothing: a
    # copy read back from Chroma then holds the very numbers this process added, down to the
    # half-precision rounding of the copy.
    norms[np.abs(norms - 1) < 1e-5] = 1
    return cast(Matrix, matrix / norms)


def _ranked(ids: Sequence[str], scores: Sequence[float], top_k: int) -> list[VectorHit]:
    """Hits by score descending, then id ascending, at most ``top_k``; a score past +-1 by
    rounding (a vector against itself at half precision) is reported as +-1."""
    clipped = [min(1.0, max(-1.0, float(score))) for score in scores]
    hits = sorted(zip(ids, clipped, strict=True), key=lambda hit: (-hit[1], hit[0]))
    return [VectorHit(item_id, score) for item_id, score in hits[:top_k]]


def _upsert(collection: Collection, ids: list[str], vectors: Matrix, metadatas: list[Any]) -> int:
    """Upsert one batch; returns how many of its ids are new."""
    known = collection.get(ids=ids, include=[])["ids"]
    collection.upsert(ids=ids, embeddings=vectors, metadatas=metadatas)
    return len(ids) - len(known)


def _insert(collection: Collection, ids: list[str], vectors: Matrix, metadatas: list[Any]) -> int:
    """Insert a batch the caller knows is new: no lookup, and Chroma's add is cheaper."""
    collection.add(ids=ids, embeddings=vectors, metadatas=metadatas)
    return len(ids)


class _UserVectors:
    """One user's vectors in memory, with role codes and timestamps, row-aligned with ``ids``.

    Arrays grow by doubling their capacity, so adding one message does not copy the matrix.
    """

    def __init__(self) -> None:
        # Chroma lists items in insertion order; its first ``synced`` items are all cached, so
        # items added by other processes can only be after that position.
        self.synced = 0
        # How many of those its last snapshot held (loaded or saved).
        self.saved = 0
        self.ids: list[str] = []
        self.rows: dict[str, int] = {}
        self._id_bytes = 0
        self.role_codes: dict[str, int] = {}
        self._matrix: Matrix = np.empty((0, 0), dtype=np.float32)
        self._roles: npt.NDArray[np.int32] = np.empty(0, dtype=np.int32)
        self._ts: npt.NDArray[np.float64] = np.empty(0, dtype=np.float64)

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """Estimated memory: the arrays (with their spare capacity) and the id strings, each
        in the ``ids`` list and as a key of ``rows``."""
        arrays = self._matrix.nbytes + self._roles.nbytes + self._ts.nbytes
        return arrays + self._id_bytes

    def put(
        self, ids: Sequence[str], vectors: Matrix, roles: Sequence[str], ts: Sequence[float]
    ) -> None:
        """Insert new ids and overwrite known ones (``ids`` must be distinct)."""
        dim = self._matrix.shape[1]
        if dim and vectors.shape[1] != dim:
            raise ValueError(f"embeddings have {vectors.shape[1]} dimensions, the index {dim}")
        filled = self.size
        rows = np.empty(len(ids), dtype=np.intp)
        for i, item_id in enumerate(ids):
            row = self.rows.get(item_id)
            if row is None:
                row = self.rows[item_id] = len(self.ids)
                self.ids.append(item_id)
                self._id_bytes += len(item_id) + 170  # the str, its list slot and dict entry
            rows[i] = row
        self._grow(filled, vectors.shape[1])
        if not self._roles.flags.writeable:  # loaded from a snapshot: copy on first write
            if not self._matrix.flags.writeable:
                self._matrix = self._matrix.copy()
            self._roles, self._ts = self._roles.copy(), self._ts.copy()
        # Held at half precision (in float32, which the scan needs): a snapshot can then store
        # float16 without loss, half the bytes where they cross a network, and every process,
        # whether it loaded its copy or built it, ranks alike. A score moves by about 1e-4.
        self._matrix[rows] = vectors.astype(np.float16)
        codes = self.role_codes
        self._roles[rows] = [codes.setdefault(role, len(codes)) for role in roles]
        self._ts[rows] = ts

    def array_bytes(self, half: bool) -> int:
        """The bytes of its filled rows as :meth:`to_bytes` saves them: what its snapshot
        holds at the least."""
        n = self.size
        matrix = self._matrix[:n].nbytes // (2 if half else 1)
        return matrix + self._roles[:n].nbytes + self._ts[:n].nbytes

    def to_bytes(self, half: bool = False) -> bytes:
        """The copy as one blob (:func:`~skilldeck.tools.snapshots.pack`), for
        :meth:`from_bytes`; ``half`` stores the matrix as float16 (it holds half-precision
        values, so nothing is lost): half the bytes to move, and a conversion to load."""
        n = self.size
        matrix = self._matrix[:n]
        return pack(
            {
                "matrix": matrix.astype(np.float16) if half else matrix,
                "roles": self._roles[:n],
                "ts": self._ts[:n],
                "ids": joined(self.ids),
                "role_names": joined(sorted(self.role_codes, key=self.role_codes.__getitem__)),
                "counts": np.array([n, len(self.role_codes), self.synced], dtype=np.int64),
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> _UserVectors:
        """The copy :meth:`to_bytes` saved; a full-width matrix and the other arrays are
        read-only views of ``data`` until the first write copies them."""
        saved = unpack(data)
        n, roles, synced = (int(c) for c in saved["counts"])
        copy = cls()
        copy.ids = split(saved["ids"], n)
        matrix = saved["matrix"]
        copy._matrix = matrix.astype(np.float32) if matrix.dtype == np.float16 else matrix
        copy._roles, copy._ts = saved["roles"], saved["ts"]
        copy.rows = dict(zip(copy.ids, range(n), strict=True))
        copy._id_bytes = saved["ids"].nbytes + 170 * n  # as ``put`` counts them, less a loop
        copy.role_codes = {
            role: code for code, role in enumerate(split(saved["role_names"], roles))
        }
        copy.synced = copy.saved = synced
        return copy

    def _grow(self, filled: int, dim: int) -> None:
        """Make room for every id, keeping the first ``filled`` rows."""
        capacity = len(self._matrix)
        if self.size <= capacity:
            return
        capacity = max(self.size, 2 * capacity, 1024)
        matrix = np.empty((capacity, dim), dtype=np.float32)
        roles = np.empty(capacity, dtype=np.int32)
        ts = np.empty(capacity, dtype=np.float64)
        if filled:
            matrix[:filled] = self._matrix[:filled]
            roles[:filled] = self._roles[:filled]
            ts[:filled] = self._ts[:filled]
        self._matrix, self._roles, self._ts = matrix, roles, ts

    def search(
        self,
        query: Matrix,
        top_k: int,
        role: str | None,
        since: float | None,
        until: float | None,
        min_score: float | None,
    ) -> list[VectorHit]:
        """Exact cosine search over the rows that pass the filters."""
        n = self.size
        if n == 0:
            return []
        if query.shape[0] != self._matrix.shape[1]:
            raise ValueError(
                f"query has {query.shape[0]} dimensions, the index {self._matrix.shape[1]}"
            )
        mask = np.ones(n, dtype=bool)
        if role is not None:
            code = self.role_codes.get(role)
            if code is None:
                return []
            mask &= self._roles[:n] == code
        if since is not None:
            mask &= self._ts[:n] >= since
        if until is not None:
            mask &= self._ts[:n] < until
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return []
        # Messages arrive roughly in time order, so a time filter keeps a narrow span of rows.
        # Scoring the whole span (a view) costs ~0.07 us a row; gathering rows costs ~0.25 us a
        # row and far more once they stop fitting in cache, so gather only sparse rows.
        start, stop = int(rows[0]), int(rows[-1]) + 1
        if stop - start < 4 * rows.size or rows.size * 8 > n:
            scores = (self._matrix[start:stop] @ query)[rows - start]
        else:
            scores = self._matrix[rows] @ query
        if min_score is not None:
            keep = scores >= min_score
            rows, scores = rows[keep], scores[keep]
        if rows.size > top_k:
            # Keep everything tied with the k-th best, so the id tie-break below stays exact.
            kth = scores[np.argpartition(scores, -top_k)[-top_k:]].min()
            keep = scores >= kth
            rows, scores = rows[keep], scores[keep]
        return _ranked([self.ids[row] for row in rows], scores.tolist(), top_k)


class VectorIndex:
    """Semantic search over each user's messages, one Chroma collection per user.

    Args:
        client: A Chroma client, e.g. from :func:`open_chroma`.
        embedding_function: Any Chroma embedding function for texts; default the offline
            multilingual USE model. Chroma refuses to reopen a collection with a function of
            another name, so one index never mixes vector spaces.
        prefix: Start of the collection names; the rest is a hash of the user id.
        write_behind: Write new items (``add(..., new=True)``) to Chroma on a background
            thread. ``add`` then returns once the item is embedded and in the in-memory
            cache; every read of that user first waits for its pending writes, so reads never
            miss an add. A write lost to a crash is recovered from the message store (the
            source of truth) by :meth:`skilldeck.tools.memory.Memory.backfill`.
        cache: Where users' vector copies are kept (default: the process's shared
            :class:`~skilldeck.tools.index_cache.IndexCache`).
        snapshots: Where a user's vector copy is saved once it is large (the message
            store), so a new process, or a user evicted from the cache, loads it in one read
            and fetches from Chroma only the items added after it.
    """

    def __init__(
        self,
        client: ClientAPI,
        *,
        embedding_function: EmbeddingFunction[Documents] | None = None,
        prefix: str = "skilldeck_messages",
        write_behind: bool = False,
        cache: IndexCache | None = None,
        snapshots: SnapshotStore | None = None,
    ) -> None:
        self._client = client
        self._snapshots = snapshots
        self._ef = embedding_function or default_embedding_function()
        self._prefix = prefix
        self._collections: dict[str, Collection] = {}
        # Users' vector copies live in the process's index cache (bounded, LRU): an evicted
        # one is loaded from Chroma again on its next query.
        self._cache = cache or shared_cache()
        self._space = f"vectors:{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._writer = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="skilldeck-chroma")
            if write_behind
            else None
        )
        self._pending: dict[str, list[Future[int | None]]] = {}

    def flush(self, user_id: str | None = None) -> None:
        """Wait for pending background writes (of one user, or all); re-raise a failed one."""
        with self._lock:
            users = [user_id] if user_id is not None else list(self._pending)
            futures = [f for user in users for f in self._pending.pop(user, [])]
        for future in futures:
            future.result()

    def close(self) -> None:
        """Finish pending writes and stop the background writer."""
        self.flush()
        if self._writer is not None:
            self._writer.shutdown(wait=True)

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Embed texts with the embedding function: float32 unit rows, one per text."""
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        return _normalised(self._ef(list(texts)))

    def add(
        self,
        user_id: str,
        ids: Sequence[str],
        texts: Sequence[str],
        roles: Sequence[str],
        ts: Sequence[float],
        thread_ids: Sequence[str],
        *,
        embeddings: npt.ArrayLike | None = None,
        new: bool = False,
    ) -> int:
        """Index messages of one user; known ids are overwritten, never duplicated.

        Args:
            user_id: Owner of the messages.
            ids: Message ids, distinct.
            texts: Message texts, each embedded once (unless ``embeddings`` is given).
            roles: Message roles, e.g. ``user`` or ``assistant``.
            ts: Message times, epoch seconds.
            thread_ids: Threads the messages belong to.
            embeddings: Precomputed vectors, one row per message, instead of embedding
                ``texts`` (bulk rebuilds, benchmarks).
            new: The caller guarantees none of ``ids`` is indexed yet (the message store
                knows), which skips the existence check on the per-message write path.

        Returns:
            How many ids were not in the index before.
        """
        n = len(ids)
        if any(len(column) != n for column in (texts, roles, ts, thread_ids)):
            raise ValueError("ids, texts, roles, ts and thread_ids must have the same length")
        if len(set(ids)) != n:
            raise ValueError("ids must be distinct within one add call")
        given = None if embeddings is None else _normalised(embeddings)
        if given is not None and len(given) != n:
            raise ValueError(f"embeddings has {len(given)} rows for {n} ids")
        if n == 0:
            return 0
        added = 0
        for start in range(0, n, _BATCH):
            part = slice(start, start + _BATCH)
            batch_ids = list(ids[part])
            vectors = self.embed(texts[part]) if given is None else given[part]
            metadatas: list[Any] = [
                {"role": role, "ts": float(t), "thread_id": thread}
                for role, t, thread in zip(roles[part], ts[part], thread_ids[part], strict=True)
            ]
            write = _insert if new else _upsert
            upsert = partial(write, ids=batch_ids, vectors=vectors, metadatas=metadatas)
            with self._lock:
                cache = self._cache.get((self._space, user_id))
                if cache is not None:
                    cache.put(batch_ids, vectors, list(roles[part]), list(ts[part]))
                    self._cache.reweigh((self._space, user_id), cache)
            if new and self._writer is not None:
                # Submitted last: the writer holds the GIL while Chroma writes, and nothing
                # left on this thread should wait for it.
                with self._lock:
                    pending = self._pending.setdefault(user_id, [])
                    pending.append(
                        self._writer.submit(self._with_collection, user_id, upsert, create=True)
                    )
                added += len(batch_ids)
            else:
                added += self._with_collection(user_id, upsert, create=True) or 0
        return added

    def query(
        self,
        user_id: str,
        *,
        text: str | None = None,
        embedding: Sequence[float] | None = None,
        top_k: int = 10,
        role: str | None = None,
        since: float | None = None,
        until: float | None = None,
        min_score: float | None = None,
        known: int | None = None,
    ) -> list[VectorHit]:
        """The user's messages most similar to ``text`` or ``embedding``.

        Args:
            user_id: Whose messages to search; other users' are never seen.
            text: Query text, embedded with the embedding function.
            embedding: Query vector, instead of ``text``.
            top_k: Most hits to return.
            role: Only messages with this role; None or ``"any"`` for all.
            since: Only messages with ``ts >= since``.
            until: Only messages with ``ts < until``.
            min_score: Drop hits whose cosine similarity is below this.
            known: How many messages the user has (the message store's count): a filtered
                query whose copy of the vectors holds as many asks Chroma nothing.

        Returns:
            Hits by score descending, then id ascending; empty for an unknown user.
        """
        if (text is None) == (embedding is None):
            raise ValueError("query needs exactly one of text or embedding")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        role = None if role == "any" else role
        self.flush(user_id)
        # Checked before embedding: an unknown user costs no model call.
        if self._collection(user_id, create=False) is None:
            return []
        if text is not None:
            vector = self.embed([text])[0]
        else:
            assert embedding is not None
            vector = _normalised(embedding)[0]
        if role is None and since is None and until is None:
            hits = self._with_collection(user_id, lambda c: self._approximate(c, vector, top_k))
            return [hit for hit in hits or [] if min_score is None or hit.score >= min_score]
        cache = self._with_collection(user_id, lambda c: self._fresh_cache(user_id, c, known))
        if cache is None:
            return []
        with self._lock:
            return cache.search(vector, top_k, role, since, until, min_score)

    def ids(self, user_id: str) -> set[str]:
        """Every indexed message id of the user."""
        self.flush(user_id)
        found: set[str] = set()

        def page_through(collection: Collection) -> None:
            while True:
                page = collection.get(include=[], limit=_PAGE, offset=len(found))
                found.update(page["ids"])
                if len(page["ids"]) < _PAGE:
                    return

        self._with_collection(user_id, page_through)
        return found

    def count(self, user_id: str) -> int:
        """How many messages of the user are indexed."""
        self.flush(user_id)
        return self._with_collection(user_id, lambda collection: collection.count()) or 0

    def reset(self, user_id: str) -> None:
        """Delete the user's collection and cached vectors (before a rebuild)."""
        self.flush(user_id)
        self._forget(user_id)
        with suppress(NotFoundError):
            self._client.delete_collection(self._name(user_id))

    def _name(self, user_id: str) -> str:
        # Collection names allow few characters and lengths; a hash fits any user id.
        return f"{self._prefix}_{hashlib.sha256(user_id.encode()).hexdigest()[:40]}"

    def _collection(self, user_id: str, *, create: bool) -> Collection | None:
        collection = self._collections.get(user_id)
        if collection is not None:
            return collection
        ef = cast(Any, self._ef)  # Chroma types the parameter over all embeddable inputs
        if create:
            collection = self._client.get_or_create_collection(
                self._name(user_id),
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"user_id": user_id},
                embedding_function=ef,
            )
        else:
            try:
                collection = self._client.get_collection(self._name(user_id), embedding_function=ef)
            except NotFoundError:
                return None
        self._collections[user_id] = collection
        return collection

    def _with_collection(
        self, user_id: str, call: Callable[[Collection], T], *, create: bool = False
    ) -> T | None:
        """``call`` on the user's collection; None if it does not exist and ``create`` is off.

        A handle goes stale when another index (maybe in another process) resets the user, so
        a collection that vanished is looked up once more.
        """
        for retry in (False, True):
            collection = self._collection(user_id, create=create)
            if collection is None:
                return None
            try:
                return call(collection)
            except NotFoundError:
                if retry:
                    raise
                self._forget(user_id)
        raise AssertionError("unreachable")

    def _forget(self, user_id: str) -> None:
        with self._lock:
            self._collections.pop(user_id, None)
            self._cache.discard((self._space, user_id))

    def _approximate(self, collection: Collection, vector: Matrix, top_k: int) -> list[VectorHit]:
        count = collection.count()
        if count == 0:
            return []
        result = collection.query(
            query_embeddings=vector, n_results=min(top_k, count), include=["distances"]
        )
        distances = (result["distances"] or [[]])[0]
        # Chroma's cosine distance is 1 - cosine similarity.
        return _ranked(result["ids"][0], [1.0 - d for d in distances], top_k)

    def covers(self, user_id: str, count: int) -> bool:
        """Whether this process's copy of the user's vectors (cached, or loaded from its
        snapshot) holds ``count`` items or more, learnt without asking Chroma anything: its
        first question about a large collection loads the collection's index, which a
        filtered query does not need."""
        self.flush(user_id)
        copy = self._with_collection(user_id, lambda c: self._copy(user_id, c))
        return copy is not None and copy.size >= count

    def _copy(self, user_id: str, collection: Collection) -> _UserVectors | None:
        """The cached copy, else the saved one (then cached), if it was made of this very
        collection (a reset makes a new one)."""
        key = (self._space, user_id)
        cache: _UserVectors | None = self._cache.get(key)
        if cache is not None or self._snapshots is None:
            return cache
        saved = self._snapshots.load_snapshot(user_id, "vectors")
        if saved is None or saved[2] != self._snapshot_version(collection):
            return None
        cache = _UserVectors.from_bytes(saved[3])
        self._cache.put(key, cache)
        return cache

    def _snapshot_version(self, collection: Collection) -> str:
        return f"{_SNAPSHOT_LAYOUT}/{collection.name}/{collection.id}"

    def _fresh_cache(
        self, user_id: str, collection: Collection, known: int | None = None
    ) -> _UserVectors:
        """The user's copy, first catching up with items added elsewhere; a copy that holds
        ``known`` items (the message store's count) is taken as it is."""
        key = (self._space, user_id)
        cache = self._copy(user_id, collection)
        if cache is not None and known is not None and cache.size >= known:
            return cache
        count = collection.count()
        if cache is not None:
            before = cache.synced
            if cache.size != count:
                self._pull(collection, cache)
            if cache.size >= count:
                if cache.synced != before:  # it grew: save it if due, and weigh it again
                    self._save(user_id, collection, cache)
                    self._cache.put(key, cache)
                    self._settle(cache.synced - before)
                return cache
        # No copy yet, or catching up did not account for every item (it lacks items before
        # its position): load everything.
        cache = _UserVectors()
        self._pull(collection, cache)
        self._save(user_id, collection, cache)
        self._cache.put(key, cache)
        self._settle(cache.synced)
        return cache

    @staticmethod
    def _settle(fetched: int) -> None:
        """After a copy of many pages (each decoded from JSON, then freed), hand the freed heap
        back to the OS: otherwise a 100,000-item copy leaves the process ~0.7 GB larger than
        what it keeps."""
        if fetched >= _PAGE:
            release_free_memory()

    def _save(self, user_id: str, collection: Collection, cache: _UserVectors) -> None:
        """Save a large copy's snapshot the first time, then once many items came after it."""
        fetched = cache.synced - cache.saved
        if self._snapshots is None or cache.size < SNAPSHOT_MIN or fetched <= 0:
            return
        if cache.saved and fetched < SNAPSHOT_MIN // 2:
            return
        # A search never fails for its snapshot: a copy too large to keep, or a store that
        # refuses it, only costs the next cold start the copy out of Chroma. The arrays alone
        # tell most too-large copies, before packing them.
        half = self._snapshots.remote  # bytes cost most where they cross a network
        data = b"" if cache.array_bytes(half) > SNAPSHOT_MAX_BYTES else cache.to_bytes(half)
        if data and len(data) <= SNAPSHOT_MAX_BYTES:
            try:
                self._snapshots.save_snapshot(
                    user_id,
                    upto=cache.synced,
                    count=cache.size,
                    version=self._snapshot_version(collection),
                    data=data,
                    kind="vectors",
                )
            except Exception as exc:
                log_error(log, f"could not save the vector snapshot of {len(data):,} bytes", exc)
        cache.saved = cache.synced

    def _pull(self, collection: Collection, cache: _UserVectors) -> None:
        """Copy the collection's items after ``cache.synced`` into ``cache``, page by page."""
        while True:
            page = collection.get(
                include=["embeddings", "metadatas"], limit=_PAGE, offset=cache.synced
            )
            metadatas = page["metadatas"] or []
            if page["ids"]:
                vectors = _normalised(cast(Any, page["embeddings"]))
                with self._lock:
                    cache.put(
                        page["ids"],
                        vectors,
                        [str(meta["role"]) for meta in metadatas],
                        [float(cast(float, meta["ts"])) for meta in metadatas],
                    )
                    cache.synced += len(page["ids"])
            if len(page["ids"]) < _PAGE:
                return
