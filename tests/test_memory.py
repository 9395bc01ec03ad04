"""The message store, importers and the memory tools of seed 001, on real SQLite and Chroma."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from skilldeck.cli import app
from skilldeck.errors import SkillDeckError
from skilldeck.tools import ToolRegistry, default_registry
from skilldeck.tools.importers import read_messages_file
from skilldeck.tools.memory import Memory
from skilldeck.tools.messages import Message, MessageStore
from skilldeck.tools.vectors import VectorIndex, open_chroma

pytestmark = pytest.mark.L2

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo-dev5.json"
ALL = {"role": "any", "time_range": {"since": "2020-01-01T00:00:00Z"}}

TEXTS = [
    ("m1", "user", "2026-01-03T09:00:00Z", "I don't eat spicy food, 我不吃辣."),
    ("m2", "assistant", "2026-01-03T09:00:05Z", "Noted: no spicy dishes for you."),
    ("m3", "user", "2026-01-10T12:00:00Z", "我不吃香菜，也不太吃辣的东西。"),
    ("m4", "user", "2026-02-01T08:30:00Z", "I work as a nurse in Lyon and I love hiking."),
    (
        "m5",
        "assistant",
        "2026-02-01T08:31:00Z",
        "Hiking near Lyon sounds great! Any favourite trail?",
    ),
    ("m6", "user", "2026-03-15T18:00:00Z", "I'm allergic to peanuts, please remember that."),
    ("m7", "user", "2026-03-15T18:01:00Z", "Spicy curry is fine for my husband, not for me."),
]


def _messages(user: str = "u1", thread: str = "t1") -> list[Message]:
    return [Message(i, user, thread, role, ts, text) for i, role, ts, text in TEXTS]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.server)])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's message store lives: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "m.sqlite")


@pytest.fixture
def memory(store_at: str, tmp_path: Path) -> Iterator[Memory]:
    mem = Memory(MessageStore(store_at), VectorIndex(open_chroma(tmp_path / "c")))
    mem.add(_messages())
    yield mem
    mem.store.close()


@pytest.fixture
def registry(memory: Memory, tmp_path: Path) -> ToolRegistry:
    return default_registry(tmp_path, memory=lambda: memory)


def _call(registry: ToolRegistry, name: str, user: str = "u1", **args: Any) -> Any:
    result = registry.invoke(name, args, {"user_id": user})
    return json.loads(result.content) if result.ok else result.content


# -- the store and importers ---------------------------------------------------------------------
def test_store_is_idempotent_and_normalises_time(store_at: str) -> None:
    store = MessageStore(store_at)
    first = store.add(_messages())
    assert [m.seq for m in first] == list(range(1, 8))
    assert store.add(_messages()) == []
    assert store.count("u1") == 7
    store.add([Message("x", "u1", "t1", "user", "2026-01-01T10:00:00+02:00", "tz")])
    assert store.get("u1", ["x"])[0].ts == "2026-01-01T08:00:00Z"
    assert store.get("u2", ["m1"]) == []  # another user's message is invisible
    assert store.users() == ["u1"] and store.count() == 8
    store.close()


def test_jsonl_import_with_line_numbers_and_stable_ids(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(
        '{"role": "user", "ts": "2026-01-01T00:00:00Z", "text": "hello", "thread_id": "a"}\n\n'
        '{"id": "k", "role": "assistant", "ts": "2026-01-01T00:00:01Z", "text": "hi"}\n',
        "utf-8",
    )
    first = list(read_messages_file(good, "u"))
    again = list(read_messages_file(good, "u"))
    assert first[1].id == "k" and first[0].id == again[0].id  # content-hash ids are stable
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"role": "user", "ts": "2026-01-01T00:00:00Z", "text": "ok"}\n{"role": "user"}\n'
    )
    with pytest.raises(SkillDeckError, match=r"bad.jsonl:2: missing or empty 'text'"):
        list(read_messages_file(bad, "u"))
    stamp = tmp_path / "ts.jsonl"
    stamp.write_text('{"role": "user", "ts": "yesterday", "text": "x"}\n')
    with pytest.raises(SkillDeckError, match="not an ISO 8601 time"):
        list(read_messages_file(stamp, "u"))
    other = tmp_path / "other.json"
    other.write_text(
        '[{"user_id": "eve", "role": "user", "ts": "2026-01-01T00:00:00Z", "text": "x"}]'
    )
    with pytest.raises(SkillDeckError, match="differs from the import's user"):
        list(read_messages_file(other, "u"))


@pytest.mark.skipif(not LOCOMO.is_file(), reason="needs ../shared/data/locomo")
def test_locomo_import() -> None:
    messages = list(read_messages_file(LOCOMO, "u"))
    first = messages[0]
    assert first.id == "conv-26:D1:1" and first.thread_id == "conv-26"
    assert first.ts == "2023-05-08T13:56:00Z"  # "1:56 pm on 8 May, 2023"
    assert first.meta == {"dia_id": "D1:1", "speaker": "Caroline", "session": 1}
    assert {m.role for m in messages} == {"user", "assistant"}
    assert len({m.id for m in messages}) == len(messages)
    assert any("[shares a photo:" in m.text for m in messages)


def test_cli_import_is_idempotent_and_shows_progress(tmp_path: Path) -> None:
    data = tmp_path / "msgs.json"
    data.write_text(json.dumps([{"role": r, "ts": ts, "text": t} for _, r, ts, t in TEXTS]))
    env = {
        "SKILLDECK_MESSAGES_PATH": str(tmp_path / "cli.sqlite"),
        "SKILLDECK_CHROMA_PATH": str(tmp_path / "chroma"),
    }
    runner = CliRunner(env=env)
    first = runner.invoke(app, ["messages", "import", str(data), "--user", "u", "--json"])
    assert first.exit_code == 0, first.output
    assert '"added": 7' in first.stdout and "importing msgs.json" in first.stderr
    again = runner.invoke(app, ["messages", "import", str(data), "--user", "u", "--json"])
    assert json.loads(again.stdout) == {
        "file": str(data),
        "user": "u",
        "read": 7,
        "added": 0,
        "skipped": 7,
    }
    broken = runner.invoke(app, ["messages", "import", str(tmp_path / "none.jsonl"), "--user", "u"])
    assert broken.exit_code == 2 and "no such file" in broken.stderr


# -- seed 001's explicit-filter rules, enforced by the tools -------------------------------------
@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("messages_list", {"since": "2026-01-01T00:00:00Z"}, "needs role"),
        ("messages_list", {"role": "any"}, "needs since or until"),
        ("lexical_search", {"query_text": "spicy"}, "needs filter="),
        (
            "lexical_search",
            {"query_text": "spicy", "filter": {"time_range": {"since": "2026-01-01T00:00:00Z"}}},
            "needs filter.role",
        ),
        (
            "lexical_search",
            {"query_text": "spicy", "filter": {"role": "user"}},
            "filter.time_range.since or filter.time_range.until",
        ),
        (
            "semantic_search",
            {"query_text": "spicy", "filter": {"role": "any", "time_range": {}}},
            "filter.time_range.since",
        ),
        ("semantic_search", {"filter": ALL}, "exactly one of query_text or query_embedding"),
        (
            "lexical_search",
            {"query_text": "x", "filter": {"role": "any", "time_range": {"since": "May 2023"}}},
            "not an ISO 8601 time",
        ),
        (
            "messages_list",
            {"role": "any", "since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
            "since must be before",
        ),
        (
            "lexical_search",
            {"query_text": "x", "filter": {"role": "any", "when": 1}},
            "invalid arguments",
        ),
        (
            "lexical_search",
            {"query_text": "x", "filter": ALL, "user_id": "eve"},
            "bound by the runtime",
        ),
        ("lexical_search", {"query_text": "?!", "filter": ALL}, "no searchable words"),
        ("neighbors", {"message_id": "nope"}, "no message 'nope'"),
        (
            "lexical_search",
            {"query_text": "x", "filter": ALL, "cursor": "%%%"},
            "cursor is not valid",
        ),
    ],
)
def test_filter_rules_and_bad_arguments(
    registry: ToolRegistry, tool: str, args: dict[str, Any], message: str
) -> None:
    result = _call(registry, tool, **args)
    assert isinstance(result, str) and result.startswith("Error:") and message in result, result


def test_bare_names_and_families_are_the_same_tools(registry: ToolRegistry) -> None:
    assert registry.resolve("lexical_search") == "memory__lexical_search"
    assert registry.identity_params("memory__neighbors") == {"user_id"}
    schema: Any = registry.get("semantic_search").tool_call_schema
    assert "user_id" not in schema.model_json_schema()["properties"]


# -- results -------------------------------------------------------------------------------
def test_hits_have_the_documented_shape(registry: ToolRegistry) -> None:
    hits = _call(registry, "lexical_search", query_text="nurse Lyon", filter=ALL)["hits"]
    # m5 is indexed after the turn it answers (m4), so both match; the store's text is m5's own.
    assert {h["message_id"] for h in hits[:2]} == {"m4", "m5"}
    assert hits[0]["text"] in (TEXTS[3][3], TEXTS[4][3])
    assert set(hits[0]) == {"message_id", "ts", "role", "text", "score"}
    assert _call(registry, "lexical_search", "u2", query_text="hiking", filter=ALL)["hits"] == []


def test_cjk_phrase_must_match_contiguously(registry: ToolRegistry) -> None:
    loose = _call(registry, "lexical_search", query_text="不吃辣", filter=ALL)["hits"]
    # m3 has 不吃 and 吃辣 apart; m2 matches through m1, the turn just before it (m4 came
    # weeks after m3, so it is read alone).
    assert {h["message_id"] for h in loose} == {"m1", "m2", "m3"}
    exact = _call(registry, "lexical_search", query_text='"不吃辣"', filter=ALL)["hits"]
    assert [h["message_id"] for h in exact] == ["m1"]
    english = _call(registry, "lexical_search", query_text='"spicy curry"', filter=ALL)["hits"]
    assert [h["message_id"] for h in english] == ["m7"]


def test_filters_apply_before_ranking(registry: ToolRegistry) -> None:
    flt = {"role": "assistant", "time_range": {"since": "2026-01-01T00:00:00Z"}}
    hits = _call(registry, "lexical_search", query_text="spicy", filter=flt, page_size=1)["hits"]
    assert [h["message_id"] for h in hits] == ["m2"]  # the best "spicy" matches are the user's
    window = {
        "role": "user",
        "time_range": {"since": "2026-03-01T00:00:00Z", "until": "2026-03-15T18:01:00Z"},
    }
    hits = _call(registry, "lexical_search", query_text="spicy peanuts", filter=window)["hits"]
    assert [h["message_id"] for h in hits] == ["m6"]  # until is exclusive: m7 is out


def test_lexical_cursors_page_without_gaps(registry: ToolRegistry) -> None:
    seen, cursor, pages = [], None, 0
    first = _call(registry, "lexical_search", query_text="spicy food 辣 I", filter=ALL, page_size=2)
    total = first["total"]
    while True:
        args: dict[str, Any] = {"query_text": "spicy food 辣 I", "filter": ALL, "page_size": 2}
        if cursor:
            args["cursor"] = cursor
        page = _call(registry, "lexical_search", **args)
        seen += [h["message_id"] for h in page["hits"]]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == total and pages == -(-total // 2)
    again = _call(
        registry,
        "lexical_search",
        query_text="spicy food 辣 I",
        filter=ALL,
        page_size=2,
        cursor=first["next_cursor"],
    )
    assert [h["message_id"] for h in again["hits"]] == seen[2:4]  # a cursor is stable
    other = _call(
        registry, "lexical_search", query_text="hiking", filter=ALL, cursor=first["next_cursor"]
    )
    assert "belongs to another query" in other


def test_messages_list_pages_in_time_order(registry: ToolRegistry) -> None:
    first = _call(registry, "messages_list", role="user", since="2026-01-01T00:00:00Z", page_size=3)
    assert [h["message_id"] for h in first["hits"]] == ["m1", "m3", "m4"]
    rest = _call(
        registry,
        "messages_list",
        role="user",
        since="2026-01-01T00:00:00Z",
        page_size=3,
        cursor=first["next_cursor"],
    )
    assert [h["message_id"] for h in rest["hits"]] == ["m6", "m7"] and rest["next_cursor"] is None
    assert (
        _call(registry, "messages_list", role="any", until="2026-01-04T00:00:00Z")["hits"][1][
            "message_id"
        ]
        == "m2"
    )


def test_semantic_search_is_multilingual_and_filtered(registry: ToolRegistry) -> None:
    hits = _call(
        registry, "semantic_search", query_text="does the user like hot chili?", filter=ALL, top_k=3
    )["hits"]
    assert {h["message_id"] for h in hits} & {"m1", "m3", "m7"}
    only = {"role": "assistant", "time_range": {"until": "2026-01-31T00:00:00Z"}}
    hits = _call(registry, "semantic_search", query_text="spicy", filter=only)["hits"]
    assert [h["message_id"] for h in hits] == ["m2"]
    strict = _call(
        registry, "semantic_search", query_text="nurse in Lyon", filter=ALL, min_score=0.99
    )
    assert strict["hits"] == []


def test_neighbors_default_to_eight_before(memory: Memory, registry: ToolRegistry) -> None:
    memory.add([Message("other", "u1", "t2", "user", "2026-03-15T18:00:30Z", "elsewhere")])
    hits = _call(registry, "neighbors", message_id="m7")["hits"]
    assert [h["message_id"] for h in hits] == ["m1", "m2", "m3", "m4", "m5", "m6", "m7"]
    around = _call(registry, "neighbors", message_id="m3", before=1, after=1)["hits"]
    assert [h["message_id"] for h in around] == ["m2", "m3", "m4"]


def test_incremental_adds_and_rebuild_give_the_same_results(memory: Memory) -> None:
    query = {"query_text": "spicy hiking 辣", "filter": ALL, "page_size": 10}
    memory.lexical_search("u1", **query)  # builds the lexicon before the add
    memory.add(
        [Message("m8", "u1", "t1", "user", "2026-04-01T00:00:00Z", "Spicy ramen hiking trip")]
    )
    before = memory.lexical_search("u1", **query)
    semantic = memory.semantic_search("u1", query_text="spicy ramen", filter=ALL, top_k=3)
    assert before["hits"][0]["message_id"] == "m8"
    memory.rebuild("u1")
    assert memory.lexical_search("u1", **query) == before
    after = memory.semantic_search("u1", query_text="spicy ramen", filter=ALL, top_k=3)
    # The same hits in the same order; a score may move in its last digit, because a rebuild
    # embeds the messages in one batch and an add embeds one (float sums in another order).
    assert [h["message_id"] for h in after["hits"]] == [h["message_id"] for h in semantic["hits"]]
    assert [h["score"] for h in after["hits"]] == pytest.approx(
        [h["score"] for h in semantic["hits"]], abs=1e-5
    )


def test_deck_runs_bind_the_user(tmp_path: Path, memory: Memory) -> None:
    """A skill's memory tool call searches the run's user only, never an argument's."""
    from conftest import output, write_bundle

    from skilldeck import Settings, SkillDeck
    from skilldeck.nodes import transcript

    skills = tmp_path / "skills"
    write_bundle(skills, "recall", meta={"tools": ["lexical_search"]})
    script = tmp_path / "s.yaml"
    call = {"name": "lexical_search", "args": {"query_text": "peanuts", "filter": ALL}}
    script.write_text(json.dumps({"skills": {"recall": [{"tool_calls": [call]}, output()]}}))
    deck = SkillDeck(
        skills,
        checkpointer="memory://",
        settings=Settings(model=f"scripted:{script}"),
        tools=default_registry(tmp_path, memory=lambda: memory),
    )
    result = deck.run({}, context="ctx", user_id="u1")
    turn = transcript.read(
        deck.store, result.state["attempt"]["turn"], result.state["attempt"]["head"]
    )
    assert "m6" in str(turn[3].content)
    other = deck.run({}, context="ctx", user_id="u2")
    turn = transcript.read(
        deck.store, other.state["attempt"]["turn"], other.state["attempt"]["head"]
    )
    assert '"hits": []' in str(turn[3].content)


def test_write_behind_never_misses_an_add_and_backfill_recovers(
    store_at: str, tmp_path: Path
) -> None:
    store = MessageStore(store_at)
    vectors = VectorIndex(open_chroma(tmp_path / "wb"), write_behind=True)
    memory = Memory(store, vectors)
    memory.add(_messages())
    # A read right after the add waits for the pending Chroma write.
    hits = memory.semantic_search("u1", query_text="allergic to peanuts", filter=ALL, top_k=2)
    assert "m6" in {h["message_id"] for h in hits["hits"]}  # m7 is indexed after m6
    assert vectors.count("u1") == 7
    # A message stored by another path (or whose vector write was lost) is indexed on first use.
    store.add([Message("m9", "u1", "t1", "user", "2026-04-02T00:00:00Z", "I moved to Kyoto")])
    fresh = Memory(store, VectorIndex(open_chroma(tmp_path / "wb"), write_behind=True))
    assert fresh.backfill("u1") == 1 and fresh.backfill("u1") == 0
    found = fresh.semantic_search("u1", query_text="moved to Kyoto", filter=ALL, top_k=1)
    assert found["hits"][0]["message_id"] == "m9"
    fresh.close()
    memory.close()
