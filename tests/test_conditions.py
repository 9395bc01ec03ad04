"""Tests for the skill condition expression language."""

from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from skilldeck.skills import conditions
from skilldeck.skills.conditions import Condition, ConditionError, parse_condition

pytestmark = pytest.mark.L2

STATE: dict[str, Any] = {
    "profile": {"intake_status": "pending", "name": "Ada"},
    "matter_id": "M-1",
    "count": 3,
    "ratio": 1.5,
    "delta": -3,
    "flag": False,
    "done": True,
    "empty": "",
    "zero": 0,
    "nothing": None,
    "tags": ["x", "y"],
    "no_tags": [],
    "kind": "c",
    "items": [{"name": "first"}, {"name": "second"}],
    "meta": {"a": 1, "b": None},
    "numbered": {"0": "zero"},
    "text": "hello world",
    "quoted": 'it\'s "q"\tend\n',
    "backslash": "a\\b",
}


def check(expression: str, state: dict[str, Any] | None = None) -> bool:
    result = parse_condition(expression).evaluate(STATE if state is None else state)
    assert type(result) is bool
    return result


@pytest.mark.parametrize(
    "expression",
    [
        # The examples from the metadata documentation.
        "state.profile.intake_status != 'completed'",
        "state.matter_id != null",
        "state.count >= 3 and not (state.flag == true)",
        "'x' in state.tags",
        "state.kind not in ['a', \"b\"]",
        "state.nothing == None",
        "state.flag == False",
        "state.ratio == 1.5",
        "state.delta < -2",
        # Literals of every kind.
        "'single' == \"single\"",
        r"'it\'s \"q\"\tend\n' == state.quoted",
        r'"it' + "'" + r's \"q\"\tend\n" == state.quoted',
        r"state.backslash == 'a\\b'",
        "state.count == 3.0",
        "-0.5 < 0",
        "1e3 == 1000",
        "2.5E-1 == 0.25",
        "null == None",
        "true == True",
        "false == False",
        "[1, 'a', null, true, 2.5] == [1, 'a', None, True, 2.5]",
        "[] == state.no_tags",
        "['x', 'y',] == state.tags",
        "[[1, 2], []] == [[1, 2], []]",
        "'__import__' == '__import__'",
        # Each comparison operator.
        "state.count == 3",
        "state.count != 4",
        "state.count < 4",
        "state.count <= 3",
        "state.count > 2.5",
        "state.count >= 3",
        "'abc' < 'abd'",
        "state.meta == state.meta",
        "state.meta != state.profile",
        # Precedence and parentheses.
        "true or false and false",
        "not false and true",
        "not state.count == 4",
        "not (false and true)",
        "(true or false) and (state.count > 1 or state.missing)",
        "not not true",
        "state.count >= 3 and state.flag == false and 'y' in state.tags",
        # Bare paths resolve against the state root; bare `state` is the whole state.
        "matter_id == 'M-1'",
        "matter_id == state.matter_id",
        "state",
        "profile.name == 'Ada'",
        # List indexes and numeric-string keys.
        "state.items.0.name == 'first'",
        "items.1.name == 'second'",
        "state.items.2.name == null",
        "state.numbered.0 == 'zero'",
        # Missing paths read as null.
        "state.missing == null",
        "state.profile.missing.deeper == null",
        "state.count.real == null",
        "state.tags.first == null",
        "state.text.0 == null",
        "not state.missing",
        # Truthiness of JSON values.
        "state.tags and state.meta and state.text and state.count and state.done",
        "not (state.no_tags or state.empty or state.zero or state.nothing or state.flag)",
        "not []",
        "'a'",
        # in / not in on lists, strings, dicts and non-containers.
        "'y' in state.tags",
        "'z' not in state.tags",
        "[1, 2] in [[1, 2], 3]",
        "'world' in state.text",
        "'World' not in state.text",
        "1 not in state.text",
        "'a' in state.meta",
        "'b' in state.meta",
        "'z' not in state.meta",
        "[1] not in state.meta",
        "'x' not in state.nothing",
        "'x' not in state.missing",
        "3 not in state.count",
    ],
)
def test_true_conditions(expression: str) -> None:
    assert check(expression) is True


@pytest.mark.parametrize(
    "expression",
    [
        "state.profile.intake_status == 'completed'",
        "state.matter_id == null",
        "state.count >= 3 and not (state.done == true)",
        "state.kind in ['a', \"b\", 'C']",
        # Comparisons with both operands literal.
        "1 == 2",
        "'a' != 'a'",
        "2 < 1",
        "2 <= 1",
        "1 > 2",
        "1 >= 2",
        "'b' < 'a'",
        "[1, 2] == [2, 1]",
        "[1] == [1, 1]",
        # Booleans never equal numbers.
        "true == 1",
        "false == 0",
        "state.done == 1",
        "[true] == [1]",
        "true in [1, 2]",
        "0 in [false]",
        "state.zero in [false]",
        # Ordering across types is simply false, never an error.
        "state.count < 'a'",
        "state.count >= 'a'",
        "'a' > 1",
        "state.nothing < 1",
        "state.nothing >= 0",
        "state.missing <= 0",
        "true < 2",
        "state.done > false",
        "state.tags > [1]",
        "state.meta >= state.meta",
        # Precedence and parentheses.
        "(true or false) and false",
        "not (false or true)",
        "not true == true",
        "false and state.missing.x == null",
        # Missing paths and falsy values.
        "state.missing",
        "state.items.5",
        "state.no_tags or state.empty or state.zero or state.nothing",
        "[]",
        "null",
        # in / not in on lists, strings, dicts and non-containers.
        "'z' in state.tags",
        "'hello' not in state.text",
        "1 in state.text",
        "'z' in state.meta",
        "[1] in state.meta",
        "'x' in state.nothing",
        "'x' in state.missing",
        "3 in state.count",
    ],
)
def test_false_conditions(expression: str) -> None:
    assert check(expression) is False


def test_or_and_and_short_circuit() -> None:
    state = {"a": True, "b": False}
    assert check("a or b.c.d", state) is True
    assert check("b and a", state) is False


def test_bare_state_is_the_whole_state() -> None:
    assert check("state", {}) is False
    assert check("state.state == 1", {"state": 1}) is True


@pytest.mark.parametrize(
    "state",
    [{}, {"count": None}, {"count": "3"}, {"tags": None, "items": "abc"}, {"meta": [1, {}]}],
)
def test_evaluation_never_raises_for_odd_state(state: dict[str, Any]) -> None:
    for expression in (
        "state.count > 1",
        "'x' in state.tags and state.items.0.name == 'a'",
        "state.meta.a not in state.meta",
        "state.meta < state.count",
    ):
        assert isinstance(check(expression, state), bool)


def test_paths_in_order_without_state_prefix_and_deduplicated() -> None:
    condition = parse_condition(
        "state.a.b == x and (state.items.0.name in ['q'] or not a.b) and state"
    )
    assert condition.paths() == (("a", "b"), ("x",), ("items", 0, "name"), ())
    assert parse_condition("1 < 2").paths() == ()


def test_condition_is_frozen_and_compares_by_source() -> None:
    first, second = parse_condition("state.a == 1"), parse_condition("state.a == 1")
    assert isinstance(first, Condition)
    assert first == second and hash(first) == hash(second)
    assert first != parse_condition("state.a == 2")
    assert first.source == "state.a == 1"
    assert repr(first) == "Condition(source='state.a == 1')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.source = "x"  # type: ignore[misc]


def test_maximum_length_is_accepted() -> None:
    assert check("a" * 1000, {"a" * 1000: 1}) is True


@pytest.mark.parametrize(
    ("expression", "position", "message"),
    [
        ("", 0, "empty expression"),
        ("  \n ", 0, "empty expression"),
        ("x" * 1001, 1000, "longer than 1000 characters"),
        ("__import__('os')", 0, "dunder name '__import__'"),
        ("state.__class__", 6, "dunder name '__class__'"),
        ("().__class__", 3, "dunder name"),
        ("state.a.__dict__ == 1", 8, "dunder name"),
        ("len(state.x)", 3, "function calls are not allowed"),
        ("state.items.count(1) > 0", 17, "function calls are not allowed"),
        ("(state.a)(1)", 9, "function calls are not allowed"),
        ("true()", 4, "function calls are not allowed"),
        ("'abc'.upper", 5, "attribute access on literals"),
        ("1.real", 1, "attribute access on literals"),
        ("null.x == 1", 4, "attribute access on literals"),
        ("[1].x", 3, "attribute access on literals"),
        ("(state.a).b", 9, "attribute access on parenthesised expressions"),
        ("state.x & 1", 8, "unexpected character '&'"),
        ("state.x = 1", 8, "use '=='"),
        ("state.x ! 1", 8, "unexpected character '!'"),
        ("- 1 < 0", 0, "unexpected character '-'"),
        ("state.x == 'abc", 11, "unterminated string"),
        ('"abc', 0, "unterminated string"),
        ("'abc\\", 0, "unterminated string"),
        (r"'a\q'", 2, "invalid escape sequence"),
        ("state.a state.b", 8, "unexpected trailing name 'state'"),
        ("state.a )", 8, "unexpected trailing ')'"),
        ("a < b < c", 6, "cannot be chained"),
        ("a == b != c", 7, "cannot be chained"),
        ("a in b not in c", 7, "cannot be chained"),
        ("state.and == 1", 6, "reserved word 'and' cannot be a path segment"),
        ("state.null.x", 6, "reserved word 'null'"),
        ("a.True", 2, "reserved word 'True'"),
        ("state.", 6, "expected a name or list index, got end of expression"),
        ("state.-1", 6, "expected a name or list index"),
        ("state.items[0]", 11, "subscripts are not allowed"),
        ("not", 3, "expected an expression, got end of expression"),
        ("state.a ==", 10, "expected an expression"),
        ("state.a == not b", 11, "expected an expression, got 'not'"),
        ("and", 0, "expected an expression, got 'and'"),
        ("()", 1, "expected an expression, got ')'"),
        ("(state.a", 8, "expected ')'"),
        ("[state.a]", 1, "expected a literal list element, got name 'state'"),
        ("[1,", 3, "expected a literal list element"),
        ("[,]", 1, "expected a literal list element"),
        ("[1 2]", 3, "expected ']'"),
        ("(" * 60 + "1" + ")" * 60, 50, "nested more than 50 levels"),
        ("not " * 60 + "x", 200, "nested more than 50 levels"),
    ],
)
def test_rejected_expressions(expression: str, position: int, message: str) -> None:
    with pytest.raises(ConditionError) as caught:
        parse_condition(expression)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.expression == expression
    assert error.position == position
    assert message in error.reason
    assert str(error) == f"{error.reason} at column {position + 1} in {expression!r}"
    assert "\n" not in str(error)


def test_condition_error_pickles() -> None:
    error = pickle.loads(pickle.dumps(ConditionError("a b", 2, "unexpected trailing name 'b'")))
    assert (error.expression, error.position, error.reason) == ("a b", 2, error.reason)
    assert str(error) == "unexpected trailing name 'b' at column 3 in 'a b'"


def test_module_uses_no_dynamic_evaluation() -> None:
    source = Path(conditions.__file__).read_text("utf-8")
    assert not re.search(r"\b(eval|exec|compile|literal_eval)\s*\(", source)
    assert conditions.__all__ == ["Condition", "ConditionError", "parse_condition"]
