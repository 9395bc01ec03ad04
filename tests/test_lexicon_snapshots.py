"""Lexicon snapshots: a cold start loads a user's BM25 lexicon from the message store instead of
re-tokenizing the history, and answers exactly as a lexicon built from every message would
(real SQLite and PostgreSQL)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rank_bm25 import BM25Okapi

from skilldeck.tools.index_cache import IndexCache
from skilldeck.tools.memory import Memory, _Lexicon
from skilldeck.tools.messages import Message, MessageStore
from skilldeck.tools.snapshots import SNAPSHOT_MIN, joined, split
from skilldeck.tools.text import Tokenizer

pytestmark = [pytest.mark.L2, pytest.mark.stores]

ALL = {"role": "any", "time_range": {"since": "2020-01-01T00:00:00Z"}}
QUERIES = ["w3 w17", "w100 w2 w9", '"w1 w2"', "w4999", "token17 w5"]


def _history(user: str, count: int, start: int = 0) -> list[Message]:
    out = []
    for i in range(start, start + count):
        rng = random.Random(i)
        words = " ".join(f"w{int(rng.paretovariate(1.2)) % 5000}" for _ in range(25))
        ts = f"2026-01-{1 + i // 1440 % 28:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00Z"
        role = "user" if i % 3 else "assistant"
        out.append(Message(f"{user}-{i}", user, f"t{i // 7}", role, ts, f"{words} token{i}"))
    return out


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.server)])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "m.sqlite")


def _answers(memory: Memory, user: str) -> list[tuple[list[str], int]]:
    out = []
    for query in QUERIES:
        found = memory.lexical_search(user, query_text=query, filter=ALL, page_size=15)
        out.append(([h["message_id"] for h in found["hits"]], found["total"]))
    filtered = memory.lexical_search(user, query_text="w3", page_size=15, filter={
        "role": "assistant", "time_range": {"since": "2026-01-01T05:00:00Z"}})  # fmt: skip
    out.append(([h["message_id"] for h in filtered["hits"]], filtered["total"]))
    return out


class Counting:
    """A tokenizer that remembers what it tokenized (and says it is the one it wraps)."""

    def __init__(self, real: Tokenizer) -> None:
        self.real, self.seen = real, list[str]()

    def tokens(self, text: str) -> list[str]:
        self.seen.append(text)
        return self.real.tokens(text)

    def __repr__(self) -> str:
        return repr(self.real)


def _fresh(store_at: str) -> Memory:
    return Memory(MessageStore(store_at), None, cache=IndexCache())


def test_a_cold_start_loads_the_snapshot_and_answers_the_same(
    store_at: str,
) -> None:
    first = _fresh(store_at)
    first.add(_history("u", SNAPSHOT_MIN + 300))
    _answers(first, "u")  # the first search builds from every message, and saves it
    saved = first.store.load_snapshot("u")
    assert saved is not None and saved[1] == SNAPSHOT_MIN + 300
    first.store.add(_history("u", 40, start=SNAPSHOT_MIN + 300))  # after the snapshot
    first.close()

    second = _fresh(store_at)
    counting = Counting(second.tokenizer)
    second.tokenizer = counting  # type: ignore[assignment]
    loaded = _answers(second, "u")
    # Only the 40 later messages were indexed (indexed texts start with their speaker; the
    # phrase query's checks tokenize raw message texts).
    assert sum(t.startswith(("user: ", "assistant: ")) for t in counting.seen) == 40
    reference = _fresh(store_at)
    reference.rebuild("u")  # every message tokenized again
    assert loaded == _answers(reference, "u")
    # A later message that ends its thread: its text is indexed with no other turn's.
    last = next(i for i in range(SNAPSHOT_MIN + 300, SNAPSHOT_MIN + 340) if (i + 1) % 7 == 0)
    found = second.lexical_search("u", query_text=f"token{last}", filter=ALL)
    assert found["total"] == 1 and found["hits"][0]["message_id"] == f"u-{last}"
    second.close()
    reference.close()


def test_a_loaded_lexicon_scores_as_rank_bm25(tmp_path: Path) -> None:
    memory = _fresh(str(tmp_path / "m.sqlite"))
    messages = _history("u", 300)
    memory.add(messages)
    lexicon = memory._lexicon("u")
    loaded = _Lexicon.from_bytes(lexicon.to_bytes())
    corpus = [memory.tokenizer.tokens(t) for t in _indexed(memory, messages)]
    oracle = BM25Okapi(corpus)
    for query in (["w3", "w17"], ["w100"], ["token5", "w2", "w2"]):
        scores = list(loaded.index.scores(query))
        assert scores == list(lexicon.index.scores(query))  # bit for bit the built index
        # rank-bm25 floors frequent terms with a mean idf it sums in another order.
        assert scores == pytest.approx(list(oracle.get_scores(query)), rel=1e-12)
    assert loaded.ids == lexicon.ids and loaded.texts == lexicon.texts
    assert list(loaded.ts.view()) == list(lexicon.ts.view())
    assert loaded.role_codes == lexicon.role_codes
    loaded.add(messages[0], ["fresh", "term"])  # a loaded lexicon keeps growing
    assert loaded.index.top(["fresh"], 1) == [
        (300, pytest.approx(loaded.index.scores(["fresh"])[300]))
    ]
    memory.close()


def _indexed(memory: Memory, messages: list[Message]) -> list[str]:
    return [text for _, text in memory._in_context("u", messages, seeded=False)]


def test_a_snapshot_of_another_version_or_count_is_not_trusted(store_at: str) -> None:
    memory = _fresh(store_at)
    memory.add(_history("u", SNAPSHOT_MIN))
    expected = _answers(memory, "u")
    upto, count, version, data = memory.store.load_snapshot("u") or (0, 0, "", b"")
    # Another tokenizer or layout: ignored, built from the store and saved again.
    memory.store.save_snapshot("u", upto=upto, count=count, version="0/old", data=data)
    other = _fresh(store_at)
    assert _answers(other, "u") == expected
    assert (other.store.load_snapshot("u") or ())[2] == version
    # A snapshot that misses a message below its upto (an out-of-order commit): rebuilt.
    memory.store.save_snapshot("u", upto=upto, count=count - 1, version=version,
                               data=_drop_last(data))  # fmt: skip
    third = _fresh(store_at)
    assert _answers(third, "u") == expected
    for m in (memory, other, third):
        m.close()


def _drop_last(data: bytes) -> bytes:
    """A snapshot without its last message (the store still holds it)."""
    full = _Lexicon.from_bytes(data)
    rebuilt = _Lexicon()
    tokens = Tokenizer(stem=True, stopwords=True)
    for i, text in enumerate(full.texts[:-1]):
        rebuilt.add(Message(full.ids[i], "u", "t", "user", "2026-01-01T00:00:00Z", text),
                    tokens.tokens(text))  # fmt: skip
    return rebuilt.to_bytes()


@pytest.mark.parametrize("strings", [[], [""], ["a"], ["a\\0b", "x\0y", "\\", "é中"], ["", ""]])
def test_string_lists_survive_the_snapshot_encoding(strings: list[str]) -> None:
    assert split(joined(strings), len(strings)) == strings
