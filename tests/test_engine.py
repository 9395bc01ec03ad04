"""The skill runner, the output contract, cards and resume, on real checkpoints."""

from __future__ import annotations

import datetime
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, write_bundle
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from skilldeck import (
    CheckpointError,
    InvalidAnswersError,
    NoPendingCardError,
    Resume,
    SkillDeck,
    SkillDeckError,
    StaleInterruptError,
    ThreadNotFoundError,
    ToolCallEvent,
)
from skilldeck.nodes import transcript
from skilldeck.nodes.transcript import PROMPTS
from skilldeck.scripted import ScriptedChatModel

pytestmark = pytest.mark.L2

PROVIDES = ["profile.name", "profile.party"]


def _skill(skills_dir: Path, name: str = "intake", **kwargs: Any) -> Path:
    meta = {"outputs": {"provides": PROVIDES}, **kwargs.pop("meta", {})}
    write_bundle(skills_dir, name, meta=meta, **kwargs)
    return skills_dir


# -- the demo: run, card, resume ---------------------------------------------------------------
def test_demo_pauses_on_a_card_and_finishes_after_resume(demo_deck: SkillDeck) -> None:
    result = demo_deck.run(
        {"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter", user_id="u"
    )
    assert result.status == "interrupted"
    card = result.card
    assert card is not None
    assert set(card) == {
        "event", "thread_id", "skill", "review_type", "questions", "interrupt_id", "answers_schema",
    }  # fmt: skip
    # The answers' schema: each answer's type, and the field it writes (the party enum).
    schema = card["answers_schema"]
    assert schema["required"] == ["profile.defendant.name", "profile.defendant.type"]
    kinds = schema["properties"]["profile.defendant.type"]["allOf"]
    assert kinds[1]["enum"] == ["person", "organisation"]
    assert card["event"] == "card" and card["thread_id"] == result.thread_id
    assert [q["field_key"] for q in card["questions"]] == [
        "profile.defendant.name",
        "profile.defendant.type",
    ]
    assert result.state["profile"]["plaintiff"]["name"] == "Jane Doe"
    assert result.state["evidence_list"][0]["file_id"] == "complaint.txt"  # data at top level
    assert result.state["attempt"]["model"].startswith("scripted:")
    assert [c["status"] for c in result.state["attempt"]["tool_calls"]] == ["ok", "ok"]

    done = demo_deck.run(Resume(result.thread_id, DEMO_ANSWERS, interrupt_id=card["interrupt_id"]))
    assert done.status == "finished", done.error
    profile = done.state["profile"]
    assert profile["defendant"] == {"name": "Acme Logistics Ltd.", "type": "organisation"}
    assert profile["intake_status"] == "completed"
    assert profile["plaintiff"]["name"] == "Jane Doe"  # earlier increments kept
    assert done.card is None and done.state["card"] is None


def test_the_model_is_not_called_again_for_one_card(
    demo_deck: SkillDeck, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = ScriptedChatModel._generate

    def counting(
        self: ScriptedChatModel, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        calls.append(1)
        return original(self, messages, stop, run_manager, **kw)

    monkeypatch.setattr(ScriptedChatModel, "_generate", counting)
    result = demo_deck.run(
        {"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter"
    )
    assert len(calls) == 3  # two tool rounds and the output
    with pytest.raises(InvalidAnswersError):
        demo_deck.run(Resume(result.thread_id, {"profile.defendant.name": "X"}))
    assert len(calls) == 3
    demo_deck.run(Resume(result.thread_id, DEMO_ANSWERS))
    assert len(calls) == 5  # after the card: read the complaint, then the output; none repeated
    assert demo_deck.get_thread(result.thread_id).state["calls"] == {"litigation-intake": 5}


@pytest.mark.subprocess
def test_resume_from_a_new_process_and_a_new_deck(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite"
    code = f"""
import json, sys
from skilldeck import Resume, SkillDeck, Settings
deck = SkillDeck(checkpointer="sqlite:///{db}",
                 settings=Settings(model="scripted:{DEMO_SCRIPT}", files_root="{DEMO_FILES}"))
if sys.argv[1] == "run":
    r = deck.run({{"documents": ["complaint.txt"]}}, context="matter", matter_id="demo-matter")
else:
    r = deck.run(Resume(sys.argv[2], json.loads(sys.argv[3])))
print(json.dumps({{"status": r.status, "thread_id": r.thread_id, "profile": r.state["profile"]}}))
deck.close()
"""

    def child(*args: str) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
        )
        return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    first = child("run")
    assert first["status"] == "interrupted"
    second = child("resume", first["thread_id"], json.dumps(DEMO_ANSWERS))
    assert second["status"] == "finished"
    assert second["profile"]["defendant"]["name"] == "Acme Logistics Ltd."


# -- the output contract -----------------------------------------------------------------------
VALID = output(profile={"name": "Ann"}, data={"note": "n"})["output"]

BAD_OUTPUTS = {
    "not json": ({"text": "Sure! Here is the intake."}, "not JSON"),
    "not an object": ({"text": "[1, 2]"}, "JSON object"),
    "missing section": (
        {"output": {k: v for k, v in VALID.items() if k != "data"}},
        '"data" is a required',
    ),
    "extra key": ({"output": {**VALID, "notes": "x"}}, "'notes' was unexpected"),
    "wrong type": ({"output": {**VALID, "response": 42}}, 'is not of type "string"'),
    "profile outside provides": (
        {"output": {**VALID, "profile": {"secret": 1}}},
        "'secret' was unexpected",
    ),
    "data outside schema": ({"output": {**VALID, "data": {"other": 1}}}, "'other' was unexpected"),
    "bad action": (
        {"output": {**VALID, "control": {"action": "done"}}},
        "is not one of",
    ),
    "ask_user without questions": (
        {"output": {**VALID, "control": {"action": "ask_user", "review_type": "clarify"}}},
        '"questions" is a required property',
    ),
    "select without options": (
        {
            "output": {
                **VALID,
                "control": {
                    "action": "ask_user",
                    "review_type": "select",
                    "questions": [
                        {
                            "question": "Which?",
                            "field_key": "profile.party",
                            "input_type": "select",
                            "required": True,
                        }
                    ],
                },
            }
        },
        '"options" is a required property',
    ),
    "question field outside provides": (
        {
            "output": {
                **VALID,
                "control": {
                    "action": "ask_user",
                    "review_type": "clarify",
                    "questions": [
                        {
                            "question": "Age?",
                            "field_key": "profile.age",
                            "input_type": "text",
                            "required": True,
                        }
                    ],
                },
            }
        },
        "not under outputs.provides",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_OUTPUTS))
def test_invalid_output_fails_the_run_and_merges_nothing(
    case: str, skills_dir: Path, make_deck: Any
) -> None:
    turn, reason = BAD_OUTPUTS[case]
    deck = make_deck(_skill(skills_dir), {"intake": [turn]}, max_retries=0)
    result = deck.run({}, context="ctx")
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "CONTRACT_VIOLATION"
    assert any(reason in e.message for e in result.error.errors), result.error
    assert result.state.get("profile") in (None, {})
    assert "note" not in result.state
    assert result.state["attempt"]["action"] == "rejected"
    assert result.state["attempt"]["validation_errors"] == result.error.dump()["errors"]


def test_invalid_output_is_retried_with_the_errors(skills_dir: Path, make_deck: Any) -> None:
    turns = [
        {"text": "not json", "invalid": True},
        output(profile={"name": "Ann"}, data={"note": "ok"}),
    ]
    deck = make_deck(_skill(skills_dir), {"intake": turns}, max_retries=1)
    result = deck.run({}, context="ctx")
    assert result.status == "finished"
    assert result.state["profile"] == {"name": "Ann"} and result.state["note"] == "ok"
    assert result.state["attempt"]["attempt"] == 2
    rejected = [h for h in deck.history(result.thread_id) if h["action"] == "rejected"]
    assert len(rejected) == 1
    messages = transcript.read(
        deck.store, result.state["attempt"]["turn"], result.state["attempt"]["head"]
    )
    feedback = [m for m in messages if isinstance(m, HumanMessage)][-1]
    assert "Your output was rejected" in feedback.content and "not JSON" in feedback.content


def test_a_scripted_turn_never_hides_a_contract_error(skills_dir: Path, make_deck: Any) -> None:
    """An invalid turn not marked ``invalid: true`` fails the run at once, naming the turn: the
    valid turn after it is not taken as the re-ask's answer."""
    turns = [output(data={"note": 7}), output(profile={"name": "Ann"}, data={"note": "ok"})]
    deck = make_deck(_skill(skills_dir), {"intake": turns}, max_retries=2)
    result = deck.run({}, context="ctx")
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "CONTRACT_VIOLATION"
    assert re.search(r"scripted turn .*script\d\.yaml: skills\.intake\[0\]", result.error.message)
    assert "invalid: true" in result.error.message
    assert result.error.dump()["errors"] == [
        {"path": "$.data.note", "message": '7 is not of type "string"'}
    ]
    assert result.state["calls"] == {"intake": 1}
    assert "note" not in result.state


def test_retries_are_bounded_by_the_host(skills_dir: Path, make_deck: Any) -> None:
    turns = [{"text": "x", "invalid": True}] * 10
    deck = make_deck(_skill(skills_dir), {"intake": turns}, max_retries=2)
    result = deck.run({}, context="ctx")
    assert result.status == "failed"
    assert result.state["calls"] == {"intake": 3}
    assert "3 attempt(s)" in result.error.message


def test_retry_action_reasks_with_the_retry_prompt(skills_dir: Path, make_deck: Any) -> None:
    turns = [
        output(action="retry", retry_prompt="Look at page 2 as well."),
        output(profile={"name": "Ann"}),
    ]
    deck = make_deck(_skill(skills_dir), {"intake": turns})
    result = deck.run({}, context="ctx")
    assert result.status == "finished"
    messages = transcript.read(
        deck.store, result.state["attempt"]["turn"], result.state["attempt"]["head"]
    )
    assert "Look at page 2 as well." in messages[-2].content


def test_tool_rounds_are_bounded(skills_dir: Path, make_deck: Any) -> None:
    calls = [
        {"tool_calls": [{"name": "element__extract", "args": {"text": f"Plaintiff: A{i}"}}]}
        for i in range(10)
    ]
    deck = make_deck(
        _skill(skills_dir, meta={"tools": ["element__extract"]}),
        {"intake": calls},
        max_tool_rounds=2,
        max_retries=0,
    )
    result = deck.run({}, context="ctx")
    assert result.status == "failed"
    assert "tool round limit (2)" in result.error.dump()["errors"][0]["message"]
    assert len(result.state["attempt"]["tool_calls"]) == 2


def test_a_long_turns_checkpoints_do_not_grow_with_its_rounds(
    skills_dir: Path, make_deck: Any
) -> None:
    """The turn is checkpointed at every step: it holds the round in flight and tallies, and
    the calls' records stay in the transcript, whence the attempt record lists them all and
    a stream reports each call once."""
    rounds = 40
    calls = [
        {"tool_calls": [{"name": "element__extract", "args": {"text": f"Plaintiff: A{i}"}}]}
        for i in range(rounds)
    ]
    deck = make_deck(
        _skill(skills_dir, meta={"tools": ["element__extract"]}),
        {"intake": [*calls, output(profile={"name": "A"})]},
        max_tool_rounds=rounds,
    )
    events = list(deck.stream({}, context="ctx"))
    thread = events[-1].thread_id
    assert events[-1].event == "done", events[-1]
    reported = [e.call_id for e in events if isinstance(e, ToolCallEvent)]
    assert len(reported) == rounds == len(set(reported))
    config = {"configurable": {"thread_id": thread}}
    turns = [
        snap.values["turn"]
        for snap in reversed(list(deck.graph.get_state_history(config)))
        if snap.values.get("turn") and snap.next == ("intake",)  # after a tools step
    ]
    assert [t["round"] for t in turns] == list(range(1, rounds + 1))
    sizes = [len(json.dumps(t)) for t in turns]
    assert sizes[-1] - sizes[4] < 40, sizes  # a few more digits, not a call a round
    attempt = deck.get_thread(thread).state["attempt"]
    assert [c["args"]["text"] for c in attempt["tool_calls"]] == [
        f"Plaintiff: A{i}" for i in range(rounds)
    ]
    assert {c["status"] for c in attempt["tool_calls"]} == {"ok"}


def test_a_call_that_repeats_one_that_worked_narrows_the_turn_to_the_output(
    skills_dir: Path, make_deck: Any
) -> None:
    """The model gets the results it has, and the output only: the call is not run twice."""
    call = {"tool_calls": [{"name": "element__extract", "args": {"text": "Plaintiff: A"}}]}
    deck = make_deck(
        _skill(skills_dir, meta={"tools": ["element__extract"]}),
        {"intake": [call, call, output(profile={"name": "A"})]},
    )
    result = deck.run({}, context="ctx")
    assert result.status == "finished", result.error
    assert [c["status"] for c in result.state["attempt"]["tool_calls"]] == ["ok"]
    messages = transcript.read(
        deck.store, result.state["attempt"]["turn"], result.state["attempt"]["head"]
    )
    assert "You already called element__extract" in messages[-2].content


def test_the_model_is_offered_only_the_meta_tools_and_bound_once(
    skills_dir: Path, make_deck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    offered: list[list[str]] = []
    bind = ScriptedChatModel.bind_tools

    def record(self: ScriptedChatModel, tools: Any, **kwargs: Any) -> Any:
        offered.append(
            [t.name if isinstance(t, BaseTool) else t["function"]["name"] for t in tools]
        )
        return bind(self, tools, **kwargs)

    monkeypatch.setattr(ScriptedChatModel, "bind_tools", record)
    call = {"tool_calls": [{"name": "element__extract", "args": {"text": "Plaintiff: A"}}]}
    deck = make_deck(
        _skill(skills_dir, meta={"tools": ["element__extract"]}),
        {"intake": [call, output(action="finish")]},
        max_tool_rounds=1,
        output_mode="tool",
    )
    for _ in range(2):
        assert deck.run({}, context="ctx").status == "finished"
    # The first call may use the skill's tools, the last (no rounds left) only submit its
    # output; both bindings are reused by the second run.
    assert offered == [["element__extract", "submit_output"], ["submit_output"]]


def test_an_exhausted_script_fails_the_run_clearly(skills_dir: Path, make_deck: Any) -> None:
    deck = make_deck(_skill(skills_dir), {"intake": []})
    result = deck.run({}, context="ctx")
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "MODEL_ERROR"
    assert "no turn 0 for skill 'intake'" in result.error.message


# -- validate.py and preprocess.py -------------------------------------------------------------
VALIDATE_RETRY = """
def validate(output, state):
    if not state["profile"].get("name"):
        return {"action": "retry", "errors": ["name is missing"], "retry_prompt": "Find the name."}
    return "continue"
"""


def test_validate_script_can_ask_for_a_retry(skills_dir: Path, make_deck: Any) -> None:
    turns = [
        {**output(action="continue"), "invalid": True},  # validate.py sends this one back
        output(profile={"name": "Ann"}, action="finish"),
    ]
    skills = _skill(skills_dir, scripts={"validate": VALIDATE_RETRY})
    deck = make_deck(skills, {"intake": turns}, trust=[skills])
    result = deck.run({}, context="ctx")
    assert result.status == "finished" and result.state["profile"]["name"] == "Ann"
    messages = transcript.read(
        deck.store, result.state["attempt"]["turn"], result.state["attempt"]["head"]
    )
    assert "name is missing" in messages[-2].content and "Find the name." in messages[-2].content


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("def validate(output, state):\n    raise KeyError('plaintiff')\n", "KeyError"),
        ("def validate(output, state):\n    return 'maybe'\n", "expected continue, retry"),
        (
            "def validate(output, state):\n    return {'action': 'ask_user', 'questions': []}\n",
            "invalid card",
        ),
        (
            "def validate(output, state):\n"
            "    return {'action': 'ask_user', 'review_type': 'clarify', 'questions': {1}}\n",
            "invalid card: $: not JSON data",
        ),
        (
            "def validate(output, state):\n"
            "    return {'action': 'ask_user', 'review_type': 'clarify', 'questions': [1]}\n",
            "invalid card: $.questions[0]: 1 is not of type",
        ),
    ],
)
def test_broken_validate_script_fails_the_run(
    source: str, reason: str, skills_dir: Path, make_deck: Any
) -> None:
    turns = [output(profile={"name": "Ann"})]
    skills = _skill(skills_dir, scripts={"validate": source})
    deck = make_deck(skills, {"intake": turns}, trust=[skills])
    result = deck.run({}, context="ctx")
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "SCRIPT_ERROR"
    assert reason in result.error.message
    assert result.state.get("profile") in (None, {})


# -- cards ------------------------------------------------------------------------------------
ASK = output(
    profile={"name": "Ann"},
    action="ask_user",
    review_type="select",
    questions=[
        {
            "question": "Party?",
            "field_key": "profile.party",
            "input_type": "select",
            "required": True,
            "options": [{"label": "Us", "value": "us"}, {"label": "Them", "value": "them"}],
        },
        {
            "question": "Files?",
            "field_key": "tags",
            "input_type": "multi_select",
            "required": False,
            "options": [{"label": "A", "value": "a"}, {"label": "B", "value": "b"}],
        },
        {
            "question": "Urgent?",
            "field_key": "meta.urgent",
            "input_type": "boolean",
            "required": False,
        },
    ],
)


@pytest.fixture
def paused(skills_dir: Path, make_deck: Any) -> tuple[SkillDeck, str]:
    data = {"tags": {"type": "array"}, "meta": {"type": "object"}}
    deck = make_deck(
        _skill(skills_dir, data=data),
        {"intake": [ASK, output(action="finish")]},
    )
    result = deck.run({}, context="ctx")
    assert result.status == "interrupted"
    return deck, result.thread_id


@pytest.mark.parametrize(
    ("answers", "field", "message"),
    [
        ({}, "profile.party", "required"),
        ({"profile.party": "nobody"}, "profile.party", 'must be one of "us" or "them"'),
        ({"profile.party": 3}, "profile.party", 'must be one of "us" or "them"'),
        ({"profile.party": "us", "tags": ["a", "z"]}, "tags", 'item 2: must be one of "a" or "b"'),
        ({"profile.party": "us", "tags": "a"}, "tags", "must be a list"),
        ({"profile.party": "us", "meta.urgent": "yes"}, "meta.urgent", "must be true or false"),
        ({"profile.party": "us", "profile.name": "Eve"}, "profile.name", "did not ask"),
        ([1, 2], "$", "must be an object"),
        # Python callers can pass values that are not JSON data at all.
        ({"profile.party": "us", "tags": {"a"}}, "tags", "not JSON data: Unsupported type: 'set'"),
        ({"profile.party": datetime.date(2024, 1, 2)}, "profile.party", "not JSON data"),
        ({"profile.party": "us", 7: "x"}, "7", "field keys must be strings"),
    ],
)
def test_invalid_answers_raise_the_card_again_and_change_nothing(
    paused: tuple[SkillDeck, str], answers: Any, field: str, message: str
) -> None:
    deck, thread = paused
    before = deck.get_thread(thread)
    with pytest.raises(InvalidAnswersError) as info:
        deck.run(Resume(thread, answers))
    assert any(e["field_key"] == field and message in e["message"] for e in info.value.errors)
    assert info.value.card["errors"] == info.value.errors
    assert info.value.card["interrupt_id"] == before.card["interrupt_id"]  # type: ignore[index]
    after = deck.get_thread(thread)
    assert after == before


AMOUNTS = [
    {
        "question": "Amount (EUR)?",
        "field_key": "amount",
        "input_type": "number",
        "required": True,
        "minimum": 0,
        "maximum": 500,
    },
    {"question": "Crates?", "field_key": "crates", "input_type": "integer", "required": True},
    {"question": "Case number?", "field_key": "case_no", "input_type": "text", "required": True},
    {
        "question": "Court code?",
        "field_key": "court",
        "input_type": "text",
        "required": False,
        "error_message": "Write the court's code: two capitals and digits, like AB12.",
    },
    {"question": "Colour?", "field_key": "colour", "input_type": "text", "required": False},
]
AMOUNT_FIELDS = {
    "amount": {"type": "number"},
    "crates": {"type": "integer"},
    "case_no": {"type": "string", "pattern": "^[0-9]{4}-[A-Z]+$"},
    "court": {"type": "string", "pattern": "^[A-Z]{2}[0-9]+$"},
    "colour": {"enum": ["red", "green", "blue", "amber", "white", "black"]},
}


@pytest.fixture
def amounts(skills_dir: Path, make_deck: Any) -> tuple[SkillDeck, str]:
    deck = make_deck(
        _skill(skills_dir, data=AMOUNT_FIELDS),
        {
            "intake": [
                output(action="ask_user", review_type="clarify", questions=AMOUNTS),
                output(action="finish"),
            ]
        },
    )
    result = deck.run({}, context="ctx")
    assert result.status == "interrupted"
    return deck, result.thread_id


def test_number_answers_and_errors_a_person_can_read(amounts: tuple[SkillDeck, str]) -> None:
    deck, thread = amounts
    card = deck.get_thread(thread).card
    assert card is not None and card["questions"][0]["maximum"] == 500
    bad = {"amount": 900, "crates": 2.5, "case_no": "12", "court": "x", "colour": "pink"}
    with pytest.raises(InvalidAnswersError) as refused:
        deck.run(Resume(thread, bad))
    said = {e["field_key"]: e["message"] for e in refused.value.errors}
    assert said == {
        "amount": "must be at most 500",
        "crates": "must be a whole number",
        "case_no": "is not in the expected format",  # the field's regex is never quoted
        "court": "Write the court's code: two capitals and digits, like AB12.",
        # Every allowed value, however many (jsonschema-rs says "or 4 other candidates").
        "colour": 'must be one of "red", "green", "blue", "amber", "white" or "black"',
    }
    with pytest.raises(InvalidAnswersError) as refused:
        deck.run(Resume(thread, {"amount": "12", "crates": 2, "case_no": "2024-AB"}))
    assert refused.value.errors == [{"field_key": "amount", "message": "must be a number"}]
    done = deck.run(Resume(thread, {"amount": 120.5, "crates": 3, "case_no": "2024-AB"}))
    assert (done.state["amount"], done.state["crates"], done.status) == (120.5, 3, "finished")


@pytest.mark.parametrize(
    ("question", "reason"),
    [
        ({"input_type": "text", "maximum": 3}, "minimum and maximum bound number and integer"),
        ({"input_type": "number", "minimum": 5, "maximum": 1}, "minimum 5 is above its maximum 1"),
        ({"input_type": "integer", "maximum": "9"}, 'is not of type "number"'),
        ({"input_type": "number", "error_message": ""}, "shorter than 1 character"),
    ],
)
def test_a_card_with_senseless_bounds_or_message_is_a_contract_error(
    skills_dir: Path, make_deck: Any, question: dict[str, Any], reason: str
) -> None:
    asked = {"question": "Amount?", "field_key": "amount", "required": True, **question}
    deck = make_deck(
        _skill(skills_dir, data={"amount": {"type": "number"}}),
        {"intake": [{**output(action="ask_user", review_type="clarify", questions=[asked]),
                     "invalid": True}] * 3},
    )  # fmt: skip
    result = deck.run({}, context="ctx")
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "CONTRACT_VIOLATION"
    assert any(reason in e["message"] for e in result.error.dump()["errors"]), result.error


def test_answers_are_written_at_their_dot_paths(paused: tuple[SkillDeck, str]) -> None:
    deck, thread = paused
    result = deck.run(Resume(thread, {"profile.party": "them", "tags": ["b"], "meta.urgent": True}))
    assert result.status == "finished"
    assert result.state["profile"] == {"name": "Ann", "party": "them"}
    assert result.state["tags"] == ["b"]
    assert result.state["meta"] == {"urgent": True}


def test_a_raw_resume_with_bad_answers_reraises_the_card(paused: tuple[SkillDeck, str]) -> None:
    """Also a regression test for extra resumes when an interrupt sits in a loop."""
    deck, thread = paused
    config = {"configurable": {"thread_id": thread}}
    first = deck.get_thread(thread).card
    out = deck.graph.invoke(Command(resume={first["interrupt_id"]: {"x": 1}}), config, version="v2")  # type: ignore[index]
    assert len(out.interrupts) == 1
    again = out.interrupts[0]
    assert again.id != first["interrupt_id"]  # type: ignore[index]
    assert again.value["errors"][0]["field_key"] in ("profile.party", "x")
    assert deck.get_thread(thread).state["profile"] == {"name": "Ann"}
    result = deck.run(Resume(thread, {"profile.party": "us"}))
    assert result.status == "finished" and result.state["profile"]["party"] == "us"
    with pytest.raises(NoPendingCardError):
        deck.run(Resume(thread, {"profile.party": "us"}))


def test_resume_errors(paused: tuple[SkillDeck, str]) -> None:
    deck, thread = paused
    with pytest.raises(ThreadNotFoundError, match=r"not found in .*checkpoints\.sqlite"):
        deck.run(Resume("no-such-thread", {}))
    with pytest.raises(StaleInterruptError, match="already answered"):
        deck.run(Resume(thread, {"profile.party": "us"}, interrupt_id="stale"))
    with pytest.raises(SkillDeckError, match="waiting for answers"):
        deck.run({}, context="ctx", thread_id=thread)
    deck.run(Resume(thread, {"profile.party": "us"}))
    with pytest.raises(NoPendingCardError, match="'finished'"):
        deck.run(Resume(thread, {"profile.party": "us"}))


def test_identity_comes_from_arguments_not_input(skills_dir: Path, make_deck: Any) -> None:
    deck = make_deck(_skill(skills_dir), {"intake": [output()]})
    with pytest.raises(SkillDeckError, match="identity"):
        deck.run({"user_id": "mallory"}, context="ctx")
    with pytest.raises(ThreadNotFoundError):
        deck.get_thread("none")


# -- checkpoint databases ----------------------------------------------------------------------
def test_a_locked_database_is_a_clear_error_and_loses_nothing(
    tmp_path: Path, skills_dir: Path, make_deck: Any
) -> None:
    db = tmp_path / "locked.sqlite"
    deck = make_deck(
        _skill(skills_dir),
        {"intake": [output(), output()]},
        checkpointer=f"sqlite:///{db}",
        sqlite_timeout_s=0.2,
    )
    first = deck.run({}, context="ctx", thread_id="t1")
    assert first.status == "finished"
    holder = sqlite3.connect(db)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CheckpointError, match="locked"):
            deck.run({}, context="ctx", thread_id="t2")
    finally:
        holder.rollback()
        holder.close()
    assert deck.get_thread("t1") == first
    with pytest.raises(ThreadNotFoundError):
        deck.get_thread("t2")
    assert deck.run({}, context="ctx", thread_id="t2").status == "finished"


def test_a_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    from skilldeck.checkpoints import open_persistence

    with pytest.raises(CheckpointError, match="does not exist"):
        open_persistence(f"sqlite:///{tmp_path / 'nope.sqlite'}", must_exist=True)
    assert not (tmp_path / "nope.sqlite").exists()
    with pytest.raises(CheckpointError, match="unsupported checkpoint URL"):
        open_persistence("redis://localhost")


def test_checkpoints_are_strict_json_native(demo_deck: SkillDeck) -> None:
    result = demo_deck.run(
        {"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter"
    )
    assert json.loads(json.dumps(result.state)) == result.state
    serde = demo_deck.checkpointer.serde
    assert getattr(serde, "_allowed_msgpack_modules", True) is None


def test_thread_ids_with_periods_work(demo_deck: SkillDeck) -> None:
    result = demo_deck.run(
        {"documents": ["complaint.txt"]},
        context="matter",
        matter_id="demo-matter",
        user_id="u",
        thread_id="case.v1.2E.",
    )
    assert result.status == "interrupted"
    assert demo_deck.run(Resume("case.v1.2E.", DEMO_ANSWERS)).status == "finished"


def test_a_system_prompt_is_stored_once_for_every_turn(skills_dir: Path, make_deck: Any) -> None:
    deck = make_deck(_skill(skills_dir), {"intake": [output(), output()]})
    runs = [deck.run({}, context="ctx", thread_id=t) for t in ("t1", "t2")]
    prompts = deck.store.search(PROMPTS)
    assert len(prompts) == 1
    system = prompts[0].value["message"]["data"]["content"]
    assert system.startswith("# Skill: intake") and "## Output" in system
    for run in runs:
        turn, head = run.state["attempt"]["turn"], run.state["attempt"]["head"]
        (row,) = deck.store.search(transcript.turn_namespace(turn))
        assert row.value["messages"][0] == {"type": "prompt_ref", "key": prompts[0].key}
        messages = transcript.read(deck.store, turn, head)
        assert isinstance(messages[0], SystemMessage) and messages[0].content == system
        assert isinstance(messages[1], HumanMessage) and isinstance(messages[2], AIMessage)


def test_a_transcript_without_its_prompt_is_a_clear_error(skills_dir: Path, make_deck: Any) -> None:
    deck = make_deck(_skill(skills_dir), {"intake": [output()]})
    result = deck.run({}, context="ctx")
    (prompt,) = deck.store.search(PROMPTS)
    deck.store.delete(PROMPTS, prompt.key)
    with pytest.raises(CheckpointError, match=f"system prompt {prompt.key} that the store"):
        transcript.read(
            deck.store, result.state["attempt"]["turn"], result.state["attempt"]["head"]
        )
