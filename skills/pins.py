"""Output fields whose value the run already knows: ``"x-state": "input.fact_id"``.

A field of a skill's ``output_schema.json`` that must repeat a value of the run's state (the
record's ``fact_id``, unchanged) says so with ``x-state``, the dotted path of that value in the
state. After the reply the value is checked like the rest of the contract; in ``schema`` mode
the grammar holds it as a ``const``, so a model cannot write anything else. A path with no
value in the state (or one that is not a string, number or boolean) pins nothing.

Pins sit on properties only (``properties`` all the way from the root): a pin inside a list
or a branch would not say which item or branch it binds.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skilldeck._internal.paths import get_path

__all__ = ["KEYWORD", "Pin", "find_pins", "pin_errors", "pin_values", "pinned"]

KEYWORD = "x-state"


@dataclass(frozen=True, slots=True)
class Pin:
    """The output field at ``path`` (keys from the output's root) repeats state ``source``."""

    path: tuple[str, ...]
    source: str


def find_pins(schema: Mapping[str, Any]) -> tuple[Pin, ...]:
    """Every pin of an output schema.

    Raises:
        ValueError: a pin that is not a dotted path, or sits outside ``properties``.
    """
    pins: list[Pin] = []

    def walk(node: Any, path: tuple[str, ...] | None, where: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, None, f"{where}[{i}]")
            return
        if not isinstance(node, Mapping):
            return
        if KEYWORD in node:
            source = node[KEYWORD]
            if path is None:
                raise ValueError(
                    f"{where}: {KEYWORD} pins a property, and this is inside a list or a "
                    "branch: move it to a property reached through properties alone"
                )
            if not isinstance(source, str) or not all(source.split(".")):
                raise ValueError(
                    f"{where}.{KEYWORD}: {source!r} is not a dotted state path like 'input.fact_id'"
                )
            pins.append(Pin(path, source))
        for key, value in node.items():
            if key == "properties" and isinstance(value, Mapping):
                for name, inner in value.items():
                    inner_path = None if path is None else (*path, name)
                    walk(inner, inner_path, f"{where}.properties.{name}")
            elif key != KEYWORD:
                walk(value, None, f"{where}.{key}")

    walk(schema, (), "$")
    return tuple(pins)


def _value(pin: Pin, state: Mapping[str, Any]) -> Any:
    """The pin's value in ``state``, or ``None`` when it has no scalar there."""
    value = get_path(state, pin.source)
    return value if isinstance(value, str | int | float | bool) else None


def pin_values(pins: tuple[Pin, ...], state: Mapping[str, Any]) -> dict[tuple[str, ...], Any]:
    """The value each pin takes in ``state`` (pins with no scalar value there left out)."""
    return {p.path: v for p in pins if (v := _value(p, state)) is not None}


def pinned(schema: Mapping[str, Any], values: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """``schema`` with each pinned property a ``const`` of its value (for the grammar)."""
    out = copy.deepcopy(dict(schema))
    for path, value in values.items():
        node = out
        for name in path:
            node = node["properties"][name]
        node["const"] = value
    return out


def pin_errors(
    pins: tuple[Pin, ...], output: Mapping[str, Any], state: Mapping[str, Any]
) -> list[dict[str, str]]:
    """One error for each pinned field of ``output`` that differs from its state value."""
    errors = []
    for pin in pins:
        value = _value(pin, state)
        node: Any = output
        for name in pin.path:
            node = node.get(name, _MISSING) if isinstance(node, Mapping) else _MISSING
        if value is not None and node is not _MISSING and node != value:
            errors.append(
                {
                    "path": "$." + ".".join(pin.path),
                    "message": f"{node!r} must be {pin.source}, {value!r}, unchanged",
                }
            )
    return errors


_MISSING = object()
