"""Conditionals unfolded for a grammar-constrained endpoint mean exactly what they meant: every
instance from a pool of likely and unlikely values gets the same verdict from the unfolded
schema as from the original."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jsonschema
import pytest

from skilldeck.skills import builtin_skills_dir
from skilldeck.skills.contract import (
    CONTROL_SCHEMA,
    QUESTION_SCHEMA,
    build_output_schema,
    compile_schema,
    format_errors,
    output_skeleton,
    turn_schema,
)
from skilldeck.skills.grammar import for_grammar
from skilldeck.skills.loader import load_skills

pytestmark = pytest.mark.L2

MISSING = object()

SAVE_OR_SKIP: dict[str, Any] = {
    "type": "object",
    "required": ["action", "files", "insight", "reason"],
    "additionalProperties": False,
    "properties": {
        "action": {"enum": ["saved", "skipped"]},
        "files": {"type": "array", "items": {"type": "string"}},
        "insight": {"type": ["string", "null"], "minLength": 1},
        "reason": {"type": ["string", "null"], "minLength": 1},
    },
    "if": {"properties": {"action": {"const": "saved"}}},
    "then": {"properties": {"files": {"minItems": 1}, "insight": {"type": "string"}}},
    "else": {"properties": {"files": {"maxItems": 0}, "insight": {"type": "null"}}},
}


def _instances(pools: Mapping[str, Sequence[Any]]) -> Iterator[dict[str, Any]]:
    names = list(pools)
    for values in itertools.product(*(pools[name] for name in names)):
        yield {n: v for n, v in zip(names, values, strict=True) if v is not MISSING}


def _same_verdicts(schema: Mapping[str, Any], instances: Iterator[Any]) -> int:
    original = jsonschema.Draft202012Validator(schema)
    unfolded = jsonschema.Draft202012Validator(for_grammar(schema, "p_"))
    valid = 0
    for instance in instances:
        verdict = original.is_valid(instance)
        assert unfolded.is_valid(instance) == verdict, json.dumps(instance)
        valid += verdict
    return valid


def _has_conditional(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return "if" in schema or any(_has_conditional(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_conditional(v) for v in schema)
    return False


def test_a_save_or_skip_conditional_becomes_two_branches_that_mean_the_same() -> None:
    unfolded = for_grammar(SAVE_OR_SKIP, "p_")
    assert not _has_conditional(unfolded) and len(unfolded["anyOf"]) == 2
    saved, skipped = unfolded["anyOf"]
    assert saved["properties"]["files"]["minItems"] == 1
    assert saved["properties"]["insight"] == {"type": "string", "minLength": 1}
    assert skipped["properties"]["action"] == {"enum": ["skipped"]}
    pools = {
        "action": ["saved", "skipped", "other", MISSING],
        "files": [[], ["a.md"], ["a.md", "b.md"], "a.md", MISSING],
        "insight": [None, "x", "", 3, MISSING],
        "reason": [None, "why", MISSING],
        "extra": [MISSING, 1],
    }
    assert _same_verdicts(SAVE_OR_SKIP, _instances(pools)) > 0


@pytest.mark.parametrize(
    ("files", "left"),
    [({"maxItems": 0}, "skipped"), ({"minItems": 1, "items": {"enum": ["a.md"]}}, "saved")],
)
def test_a_branch_that_can_hold_nothing_is_dropped_and_the_rest_mean_the_same(
    files: dict[str, Any], left: str
) -> None:
    # What a calls pin does to pkm-agent's files: before a write, no save can hold; after
    # one, no skip can.
    schema = {**SAVE_OR_SKIP, "properties": {**SAVE_OR_SKIP["properties"]}}
    schema["properties"]["files"] = {**schema["properties"]["files"], **files}
    unfolded = for_grammar(schema, "p_")
    assert "anyOf" not in unfolded and unfolded["properties"]["action"] == {"enum": [left]}
    pools = {
        "action": ["saved", "skipped"],
        "files": [[], ["a.md"], ["b.md"], ["a.md", "a.md"]],
        "insight": [None, "x"],
        "reason": [None, "why"],
    }
    assert _same_verdicts(schema, _instances(pools)) > 0


def test_the_card_controls_conditionals_unfold_and_mean_the_same() -> None:
    question = {"question": "Who?", "field_key": "profile.x", "required": True}
    options = [{"label": "A", "value": "a"}]
    questions = [
        {**question, "input_type": kind, **({"options": options} if with_options else {})}
        for kind in ("text", "select", "multi_select", "boolean", "oops")
        for with_options in (False, True)
    ]
    assert not _has_conditional(for_grammar(QUESTION_SCHEMA, "p_"))
    assert _same_verdicts(QUESTION_SCHEMA, iter(questions)) == 6  # not "oops", not bare selects
    assert not _has_conditional(for_grammar(CONTROL_SCHEMA, "p_"))
    pools = {
        "action": ["ask_user", "finish", "continue", "wait", MISSING],
        "review_type": ["clarify", "nope", MISSING],
        "questions": [[], questions[:1], questions[2:3], questions[1:2], MISSING],
        "retry_prompt": ["again", MISSING],
    }
    assert _same_verdicts(CONTROL_SCHEMA, _instances(pools)) > 0


@pytest.mark.parametrize(
    "schema",
    [
        # The property is optional: ``if`` also holds when it is missing.
        {**SAVE_OR_SKIP, "required": ["files", "insight", "reason"]},
        # ``then`` says something a branch cannot narrow to.
        {**SAVE_OR_SKIP, "then": {"properties": {"files": {"uniqueItems": True}}}},
        # ``then`` adds a property the object does not declare.
        {**SAVE_OR_SKIP, "then": {"properties": {"note": {"type": "string"}}}},
        # The tested property does not list its values.
        {**SAVE_OR_SKIP, "properties": {**SAVE_OR_SKIP["properties"], "action": {}}},
        # ``if`` tests two properties.
        {**SAVE_OR_SKIP, "if": {"properties": {"action": {"const": "saved"}, "files": {}}}},
    ],
)
def test_a_conditional_that_cannot_unfold_exactly_is_left_for_validation(
    schema: dict[str, Any],
) -> None:
    assert _has_conditional(for_grammar(schema, "p_"))


def test_narrowing_keeps_the_stricter_bound_and_the_common_type() -> None:
    schema = {
        "type": "object",
        "required": ["kind", "n", "tags"],
        "properties": {
            "kind": {"type": "boolean"},
            "n": {"type": "number", "minimum": 0, "maximum": 10},
            "tags": {"type": "array", "minItems": 1, "maxItems": 5},
        },
        "allOf": [
            {
                "if": {"properties": {"kind": {"const": True}}},
                "then": {
                    "properties": {
                        "n": {"type": "integer", "minimum": 2, "maximum": 20},
                        "tags": {"minItems": 0, "maxItems": 2},
                    }
                },
            }
        ],
    }
    unfolded = for_grammar(schema, "p_")
    assert not _has_conditional(unfolded)
    yes = unfolded["anyOf"][0]["properties"]
    assert yes["n"] == {"type": "integer", "minimum": 2, "maximum": 10}
    assert yes["tags"] == {"type": "array", "minItems": 1, "maxItems": 2}
    pools = {
        "kind": [True, False, MISSING],
        "n": [0, 1, 2, 2.5, 10, 11, MISSING],
        "tags": [[], ["a"], ["a", "b", "c"], MISSING],
    }
    assert _same_verdicts(schema, _instances(pools)) > 0


@pytest.mark.parametrize(
    ("items", "most", "bound"),
    [({"enum": ["a.md"]}, None, 1), ({"enum": ["a", "b", "c"]}, 2, 2), ({"const": "a"}, 5, 1)],
)
def test_unique_items_from_listed_values_are_bounded_by_their_count(
    items: dict[str, Any], most: int | None, bound: int
) -> None:
    schema: dict[str, Any] = {"type": "array", "items": items, "uniqueItems": True}
    if most is not None:
        schema["maxItems"] = most
    held = for_grammar(schema, "p_")
    assert held["maxItems"] == bound
    pools = [[], ["a.md"], ["a.md", "a.md"], ["a", "b"], ["a", "a"], ["a", "b", "c"], ["z"]]
    assert _same_verdicts(schema, iter(pools)) > 0


def test_a_list_without_unique_items_or_listed_values_is_not_bounded() -> None:
    free = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    repeats = {"type": "array", "items": {"enum": ["a"]}}
    assert "maxItems" not in for_grammar(free, "p_")
    assert "maxItems" not in for_grammar(repeats, "p_")


def test_no_built_in_skill_leaves_a_conditional_to_the_grammar() -> None:
    for bundle in load_skills(builtin_skills_dir()):
        assert not _has_conditional(turn_schema(bundle.output_schema)), bundle.name


@pytest.mark.parametrize(
    ("actions", "card_keys"),
    [(["finish"], False), (["continue", "finish"], False), (["ask_user", "finish"], True)],
)
def test_a_skill_narrows_control_action_for_the_grammar_and_the_check(
    actions: list[str], card_keys: bool
) -> None:
    source = {"properties": {"control": {"properties": {"action": {"enum": actions}}}}}
    schema, _ = build_output_schema(source, ())
    control = schema["properties"]["control"]
    assert control["properties"]["action"] == {"enum": actions}
    # A skill that never asks leaves the grammar no card to run away in.
    assert ("questions" in control["properties"]) is card_keys
    assert not _has_conditional(turn_schema(schema))
    validator = compile_schema(schema)
    base = {"response": "ok", "profile": {}, "data": {}}
    for action in ("continue", "retry", "ask_user", "finish"):
        errors = format_errors(validator, {**base, "control": {"action": action}})
        if action in actions and action != "ask_user":
            assert errors == []
        elif action not in actions:
            assert [e["path"] for e in errors] == ["$.control.action"], action
    assert output_skeleton(schema)["control"] == {"action": "finish"}


def test_a_skill_caps_its_response_for_the_grammar_and_the_check() -> None:
    schema, _ = build_output_schema({"properties": {"response": {"maxLength": 12}}}, ())
    grammar = turn_schema(schema)
    final = grammar["properties"]["final"]
    assert final["properties"]["response"] == {"type": "string", "maxLength": 12}
    validator = compile_schema(schema)
    output = {"profile": {}, "data": {}, "control": {"action": "finish"}}
    assert format_errors(validator, {**output, "response": "Saved it."}) == []
    errors = format_errors(validator, {**output, "response": "Saved it, and more, and more."})
    assert [e["path"] for e in errors] == ["$.response"]


def test_the_skeleton_takes_the_first_allowed_action_when_finish_is_not_one() -> None:
    source = {
        "properties": {"control": {"properties": {"action": {"enum": ["ask_user", "continue"]}}}}
    }
    schema, _ = build_output_schema(source, ())
    assert output_skeleton(schema)["control"] == {"action": "continue"}


def test_pinned_values_reach_the_grammar_whole() -> None:
    """A ``const`` or ``enum`` holds data, not a schema: a pinned card whose keys happen to be
    keyword names (a ``title``, a ``description``) keeps them, or the grammar would let the
    model drop them and the check after the reply would refuse what the grammar allowed."""
    saved = {"url": "https://example.org", "title": "A talk", "description": "d", "default": 1}
    schema = {
        "type": "object",
        "properties": {
            "ui_config": {"type": "object", "const": saved},
            "kind": {"enum": [{"title": "x"}, "y"]},
        },
    }
    grammar = for_grammar(schema, "s_")
    assert grammar["properties"]["ui_config"]["const"] == saved
    assert grammar["properties"]["kind"]["enum"] == [{"title": "x"}, "y"]
