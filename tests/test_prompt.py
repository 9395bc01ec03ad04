"""Prompt rendering: what a skill's model sees (seed 004: state + SKILL.md + references)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import output, write_bundle
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from skilldeck.errors import SkillDeckError
from skilldeck.nodes import transcript
from skilldeck.nodes.prompt import SUBMIT_TOOL, render_feedback, render_prompt, state_view
from skilldeck.skills import SkillBundle, load_bundle

pytestmark = pytest.mark.L1

BODY = "# Alpha\nRead the matter.\nNever guess a name."
STATE: dict[str, Any] = {
    "context": "matter",
    "input": {"documents": ["complaint.txt"]},
    "matter_id": "m-7",
    "profile": {"a": "known"},
    "note": "a data field",
    "other_note": None,
    "foreign": "not a data field of this deck",
    # bookkeeping: never shown to the model
    "user_id": "user-secret-9",
    "turn": {"id": "turn-secret-1"},
    "attempt": {"skill": "attempt-secret-2"},
    "guard": {"fingerprint": "guard-secret-3"},
    "calls": {"calls-secret-4": 1},
    "status": "status-secret-5",
    "error": {"message": "error-secret-6"},
    "card": {"card_id": "card-secret-7"},
    "next_skill": "next-secret-8",
    "response": "response-secret-9",
}
SECRETS = [f"secret-{i}" for i in range(1, 10)] + ["user-secret-9"]
DATA_KEYS = ("note", "other_note")


@pytest.fixture
def bundle(skills_dir: Path) -> SkillBundle:
    folder = write_bundle(
        skills_dir,
        "alpha",
        meta={"outputs": {"provides": ["profile.a", "profile.b.c"]}, "references": "inline"},
        skill_md=f"---\nname: alpha\ndescription: front matter text\n---\n{BODY}\n",
        references={"b-rules.md": "Rule B: 诉讼时效.\n", "a-checklist.md": "Checklist A.\n"},
    )
    return load_bundle(folder)


def _state_section(user: str) -> dict[str, Any]:
    assert user.startswith("## State\n")
    return json.loads(user.removeprefix("## State\n").split("\n## Prepared context\n")[0])


def test_system_message(bundle: SkillBundle) -> None:
    system, user = render_prompt(bundle, STATE, DATA_KEYS, output_mode="json")
    assert isinstance(system, SystemMessage) and isinstance(user, HumanMessage)
    text = system.content
    assert isinstance(text, str)
    assert text.startswith("# Skill: alpha\ntest skill alpha")
    assert BODY in text
    assert "front matter text" not in text and "name: alpha" not in text
    assert not text.lstrip().startswith("---")
    refs = text.index("## References")
    assert text.index(BODY) < refs < text.index("### a-checklist.md\nChecklist A.")
    assert text.index("### a-checklist.md") < text.index("### b-rules.md\nRule B: 诉讼时效.")
    assert "only these fields are allowed: profile.a, profile.b.c." in text
    compact = json.dumps(bundle.output_schema, ensure_ascii=False, separators=(",", ":"))
    assert f"JSON Schema of the whole output: {compact}" in text
    assert "one JSON object with exactly four keys" in text
    for secret in SECRETS:
        assert secret not in text


def test_system_message_without_references_or_provides(skills_dir: Path) -> None:
    bundle = load_bundle(write_bundle(skills_dir, "bare"))
    (system, _) = render_prompt(bundle, {}, (), output_mode="json")
    assert "## References" not in system.content
    assert "only these fields are allowed: none." in system.content


def test_user_message_is_the_state_view(bundle: SkillBundle) -> None:
    _, user = render_prompt(bundle, STATE, DATA_KEYS, output_mode="json")
    assert isinstance(user.content, str)
    view = _state_section(user.content)
    assert view == {
        "context": "matter",
        "input": {"documents": ["complaint.txt"]},
        "matter_id": "m-7",
        "profile": {"a": "known"},
        "data": {"note": "a data field"},
    }
    assert view == state_view(STATE, DATA_KEYS)
    for secret in SECRETS:
        assert secret not in user.content
    for key in ("turn", "attempt", "guard", "calls", "status", "user_id", "foreign"):
        assert f'"{key}"' not in user.content
    assert "## Prepared context" not in user.content


@pytest.mark.parametrize(
    ("state", "view"),
    [
        ({}, {}),
        ({"context": "c", "profile": {}, "input": {}, "note": None}, {"context": "c"}),
        ({"note": [], "other_note": 0}, {"data": {"note": [], "other_note": 0}}),
    ],
)
def test_state_view_drops_empty_parts(state: dict[str, Any], view: dict[str, Any]) -> None:
    assert state_view(state, DATA_KEYS) == view


def test_prepared_context(bundle: SkillBundle) -> None:
    prepared = {"hint": "看第3页", "pages": [3]}
    _, user = render_prompt(bundle, STATE, DATA_KEYS, output_mode="json", prepared=prepared)
    assert isinstance(user.content, str)
    _, tail = user.content.split("\n## Prepared context\n")
    assert json.loads(tail) == prepared
    assert "看第3页" in tail  # not escaped
    assert _state_section(user.content) == state_view(STATE, DATA_KEYS)
    _, empty = render_prompt(bundle, STATE, DATA_KEYS, output_mode="json", prepared={})
    assert "Prepared context" not in empty.content


TOOLS = [("kb__search", "Search the knowledge base.", {"properties": {"q": {"type": "string"}}})]


def test_output_mode_wording(bundle: SkillBundle) -> None:
    def system(mode: str) -> str:
        (message, _) = render_prompt(bundle, STATE, DATA_KEYS, output_mode=mode, tools=TOOLS)
        assert isinstance(message.content, str)
        return message.content

    json_text, tool_text, schema_text = system("json"), system("tool"), system("schema")
    assert "No prose and no code fence." in json_text
    assert '{"tool": NAME, "arguments": {...}}' in json_text
    assert SUBMIT_TOOL not in json_text
    assert f'calling the "{SUBMIT_TOOL}" tool' in tool_text
    assert "no code fence" not in tool_text
    assert '{"final": OUTPUT} ends your turn' in schema_text
    # The schema is sent once: in the prompt only where no grammar or tool carries it.
    assert "JSON Schema of the whole output" in json_text
    assert "JSON Schema of the whole output" not in tool_text + schema_text
    # Native tools in tool mode; described in the text where the mode has none.
    assert "- kb__search: Search the knowledge base. Arguments: q (string, optional)." in json_text
    assert "## Tools" in schema_text and "## Tools" not in tool_text
    with pytest.raises(SkillDeckError, match="no output mode named 'xml'; available: schema"):
        render_prompt(bundle, STATE, DATA_KEYS, output_mode="xml")


@pytest.mark.parametrize("retry_prompt", ["Check the plaintiff's name again.", None])
def test_render_feedback(retry_prompt: str | None) -> None:
    errors = [
        {"path": "$.profile.a", "message": "1 is not of type 'string'"},
        {"path": "$.control.questions[0].field_key", "message": "'x.y' is not provided"},
        {"path": "validate.py", "message": "amount must be positive"},
    ]
    message = render_feedback(errors, retry_prompt)
    assert isinstance(message, HumanMessage)
    lines = message.content.splitlines()
    assert lines[0] == "Your output was rejected:"
    for err in errors:
        assert f"- {err['path']}: {err['message']}" in lines
    if retry_prompt:
        assert retry_prompt in lines
    else:
        assert "None" not in message.content
    assert lines[-1].startswith("Reply again with one JSON object")


def test_preprocess_hint_reaches_the_model(make_deck: Callable[..., Any], skills_dir: Path) -> None:
    write_bundle(
        skills_dir,
        "alpha",
        scripts={"preprocess": "def preprocess(state):\n    return {'hint': 'X'}\n"},
    )
    deck = make_deck(skills_dir, {"alpha": [output(data={"note": "done"})]}, trust=[skills_dir])
    result = deck.run({"q": 1}, context="ctx", matter_id="m-1", user_id="u-secret")
    assert result.status == "finished", result.error
    attempt = result.state["attempt"]
    messages = transcript.read(deck.store, attempt["turn"], attempt["head"])
    assert [type(m) for m in messages] == [SystemMessage, HumanMessage, AIMessage]
    assert "Do alpha." in messages[0].content
    user = messages[1].content
    assert isinstance(user, str)
    assert json.loads(user.split("\n## Prepared context\n")[1]) == {"hint": "X"}
    assert _state_section(user) == {"context": "ctx", "input": {"q": 1}, "matter_id": "m-1"}
    assert "u-secret" not in user
