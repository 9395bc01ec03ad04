"""Output fields whose value the run already knows.

Two keywords of a skill's ``output_schema.json`` bind a field to what the run holds, so a
model cannot report something else:

- ``"x-state": "input.fact_id"``: the field repeats a value of the run's state (the record's
  ``fact_id``, unchanged). A path with no value in the state (or one that is not a string,
  number or boolean) pins nothing.
- ``"x-calls": ["pkm__append.path", "pkm__create.path"]``: a list that reports what this
  attempt's calls did. Its items are values those tools' successful calls took for that
  argument, and it is empty exactly when no such call was made (a save names only files it
  wrote, and a skip wrote nothing).
- ``"x-result": "card__save.path"``: the field repeats a value a tool returned (the path the
  card was saved at, or a list or object such as the saved ``ui_config``): that field of the
  result of the attempt's last successful call of the tool, once there is one.

After the reply the values are checked like the rest of the contract. In ``schema`` mode the
grammar holds them: a ``const`` for a state or result pin; for a calls pin, an ``enum`` of the
values and at least one item, or no item before any such call (pkm-agent's grammar then has no
save to claim, and after a write no skip).

Pins sit on properties only (``properties`` all the way from the root): a pin inside a list
or a branch would not say which item or branch it binds.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from skilldeck._internal.paths import get_path

__all__ = [
    "CALLS_KEYWORD",
    "KEYWORD",
    "RESULT_KEYWORD",
    "AnyPin",
    "CallsPin",
    "MadeCall",
    "Pin",
    "ResultPin",
    "find_pins",
    "pin_errors",
    "pin_values",
    "pinned",
    "result_fields",
]

KEYWORD = "x-state"
CALLS_KEYWORD = "x-calls"
RESULT_KEYWORD = "x-result"
_KEYWORDS = (KEYWORD, CALLS_KEYWORD, RESULT_KEYWORD)


class MadeCall(Protocol):
    """A tool call that worked, as pins read it (the run's records are such calls)."""

    @property
    def name(self) -> str: ...

    @property
    def args(self) -> Mapping[str, Any]: ...

    @property
    def returned(self) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class Pin:
    """The output field at ``path`` (keys from the output's root) repeats state ``source``."""

    path: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True)
class CallsPin:
    """The list at ``path`` names the values this attempt's successful calls gave the
    ``(tool, argument)`` pairs of ``calls``."""

    path: tuple[str, ...]
    calls: tuple[tuple[str, str], ...]

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(tool for tool, _ in self.calls))

    def describe(self) -> str:
        """The calls in words: ``pkm__append.path or pkm__create.path``."""
        return " or ".join(f"{tool}.{arg}" for tool, arg in self.calls)


@dataclass(frozen=True, slots=True)
class ResultPin:
    """The output field at ``path`` repeats ``field`` of what this attempt's last successful
    ``tool`` call returned."""

    path: tuple[str, ...]
    tool: str
    field: str

    @property
    def tools(self) -> tuple[str, ...]:
        return (self.tool,)

    def describe(self) -> str:
        return f"the {self.field} that {self.tool} returned"


AnyPin = Pin | CallsPin | ResultPin


def result_fields(pins: Sequence[AnyPin]) -> dict[str, tuple[str, ...]]:
    """The result fields that result pins read, by tool: what a call's record keeps."""
    fields: dict[str, tuple[str, ...]] = {}
    for pin in pins:
        if isinstance(pin, ResultPin):
            fields[pin.tool] = tuple(dict.fromkeys((*fields.get(pin.tool, ()), pin.field)))
    return fields


def find_pins(schema: Mapping[str, Any]) -> tuple[AnyPin, ...]:
    """Every pin of an output schema.

    Raises:
        ValueError: a pin that is malformed, or sits outside ``properties``.
    """
    pins: list[AnyPin] = []

    def walk(node: Any, path: tuple[str, ...] | None, where: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, None, f"{where}[{i}]")
            return
        if not isinstance(node, Mapping):
            return
        for keyword in _KEYWORDS:
            if keyword not in node:
                continue
            if path is None:
                raise ValueError(
                    f"{where}: {keyword} pins a property, and this is inside a list or a "
                    "branch: move it to a property reached through properties alone"
                )
            pins.append(_pin(node, keyword, path, where))
        for key, value in node.items():
            if key == "properties" and isinstance(value, Mapping):
                for name, inner in value.items():
                    inner_path = None if path is None else (*path, name)
                    walk(inner, inner_path, f"{where}.properties.{name}")
            elif key not in _KEYWORDS:
                walk(value, None, f"{where}.{key}")

    walk(schema, (), "$")
    return tuple(pins)


def _pin(node: Mapping[str, Any], keyword: str, path: tuple[str, ...], where: str) -> AnyPin:
    source = node[keyword]
    if keyword == KEYWORD:
        if not isinstance(source, str) or not all(source.split(".")):
            raise ValueError(
                f"{where}.{keyword}: {source!r} is not a dotted state path like 'input.fact_id'"
            )
        return Pin(path, source)
    if keyword == RESULT_KEYWORD:
        parts = source.split(".") if isinstance(source, str) else []
        if len(parts) != 2 or not all(parts):
            raise ValueError(
                f"{where}.{keyword}: {source!r} is not a TOOL.FIELD name like 'card__save.path'"
            )
        return ResultPin(path, parts[0], parts[1])
    if node.get("type") != "array":
        raise ValueError(f'{where}: {keyword} reports calls in a list: give it "type": "array"')
    pairs = [s.split(".") for s in source] if isinstance(source, list) else []
    if not pairs or not all(len(p) == 2 and all(p) for p in pairs):
        raise ValueError(
            f"{where}.{keyword}: {source!r} is not a list of TOOL.ARGUMENT names like "
            "['pkm__append.path']"
        )
    return CallsPin(path, tuple((tool, arg) for tool, arg in pairs))


def _state_value(pin: Pin, state: Mapping[str, Any]) -> Any:
    """The pin's value in ``state``, or ``None`` when it has no scalar there."""
    value = get_path(state, pin.source)
    return value if isinstance(value, str | int | float | bool) else None


def _call_values(pin: CallsPin, calls: Sequence[MadeCall]) -> tuple[Any, ...]:
    """The values the successful ``calls`` gave the pin's arguments, first seen first."""
    found = (call.args.get(arg) for call in calls for tool, arg in pin.calls if call.name == tool)
    return tuple(dict.fromkeys(v for v in found if isinstance(v, str | int | float | bool)))


def _result_value(pin: ResultPin, calls: Sequence[MadeCall]) -> Any:
    """The field of what the last successful call of the pin's tool returned (any JSON value
    but null), or ``None`` before one."""
    for call in reversed(calls):
        if call.name == pin.tool and call.returned and pin.field in call.returned:
            return call.returned[pin.field]
    return None


def pin_values(
    pins: tuple[AnyPin, ...],
    state: Mapping[str, Any],
    calls: Sequence[MadeCall] = (),
) -> dict[tuple[str, ...], Any]:
    """What each pin holds: a state pin its scalar (left out when the state has none), a
    calls pin the tuple of values this attempt's successful ``calls`` gave, a result pin the
    value the last such call returned (left out before one)."""
    values: dict[tuple[str, ...], Any] = {}
    for pin in pins:
        if isinstance(pin, CallsPin):
            values[pin.path] = _call_values(pin, calls)
        elif isinstance(pin, ResultPin):
            if (returned := _result_value(pin, calls)) is not None:
                values[pin.path] = returned
        elif (value := _state_value(pin, state)) is not None:
            values[pin.path] = value
    return values


def pinned(schema: Mapping[str, Any], values: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """``schema`` with each pin's values held (for the grammar): a scalar as a ``const``, a
    calls pin's values as the list's only items (at least one), or no item when none."""
    out = copy.deepcopy(dict(schema))
    for path, value in values.items():
        node = out
        for name in path:
            node = node["properties"][name]
        if not isinstance(value, tuple):
            node["const"] = value
        elif value:
            node["items"] = {**(node.get("items") or {}), "enum": list(value)}
            node["minItems"] = max(int(node.get("minItems", 0)), 1)
        else:
            node["maxItems"] = 0
    return out


def pin_errors(
    pins: tuple[AnyPin, ...],
    output: Mapping[str, Any],
    state: Mapping[str, Any],
    calls: Sequence[MadeCall] = (),
) -> list[dict[str, str]]:
    """One error for each pinned field of ``output`` that differs from what the run holds."""
    errors = []
    for pin in pins:
        node: Any = output
        for name in pin.path:
            node = node.get(name, _MISSING) if isinstance(node, Mapping) else _MISSING
        where = "$." + ".".join(pin.path)
        if isinstance(pin, CallsPin):
            if isinstance(node, list):  # the schema reports anything else
                errors += _calls_errors(pin, node, _call_values(pin, calls), where)
            continue
        if isinstance(pin, ResultPin):
            value, source = _result_value(pin, calls), pin.describe()
        else:
            value, source = _state_value(pin, state), pin.source
        if value is not None and node is not _MISSING and node != value:
            errors.append(
                {"path": where, "message": f"{node!r} must be {source}, {value!r}, unchanged"}
            )
    return errors


def _calls_errors(
    pin: CallsPin, items: list[Any], made: tuple[Any, ...], where: str
) -> list[dict[str, str]]:
    errors = [
        {
            "path": f"{where}[{i}]",
            "message": f"{item!r} is not the {pin.describe()} of a successful call in this "
            "attempt: make that call first, or leave it out",
        }
        for i, item in enumerate(items)
        if item not in made
    ]
    if made and not items:
        errors.append(
            {
                "path": where,
                "message": f"this attempt's successful calls gave {pin.describe()} "
                f"{', '.join(map(repr, made))}: name them here",
            }
        )
    return errors


_MISSING = object()
