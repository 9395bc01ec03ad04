"""The problems of skill bundles, collected rather than raised one at a time, in words a skill
author reads without knowing JSON Schema's vocabulary.

The loader checks a bundle completely and reports every problem at once (``skilldeck check``
prints them); a bundle with an error never loads, a warning never stops it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jsonschema import ValidationError

from skilldeck.errors import BundleError
from skilldeck.skills.contract import json_path
from skilldeck.types import Problem

__all__ = ["Problems", "describe"]

_TYPES = {
    "array": "a list",
    "object": "an object",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


class Problems:
    """The problems found so far, in the order found."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def error(self, file: str | Path, path: str, message: str) -> None:
        self._add(Problem(str(file), path, message))

    def warn(self, file: str | Path, path: str, message: str, rule: str | None = None) -> None:
        self._add(Problem(str(file), path, message, "warning", rule))

    def _add(self, problem: Problem) -> None:
        if problem not in self.items:
            self.items.append(problem)

    def extend(self, problems: Iterable[Problem]) -> None:
        for problem in problems:
            self._add(problem)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.items if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.items if p.severity == "warning"]

    def raise_errors(self) -> None:
        """Raise :class:`BundleError` with every error, if there is one."""
        if self.errors:
            raise BundleError.of(self.errors)

    def schema_errors(self, file: str | Path, errors: Iterable[ValidationError]) -> None:
        """Add JSON Schema validation errors, described for people, in document order."""
        for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
            self.error(file, json_path(error.absolute_path), describe(error))


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    for name, python in (
        ("a list", list),
        ("an object", dict),
        ("a string", str),
        ("a number", int | float),
    ):
        if isinstance(value, python):
            return name
    return "null"


def describe(error: ValidationError) -> str:
    """One JSON Schema validation error in words (``describe`` never says "regexes")."""
    kind: Any = error.validator
    expected: Any = error.validator_value
    instance: Any = error.instance
    schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
    if kind == "required":
        missing = [p for p in expected if isinstance(instance, Mapping) and p not in instance]
        return "missing required key " + ", ".join(repr(p) for p in missing)
    if kind == "additionalProperties" and isinstance(instance, Mapping):
        return _unknown_keys(instance, schema)
    if kind == "type":
        wanted = [expected] if isinstance(expected, str) else list(expected)
        names = " or ".join(_TYPES.get(t, t) for t in wanted)
        return f"must be {names}, not {_kind(instance)} ({_shown(instance)})"
    if kind == "enum":
        return f"must be one of {', '.join(map(_shown, expected))}, not {_shown(instance)}"
    if kind == "const":
        return f"must be {_shown(expected)}, not {_shown(instance)}"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "more than",
            "exclusiveMaximum": "less than",
        }[kind]
        return f"must be {bound} {expected}, not {_shown(instance)}"
    if kind == "minLength":
        return "must not be empty" if expected == 1 else f"must have at least {expected} characters"
    if kind == "maxLength":
        return f"must have at most {expected} characters (it has {len(instance)})"
    if kind == "minItems":
        return "must not be empty" if expected == 1 else f"must have at least {expected} items"
    if kind == "uniqueItems" and isinstance(instance, list):
        repeated = next(v for i, v in enumerate(instance) if v in instance[:i])
        return f"lists {_shown(repeated)} more than once"
    if kind == "pattern":
        hint = schema.get("x-hint")
        return (
            f"{_shown(instance)}: {hint}" if hint else f"{_shown(instance)} must match {expected}"
        )
    if kind in ("anyOf", "oneOf") and error.absolute_path and error.absolute_path[-1] == "type":
        return f"{_shown(instance)} is not a JSON Schema type ({', '.join(_TYPES)})"
    return str(error.message)


def _unknown_keys(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> str:
    allowed = list(schema.get("properties") or {})
    patterns = list(schema.get("patternProperties") or {})
    unknown = [
        k for k in instance if k not in allowed and not any(re.search(p, k) for p in patterns)
    ]
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, allowed, n=1)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    own = "; keys of your own must start with 'x-'" if "^x-" in patterns else ""
    return (
        f"unknown key{'s' * (len(unknown) > 1)} {', '.join(parts)}; the keys are: "
        f"{', '.join(allowed)}{own}"
    )
