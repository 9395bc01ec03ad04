"""A skill says what input it takes (``assets/input_schema.json``): a run's input is checked
against the schema of the skill the run starts with before anything is written (on SQLite and
PostgreSQL, over HTTP as a 422), a skill without one takes any object, and the built-in skills
ship theirs, which take what the demo, their examples and their eval cases pass."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_FILES, DEMO_SCRIPT, output, write_bundle
from fastapi.testclient import TestClient

from skilldeck import InvalidInputError, Settings, SkillDeck
from skilldeck.demo import INPUT as DEMO_INPUT
from skilldeck.errors import ThreadNotFoundError
from skilldeck.evals.suites import suite_for_skill
from skilldeck.server import create_app, hash_key
from skilldeck.skills import builtin_skills_dir, load_bundle

pytestmark = pytest.mark.L2

KEY = "sdk_alice_input_key_0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
CLAIM = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "minimum": 0},
        "items": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "request": {"type": "string"},
    },
    "required": ["amount"],
    "additionalProperties": False,
}
BUILTIN = ("litigation-intake", "card-agent", "pkm-agent", "nomemory-recall", "rag-retrieve")


def _skills(root: Path) -> Path:
    """``claims`` (with the input schema above) and ``notes`` (without one), both in context
    ``ctx`` and routed by description in context ``auto``."""
    claims = write_bundle(root, "claims", meta={"description": "File an expense claim amount"})
    (claims / "assets" / "input_schema.json").write_text(json.dumps(CLAIM), "utf-8")
    write_bundle(root, "notes", meta={"description": "Write a note"})
    return root


@pytest.fixture
def deck(skills_dir: Path, make_deck: Callable[..., SkillDeck], database_url: str) -> SkillDeck:
    turns = [output(action="finish")]
    return make_deck(
        _skills(skills_dir), {"claims": turns, "notes": turns}, checkpointer=database_url
    )


def test_input_outside_the_schema_is_refused_and_nothing_is_written(deck: SkillDeck) -> None:
    bundle = next(b for b in deck.bundles if b.name == "claims")
    assert bundle.input_schema == CLAIM
    bad = {"amount": "12", "items": ["a", ""], "other": 1}
    with pytest.raises(InvalidInputError) as refused:
        deck.run(bad, context="ctx", thread_id="t-refused")
    assert refused.value.code == "INVALID_INPUT" and refused.value.skill == "claims"
    assert refused.value.errors == [
        {"path": "$", "message": "may not have 'other'"},
        {"path": "$.amount", "message": "must be a number"},
        {"path": "$.items[1]", "message": "must not be empty"},
    ]
    assert refused.value.to_dict()["errors"] == refused.value.errors
    with pytest.raises(InvalidInputError):
        list(deck.stream({}, context="ctx", thread_id="t-refused"))  # '$': needs 'amount'
    # Nothing was written: no thread in the index, no checkpoint.
    assert deck.threads() == []
    with pytest.raises(ThreadNotFoundError):
        deck.get_thread("t-refused")
    assert deck.run({"amount": 12.5}, context="ctx").status == "finished"


def test_the_schema_is_the_one_of_the_skill_the_run_starts_with(deck: SkillDeck) -> None:
    # Forced, or routed by description: the input is checked by the skill chosen.
    with pytest.raises(InvalidInputError, match="skill 'claims'"):
        deck.run({"amount": -1}, context="ctx", next_skill="claims")
    assert deck.run({"anything": [1, {}]}, context="ctx", next_skill="notes").status == "finished"
    with pytest.raises(InvalidInputError, match=r"\$\.amount: must be at least 0"):
        deck.run({"request": "file my expense claim", "amount": -1}, context="auto")
    # A skill without a schema takes any object.
    routed = deck.run({"request": "write a note", "n": [1, 2]}, context="auto")
    assert routed.status == "finished" and routed.state["attempt"]["skill"] == "notes"


def test_over_http_a_refused_input_is_a_422_naming_the_paths(deck: SkillDeck) -> None:
    app = create_app(deck, api_keys={hash_key(KEY): "alice"})
    with TestClient(app) as http:
        skills = {s["name"]: s for s in http.get("/skills", headers=AUTH).json()["skills"]}
        assert skills["claims"]["input_schema"] == CLAIM and skills["notes"]["input_schema"] is None
        thread = http.post("/threads", headers=AUTH).json()["thread_id"]
        body = {"input": {"amount": "lots"}, "context": "ctx"}
        refused = http.post(f"/threads/{thread}/runs", headers=AUTH, json=body)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "INVALID_INPUT" and error["skill"] == "claims"
        assert error["errors"] == [{"path": "$.amount", "message": "must be a number"}]
        view = http.get(f"/threads/{thread}", headers=AUTH).json()
        assert view["status"] == "new" and http.get(f"/threads/{thread}/history", headers=AUTH
                                                    ).json()["checkpoints"] == []  # fmt: skip


@pytest.mark.parametrize("name", BUILTIN)
def test_the_builtin_skills_say_what_input_they_take(name: str) -> None:
    bundle = load_bundle(builtin_skills_dir() / name)
    assert bundle.input_schema is not None
    assert bundle.input_schema["properties"]["request"]["type"] == "string"  # auto routing
    assert bundle.input_errors({}) != []  # each needs its input
    # What their eval cases pass (the harness's keys aside) fits, except what a setup hook
    # turns into the run input.
    hooked = bundle.eval_setup_path is not None
    for task in suite_for_skill(name).tasks:
        given = {"question": task.input["question"]} if hooked else task.input
        if task.context in (None, *bundle.contexts):
            assert bundle.input_errors(given) == [], (task.id, given)


def test_the_demo_input_fits_litigation_intake_and_a_bad_one_is_named(tmp_path: Path) -> None:
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES))
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings) as deck:
        intake = next(b for b in deck.bundles if b.name == "litigation-intake")
        assert intake.input_errors(DEMO_INPUT) == []
        with pytest.raises(InvalidInputError) as refused:
            deck.run({"documents": "complaint.txt"}, context="matter", matter_id="demo-matter")
        assert refused.value.errors == [{"path": "$.documents", "message": "must be a list"}]


def test_a_run_through_the_graph_itself_fails_on_a_refused_input(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    """LangGraph's own server hands the input to the graph: the start node ends the run as
    failed with the same error, before any skill runs."""
    deck = make_deck(_skills(skills_dir), {"claims": [output(action="finish")]})
    config: Any = {"configurable": {"thread_id": "g"}}
    state = deck.server_graph().invoke({"input": {"amount": "x"}, "context": "ctx"}, config)
    assert state["status"] == "failed" and state["error"]["code"] == "INVALID_INPUT"
    assert state["error"]["errors"] == [{"path": "$.amount", "message": "must be a number"}]
    assert state.get("attempt") is None
