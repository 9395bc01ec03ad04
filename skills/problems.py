"""The problems of skill bundles, collected rather than raised one at a time, in words a skill
author reads without knowing JSON Schema's vocabulary.

The loader checks a bundle completely and reports every problem at once (``skilldeck check``
prints them); a bundle with an error never loads, a warning never stops it. JSON Schema's
errors (a bundle's own schemas) and pydantic's (``skill.meta.json``, see
:mod:`skilldeck.skills.meta`) come out in the same words.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonschema import ValidationError

from skilldeck.errors import BundleError
from skilldeck.skills.contract import json_path
from skilldeck.types import Problem

if TYPE_CHECKING:
    import pydantic

__all__ = ["Problems", "describe", "schema_at", "shown"]

_TYPES = {
    "array": "a list",
    "object": "an object",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}
#: pydantic's type errors, by the JSON type they ask for.
_PYDANTIC_TYPES = {
    "string_type": "string",
    "int_type": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "bool_type": "boolean",
    "tuple_type": "array",
    "list_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
}
_BOUNDS = {"ge": "at least", "le": "at most", "gt": "more than", "lt": "less than"}


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

    def validation_errors(
        self, file: str | Path, error: pydantic.ValidationError, model: type[pydantic.BaseModel]
    ) -> None:
        """Add the errors of validating a document with ``model``, described for people: a
        missing or an unknown key is a problem of the object that has it (the unknown ones
        listed together, with the keys it takes)."""
        items, schema = error.errors(include_url=False), _model_schema(model)
        grouped: dict[tuple[str, tuple[Any, ...]], list[str]] = {}
        for item in items:
            if item["type"] in ("missing", "extra_forbidden"):
                key = (item["type"], tuple(item["loc"][:-1]))
                grouped.setdefault(key, []).append(str(item["loc"][-1]))
        for item in items:
            loc = tuple(item["loc"])
            if item["type"] not in ("missing", "extra_forbidden"):
                self.error(file, json_path(loc), _explain(item, schema_at(schema, loc)))
                continue
            keys = grouped.get((item["type"], loc[:-1]))
            if not keys or keys[0] != str(loc[-1]):
                continue  # said with the first key of its object
            if item["type"] == "missing":
                message = "missing required key " + ", ".join(repr(k) for k in keys)
            else:
                message = _unknown_keys(keys, schema_at(schema, loc[:-1]))
            self.error(file, json_path(loc[:-1]), message)


def shown(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters: how a message quotes what it found."""
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
        allowed, patterns = list(schema.get("properties") or {}), schema.get("patternProperties")
        unknown = [
            k
            for k in instance
            if k not in allowed and not any(re.search(p, k) for p in patterns or ())
        ]
        return _unknown_keys(unknown, schema)
    if kind == "type":
        wanted = [expected] if isinstance(expected, str) else list(expected)
        names = " or ".join(_TYPES.get(t, t) for t in wanted)
        return f"must be {names}, not {_kind(instance)} ({shown(instance)})"
    if kind == "enum":
        return f"must be one of {', '.join(map(shown, expected))}, not {shown(instance)}"
    if kind == "const":
        return f"must be {shown(expected)}, not {shown(instance)}"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "more than",
            "exclusiveMaximum": "less than",
        }[kind]
        return f"must be {bound} {expected}, not {shown(instance)}"
    if kind == "minLength":
        return "must not be empty" if expected == 1 else f"must have at least {expected} characters"
    if kind == "maxLength":
        return f"must have at most {expected} characters (it has {len(instance)})"
    if kind == "minItems":
        return "must not be empty" if expected == 1 else f"must have at least {expected} items"
    if kind == "uniqueItems" and isinstance(instance, list):
        repeated = next(v for i, v in enumerate(instance) if v in instance[:i])
        return f"lists {shown(repeated)} more than once"
    if kind == "pattern":
        return f"{shown(instance)} must match {expected}"
    if kind in ("anyOf", "oneOf") and error.absolute_path and error.absolute_path[-1] == "type":
        return f"{shown(instance)} is not a JSON Schema type ({', '.join(_TYPES)})"
    return str(error.message)


def _unknown_keys(unknown: Sequence[str], schema: Mapping[str, Any]) -> str:
    """``unknown`` keys of an object of ``schema``, with the keys it takes."""
    allowed = list(schema.get("properties") or {})
    patterns = list(schema.get("patternProperties") or {})
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, allowed, n=1)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    own = "; keys of your own must start with 'x-'" if "^x-" in patterns else ""
    return (
        f"unknown key{'s' * (len(unknown) > 1)} {', '.join(parts)}; the keys are: "
        f"{', '.join(allowed)}{own}"
    )


def _explain(error: Mapping[str, Any], schema: Mapping[str, Any]) -> str:
    """One pydantic error (not a missing or an unknown key) in words; ``schema``: the JSON
    Schema of the value it is about."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind in _PYDANTIC_TYPES:
        return f"must be {_TYPES[_PYDANTIC_TYPES[kind]]}, not {_kind(value)} ({shown(value)})"
    if kind == "literal_error" and "enum" in schema:
        return f"must be one of {', '.join(map(shown, schema['enum']))}, not {shown(value)}"
    bound = next((b for b in _BOUNDS if b in ctx), None)
    if kind.startswith(("greater_than", "less_than")) and bound:
        limit = ctx[bound]
        # A float field's bound is a float: 2.0 is written as the author wrote it, 2.
        limit = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
        return f"must be {_BOUNDS[bound]} {limit}, not {shown(value)}"
    if kind in ("string_too_short", "too_short"):
        least, unit = ctx.get("min_length"), "characters" if kind.startswith("string") else "items"
        return "must not be empty" if least == 1 else f"must have at least {least} {unit}"
    if kind in ("string_too_long", "too_long"):
        most, unit = ctx.get("max_length"), "characters" if kind.startswith("string") else "items"
        return f"must have at most {most} {unit}"
    return str(error["msg"])  # the model's own errors are written in words


@cache
def _model_schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def schema_at(root: Mapping[str, Any], loc: Sequence[Any]) -> Mapping[str, Any]:
    """The schema, in the JSON Schema ``root``, of the value at ``loc`` of a document (``$ref``
    into ``$defs`` followed; of a value that may be null, the schema of the value; ``{}``
    where the schema does not say)."""
    node = _resolved(root, root)
    for part in loc:
        if isinstance(part, int):
            node = node.get("items") or {}
        elif part in (node.get("properties") or {}):
            node = node["properties"][part]
        else:
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, Mapping) else {}
        node = _resolved(root, node)
    return node


def _resolved(root: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    options = [o for o in node.get("anyOf") or () if o.get("type") != "null"]
    if len(options) == 1:
        node = options[0]
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        node = root["$defs"][ref.removeprefix("#/$defs/")]
    return node
