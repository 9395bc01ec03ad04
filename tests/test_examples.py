"""Worked examples (``assets/examples.jsonl``): checked when the bundle loads and when the deck
is built, matched to the run's input, and shown in the first message of a turn."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import output, write_bundle

from skilldeck import SkillDeck
from skilldeck.checkpoints.inspect import transcript
from skilldeck.errors import BundleError
from skilldeck.nodes.examples import ExampleMatcher
from skilldeck.nodes.prompt import render_user
from skilldeck.skills import load_bundle
from skilldeck.skills.examples import EXAMPLES_FILE, Examples
from skilldeck.skills.loader import inspect_bundle
from skilldeck.tools.embeddings import default_embedding_function

pytestmark = pytest.mark.L2

FINAL = output(data={"note": "x"})["output"]


def _call(text: str, kind: str) -> dict[str, Any]:
    return {"tool": "pkm__create", "arguments": {"path": f"{kind}.txt", "text": text}}


GOOD = [
    {"input": {"content": "Dentist on Tuesday at 3pm"}, "reply": _call("3pm", "event")},
    {"input": {"content": "Paid 12 euros for lunch"}, "reply": _call("12 euros", "money")},
    {"input": {"content": "下周一上午开会"}, "reply": _call("开会", "meeting")},
    {
        "input": {"content": "Just a thought"},
        "reply": {"final": output(data={"note": "x"})["output"]},
    },
]


def _bundle(root: Path, lines: Sequence[Any] = GOOD, **meta: Any) -> Path:
    folder = write_bundle(
        root,
        "noter",
        meta={"tools": ["pkm__create"], "examples": {"match": "input.content"}, **meta},
    )
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    (folder / EXAMPLES_FILE).write_text(text + "\n", "utf-8")
    return folder


def _problems(folder: Path) -> list[tuple[str, str]]:
    bundle, problems = inspect_bundle(folder)
    assert bundle is None
    return [(p.json_path, p.message) for p in problems.errors]


# -- loading ------------------------------------------------------------------------------------


def test_examples_load_and_are_never_offered_as_files(tmp_path: Path) -> None:
    bundle = load_bundle(_bundle(tmp_path))
    assert bundle.examples is not None
    assert [e.line for e in bundle.examples.items] == [1, 2, 3, 4]
    assert bundle.examples.shown == 2 and bundle.examples.match == "input.content"
    assert bundle.examples.items[0].text == "Dentist on Tuesday at 3pm"
    assert bundle.examples.items[3].tool is None
    assert EXAMPLES_FILE not in dict(bundle.files)  # the engine shows them, not skill__read_file


BAD_LINES: dict[str, tuple[Any, str]] = {
    "not-json": ('{"input": ', "invalid JSON"),
    "extra-key": ({"input": {}, "reply": {}, "why": 1}, 'exactly "input" and "reply"'),
    "input-not-object": ({"input": "hi", "reply": {}}, '"input" must be an object'),
    "no-match-text": (
        {"input": {"title": "x"}, "reply": _call("x", "y")},
        "no text at 'input.content'",
    ),
    "other-tool": (
        {"input": {"content": "x"}, "reply": {"tool": "card__save", "arguments": {}}},
        "'card__save', not one of the skill's tools \\(pkm__create\\)",
    ),
    "arguments-not-object": (
        {"input": {"content": "x"}, "reply": {"tool": "pkm__create", "arguments": []}},
        '"arguments" must be an object',
    ),
    "final-breaks-contract": (
        {"input": {"content": "x"}, "reply": {"final": {"response": "hi"}}},
        "the final output breaks the contract at \\$",
    ),
    "reply-shape": ({"input": {"content": "x"}, "reply": {"answer": 1}}, '"tool": NAME'),
}


@pytest.mark.parametrize(("line", "reason"), BAD_LINES.values(), ids=list(BAD_LINES))
def test_a_bad_example_names_its_line_and_stops_the_load(
    tmp_path: Path, line: Any, reason: str
) -> None:
    folder = _bundle(tmp_path, [GOOD[0], line])
    [(where, message)] = _problems(folder)
    assert where == "$[line 2]"
    assert re.search(reason, message), message


def test_every_bad_example_is_reported_at_once(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, ["nope", GOOD[0], "", {"input": {}, "reply": {}}])
    assert [where for where, _ in _problems(folder)] == ["$[line 1]", "$[line 4]"]


def test_an_empty_file_and_a_setting_without_a_file_are_refused(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, [])
    assert _problems(folder) == [
        ("$", "has no examples: add one JSON object per line, or delete it")
    ]
    (folder / EXAMPLES_FILE).unlink()
    [(where, message)] = _problems(folder)
    assert where == "$.examples" and "has no assets/examples.jsonl" in message


@pytest.mark.parametrize(
    ("choice", "reason"),
    [
        ("pkm__create", "reply must call 'pkm__create': tool_choice makes every attempt start"),
        ("required", "reply is a final output, but tool_choice 'required'"),
    ],
)
def test_an_example_reply_the_tool_choice_forbids_is_refused(
    tmp_path: Path, choice: str, reason: str
) -> None:
    folder = _bundle(tmp_path, execution_config={"tool_choice": choice})
    [(where, message)] = _problems(folder)  # the final output, not the three calls
    assert where == "$[line 4]" and message.startswith(reason)


def test_examples_belong_to_single_mode_skills(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, execution_config={"mode": "planner"})
    assert any("in the planner and retrieval modes" in m for _, m in _problems(folder))


def test_a_match_path_outside_the_input_is_refused(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, examples={"match": "profile.name"})
    [(where, message)] = _problems(folder)
    assert where == "$.examples.match" and "input.content" in message


def test_the_deck_checks_an_example_call_against_the_tool_schema(
    tmp_path: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    bad = {
        "input": {"content": "x"},
        "reply": {"tool": "pkm__create", "arguments": {"path": 3, "text": "x"}},
    }
    folder = _bundle(tmp_path, [*GOOD, bad])
    load_bundle(folder)  # the loader does not know the tools; the deck does
    with pytest.raises(BundleError) as info:
        make_deck(tmp_path, checkpointer="memory://")
    where = [(Path(p.file).name, p.json_path) for p in info.value.problems]
    assert ("examples.jsonl", "$[line 5].reply.arguments.path") in where


# -- matching -----------------------------------------------------------------------------------


def _tools_of(examples: Sequence[Any]) -> list[str]:
    return [e.reply.get("arguments", {}).get("path", "final") for e in examples]


def _examples(tmp_path: Path, shown: int = 2) -> Examples:
    examples = load_bundle(_bundle(tmp_path, examples={"match": "input.content", "shown": shown}))
    assert examples.examples is not None
    return examples.examples


def test_by_meaning_the_nearest_example_comes_first_and_crosses_languages(tmp_path: Path) -> None:
    matcher = ExampleMatcher(_examples(tmp_path), default_embedding_function(), key="t1")
    picked = matcher.pick({"input": {"content": "明天下午三点开会"}})  # a meeting, in Chinese
    assert _tools_of(picked)[0] == "meeting.txt"
    picked = matcher.pick({"input": {"content": "I spent 30 dollars on groceries"}})
    assert _tools_of(picked)[0] == "money.txt"


def test_by_words_without_an_embedding_function(tmp_path: Path) -> None:
    matcher = ExampleMatcher(_examples(tmp_path), None)
    picked = matcher.pick({"input": {"content": "lunch was 9 euros"}})
    assert _tools_of(picked)[0] == "money.txt"


def test_showing_every_example_still_puts_the_nearest_first(tmp_path: Path) -> None:
    matcher = ExampleMatcher(_examples(tmp_path, shown=8), None)
    picked = matcher.pick({"input": {"content": "lunch was 9 euros"}})
    assert len(picked) == 4 and _tools_of(picked)[0] == "money.txt"


def test_a_failing_embedding_falls_back_to_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def down(texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding endpoint down")

    matcher = ExampleMatcher(_examples(tmp_path), down, key="t2")
    with caplog.at_level(logging.WARNING):
        picked = matcher.pick({"input": {"content": "dentist appointment on Tuesday"}})
    assert _tools_of(picked)[0] == "event.txt"
    assert "embedding endpoint down" in caplog.text


def test_no_text_to_match_shows_the_first_examples(tmp_path: Path) -> None:
    matcher = ExampleMatcher(_examples(tmp_path, shown=3), None)
    assert _tools_of(matcher.pick({"input": {"title": "x"}})) == [
        "event.txt",
        "money.txt",
        "meeting.txt",
    ]


# -- the prompt ---------------------------------------------------------------------------------


def test_each_mode_shows_the_reply_as_it_would_be_written(tmp_path: Path) -> None:
    items = _examples(tmp_path).items
    state = {"input": {"content": "x"}}
    schema = render_user(state, (), examples=items, output_mode="schema").content
    assert 'reply: {"tool":"pkm__create","arguments":{"path":"event.txt"' in schema
    assert 'reply: {"final":{"response":"ok"' in schema  # the envelope the grammar holds
    tool = render_user(state, (), examples=items, output_mode="tool").content
    assert 'reply: call pkm__create with {"path":"event.txt"' in tool
    assert '"tool":' not in tool  # a model shown calls as text writes its own calls as text
    assert 'reply: final output {"response":"ok"' in tool
    assert str(schema).index("## Examples") < str(schema).index("## State")


def test_a_turn_opens_with_the_examples_nearest_its_input(
    tmp_path: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    _bundle(tmp_path, examples={"match": "input.content", "shown": 1})
    deck = make_deck(tmp_path, {"noter": [output(data={"note": "n"})]})
    result = deck.run({"content": "Paid 20 euros for a taxi"}, context="ctx", matter_id="m")
    assert result.status == "finished", result.error
    opening = transcript(deck, result.thread_id)[0]["messages"][1]["content"]
    assert "## Examples" in opening and "money.txt" in opening
    assert "event.txt" not in opening and "meeting.txt" not in opening
