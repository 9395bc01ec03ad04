"""Safe condition expressions for skill metadata.

Conditions such as ``state.count >= 3 and not state.done`` appear in
``triggers.state_conditions`` and ``requires.all``/``requires.any``. They are parsed once at
load time into a tiny AST and evaluated many times against a JSON-native state dict. The
grammar can only read state paths and compare JSON values, so there is nothing to sandbox.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = ["Condition", "ConditionError", "parse_condition"]

_MAX_LENGTH = 1000
# Bounds parser and evaluator recursion well below Python's recursion limit.
_MAX_DEPTH = 50
_KEYWORDS = frozenset({"and", "or", "not", "in", "null", "None", "true", "True", "false", "False"})
_LITERAL_WORDS: dict[str, Any] = {
    "null": None,
    "None": None,
    "true": True,
    "True": True,
    "false": False,
    "False": False,
}
# Plain pattern strings matched against slices: `re` caches them and input is capped at 1000.
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
# After a '.', digits are a list index: "items.0.1" must not lex "0.1" as a float.
_INDEX = r"[0-9]+"
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}
# Two-character operators first so "<=" is not read as "<" followed by "=".
_SYMBOLS = ("==", "!=", "<=", ">=", "<", ">", "(", ")", "[", "]", ",", ".")
_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">=", "in"})
_ORDERING: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class ConditionError(ValueError):
    """Raised for an expression that cannot be parsed.

    Attributes:
        expression: The full expression text.
        position: 0-based character offset of the problem.
        reason: What is wrong, without location details.
    """

    def __init__(self, expression: str, position: int, reason: str) -> None:
        self.expression = expression
        self.position = position
        self.reason = reason
        super().__init__(f"{reason} at column {position + 1} in {expression!r}")

    def __reduce__(self) -> tuple[type[ConditionError], tuple[str, int, str]]:
        # The default reduce would call __init__ with the formatted message only.
        return type(self), (self.expression, self.position, self.reason)


@dataclass(frozen=True, slots=True)
class _Literal:
    value: Any  # None, bool, int, float, str, or a tuple of literal values


@dataclass(frozen=True, slots=True)
class _Path:
    segments: tuple[str | int, ...]  # relative to the state root


@dataclass(frozen=True, slots=True)
class _Not:
    operand: _Node


@dataclass(frozen=True, slots=True)
class _Logic:
    op: str  # "and" or "or"
    left: _Node
    right: _Node


@dataclass(frozen=True, slots=True)
class _Compare:
    op: str  # one of _COMPARISONS or "not in"
    left: _Node
    right: _Node


_Node: TypeAlias = _Literal | _Path | _Not | _Logic | _Compare


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "name", "keyword", "number", "string", "symbol" or "end"
    value: Any
    pos: int
    text: str  # source text; unambiguous for symbols and keywords since strings keep quotes


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace():
            pos += 1
            continue
        rest = text[pos:]
        after_dot = bool(tokens) and tokens[-1].text == "."
        number = re.match(_INDEX, rest) if after_dot else None
        number = number or re.match(_NUMBER, rest)
        if char in "'\"":
            string, end = _read_string(text, pos)
            tokens.append(_Token("string", string, pos, text[pos:end]))
        elif number:
            end, digits = pos + number.end(), number.group()
            value = int(digits) if digits.lstrip("-").isdigit() else float(digits)
            tokens.append(_Token("number", value, pos, digits))
        elif name := re.match(_NAME, rest):
            end, word = pos + name.end(), name.group()
            if word.startswith("__"):
                raise ConditionError(text, pos, f"dunder name {word!r} is not allowed")
            kind = "keyword" if word in _KEYWORDS else "name"
            tokens.append(_Token(kind, word, pos, word))
        elif symbol := next((s for s in _SYMBOLS if text.startswith(s, pos)), None):
            end = pos + len(symbol)
            tokens.append(_Token("symbol", symbol, pos, symbol))
        else:
            hint = "; use '==' for equality" if char == "=" else ""
            raise ConditionError(text, pos, f"unexpected character {char!r}{hint}")
        pos = end
    tokens.append(_Token("end", None, len(text), ""))
    return tokens


def _read_string(text: str, start: int) -> tuple[str, int]:
    """Reads the string literal opening at ``start``; returns its value and end offset."""
    quote, chars, pos = text[start], [], start + 1
    while pos < len(text) and text[pos] != quote:
        # A backslash ending the text falls through and is reported as unterminated.
        if text[pos] == "\\" and pos + 1 < len(text):
            sequence = text[pos : pos + 2]
            if sequence[1] not in _ESCAPES:
                raise ConditionError(text, pos, f"invalid escape sequence {sequence!r}")
            chars.append(_ESCAPES[sequence[1]])
            pos += 2
        else:
            chars.append(text[pos])
            pos += 1
    if pos >= len(text):
        raise ConditionError(text, start, "unterminated string")
    return "".join(chars), pos + 1


def _describe(token: _Token) -> str:
    if token.kind == "end":
        return "end of expression"
    return f"{'name ' if token.kind == 'name' else ''}{token.text!r}"


class _Parser:
    """Recursive-descent parser: or < and < not < comparison < primary."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _tokenize(text)
        self._index = 0
        self._depth = 0

    def parse(self) -> _Node:
        node = self._or()
        if (token := self._peek()).kind != "end":
            raise self._error(f"unexpected trailing {_describe(token)}", token)
        return node

    def _peek(self, offset: int = 0) -> _Token:
        return self._tokens[min(self._index + offset, len(self._tokens) - 1)]

    def _next(self) -> _Token:
        token = self._peek()
        self._index += 1
        return token

    def _error(self, reason: str, token: _Token) -> ConditionError:
        return ConditionError(self._text, token.pos, reason)

    def _enter(self, token: _Token) -> None:
        self._depth += 1
        if self._depth > _MAX_DEPTH:
            raise self._error(f"expression is nested more than {_MAX_DEPTH} levels deep", token)

    def _or(self) -> _Node:
        node = self._and()
        while self._peek().text == "or":
            self._next()
            node = _Logic("or", node, self._and())
        return node

    def _and(self) -> _Node:
        node = self._not()
        while self._peek().text == "and":
            self._next()
            node = _Logic("and", node, self._not())
        return node

    def _not(self) -> _Node:
        if self._peek().text != "not":
            return self._comparison()
        self._enter(self._next())
        node = _Not(self._not())
        self._depth -= 1
        return node

    def _comparison(self) -> _Node:
        left = self._primary()
        op = self._comparison_op()
        if op is None:
            return left
        node = _Compare(op, left, self._primary())
        if self._comparison_op(consume=False):
            raise self._error("comparison operators cannot be chained; use 'and'", self._peek())
        return node

    def _comparison_op(self, consume: bool = True) -> str | None:
        first, second = self._peek(), self._peek(1)
        if first.text in _COMPARISONS:
            op, width = first.text, 1
        elif first.text == "not" and second.text == "in":
            op, width = "not in", 2
        else:
            return None
        if consume:
            self._index += width
        return op

    def _primary(self) -> _Node:
        token = self._next()
        node: _Node
        if token.kind == "name":
            node, noun = self._path(token), "paths"
        elif token.text == "(":
            self._enter(token)
            node, noun = self._or(), "parenthesised expressions"
            self._expect(")")
            self._depth -= 1
        else:
            node, noun = _Literal(self._literal(token, "an expression")), "literals"
        following = self._peek()
        if following.text == "(":
            raise self._error("function calls are not allowed", following)
        if following.text == "[":
            raise self._error("subscripts are not allowed; index lists as items.0", following)
        if following.text == ".":
            raise self._error(f"attribute access on {noun} is not allowed", following)
        return node

    def _path(self, first: _Token) -> _Path:
        segments: list[str | int] = [first.value]
        while self._peek().text == ".":
            self._next()
            token = self._next()
            if token.kind == "name" or (token.kind == "number" and token.text.isdigit()):
                segments.append(token.value)
            elif token.kind == "keyword":
                raise self._error(f"reserved word {token.text!r} cannot be a path segment", token)
            else:
                raise self._error(f"expected a name or list index, got {_describe(token)}", token)
        # A leading "state" names the root, so "state.x" and "x" read the same value.
        return _Path(tuple(segments[1:] if segments[0] == "state" else segments))

    def _literal(self, token: _Token, expected: str) -> Any:
        if token.kind in ("number", "string"):
            return token.value
        if token.kind == "keyword" and token.text in _LITERAL_WORDS:
            return _LITERAL_WORDS[token.text]
        if token.text == "[":
            self._enter(token)
            items = []
            while self._peek().text != "]":
                items.append(self._literal(self._next(), "a literal list element"))
                if self._peek().text != ",":
                    break
                self._next()
            self._expect("]")
            self._depth -= 1
            return tuple(items)
        raise self._error(f"expected {expected}, got {_describe(token)}", token)

    def _expect(self, text: str) -> None:
        if (token := self._next()).text != text:
            raise self._error(f"expected {text!r}, got {_describe(token)}", token)


def _resolve(state: Any, segments: tuple[str | int, ...]) -> Any:
    value = state
    for segment in segments:
        if isinstance(value, Mapping):
            value = value.get(str(segment))
        elif isinstance(value, list | tuple) and isinstance(segment, int) and segment < len(value):
            value = value[segment]
        else:
            return None
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(left: Any, right: Any) -> bool:
    # Python treats True == 1; JSON conditions must not.
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(_equal, left, right))
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(_equal(v, right[k]) for k, v in left.items())
    return bool(left == right)


def _contains(container: Any, item: Any) -> bool:
    if isinstance(container, list | tuple):
        return any(_equal(item, element) for element in container)
    if isinstance(container, str):
        return isinstance(item, str) and item in container
    if isinstance(container, Mapping):
        # Scanning keys with _equal never raises on unhashable items, unlike `in`.
        return any(_equal(item, key) for key in container)
    return False


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "==":
        return _equal(left, right)
    if op == "!=":
        return not _equal(left, right)
    if op == "in":
        return _contains(right, left)
    if op == "not in":
        return not _contains(right, left)
    both_numbers = _is_number(left) and _is_number(right)
    if both_numbers or (isinstance(left, str) and isinstance(right, str)):
        return bool(_ORDERING[op](left, right))
    return False


def _compile(node: _Node) -> Callable[[Any], Any]:
    """The function that evaluates ``node`` on a state: the tree is walked once, when the
    condition is parsed, not at each evaluation (the router evaluates every skill's conditions
    at every step)."""
    if isinstance(node, _Literal):
        value = node.value
        return lambda state: value
    if isinstance(node, _Path):
        segments = node.segments
        if len(segments) == 1 and isinstance(segments[0], str):  # ``state.key``: most of them
            key = segments[0]
            return lambda state: state.get(key) if isinstance(state, Mapping) else None
        return lambda state: _resolve(state, segments)
    if isinstance(node, _Not):
        operand = _compile(node.operand)
        # JSON truthiness (null, false, 0, "", [], {} are falsy) matches Python's.
        return lambda state: not operand(state)
    left, right = _compile(node.left), _compile(node.right)
    if isinstance(node, _Logic):
        if node.op == "and":
            return lambda state: bool(left(state)) and bool(right(state))
        return lambda state: bool(left(state)) or bool(right(state))
    op = node.op
    return lambda state: _compare(op, left(state), right(state))


def _paths(node: _Node) -> Iterator[tuple[str | int, ...]]:
    if isinstance(node, _Path):
        yield node.segments
    elif isinstance(node, _Not):
        yield from _paths(node.operand)
    elif isinstance(node, _Logic | _Compare):
        yield from _paths(node.left)
        yield from _paths(node.right)


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed condition; create one with :func:`parse_condition`.

    Attributes:
        source: The expression text it was parsed from.
    """

    source: str
    _root: _Node = field(repr=False, compare=False)
    _run: Callable[[Any], Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_run", _compile(self._root))

    def __reduce__(self) -> tuple[Any, ...]:
        # The compiled function does not pickle; the text parses to the same condition.
        return (parse_condition, (self.source,))

    def evaluate(self, state: Mapping[str, Any]) -> bool:
        """Evaluates the condition against ``state``; never raises for JSON-native state."""
        return bool(self._run(state))

    def paths(self) -> tuple[tuple[str | int, ...], ...]:
        """Returns the distinct state paths read, in order of appearance, without 'state'."""
        return tuple(dict.fromkeys(_paths(self._root)))

    def values(self, state: Mapping[str, Any]) -> str:
        """The values the condition reads in ``state``, for people: ``state.a = 1, state.b =
        null`` (each cut to 60 characters)."""
        shown = []
        for segments in self.paths():
            path = "state" + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in segments)
            value = json.dumps(_resolve(state, segments), ensure_ascii=False, default=str)
            shown.append(f"{path} = {value if len(value) <= 60 else value[:59] + '…'}")
        return ", ".join(shown)


def parse_condition(text: str) -> Condition:
    """Parses a condition expression.

    Args:
        text: The expression, at most 1000 characters.

    Returns:
        The parsed condition.

    Raises:
        ConditionError: If the expression is empty, too long or not valid.
    """
    if len(text) > _MAX_LENGTH:
        reason = f"expression is longer than {_MAX_LENGTH} characters"
        raise ConditionError(text, _MAX_LENGTH, reason)
    if not text.strip():
        raise ConditionError(text, 0, "empty expression")
    return Condition(text, _Parser(text).parse())
