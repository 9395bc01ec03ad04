"""The lexicon kept in the message store: written with the messages it indexes, opened by a
process's first search without tokenizing anything, and answering exactly as a lexicon built
message by message (rank-bm25's scores), on real SQLite and PostgreSQL, with writers in two
real processes."""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from skilldeck.tools.index_cache import IndexCache
from skilldeck.tools.memory import Memory, _Lexicon
from skilldeck.tools.messages import LexiconSegment, Message, MessageStore
from skilldeck.tools.snapshots import joined, split
from skilldeck.tools.text import Tokenizer

pytestmark = [pytest.mark.L2, pytest.mark.stores]

ALL = {"role": "any", "time_range": {"since": "2020-01-01T00:00:00Z"}}
QUERIES = ["w3 w17", "w100 w2 w9", '"w1 w2"', "w4999", "token17 w5", "assistant w1"]


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


def _answers(memory: Memory, user: str) -> list[tuple[list[str], list[float], int]]:
    out = []
    for query in QUERIES:
        found = memory.lexical_search(user, query_text=query, filter=ALL, page_size=15)
        hits = found["hits"]
        out.append(([h["message_id"] for h in hits], [h["score"] for h in hits], found["total"]))
    filtered = memory.lexical_search(user, query_text="w3", page_size=15, filter={
        "role": "assistant", "time_range": {"since": "2026-01-01T05:00:00Z"}})  # fmt: skip
    hits = filtered["hits"]
    out.append(([h["message_id"] for h in hits], [h["score"] for h in hits], filtered["total"]))
    return out


class Counting:
    """A tokenizer that remembers what it tokenized (and says it is the one it wraps)."""

    def __init__(self, real: Tokenizer) -> None:
        self.real, self.seen = real, list[str]()

    def tokens(self, text: str) -> list[str]:
        self.seen.append(text)
        return self.real.tokens(text)

    def indexed(self) -> int:
        """How many indexed texts (a turn, with its speaker) it tokenized: the phrase checks
        tokenize messages' own texts, which start with a word."""
        return sum(t.startswith(("user: ", "assistant: ")) for t in self.seen)

    def __repr__(self) -> str:
        return repr(self.real)


def _fresh(store_at: str, *, snapshots: bool = True) -> Memory:
    """A new process's memory: nothing cached."""
    return Memory(MessageStore(store_at), None, cache=IndexCache(), snapshots=snapshots)


def _counting(store_at: str) -> tuple[Memory, Counting]:
    memory = _fresh(store_at)
    counting = Counting(memory.tokenizer)
    memory.tokenizer = counting  # type: ignore[assignment]
    return memory, counting


def _segments(memory: Memory, user: str) -> list[LexiconSegment]:
    return memory.store.lexicon_segments(user, memory._version)


def _covers_everything(memory: Memory, user: str) -> bool:
    """The stored segments hold every message of ``user``: consecutive, none missing."""
    segments = _segments(memory, user)
    ordered = all(a.last_seq < b.first_seq for a, b in itertools.pairwise(segments))
    held = sum(s.docs for s in segments)
    last = segments[-1].last_seq if segments else 0
    return ordered and held == memory.store.count(user) and last == memory.store.last_seq(user)


def _top(memory: Memory, user: str, i: int) -> str:
    """The best hit for ``token{i}``: message ``i`` (the next turn of its thread, which holds
    it in its indexed text too, is longer)."""
    found = memory.lexical_search(user, query_text=f"token{i}", filter=ALL)
    return str(found["hits"][0]["message_id"])


def test_a_first_search_opens_the_stored_lexicon_and_answers_as_one_built_from_scratch(
    store_at: str,
) -> None:
    writer = _fresh(store_at)
    history = _history("u", 700)
    for m in history[:250]:  # one at a time, as a chat writes them: segments merge
        writer.add([m])
    for start in range(250, 700, 90):  # then in batches, as an import does
        writer.add(history[start : start + 90])
    assert _covers_everything(writer, "u") and len(_segments(writer, "u")) <= 4
    writer.close()

    reader, counting = _counting(store_at)
    opened = _answers(reader, "u")
    assert counting.indexed() == 0  # nothing tokenized: the postings were read as stored
    built = _fresh(store_at, snapshots=False)  # the old path: every message tokenized
    assert opened == _answers(built, "u")
    lexicon, reference = reader._lexicon("u"), built._lexicon("u")
    for terms in (["w3"], ["assist", "w1"], ["token5", "w2", "w2"]):  # a floored term too
        assert np.array_equal(lexicon.index.scores(terms), reference.index.scores(terms))

    # Messages stored by another path (here the bare store): the next cold start indexes only
    # those, and stores them, so the one after indexes nothing.
    reader.store.add(_history("u", 40, start=700))
    later, counting = _counting(store_at)
    assert _answers(later, "u") == _answers(_fresh(store_at, snapshots=False), "u")
    assert counting.indexed() == 40 and _covers_everything(later, "u")
    last, counting = _counting(store_at)
    _answers(last, "u")
    assert counting.indexed() == 0
    # A message that ends its thread is indexed with no later turn's text.
    found = last.lexical_search("u", query_text="token734", filter=ALL)
    assert found["total"] == 1 and found["hits"][0]["message_id"] == "u-734"
    for memory in (reader, built, later, last):
        memory.close()


def _stable_top(scores: np.ndarray, k: int) -> list[int]:
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [int(i) for i in order if scores[i] > 0]


def test_merged_segments_score_as_rank_bm25(tmp_path: Path) -> None:
    where = str(tmp_path / "m.sqlite")
    writer = _fresh(where)
    history = _history("u", 600)
    for m in history:
        writer.add([m])
    segments = _segments(writer, "u")
    # Each stored one holds at least 4 times the next: log4(600) + 1 segments at most.
    assert len(segments) <= math.log(600, 4) + 1
    assert all(a.docs >= 4 * b.docs for a, b in itertools.pairwise(segments))
    lexicon = _fresh(where)._lexicon("u")
    texts = [text for _, text in writer._in_context("u", writer.store.iter_user("u"), seeded=False)]
    oracle = BM25Okapi([writer.tokenizer.tokens(t) for t in texts])
    for terms in (["w3", "w17"], ["w100"], ["token5", "w2", "w2"], ["user", "w1"]):
        ours, theirs = lexicon.index.scores(terms), oracle.get_scores(terms)
        # rank-bm25 floors frequent terms with a mean idf it sums in another order.
        assert list(ours) == pytest.approx(list(theirs), rel=1e-12)
        assert [d for d, _ in lexicon.index.top(terms, 10)] == _stable_top(theirs, 10)
    writer.close()


def test_another_version_or_a_missing_message_is_not_trusted(store_at: str) -> None:
    memory = _fresh(store_at)
    memory.add(_history("u", 200))
    expected = _answers(memory, "u")
    # Another tokenizer: its first search indexes every message and replaces the stored
    # segments with its own, then the default one does the same again.
    plain = Memory(MessageStore(store_at), None, cache=IndexCache(), tokenizer=Tokenizer())
    plain.lexical_search("u", query_text="w3", filter=ALL)
    assert _covers_everything(plain, "u") and _segments(memory, "u") == []
    again, counting = _counting(store_at)
    assert _answers(again, "u") == expected and counting.indexed() == 200
    assert _covers_everything(again, "u")
    # A message below the segments' end that they do not hold (a store edited by hand): a
    # cold start indexes every message again.
    memory.store._db.execute(
        f"DELETE FROM {memory.store._table} WHERE user_id = ? AND id = ?", ["u", "u-17"]
    )
    third, counting = _counting(store_at)
    assert _answers(third, "u") == _answers(_fresh(store_at, snapshots=False), "u")
    assert counting.indexed() == 199 and _covers_everything(third, "u")
    assert third.lexical_search("u", query_text="token17", filter=ALL)["total"] == 0
    for m in (memory, plain, again, third):
        m.close()


class FailingStore(MessageStore):
    """A message store whose lexicon writes fail (a full disk, a size limit)."""

    def replace_lexicon(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")


def test_messages_and_their_lexicon_are_written_together(store_at: str) -> None:
    memory = Memory(FailingStore(store_at), None, cache=IndexCache())
    with pytest.raises(OSError, match="disk full"):
        memory.add(_history("u", 5))
    assert memory.store.count("u") == 0  # the messages were rolled back with it
    memory.snapshots = False  # nothing is stored: the messages go in alone
    assert len(memory.add(_history("u", 5))) == 5
    memory.close()
    # A search stores what it indexed, but never fails for it.
    failing = Memory(FailingStore(store_at), None, cache=IndexCache())
    assert _top(failing, "u", 3) == "u-3"
    assert _segments(failing, "u") == []
    failing.close()


def test_with_snapshots_off_nothing_is_stored_or_read(store_at: str) -> None:
    memory = _fresh(store_at, snapshots=False)
    memory.add(_history("u", 30))
    assert _top(memory, "u", 3) == "u-3"
    assert _segments(memory, "u") == []
    on = _fresh(store_at)
    # The first add with snapshots on numbers its terms after those of the lexicon so far,
    # which it indexes (all 30) and stores first.
    on.add(_history("u", 5, start=30))
    assert _covers_everything(on, "u") and _top(on, "u", 33) == "u-33"
    off, counting = _counting(store_at)
    off.snapshots = False
    off.lexical_search("u", query_text="token3", filter=ALL)
    assert counting.indexed() == 35  # it reads no segment
    for m in (memory, on, off):
        m.close()


def test_a_cached_lexicon_sees_what_another_process_stored(store_at: str) -> None:
    one, two = _fresh(store_at), _fresh(store_at)  # two processes: two caches
    one.add(_history("u", 20))
    assert _top(two, "u", 5) == "u-5"
    one.add(_history("u", 20, start=20))
    two.store.add(_history("u", 3, start=40))  # and one more writer, without the lexicon
    assert [_top(two, "u", i) for i in (25, 39, 42)] == ["u-25", "u-39", "u-42"]
    assert _answers(two, "u") == _answers(_fresh(store_at, snapshots=False), "u")
    assert _covers_everything(two, "u")
    one.close()
    two.close()


_WRITER = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from test_lexicon_snapshots import ALL, _answers, _fresh, _history, _top
    from skilldeck.tools.index_cache import IndexCache
    from skilldeck.tools.memory import Memory
    from skilldeck.tools.messages import MessageStore

    store, name, first, count = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    total = 2 * count
    memory = Memory(MessageStore(store), None, cache=IndexCache())
    mine = _history("shared", count, start=first)
    start = 0
    while start < count:
        # Both write the shared user, in batches of 1 to 4, and search it in between.
        size = 1 + start % 4
        memory.add(mine[start : start + size])
        memory.add(_history(name, 1, start=start))
        memory.lexical_search("shared", query_text=f"token{first + start}", filter=ALL)
        start += size
    deadline = time.monotonic() + 120
    while memory.store.count("shared") < total and time.monotonic() < deadline:
        time.sleep(0.05)  # the other process may not be done (or failed: then this fails)
    # Every message of both, from this cached lexicon, as one built from the store answers.
    missing = [i for i in range(total) if _top(memory, "shared", i) != f"shared-{i}"]
    same = _answers(memory, "shared") == _answers(_fresh(store, snapshots=False), "shared")
    print(json.dumps({"missing": missing, "same": same}))
    memory.close()
    """
)


@pytest.mark.subprocess
def test_writers_in_two_processes_keep_one_lexicon(store_at: str) -> None:
    per_process = 120
    total = 2 * per_process
    here = str(Path(__file__).resolve().parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, here, store_at, name, str(first), str(per_process)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, first in (("one", 0), ("two", per_process))
    ]
    try:
        outs = [proc.communicate(timeout=300) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
        assert json.loads(out.splitlines()[-1]) == {"missing": [], "same": True}
    reader, counting = _counting(store_at)
    assert _covers_everything(reader, "shared")
    assert _answers(reader, "shared") == _answers(_fresh(store_at, snapshots=False), "shared")
    assert counting.indexed() == 0
    for i in random.Random(0).sample(range(total), 40):
        assert _top(reader, "shared", i) == f"shared-{i}"
    for name in ("one", "two"):
        assert _covers_everything(reader, name)
    reader.close()


@pytest.mark.parametrize("strings", [[], [""], ["a"], ["a\\0b", "x\0y", "\\", "é中"], ["", ""]])
def test_string_lists_survive_the_segment_encoding(strings: list[str]) -> None:
    assert split(joined(strings), len(strings)) == strings


def test_a_lexicon_opened_from_segments_keeps_growing(tmp_path: Path) -> None:
    memory = _fresh(str(tmp_path / "m.sqlite"))
    memory.add(_history("u", 50))
    lexicon = _fresh(str(tmp_path / "m.sqlite"))._lexicon("u")
    assert isinstance(lexicon, _Lexicon) and len(lexicon) == 50
    message = Message("new", "u", "t-new", "user", "2026-02-01T00:00:00Z", "fresh", seq=51)
    lexicon.add(message, ["fresh", "w3"])  # the stored arrays are read only: copied first
    assert lexicon.index.top(["fresh"], 1)[0][0] == 50 and lexicon.last_seq == 51
    assert (
        lexicon.index.count_matches(["w3"]) == memory._lexicon("u").index.count_matches(["w3"]) + 1
    )
    memory.close()


def test_chinese_and_english_turns_are_found_from_the_stored_lexicon(store_at: str) -> None:
    texts = ["我喜欢吃辣的拉面", "周末去爬山吗?", "Spicy ramen after hiking", "北京的烤鸭很好吃",
             "我们下周去北京", "The duck in Beijing was great"]  # fmt: skip
    writer = _fresh(store_at)
    for i, text in enumerate(texts):
        ts = f"2026-03-0{1 + i}T10:00:00Z"
        writer.add([Message(f"m{i}", "zh", f"t{i // 2}", "user", ts, text)])
    writer.close()
    reader, counting = _counting(store_at)
    built = _fresh(store_at, snapshots=False)
    for query in ("吃辣", "北京", "拉面 ramen", '"烤鸭"', "beijing duck"):
        found = reader.lexical_search("zh", query_text=query, filter=ALL)
        assert found["hits"], query
        assert found == built.lexical_search("zh", query_text=query, filter=ALL), query
    assert counting.indexed() == 0  # the bigrams came from the store, not the tokenizer
    assert reader.lexical_search("zh", query_text="北京", filter=ALL)["total"] == 2
    reader.close()
    built.close()
