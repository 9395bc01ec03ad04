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
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jsonschema_rs

__all__ = [
    "ACTIONS",
    "CARD_SCHEMA",
    "CONTROL_SCHEMA",
    "INPUT_TYPES",
    "QUESTION_SCHEMA",
    "REVIEW_TYPES",
    "Validator",
    "build_output_schema",
    "check_field_keys",
    "compile_schema",
    "format_errors",
    "json_path",
]

#: A compiled Draft 2020-12 validator (see :func:`compile_schema`).
Validator = jsonschema_rs.Draft202012Validator

ACTIONS = ("continue", "retry", "ask_user", "finish")
REVIEW_TYPES = ("clarify", "select", "confirm", "phase_done")
INPUT_TYPES = ("text", "select", "multi_select", "boolean", "file_ids")
DOT_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"

QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["question", "field_key", "input_type", "required"],
    "additionalProperties": False,
    "properties": {
        "question": {"type": "string", "minLength": 1},
        "field_key": {"type": "string", "pattern": DOT_PATH},
        "input_type": {"enum": list(INPUT_TYPES)},
        "required": {"type": "boolean"},
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
    ``$defs`` it refers to) are used; ``profile`` is rebuilt from ``provides``. Data fields
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
                "response": {"type": "string"},
                "profile": _profile_schema(provides, props.get("profile") or {}),
                "data": data,
                "control": CONTROL_SCHEMA,
            },
        }
    )
    return schema, data


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """``schema`` compiled for validating instances; it never fetches a remote ``$ref``.

    Raises:
        ValueError: the schema cannot be compiled (a ``$ref`` that does not resolve, or a
            ``pattern`` the regex engine rejects); the message says which.
    """
    try:
        return Validator(dict(schema), offline=True)
    except jsonschema_rs.ValidationError as exc:
        raise ValueError(str(exc).split("\n", 1)[0]) from None


def json_path(parts: Iterable[str | int]) -> str:
    """``["a", 0, "b"]`` as ``$.a[0].b``."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def format_errors(validator: Validator, instance: Any) -> list[dict[str, str]]:
    """All schema errors as ``{"path": "$.a[0].b", "message": ...}``, in document order.

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
    return [{"path": json_path(e.instance_path), "message": e.message} for e in errors]


def check_field_keys(
    questions: Iterable[Mapping[str, Any]], provides: Sequence[str], data_keys: Iterable[str]
) -> list[dict[str, str]]:
    """A card may only ask for fields the skill may write: a provided profile path (or below
    one) or one of its data fields. Field keys must also be unique within a card."""
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
        elif re.match(DOT_PATH, key) and key.split(".")[0] not in data_keys:
            errors.append(
                {
                    "path": where,
                    "message": f"{key!r} is neither a provided profile field nor a data field",
                }
            )
    return errors
