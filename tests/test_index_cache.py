"""The process's index cache: bounded by bytes, least recently used out first, and an evicted
index is rebuilt from the stores with nothing lost or counted twice (real SQLite and Chroma)."""

from __future__ import annotations

import random
import threading
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from skilldeck.tools.index_cache import IndexCache
from skilldeck.tools.memory import Memory, _Lexicon, _Segment
from skilldeck.tools.messages import Message, MessageStore
from skilldeck.tools.text import Tokenizer
from skilldeck.tools.vectors import VectorIndex, _UserVectors, open_chroma

pytestmark = pytest.mark.L2

MB = 1024 * 1024
ALL = {"role": "any", "time_range": {"since": "2020-01-01T00:00:00Z"}}


@dataclass
class Blob:
    nbytes: int


def test_entries_are_held_within_the_budget_least_recently_used_out_first() -> None:
    cache = IndexCache(budget_mb=1)
    a, b, c = Blob(400_000), Blob(400_000), Blob(400_000)
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is a  # a is now the most recently used
    cache.put("c", c)  # 1.2 MB > 1 MiB: b goes
    assert cache.get("b") is None and cache.get("a") is a and cache.get("c") is c
    c.nbytes = 700_000  # c grew: weighed again, a goes
    cache.reweigh("c", c)
    assert cache.get("a") is None and cache.get("c") is c
    stats = cache.stats()
    assert stats["bytes"] == 700_000 <= stats["budget_bytes"] == MB
    assert stats["evictions"] == 2 and stats["entries"] == 1
    cache.put("huge", Blob(2 * MB))  # larger than the budget: never kept, nothing evicted
    assert cache.get("huge") is None and cache.get("c") is c
    cache.resize(0.5)  # c no longer fits at all
    assert cache.get("c") is None and cache.stats()["budget_bytes"] == MB // 2
    with pytest.raises(ValueError, match="positive"):
        IndexCache(budget_mb=0)


def _message(i: int, user: str = "u") -> Message:
    rng = random.Random(i)
    words = " ".join(f"w{rng.randrange(5000)}" for _ in range(30))
    ts = f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"
    # A thread per message: no turn is indexed with another's text, so token{i} is in one.
    return Message(f"{user}-m{i}", user, f"t{i}", "user", ts, f"{words} token{i}")


def _measured(build: object) -> int:
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    made = build()  # type: ignore[operator]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del made
    return size


@pytest.mark.slow
def test_index_sizes_are_estimated_within_a_factor_of_two(tmp_path: Path) -> None:
    tokenizer = Tokenizer(stem=True, stopwords=True)
    messages = [_message(i) for i in range(3000)]
    tokens = [tokenizer.tokens(m.text) for m in messages]
    writer = Memory(MessageStore(tmp_path / "m.sqlite"), None, cache=IndexCache())
    writer.add(messages)

    def lexicon() -> _Lexicon:
        built = _Lexicon()
        for m, t in zip(messages, tokens, strict=True):
            built.add(m, t)
        holder.append(built)
        return built

    def opened() -> _Lexicon:
        """As a first search opens it: read from the store, a few terms' postings made."""
        found = writer.store.lexicon_data("u", writer._version)
        built = _Lexicon.from_segments([_Segment.from_bytes(data) for _, data in found])
        for i in range(0, 3000, 7):
            built.index.scores([f"token{i}", f"w{i}"])
        holder.append(built)
        return built

    def vectors() -> _UserVectors:
        built = _UserVectors()
        rows = np.random.default_rng(0).random((3000, 512), dtype=np.float32)
        built.put([m.id for m in messages], rows, ["user"] * 3000, [0.0] * 3000)
        holder.append(built)
        return built

    for build in (lexicon, opened, vectors):
        holder: list[object] = []
        actual = _measured(build)
        estimate = holder[0].nbytes  # type: ignore[attr-defined]
        assert 0.5 <= estimate / actual <= 2.0, (build.__name__, estimate, actual)
    writer.close()


@pytest.fixture
def memory_at(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "m.sqlite", tmp_path / "chroma"


def _memory(where: tuple[Path, Path], budget_mb: float) -> Memory:
    cache = IndexCache(budget_mb=budget_mb)
    store, chroma = where
    return Memory(
        MessageStore(str(store)), VectorIndex(open_chroma(chroma), cache=cache), cache=cache
    )


@pytest.mark.slow
def test_evicted_users_are_rebuilt_and_answer_as_before(memory_at: tuple[Path, Path]) -> None:
    users = [f"user{i}" for i in range(12)]
    small = _memory(memory_at, budget_mb=8)  # a few users' indexes at a time
    for user in users:
        small.add([_message(i, user) for i in range(150)])
    answers = {}
    for _ in range(2):  # the second round meets every user evicted by the others
        for user in users:
            lexical = small.lexical_search(user, query_text="token7 token149", filter=ALL)
            semantic = small.semantic_search(user, query_text="token7", filter=ALL, top_k=3)
            seen = ([h["message_id"] for h in lexical["hits"]], lexical["total"],
                    [h["message_id"] for h in semantic["hits"]])  # fmt: skip
            assert answers.setdefault(user, seen) == seen
    stats = small._cache.stats()
    assert stats["evictions"] > 0 and stats["bytes"] <= stats["budget_bytes"]
    assert set(answers["user3"][0]) == {"user3-m7", "user3-m149"}
    small.close()
    # A new process (a new Memory on the same stores) answers the same from a cold start.
    fresh = _memory(memory_at, budget_mb=64)
    for user in users:
        lexical = fresh.lexical_search(user, query_text="token7 token149", filter=ALL)
        semantic = fresh.semantic_search(user, query_text="token7", filter=ALL, top_k=3)
        assert [h["message_id"] for h in lexical["hits"]] == answers[user][0]
        assert [h["message_id"] for h in semantic["hits"]] == answers[user][2]
    fresh.close()


@pytest.mark.slow
def test_concurrent_writes_and_searches_under_eviction_lose_and_double_nothing(
    memory_at: tuple[Path, Path],
) -> None:
    memory = _memory(memory_at, budget_mb=1.5)  # about one user at a time
    users = [f"user{i}" for i in range(6)]
    per_user = 120
    errors: list[BaseException] = []

    def write(user: str) -> None:
        try:
            for start in range(0, per_user, 10):
                memory.add([_message(i, user) for i in range(start, start + 10)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def search(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(60):
                user = rng.choice(users)
                memory.lexical_search(user, query_text=f"token{rng.randrange(per_user)}",
                                      filter=ALL)  # fmt: skip
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(u,)) for u in users]
    threads += [threading.Thread(target=search, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert memory._cache.stats()["evictions"] > 0
    for user in users:
        for i in range(per_user):  # each message found, exactly once
            found = memory.lexical_search(user, query_text=f"token{i}", filter=ALL)
            assert found["total"] == 1, (user, i, found["total"])
            assert found["hits"][0]["message_id"] == f"{user}-m{i}"
    memory.close()
