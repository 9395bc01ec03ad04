"""The four-part output contract of seed 004: ``{response, profile, data, control}``.

A skill's full output schema is assembled at load time from its ``assets/output_schema.json``
(the single source of truth for ``data``) and its ``outputs.provides`` (the single source of truth
for ``profile``). Validation never repairs anything: it only reports.

Instances (model output, card answers) are validated by schemas compiled once with jsonschema-rs:
the output contract is checked on every skill step, where a compiled validator costs a tenth of
an interpreted one. Compiling resolves every ``$ref`` up front, so a schema that refers to
something missing fails when its bundle loads, not mid-run. The Python ``jsonschema`` package
checks schemas themselves at load time (``check_schema``), where its error paths are better.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema_rs

from skilldeck._internal.text import cut
from skilldeck.skills.grammar import for_grammar

__all__ = [
    "ACTIONS",
    "CARD_SCHEMA",
    "CONTROL_SCHEMA",
    "FIELD_KEY",
    "FIELD_KEY_MAX_DEPTH",
    "FIELD_KEY_MAX_LENGTH",
    "INPUT_TYPES",
    "NUMBER_INPUTS",
    "PATH_PART_CHARS",
    "QUESTION_SCHEMA",
    "REVIEW_TYPES",
    "Errors",
    "OutputContract",
    "OutputLimits",
    "Validator",
    "build_output_schema",
    "card_fields",
    "check_field_keys",
    "compile_schema",
    "control_actions",
    "explain_error",
    "field_schema",
    "format_errors",
    "input_fits",
    "json_path",
    "output_skeleton",
    "response_schema",
    "skeleton",
    "turn_schema",
]

#: A compiled Draft 2020-12 validator (see :func:`compile_schema`).
Validator = jsonschema_rs.Draft202012Validator
#: Contract errors: ``[{"path": JSON path, "message": reason}]``.
Errors = list[dict[str, str]]

ACTIONS = ("continue", "retry", "ask_user", "finish")
REVIEW_TYPES = ("clarify", "select", "confirm", "phase_done")
INPUT_TYPES = ("text", "select", "multi_select", "boolean", "file_ids", "number", "integer")
#: The input types whose answer is a number; only they take ``minimum`` and ``maximum``.
NUMBER_INPUTS = ("number", "integer")
#: The most dotted parts a card's ``field_key`` has (``profile.defendant.name`` has 3), and its
#: longest length: an answer is written at that path of the state, and a path past them is
#: model output gone wrong (a re-ask), not a field of any schema.
FIELD_KEY_MAX_DEPTH = 16
FIELD_KEY_MAX_LENGTH = 256
_PART = r"[A-Za-z_][A-Za-z0-9_]*"
#: A card's ``field_key``: a dotted path of at most :data:`FIELD_KEY_MAX_DEPTH` parts.
FIELD_KEY = rf"^{_PART}(\.{_PART}){{0,{FIELD_KEY_MAX_DEPTH - 1}}}$"

QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["question", "field_key", "input_type", "required"],
    "additionalProperties": False,
    "properties": {
        "question": {"type": "string", "minLength": 1},
        "field_key": {
            "type": "string",
            "maxLength": FIELD_KEY_MAX_LENGTH,
            "pattern": FIELD_KEY,
            "description": f"A dotted path of at most {FIELD_KEY_MAX_DEPTH} parts.",
        },
        "input_type": {"enum": list(INPUT_TYPES)},
        "required": {"type": "boolean"},
        "minimum": {"type": "number"},
        "maximum": {"type": "number"},
        "error_message": {"type": "string", "minLength": 1},
        "options": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["label", "value"],
                "additionalProperties": False,
                "properties": {
                    "label": {"type": "string", "minLength": 1},
                    "value": {"type": ["string", "number", "boolean"]},
                },
            },
        },
    },
    "allOf": [
        {
            "if": {"properties": {"input_type": {"enum": ["select", "multi_select"]}}},
            "then": {"required": ["options"]},
        }
    ],
}

CARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["review_type", "questions"],
    "properties": {
        "review_type": {"enum": list(REVIEW_TYPES)},
        "questions": {"type": "array", "minItems": 1, "items": QUESTION_SCHEMA},
    },
}

CONTROL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["action"],
    "additionalProperties": False,
    "properties": {
        "action": {"enum": list(ACTIONS)},
        "review_type": {"enum": list(REVIEW_TYPES)},
        "questions": {"type": "array", "items": QUESTION_SCHEMA},
        "retry_prompt": {"type": "string"},
    },
    "if": {"properties": {"action": {"const": "ask_user"}}},
    "then": {
        "required": ["review_type", "questions"],
        "properties": {"questions": {"minItems": 1}},
    },
}


def control_actions(source: Any) -> tuple[str, ...]:
    """The actions a bundle's ``properties.control`` allows: all of :data:`ACTIONS` when it
    says nothing, else its ``action`` enum. A skill narrows the control to what it may do next
    (a filing agent that only ever finishes), so a grammar-constrained reply cannot choose
    anything else; it cannot widen the control or add keys to it.

    Raises:
        ValueError: ``source`` says anything but ``{"properties": {"action": {"enum": [...]}}}``
            with known, distinct actions.
    """
    if source is None:
        return ACTIONS
    how = 'write {"properties": {"action": {"enum": ["finish", "ask_user"]}}} with its actions'
    props = source.get("properties") if isinstance(source, Mapping) else None
    action = props.get("action") if isinstance(props, Mapping) else None
    if (
        not isinstance(source, Mapping)
        or set(source) != {"properties"}
        or set(props or {}) != {"action"}
        or not isinstance(action, Mapping)
        or set(action) != {"enum"}
    ):
        raise ValueError(f"a skill may only narrow control.action: {how}")
    enum = action["enum"]
    unknown = [a for a in enum if a not in ACTIONS] if isinstance(enum, list) else [enum]
    if unknown or not enum or len(set(enum)) != len(enum):
        raise ValueError(
            f"control.action's enum must list distinct actions of {', '.join(ACTIONS)}; "
            f"got {enum!r}"
        )
    return tuple(a for a in ACTIONS if a in enum)


def response_schema(source: Any) -> dict[str, Any]:
    """The contract's ``response``: a string, which a skill may cap with ``maxLength`` ("one
    sentence"). A grammar holds the cap, so a small model that repeats itself has to end the
    reply instead of running into the output token limit.

    Raises:
        ValueError: ``source`` says anything but ``{"maxLength": N}``, N a positive integer.
    """
    if source is None:
        return {"type": "string"}
    only_cap = isinstance(source, Mapping) and set(source) == {"maxLength"}
    cap = source["maxLength"] if only_cap else None
    if not isinstance(cap, int) or cap < 1:
        raise ValueError('a skill may only cap response\'s length: write {"maxLength": 400}')
    return {"type": "string", "maxLength": cap}


def _control_schema(actions: Sequence[str]) -> dict[str, Any]:
    """:data:`CONTROL_SCHEMA` for a skill that may take only ``actions``. A skill that never
    asks has no card keys and one that never retries no ``retry_prompt``: a constrained reply
    cannot spend its tokens on them."""
    if tuple(actions) == ACTIONS:
        return CONTROL_SCHEMA
    schema = copy.deepcopy(CONTROL_SCHEMA)
    props = schema["properties"]
    props["action"] = {"enum": list(actions)}
    if "ask_user" not in actions:
        for key in ("review_type", "questions"):
            del props[key]
        for key in ("if", "then"):
            del schema[key]
    if "retry" not in actions:
        del props["retry_prompt"]
    return schema


def _profile_schema(provides: Sequence[str], hints: Mapping[str, Any]) -> dict[str, Any]:
    """Profile properties rewritten to exactly ``provides``; a provided field keeps the type the
    bundle's schema gave it, and nothing else is allowed."""
    root: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    for path in provides:
        parts = path.split(".")[1:]
        node, hint = root, hints
        for i, part in enumerate(parts):
            hint = (hint.get("properties") or {}).get(part, {}) if isinstance(hint, Mapping) else {}
            props = node.setdefault("properties", {})
            if i == len(parts) - 1:
                props[part] = copy.deepcopy(hint) if isinstance(hint, Mapping) else {}
            else:
                node = props.setdefault(
                    part, {"type": "object", "properties": {}, "additionalProperties": False}
                )
    return root


def build_output_schema(
    source: Mapping[str, Any], provides: Sequence[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Assemble the full output schema; returns ``(output_schema, data_schema)``.

    ``source`` is the bundle's ``output_schema.json``. Only its ``properties.data`` (and any
    ``$defs`` it refers to) and the actions its ``properties.control`` allows
    (:func:`control_actions`) are used; ``profile`` is rebuilt from ``provides``. Data fields
    become state keys, so ``data`` must declare them: unknown data fields are never allowed.
    """
    props = source.get("properties") or {}
    data = copy.deepcopy(props.get("data") or {"type": "object", "properties": {}})
    data.setdefault("type", "object")
    data.setdefault("properties", {})
    data.setdefault("additionalProperties", False)
    schema = {k: copy.deepcopy(v) for k, v in source.items() if k not in ("properties", "required")}
    schema.update(
        {
            "type": "object",
            "required": ["response", "profile", "data", "control"],
            "additionalProperties": False,
            "properties": {
                "response": response_schema(props.get("response")),
                "profile": _profile_schema(provides, props.get("profile") or {}),
                "data": data,
                "control": _control_schema(control_actions(props.get("control"))),
            },
        }
    )
    return schema, data


def _no_remote(uri: str) -> Any:
    raise ValueError(f"remote reference {uri!r} is not fetched: put the schema in the bundle")


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """``schema`` compiled for validating instances; it never fetches a remote ``$ref``.

    Raises:
        ValueError: the schema cannot be compiled (a ``$ref`` that does not resolve, or a
            ``pattern`` the regex engine rejects); the message says which.
    """
    try:
        return Validator(dict(schema), retriever=_no_remote)
    except jsonschema_rs.ValidationError as exc:
        raise ValueError(str(exc).split("\n", 1)[0]) from None


def json_path(parts: Iterable[str | int]) -> str:
    """``["a", 0, "b"]`` as ``$.a[0].b``."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def format_errors(
    validator: Validator, instance: Any, *, plain: bool = False
) -> list[dict[str, str]]:
    """All schema errors as ``{"path": "$.a[0].b", "message": ...}``, in document order;
    ``plain``: in words (:func:`explain_error`), not in the validator's (which quote schemas,
    for a model to correct itself).

    An instance that is not JSON data (a set, a date, a key that is not a string: what a
    ``validate.py`` may return) is one error at ``$``.
    """
    try:
        if validator.is_valid(instance):
            return []
        errors = sorted(
            validator.iter_errors(instance), key=lambda e: [str(p) for p in e.instance_path]
        )
    except ValueError as exc:  # jsonschema-rs reads JSON data only
        return [{"path": "$", "message": f"not JSON data: {exc}"}]
    return [
        {"path": json_path(e.instance_path), "message": explain_error(e) if plain else e.message}
        for e in errors
    ]


def explain_error(error: jsonschema_rs.ValidationError) -> str:
    """A schema error in words a person reads, built from its kind: every allowed value of an
    enum, the bounds of a range, and never a ``pattern``'s regex (the schema's author writes
    a question's own ``error_message`` where a format needs explaining). The error's place is
    not said: callers name the field or path."""
    return _explain(error.kind)


_Kind = jsonschema_rs.ValidationErrorKind


def _explain(kind: jsonschema_rs.ValidationErrorKind) -> str:
    match kind:
        case _Kind.Type(types=types):
            return "must be " + " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        case _Kind.Enum(options=options):
            return "must be one of " + _listing([_value(v) for v in options])
        case _Kind.Constant(expected_value=value):
            return f"must be {_value(value)}"
        case _Kind.Minimum(limit=limit):
            return f"must be at least {_value(limit)}"
        case _Kind.Maximum(limit=limit):
            return f"must be at most {_value(limit)}"
        case _Kind.ExclusiveMinimum(limit=limit):
            return f"must be more than {_value(limit)}"
        case _Kind.ExclusiveMaximum(limit=limit):
            return f"must be less than {_value(limit)}"
        case _Kind.MultipleOf(multiple_of=step):
            return f"must be a multiple of {_value(step)}"
        case _Kind.MinLength(limit=1):
            return "must not be empty"
        case _Kind.MinLength(limit=limit):
            return f"must be at least {limit} characters long"
        case _Kind.MaxLength(limit=limit):
            return f"must be at most {limit} characters long"
        case _Kind.MinItems(limit=1):
            return "must list at least one value"
        case _Kind.MinItems(limit=limit):
            return f"must list at least {limit} values"
        case _Kind.MaxItems(limit=limit):
            return f"must list at most {limit} values"
        case _Kind.UniqueItems():
            return "must not list a value twice"
        case _Kind.Pattern():
            return "is not in the expected format"
        case _Kind.Format(format=name):
            return f"must be {_FORMAT_WORDS.get(name, f'a valid {name}')}"
        case _Kind.Required(property=name):
            return f"needs {name!r}"
        case (
            _Kind.AdditionalProperties(unexpected=names)
            | _Kind.UnevaluatedProperties(unexpected=names)
        ):
            return f"may not have {_listing([repr(n) for n in names])}"
        case _Kind.MinProperties(limit=limit):
            return f"needs at least {limit} fields"
        case _Kind.MaxProperties(limit=limit):
            return f"may have at most {limit} fields"
        case _Kind.AnyOf(context=branches) | _Kind.OneOfNotValid(context=branches):
            said = [_explain(b[0].kind) for b in branches if b]
            return ", or ".join(dict.fromkeys(said)) or "is not valid here"
        case _:
            return "is not valid here"


_TYPE_WORDS = {
    "string": "text",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "empty (null)",
}
_FORMAT_WORDS = {
    "date": "a date like 2024-03-14",
    "date-time": "a date and time like 2024-03-14T09:30:00Z",
    "time": "a time like 09:30:00Z",
    "email": "an email address",
    "uri": "an absolute URL",
}


def _value(value: Any) -> str:
    """A value as JSON writes it (strings quoted), so ``"1"`` and ``1`` stay apart."""
    return json.dumps(value, ensure_ascii=False)


def _listing(items: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``: every item, however many."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def field_schema(output_schema: Mapping[str, Any], field_key: str) -> dict[str, Any] | str:
    """The schema of the value at ``field_key`` (``profile.a.b``, a data field, or a path
    inside one), with the output schema's ``$defs`` beside it; or why no value can be written
    there (a key inside a list, a field the schema closes)."""
    head, _, rest = field_key.partition(".")
    props = output_schema.get("properties") or {}
    if head == "profile":
        node: Any = props.get("profile") or {}
        parts = rest.split(".") if rest else []
    else:
        node, parts = props.get("data") or {}, field_key.split(".")
    prefix = [head] if head == "profile" else []
    for i, part in enumerate(parts):
        node = _deref(output_schema, node)
        types = _types(output_schema, node)
        if types is not None and "object" not in types:
            where = ".".join(prefix + parts[:i])
            return f"{where!r} holds {' or '.join(sorted(types))}, not an object with {part!r}"
        inner = (node.get("properties") or {}).get(part) if isinstance(node, Mapping) else None
        if inner is None:
            extra = node.get("additionalProperties", True) if isinstance(node, Mapping) else True
            if extra is False:
                return f"the schema has no field {part!r} there"
            inner = extra if isinstance(extra, Mapping) else {}
        node = inner
    schema = copy.deepcopy(dict(node)) if isinstance(node, Mapping) else {}
    if "$defs" in output_schema:
        schema["$defs"] = output_schema["$defs"]
    return schema


def input_fits(question: Mapping[str, Any], schema: Mapping[str, Any]) -> str | None:
    """Why an answer of the question's ``input_type`` can never be valid for ``schema``, or
    why its bounds make no sense (``None``: it can be, and they do)."""
    kind = question.get("input_type")
    bounds = [question[k] for k in ("minimum", "maximum") if k in question]
    if bounds and kind not in NUMBER_INPUTS:
        return f"minimum and maximum bound {' and '.join(NUMBER_INPUTS)} answers, not {kind}"
    if len(bounds) == 2 and bounds[0] > bounds[1]:
        return f"its minimum {bounds[0]} is above its maximum {bounds[1]}"
    values = [o.get("value") for o in question.get("options") or [] if isinstance(o, Mapping)]
    if kind in ("select", "multi_select") and values:
        validator = compile_schema(schema)
        samples = values if kind == "select" else [[v] for v in values]
        bad = [v for v, s in zip(values, samples, strict=True) if not validator.is_valid(s)]
        return f"option value(s) {bad} do not fit the field's schema" if bad else None
    wanted = _ANSWER_TYPES.get(str(kind))
    types = _types(schema, schema)
    if wanted is not None and types is not None and not wanted & types:
        return f"a {kind} answer cannot be {' or '.join(sorted(types))}"
    return None


#: The JSON types of each input type's answers (the kinds with options: their values').
_ANSWER_TYPES = {
    "text": {"string"},
    "boolean": {"boolean"},
    "file_ids": {"array"},
    "number": {"number", "integer"},
    "integer": {"integer", "number"},
}


def _deref(root: Mapping[str, Any], node: Any, hops: int = 0) -> Any:
    """``node`` with a local ``$ref`` (``#/$defs/x``) followed, a few hops at most."""
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and hops < 16:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            return {}
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        node, hops = target if isinstance(target, Mapping) else {}, hops + 1
    return node


_TYPE_OF = {bool: "boolean", str: "string", int: "integer", float: "number", list: "array"}


def _types(root: Mapping[str, Any], node: Any) -> set[str] | None:
    """The JSON types ``node`` allows; ``None`` when it does not say (anything)."""
    node = _deref(root, node)
    if not isinstance(node, Mapping):
        return None
    if "type" in node:
        given = node["type"]
        types = {given} if isinstance(given, str) else set(given)
        return types | {"number"} if "integer" in types else types
    if "enum" in node or "const" in node:
        values = node["enum"] if "enum" in node else [node["const"]]
        return {
            "object" if isinstance(v, Mapping) else "null" if v is None
            else _TYPE_OF.get(type(v), "number")
            for v in values
        }  # fmt: skip
    for key in ("anyOf", "oneOf"):
        if key in node:
            found = [_types(root, sub) for sub in node[key]]
            return None if any(t is None for t in found) else set().union(*found)  # type: ignore[arg-type]
    return None


@dataclass(frozen=True, slots=True)
class OutputLimits:
    """What the host accepts of model output before any schema sees it: its size in bytes,
    its nesting depth, and numbers a checkpoint can store (64-bit integers, finite floats).
    Output past them is a contract error like any other: re-asked, then the run fails."""

    max_bytes: int = 256_000
    max_depth: int = 32

    def problems(self, value: Any, where: str = "$") -> list[dict[str, str]]:
        """What in ``value`` (parsed JSON) is past the limits; empty when nothing is.

        The walk keeps a link to each node's parent, not its path: a path string per node
        would cost memory quadratic in the input (a long key over many children). Only the
        path of the problem reported is built, with each key cut to ``PATH_PART_CHARS``."""
        stack: list[tuple[Any, _Link | None, int]] = [(value, None, 0)]
        while stack:
            item, link, depth = stack.pop()
            message = self._problem(item, depth)
            if message is not None:
                return [{"path": _path(where, link), "message": message}]
            if isinstance(item, Mapping):
                stack += [(v, (link, k), depth + 1) for k, v in item.items()]
            elif isinstance(item, list | tuple):
                stack += [(v, (link, i), depth + 1) for i, v in enumerate(item)]
        return []

    def _problem(self, item: Any, depth: int) -> str | None:
        """What is wrong with ``item`` itself (not its children), if anything."""
        if depth > self.max_depth:
            return f"nested deeper than {self.max_depth} levels"
        if isinstance(item, str):
            return "text holds a lone UTF-16 surrogate" if _SURROGATE.search(item) else None
        if isinstance(item, bool) or item is None:
            return None
        if isinstance(item, int) and not _INT_MIN <= item <= _INT_MAX:
            return "integer out of the 64-bit range"
        if isinstance(item, float) and not math.isfinite(item):
            return f"{item} is not a JSON number"
        if isinstance(item, Mapping) and any(_SURROGATE.search(str(k)) for k in item):
            return "a key holds a lone UTF-16 surrogate"
        return None


#: A node's place in the walk of :meth:`OutputLimits.problems`: its parent's link and its key.
_Link = tuple[Any, str | int]
#: How much of one key a reported path shows (a key can be as long as the whole input).
PATH_PART_CHARS = 64


def _path(where: str, link: _Link | None) -> str:
    """The path of the node ``link`` points to, below ``where``, each key cut to
    ``PATH_PART_CHARS`` characters."""
    parts: list[str | int] = []
    while link is not None:
        link, key = link
        parts.append(key)
    return where + "".join(
        f"[{p}]" if isinstance(p, int) else f".{cut(str(p), PATH_PART_CHARS)}"
        for p in reversed(parts)
    )


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
# Not encodable as UTF-8: no database, log or client could store or show it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _defs(schema: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {f"{prefix}{k}": for_grammar(v, prefix) for k, v in (schema.get("$defs") or {}).items()}


def turn_schema(
    output_schema: Mapping[str, Any],
    tools: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    final: bool = True,
) -> dict[str, Any]:
    """The strict JSON Schema of one model reply in ``schema`` output mode: one call of one of
    ``tools`` (``{name: arguments schema}``), ``{"tool": NAME, "arguments": {...}}``, or the
    final output, ``{"final": {response, profile, data, control}}``. No ``tools``: the final
    output only; ``final=False``: the calls only. The one place this envelope is derived; what
    it cannot say (an ``if``/``then``, a card's field keys) is checked after the reply as
    before."""
    output = {
        "type": "object",
        "properties": {"final": for_grammar(output_schema, "out_")},
        "required": ["final"],
        "additionalProperties": False,
    }
    branches: list[dict[str, Any]] = []
    defs = _defs(output_schema, "out_")
    for i, (name, arguments) in enumerate((tools or {}).items()):
        prefix = f"t{i}_"
        defs.update(_defs(arguments, prefix))
        branches.append(
            {
                "type": "object",
                "properties": {
                    "tool": {"const": name},
                    "arguments": for_grammar(arguments, prefix),
                },
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            }
        )
    if not final and not branches:
        raise ValueError("a reply that may only call tools needs tools")
    chosen = [*branches, *([output] if final else [])]
    schema: dict[str, Any] = {"anyOf": chosen} if len(chosen) > 1 else chosen[0]
    if defs:
        schema["$defs"] = defs
    return schema


def skeleton(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """A minimal value valid for ``schema`` as far as its shape goes: required keys with
    placeholders by type (the re-ask shows it next to the errors: something to copy)."""
    root = root if root is not None else schema
    node = _deref(root, schema)
    if not isinstance(node, Mapping):
        return None
    if "const" in node:
        return node["const"]
    if node.get("enum"):
        return node["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if node.get(key):
            return skeleton(node[key][0], root)
    kind = node.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in node:
        props = node.get("properties") or {}
        return {k: skeleton(props.get(k) or {}, root) for k in node.get("required") or []}
    return {
        "array": [],
        "string": "...",
        "integer": 0,
        "number": 0,
        "boolean": False,
        "null": None,
    }.get(str(kind), "...")


def output_skeleton(output_schema: Mapping[str, Any]) -> Any:
    """The re-ask's example of a whole output: :func:`skeleton` with ``control.action``
    ``finish`` where the skill allows it, what most rejected outputs meant to do. (The enum's
    first value, ``continue``, would send a model that copies the example into another turn of
    the same skill.)"""
    example = skeleton(output_schema)
    if isinstance(example, dict) and "control" in example:
        allowed = output_schema["properties"]["control"]["properties"]["action"]["enum"]
        example["control"] = {"action": "finish" if "finish" in allowed else allowed[0]}
    return example


def card_fields(
    output_schema: Mapping[str, Any], questions: Sequence[Mapping[str, Any]], where: str
) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]]]:
    """The schema of each question's field (``{field_key: schema}``), and the questions whose
    ``input_type`` the field cannot hold (errors at ``where[i]``)."""
    fields: dict[str, dict[str, Any]] = {}
    errors = []
    for i, q in enumerate(questions):
        key = str(q.get("field_key", ""))
        schema = field_schema(output_schema, key)
        if isinstance(schema, str):
            errors.append({"path": f"{where}[{i}].field_key", "message": f"{key!r}: {schema}"})
            continue
        reason = input_fits(q, schema)
        if reason is not None:
            errors.append({"path": f"{where}[{i}].input_type", "message": f"{key!r}: {reason}"})
        fields[key] = schema
    return fields, errors


def check_field_keys(
    questions: Iterable[Mapping[str, Any]], provides: Sequence[str], data_keys: Iterable[str]
) -> list[dict[str, str]]:
    """A card may only ask for fields the skill may write: a provided profile path (or below
    one) or one of its data fields. Field keys must also be unique within a card (their shape
    and size, :data:`FIELD_KEY`, is the card schema's)."""
    data_keys = set(data_keys)
    errors, seen = [], set()
    for i, q in enumerate(questions):
        key = str(q.get("field_key", ""))
        where = f"$.control.questions[{i}].field_key"
        if key in seen:
            errors.append({"path": where, "message": f"duplicate field_key {key!r}"})
        seen.add(key)
        if key.startswith("profile."):
            if not any(key == p or key.startswith(p + ".") for p in provides):
                errors.append({"path": where, "message": f"{key!r} is not under outputs.provides"})
        elif re.match(FIELD_KEY, key) and key.split(".")[0] not in data_keys:
            errors.append(
                {
                    "path": where,
                    "message": f"{key!r} is neither a provided profile field nor a data field",
                }
            )
    return errors


@dataclass(frozen=True, slots=True)
class OutputContract:
    """Every rule a skill's final output is held to, in the order a run applies them.

    The run (``nodes/skill.py``), ``skilldeck check`` (a cassette's output turns) and the
    loader (worked examples' final outputs) all call :meth:`problems`, so nothing a run would
    refuse passes a check. Only the pins (``x-state``, ``x-calls``, ``x-result``) and
    ``scripts/validate.py`` are left to the run: they judge an output against the run's state
    and calls.
    """

    validator: Validator
    #: The full output schema (:func:`build_output_schema`) ``validator`` was compiled from.
    output_schema: Mapping[str, Any]
    provides: tuple[str, ...]

    @property
    def data_keys(self) -> tuple[str, ...]:
        """The skill's data fields (a card may ask for them)."""
        return tuple(self.output_schema["properties"]["data"]["properties"])

    def problems(
        self,
        output: Any,
        limits: OutputLimits | None,
        pinned: Callable[[], Errors] | None = None,
    ) -> tuple[dict[str, dict[str, Any]], Errors]:
        """The schema of each field a card asks for, and the errors of ``output``: past the
        host's ``limits`` (``None``: the caller checked them), against the four-part schema
        (the data schema, ``provides``, the control), then ``pinned()`` (the pins' errors, when
        the caller has a run), then a card's field keys and input types. Empty errors: the
        output is accepted."""
        errors = (limits.problems(output) if limits is not None else []) or format_errors(
            self.validator, output
        )
        if not errors and pinned is not None:
            errors = pinned()
        if errors:
            return {}, errors
        control = output["control"]
        if control["action"] != "ask_user":
            return {}, []
        return self.card(control["questions"], "$.control.questions")

    def card(
        self, questions: Sequence[Mapping[str, Any]], where: str
    ) -> tuple[dict[str, dict[str, Any]], Errors]:
        """A card's questions (already valid as questions): the fields they write must be the
        skill's (:func:`check_field_keys`), and their input types must fit those fields
        (:func:`card_fields`, errors at ``where``)."""
        errors = check_field_keys(questions, self.provides, self.data_keys)
        return ({}, errors) if errors else card_fields(self.output_schema, questions, where)
