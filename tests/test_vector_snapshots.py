"""Vector snapshots: a cold start (a new process, or a user evicted from the index cache) loads
the user's vector copy from the message store and fetches from Chroma only what came after it;
a copy that holds every stored message asks Chroma nothing (real Chroma, SQLite and
PostgreSQL)."""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from skilldeck.tools.embeddings import default_embedding_function
from skilldeck.tools.index_cache import IndexCache
from skilldeck.tools.messages import MessageStore
from skilldeck.tools.snapshots import SNAPSHOT_MIN, pack, unpack
from skilldeck.tools.vectors import VectorIndex, _UserVectors, open_chroma

pytestmark = [pytest.mark.L2, pytest.mark.stores]

USER = "ada"
N = SNAPSHOT_MIN + 100
WIDTH = 512


class CountingPulls(VectorIndex):
    """A vector index that records where each copy out of Chroma started."""

    pulled: list[int]

    def _pull(self, collection: Any, cache: _UserVectors) -> None:
        self.pulled.append(cache.synced)
        super()._pull(collection, cache)


@pytest.fixture(scope="module")
def embedder() -> Any:
    return default_embedding_function()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.server)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MessageStore]:
    where = (
        str(request.getfixturevalue("postgres_url"))
        if request.param == "postgres"
        else str(tmp_path / "m.sqlite")
    )
    opened = MessageStore(where)
    yield opened
    opened.close()


@pytest.fixture
def open_index(tmp_path: Path, embedder: Any, store: MessageStore) -> Any:
    client = open_chroma(tmp_path / "chroma")

    def make() -> CountingPulls:
        index = CountingPulls(
            client, embedding_function=embedder, cache=IndexCache(), snapshots=store
        )
        index.pulled = []
        return index

    return make


def _vectors(count: int, seed: int) -> npt.NDArray[np.float32]:
    matrix = np.random.default_rng(seed).standard_normal((count, WIDTH), dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _add(index: VectorIndex, vectors: npt.NDArray[np.float32], start: int = 0) -> None:
    ids = [f"m{i}" for i in range(start, start + len(vectors))]
    roles = ["user" if i % 2 else "assistant" for i in range(start, start + len(vectors))]
    ts = [1_700_000_000.0 + i for i in range(start, start + len(vectors))]
    index.add(USER, ids, ids, roles, ts, ["t"] * len(ids), embeddings=vectors)


def _expected(vectors: npt.NDArray[np.float32], query: npt.NDArray[np.float32]) -> list[str]:
    """The ten best of every vector, ``role`` assistant (even rows), by exact cosine over the
    vectors at half precision, as the copy holds them."""
    scores = vectors.astype(np.float16).astype(np.float64) @ query.astype(np.float64)
    rows = sorted((r for r in range(len(vectors)) if r % 2 == 0), key=lambda r: -scores[r])
    return [f"m{r}" for r in rows[:10]]


def _ask(index: VectorIndex, query: npt.NDArray[np.float32], known: int | None) -> list[str]:
    hits = index.query(USER, embedding=query.tolist(), role="assistant", since=0.0, known=known)
    return [hit.id for hit in hits]


def test_a_cold_index_loads_the_snapshot_and_fetches_only_what_came_after(
    open_index: Any, store: MessageStore
) -> None:
    first = open_index()
    vectors = _vectors(N, seed=1)
    _add(first, vectors)
    query = _vectors(1, seed=9)[0]
    assert _ask(first, query, known=N) == _expected(vectors, query)
    assert first.pulled == [0]  # the first filtered query copies everything, then saves it
    saved = store.load_snapshot(USER, "vectors")
    assert saved is not None and saved[:2] == (N, N)

    # Another process adds 40 messages; a new one loads the snapshot and fetches those 40.
    more = _vectors(40, seed=2)
    _add(open_index(), more, start=N)
    every = np.vstack([vectors, more])
    cold = open_index()
    assert _ask(cold, query, known=N + 40) == _expected(every, query)
    assert cold.pulled == [N]
    # A copy that holds every stored message is used as it is: nothing is fetched.
    warm_start = open_index()
    assert warm_start.covers(USER, N) and not warm_start.covers(USER, N + 41)
    assert _ask(warm_start, query, known=N) == _expected(vectors, query)
    assert warm_start.pulled == []


def test_a_snapshot_of_a_reset_collection_is_not_used(open_index: Any) -> None:
    first = open_index()
    _add(first, _vectors(N, seed=1))
    query = _vectors(1, seed=9)[0]
    _ask(first, query, known=N)  # saves the snapshot
    first.reset(USER)
    rebuilt = _vectors(N, seed=3)
    _add(first, rebuilt)
    cold = open_index()
    assert not cold.covers(USER, 1)
    assert _ask(cold, query, known=N) == _expected(rebuilt, query)
    assert cold.pulled == [0]


def test_a_copy_round_trips_through_its_bytes() -> None:
    copy = _UserVectors()
    copy.put(["a", "b\0c", "ü"], _vectors(3, seed=4), ["user", "assistant", "user"], [1, 2, 3])
    copy.synced = 3
    back = _UserVectors.from_bytes(copy.to_bytes())
    assert back.ids == copy.ids and back.rows == copy.rows and back.synced == back.saved == 3
    assert back.role_codes == copy.role_codes and back.nbytes <= copy.nbytes
    query = _vectors(1, seed=5)[0]
    assert back.search(query, 3, None, None, None, None) == copy.search(
        query, 3, None, None, None, None
    )


def test_an_unknown_snapshot_kind_is_refused(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "m.sqlite")
    with pytest.raises(ValueError, match="no snapshots of kind 'tables'"):
        store.load_snapshot(USER, "tables")  # type: ignore[arg-type]
    store.close()


@pytest.mark.parametrize("half", [False, True])
def test_a_loaded_copy_is_exact_and_copied_on_its_first_write(half: bool) -> None:
    copy = _UserVectors()
    vectors = _vectors(2, seed=6)
    copy.put(["a", "b"], vectors, ["user", "user"], [1, 2])
    data = copy.to_bytes(half)
    assert unpack(data)["matrix"].dtype == (np.float16 if half else np.float32)
    assert len(data) < vectors.nbytes // (2 if half else 1) + 1024
    back = _UserVectors.from_bytes(data)
    query = _vectors(1, seed=5)[0]
    assert back.search(query, 2, None, None, None, None) == copy.search(
        query, 2, None, None, None, None
    )  # the copy holds half-precision values: either width keeps them exactly
    new = _vectors(1, seed=7)
    back.put(["a"], new, ["assistant"], [3])  # an overwrite, no growth: the views are read-only
    assert back.search(new[0], 1, "assistant", None, None, None)[0].id == "a"
    assert copy.search(new[0], 1, "assistant", None, None, None) == []  # the original is apart


def test_a_snapshot_is_half_width_where_it_crosses_a_network(
    open_index: Any, store: MessageStore
) -> None:
    index = open_index()
    _add(index, _vectors(N, seed=1))
    _ask(index, _vectors(1, seed=9)[0], known=N)  # saves the snapshot
    saved = store.load_snapshot(USER, "vectors")
    assert saved is not None
    width = unpack(saved[3])["matrix"].dtype
    assert width == (np.float16 if store.remote else np.float32)


@pytest.mark.parametrize("keep", [True, False])
def test_the_operator_can_turn_snapshots_off(tmp_path: Path, keep: bool) -> None:
    from skilldeck import Settings
    from skilldeck.services import open_memory
    from skilldeck.tools.messages import Message

    settings = Settings(
        messages_path=str(tmp_path / "m.sqlite"),
        chroma_path=str(tmp_path / "chroma"),
        index_snapshots=keep,
    )
    memory = open_memory(settings)
    stamp = "2026-01-01T00:{:02d}:{:02d}Z"
    memory.add(
        Message(f"m{i}", USER, "t", "user", stamp.format(i // 60, i % 60), f"{i}: topic {i % 7}")
        for i in range(N)
    )
    memory.close()  # a new process: nothing cached
    memory = open_memory(settings)
    since = {"role": "any", "time_range": {"since": "2020-01-01T00:00:00Z"}}
    assert memory.lexical_search(USER, query_text="topic 3", filter=since)["hits"]
    assert memory.semantic_search(USER, query_text="topic 3", filter=since)["hits"]
    lexicon = memory.store.lexicon_segments(USER, memory._version)
    assert [bool(lexicon), memory.store.load_snapshot(USER, "vectors") is not None] == [keep, keep]
    memory.close()


def test_packed_arrays_round_trip_and_a_foreign_blob_is_refused() -> None:
    arrays = {"m": _vectors(3, seed=8), "n": np.arange(5, dtype=np.int64), "e": np.empty(0)}
    back = unpack(pack(arrays))
    assert all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in arrays.items())
    with pytest.raises(ValueError, match="not a packed array snapshot"):
        unpack(b"PK\x03\x04 a zip")


class RefusingStore(MessageStore):
    """A message store whose database refuses snapshots (a full disk, a size limit)."""

    def save_snapshot(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")


def test_a_snapshot_that_cannot_be_saved_fails_no_search(
    tmp_path: Path, embedder: Any, caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    client = open_chroma(tmp_path / "chroma")
    refusing = RefusingStore(tmp_path / "m.sqlite")
    index = VectorIndex(client, embedding_function=embedder, cache=IndexCache(), snapshots=refusing)
    vectors = _vectors(N, seed=1)
    _add(index, vectors)
    query = _vectors(1, seed=9)[0]
    assert _ask(index, query, known=N) == _expected(vectors, query)
    assert "could not save the vector snapshot" in caplog.text and "disk full" in caplog.text

    # Too large to keep: not saved, and nothing is logged.
    caplog.clear()
    monkeypatch.setattr("skilldeck.tools.vectors.SNAPSHOT_MAX_BYTES", 1000)
    store = MessageStore(tmp_path / "m2.sqlite")
    small = VectorIndex(client, embedding_function=embedder, cache=IndexCache(), snapshots=store)
    assert _ask(small, query, known=N) == _expected(vectors, query)
    assert store.load_snapshot(USER, "vectors") is None and not caplog.text
    refusing.close()
    store.close()


def test_a_copy_of_many_pages_hands_the_freed_heap_back(
    open_index: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr("skilldeck.tools.vectors._PAGE", 100)
    monkeypatch.setattr("skilldeck.tools.vectors.release_free_memory", lambda: calls.append(1))
    index = open_index()
    vectors = _vectors(N, seed=1)
    _add(index, vectors)
    query = _vectors(1, seed=9)[0]
    assert _ask(index, query, known=N) == _expected(vectors, query)
    assert calls == [1]  # the first filtered query copied N items, 100 a page
    _add(index, _vectors(10, seed=2), start=N)  # this process's own add: no copy
    assert len(_ask(open_index(), query, known=N + 10)) == 10  # snapshot + 10 items: one page
    assert calls == [1]


def test_freed_heap_memory_goes_back_where_the_c_library_can() -> None:
    from skilldeck._internal import heap

    assert heap.release_free_memory() is (heap._malloc_trim() is not None)
    if sys.platform == "linux" and platform.libc_ver()[0] == "glibc":
        assert heap.release_free_memory()
