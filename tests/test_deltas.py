"""Token streaming: ``deltas=True`` adds ``delta`` events, the models' text as it is
generated, tagged with the skill and the attempt, from the scripted provider as from a real
model; the other events stay what they were. Over HTTP every event has an id, and a client
that reconnects to ``GET /threads/{id}/stream`` with ``Last-Event-ID`` gets what it missed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, own_matter, write_bundle
from fastapi.testclient import TestClient

from skilldeck import ModelConfigError, Resume, Settings, SkillDeck
from skilldeck.scripted import load_script
from skilldeck.server import create_app, hash_key
from skilldeck.types import DeltaEvent, Event, SkillResultEvent

pytestmark = [pytest.mark.L2, pytest.mark.service]

RUN = {"context": "matter", "user_id": "u", "matter_id": "demo-matter"}
DEMO = {"documents": ["complaint.txt"]}
KEY, BOB = "sdk_alice_test_key_0123456789", "sdk_bob_test_key_9876543210"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def deck(tmp_path: Path) -> Iterator[SkillDeck]:
    # Schema mode: replies are text (a JSON envelope), so there is text to stream.
    settings = Settings(
        model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), output_mode="schema"
    )
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings) as d:
        own_matter(d, "demo-matter", "alice")
        yield d


def _others(events: list[Event]) -> list[tuple[str, Any]]:
    return [(e.event, getattr(e, "node", None)) for e in events if not isinstance(e, DeltaEvent)]


def test_deltas_carry_the_text_before_the_validated_result(deck: SkillDeck) -> None:
    plain = list(deck.stream(DEMO, **RUN))
    streamed = list(deck.stream(DEMO, **RUN, deltas=True))
    assert not any(isinstance(e, DeltaEvent) for e in plain)
    assert _others(streamed) == _others(plain)
    deltas = [e for e in streamed if isinstance(e, DeltaEvent)]
    assert deltas and {(d.skill, d.attempt) for d in deltas} == {("litigation-intake", 1)}
    text = "".join(d.text for d in deltas)
    assert '{"tool": "file__parse"' in text and '"final":' in text
    # The output's text came before the result that validated it.
    result = next(i for i, e in enumerate(streamed) if isinstance(e, SkillResultEvent))
    last_delta = max(i for i, e in enumerate(streamed) if isinstance(e, DeltaEvent))
    assert last_delta < result
    thread = streamed[0].thread_id
    card = deck.get_thread(thread).card
    assert card is not None
    resumed = list(deck.stream(Resume(thread, DEMO_ANSWERS), deltas=True))
    assert any(isinstance(e, DeltaEvent) for e in resumed) and resumed[-1].event == "done"


def _replies(events: list[Event]) -> list[str]:
    """The text of each model reply: a run of deltas that no other event interrupts."""
    replies: list[list[str]] = []
    for before, event in zip([None, *events], events, strict=False):
        if isinstance(event, DeltaEvent):
            if not isinstance(before, DeltaEvent):
                replies.append([])
            replies[-1].append(event.text)
    return ["".join(reply) for reply in replies]


def test_each_reply_streams_its_text_exactly_once(deck: SkillDeck) -> None:
    # The scripted replies are JSON: a text sent twice over (the chunks, then the whole reply
    # again, as when the chunks lacked the reply's id) is no longer one JSON value.
    streamed = list(deck.stream(DEMO, **RUN, deltas=True))
    resumed = list(deck.stream(Resume(streamed[0].thread_id, DEMO_ANSWERS), deltas=True))
    for events in (streamed, resumed):
        replies = _replies(events)
        assert replies and all(json.loads(text) for text in replies), replies


def test_async_streams_deltas_too(deck: SkillDeck) -> None:
    async def collect() -> list[Event]:
        return [e async for e in deck.astream(DEMO, **RUN, deltas=True)]

    events = asyncio.run(collect())
    assert any(isinstance(e, DeltaEvent) for e in events) and events[-1].event == "card"


def _sse(text: str) -> list[dict[str, Any]]:
    blocks = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        blocks.append({"id": lines.get("id"), "event": lines["event"], **json.loads(lines["data"])})
    return blocks


def test_every_event_has_an_id_and_a_reconnect_gets_the_rest(deck: SkillDeck) -> None:
    app = create_app(deck, api_keys={hash_key(KEY): "alice", hash_key(BOB): "bob"})
    with TestClient(app) as http:
        thread = http.post("/threads", headers=AUTH).json()["thread_id"]
        body = {"input": DEMO, "context": "matter", "matter_id": "demo-matter"}
        first = _sse(http.post(f"/threads/{thread}/runs", headers=AUTH, json={
            **body, "stream_deltas": True}).text)  # fmt: skip
        assert all(e["id"] for e in first) and len({e["id"] for e in first}) == len(first)
        assert any(e["event"] == "delta" for e in first) and first[-1]["event"] == "card"
        # A client that saw only the first three events gets the rest, exactly.
        again = http.get(
            f"/threads/{thread}/stream", headers={**AUTH, "Last-Event-ID": first[2]["id"]}
        )
        assert again.status_code == 200 and _sse(again.text) == first[3:]
        assert _sse(http.get(f"/threads/{thread}/stream", headers=AUTH).text) == first
        # An id of another run (or garbage) starts the latest run from its beginning.
        stale = {**AUTH, "Last-Event-ID": "0123456789ab-4"}
        assert _sse(http.get(f"/threads/{thread}/stream", headers=stale).text) == first
        # Nothing streamed yet for a new thread; another user's thread is unknown.
        fresh = http.post("/threads", headers=AUTH).json()["thread_id"]
        missing = http.get(f"/threads/{fresh}/stream", headers=AUTH)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "NO_RUN_STREAM"
        other = http.get(f"/threads/{thread}/stream", headers={"Authorization": f"Bearer {BOB}"})
        assert other.status_code == 404 and other.json()["error"]["code"] == "THREAD_NOT_FOUND"
        plain = _sse(http.post(f"/threads/{fresh}/runs", headers=AUTH, json=body).text)
        assert not any(e["event"] == "delta" for e in plain)


def test_a_scripted_turns_latency_spreads_its_text_over_that_time(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "slowpoke")
    turn = output(response="one two three four five six", action="finish")
    deck = make_deck(skills_dir, {"slowpoke": [{**turn, "latency_s": 0.6}]}, output_mode="schema")
    arrived = [
        time.monotonic()
        for e in deck.stream({}, context="ctx", deltas=True)
        if isinstance(e, DeltaEvent)
    ]
    assert len(arrived) > 10 and arrived[-1] - arrived[0] >= 0.4  # a lower bound: sleeps only add


@pytest.mark.parametrize("latency", [-1, "soon", True, None])
def test_a_bad_latency_is_refused_where_it_is_written(tmp_path: Path, latency: Any) -> None:
    script = {"skills": {"s": [{**output(), "latency_s": latency}]}}
    with pytest.raises(ModelConfigError, match=r"\$\.skills\.s\[0\]\.latency_s: must be a number"):
        load_script(script)
