"""AG-UI: ``POST /agui`` drives a deck as an AG-UI agent (RunAgentInput in, AG-UI events out),
and the stream passes the protocol's conformance validator (``ag-ui-validate``): a run to the
demo's card (the card is the interrupt outcome, with the answers' schema), then the resume."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, own_matter
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from skilldeck import Settings, SkillDeck
from skilldeck.server import create_app, hash_key
from skilldeck.server.agui import agui_events
from skilldeck.types import DeltaEvent, DoneEvent, StepEvent, ToolCallEvent

pytestmark = [pytest.mark.L2, pytest.mark.service]

KEYS = {"alice": "sdk_alice_test_key_0123456789", "bob": "sdk_bob_test_key_9876543210"}


def auth(user: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[user]}"}


@pytest.fixture
def http(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), output_mode="schema"
    )
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings) as deck:
        own_matter(deck, "demo-matter", "alice")
        app = create_app(deck, api_keys={hash_key(k): u for u, k in KEYS.items()})
        with TestClient(app) as client:
            yield client


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def body(run: str, **fields: Any) -> dict[str, Any]:
    return {"threadId": "agui-1", "runId": run, "messages": [], "tools": [], "context": [],
            "state": {}, "forwardedProps": {}, **fields}  # fmt: skip


def test_a_run_to_a_card_and_its_resume_are_valid_agui(http: TestClient) -> None:
    start = body(
        "run-1",
        messages=[{"id": "m1", "role": "user", "content": "Open the matter"}],
        forwardedProps={"input": {"documents": ["complaint.txt"]}, "context": "matter",
                        "matter_id": "demo-matter"},
    )  # fmt: skip
    response = http.post("/agui", headers=auth(), json=start)
    assert response.status_code == 200, response.text
    first = events(response.text)
    assert_valid_agui(first)
    types = [e["type"] for e in first]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert {"TEXT_MESSAGE_CONTENT", "TOOL_CALL_START", "TOOL_CALL_RESULT", "STATE_SNAPSHOT"} <= set(
        types
    )
    outcome = first[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    schema = interrupt["responseSchema"]
    assert Draft202012Validator(schema).is_valid(DEMO_ANSWERS)
    assert not Draft202012Validator(schema).is_valid({"profile.defendant.type": "robot"})
    snapshot = next(e for e in first if e["type"] == "STATE_SNAPSHOT")["snapshot"]
    assert snapshot["status"] == "interrupted"

    answer = {"interruptId": interrupt["id"], "status": "resolved", "payload": DEMO_ANSWERS}
    resume = body("run-2", resume=[answer])
    done = events(http.post("/agui", headers=auth(), json=resume).text)
    assert_valid_agui(done)
    assert done[-1]["type"] == "RUN_FINISHED" and done[-1]["outcome"]["type"] == "success"
    assert done[-1]["result"]["status"] == "finished"


def test_what_a_deck_cannot_do_ends_the_run_with_an_error_and_changes_nothing(
    http: TestClient,
) -> None:
    for asked, code in (
        (body("r"), "NOTHING_TO_RUN"),
        (body("r", resume=[{"interruptId": "x", "status": "cancelled"}]), "RESUME_CANCELLED"),
        (body("r", resume=[{"interruptId": "x", "status": "resolved", "payload": 3}]),
         "INVALID_ANSWERS"),
    ):  # fmt: skip
        said = events(http.post("/agui", headers=auth(), json=asked).text)
        assert_valid_agui(said)
        assert [e["type"] for e in said] == ["RUN_STARTED", "RUN_ERROR"] and said[1]["code"] == code
    view = http.get("/threads/agui-1", headers=auth())
    assert view.status_code == 404  # nothing ran, and no thread was stored


def test_bad_agui_requests_are_refused_before_a_stream(http: TestClient) -> None:
    path = http.post("/agui", headers=auth(), json=body("r", threadId="../etc"))
    assert path.status_code == 422 and "threadId" in path.text
    run = body("r", messages=[{"id": "m", "role": "user", "content": "hi"}])
    assert http.post("/agui", headers=auth(), json=run).status_code == 200
    theirs = http.post("/agui", headers=auth("bob"), json=run)
    assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "THREAD_NOT_FOUND"
    assert http.post("/agui", json=run).status_code == 401


def test_each_model_reply_is_one_text_message_ended_by_any_other_event() -> None:
    # A reply is a (skill, attempt)'s run of deltas: a step, a tool call, another attempt or
    # another skill ends it, and the run's end ends the last one before its snapshot.
    def delta(skill: str, attempt: int | None, text: str) -> DeltaEvent:
        return DeltaEvent(thread_id="t", skill=skill, attempt=attempt, text=text)

    said = agui_events(
        "t",
        "r",
        iter([
            delta("a", 1, "x"), delta("a", 1, "y"),
            StepEvent(thread_id="t", node="skill"),
            delta("a", 1, "z"), delta("a", 2, "w"),
            ToolCallEvent(thread_id="t", skill="a", name="f", call_id="c1", status="ok"),
            delta("b", None, "v"),
            DoneEvent(thread_id="t", status="finished"),
        ]),
        lambda: {"status": "finished"},
    )  # fmt: skip
    shown = [
        (e.type.value, getattr(e, "message_id", None), getattr(e, "delta", None))
        for e in said
        if e.type.value.startswith("TEXT_MESSAGE")
        or e.type.value in ("STEP_STARTED", "TOOL_CALL_START", "STATE_SNAPSHOT")
    ]
    assert shown == [
        ("TEXT_MESSAGE_START", "r-reply-1", None),
        ("TEXT_MESSAGE_CONTENT", "r-reply-1", "x"),
        ("TEXT_MESSAGE_CONTENT", "r-reply-1", "y"),
        ("TEXT_MESSAGE_END", "r-reply-1", None),
        ("STEP_STARTED", None, None),
        ("TEXT_MESSAGE_START", "r-reply-2", None),
        ("TEXT_MESSAGE_CONTENT", "r-reply-2", "z"),
        ("TEXT_MESSAGE_END", "r-reply-2", None),
        ("TEXT_MESSAGE_START", "r-reply-3", None),
        ("TEXT_MESSAGE_CONTENT", "r-reply-3", "w"),
        ("TEXT_MESSAGE_END", "r-reply-3", None),
        ("TOOL_CALL_START", None, None),
        ("TEXT_MESSAGE_START", "r-reply-4", None),
        ("TEXT_MESSAGE_CONTENT", "r-reply-4", "v"),
        ("TEXT_MESSAGE_END", "r-reply-4", None),
        ("STATE_SNAPSHOT", None, None),
    ]
