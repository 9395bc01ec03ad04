"""The planner contract of seed 001: what a plan ``{stop, tool, args}`` and the final
``memory_view`` must be. Each check returns every error (``{path, message}``), empty when valid."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from skilldeck.errors import ToolError
from skilldeck.tools.messages import parse_ts
from skilldeck.tools.registry import IDENTITY_KEYS

__all__ = [
    "PLANNER_TOOLS",
    "VIEW_KEYS",
    "Errors",
    "check_plan",
    "check_view",
    "error",
    "plan_schema",
    "view_schema",
]

PLANNER_TOOLS = ("messages_list", "lexical_search", "semantic_search", "neighbors")
VIEW_KEYS = ("preferences", "profile", "constraints")
_PLAN_KEYS = frozenset(("stop", "tool", "args"))

Errors = list[dict[str, str]]


def error(path: str, message: str) -> dict[str, str]:
    """One contract error, in the shape the skill contract's errors have."""
    return {"path": path, "message": message}


def _identity_paths(value: Any, path: str) -> list[str]:
    """Where identity keys hide in ``value``, at any depth."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}"
            if key in IDENTITY_KEYS:
                found.append(where)
            found += _identity_paths(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _identity_paths(item, f"{path}[{i}]")
    return found


def _check_filter(raw: Any, where: str, *, nested: bool) -> Errors:
    """Explicit role and time range, ISO 8601 times, since before until."""
    if not isinstance(raw, Mapping):
        return [error(where, "filter is required: {role, time_range: {since, until}}")]
    errors: Errors = []
    role = raw.get("role")
    if not isinstance(role, str) or not role:
        errors.append(error(f"{where}.role", "role is required (use 'any' for every role)"))
    times, at = (raw.get("time_range"), f"{where}.time_range") if nested else (raw, where)
    if not isinstance(times, Mapping):
        return [*errors, error(at, "time_range is required: {since, until}")]
    if times.get("since") is None and times.get("until") is None:
        errors.append(error(at, "since or until is required: the time range must be explicit"))
    moments: dict[str, datetime] = {}
    for key in ("since", "until"):
        value = times.get(key)
        if value is None:
            continue
        try:
            if not isinstance(value, str):
                raise ToolError("not a string")
            moments[key] = parse_ts(value)
        except ToolError:
            errors.append(
                error(f"{at}.{key}", f"{value!r} is not ISO 8601 (e.g. 2026-01-01T00:00:00Z)")
            )
    if len(moments) == 2 and moments["since"] >= moments["until"]:
        errors.append(error(at, "since must be before until"))
    return errors


def check_plan(plan: Any, allowed: Collection[str], *, may_stop: bool = True) -> Errors:
    """Every rule of seed 001's planner contract; ``allowed``: the tools the skill may call.
    ``may_stop``: whether a stop can be right now (see :func:`plan_schema`)."""
    if not isinstance(plan, Mapping):
        return [error("$", "a plan is one JSON object {stop, tool, args}")]
    errors = [
        error(f"$.{key}", "unknown key: a plan has exactly stop, tool and args")
        for key in sorted(set(plan) - _PLAN_KEYS)
    ]
    stop = plan.get("stop")
    if not isinstance(stop, bool):
        errors.append(error("$.stop", "stop is required: true or false"))
    elif stop and not may_stop:
        return [*errors, error("$.stop", _SEARCH_FIRST)]
    elif stop:
        return errors  # a stop is a stop: a tool that came with it is not run (and recorded)
    tool = plan.get("tool")
    if tool not in PLANNER_TOOLS:
        errors.append(error("$.tool", f"tool must be one of {', '.join(PLANNER_TOOLS)}"))
    elif tool not in allowed:
        errors.append(
            error("$.tool", f"{tool} is not among this skill's tools ({', '.join(allowed)})")
        )
    args = plan.get("args")
    if not isinstance(args, Mapping):
        return [*errors, error("$.args", "args must be an object")]
    errors += [
        error(path, "identity (user_id) is bound by the runtime: never pass it")
        for path in _identity_paths(args, "$.args")
    ]
    if tool == "messages_list":
        errors += _check_filter(args, "$.args", nested=False)
    elif tool in ("lexical_search", "semantic_search"):
        errors += _check_filter(args.get("filter"), "$.args.filter", nested=True)
    elif tool == "neighbors" and not (
        isinstance(args.get("message_id"), str) and args["message_id"]
    ):
        errors.append(error("$.args.message_id", "neighbors needs the anchor's message_id"))
    return errors


def check_view(view: Any, evidence: Sequence[str], retrieved: Collection[str]) -> Errors:
    """The synthesis contract: exactly ``{preferences, profile, constraints}``, every item
    ``{text, evidence}`` citing only retrieved messages among the selected evidence."""
    if not isinstance(view, Mapping):
        return [error("$", "memory_view is one JSON object {preferences, profile, constraints}")]
    errors = [error(f"$.{k}", "unknown key") for k in sorted(set(view) - set(VIEW_KEYS))]
    errors += [error(f"$.{k}", "required (an empty array)") for k in VIEW_KEYS if k not in view]
    for key in VIEW_KEYS:
        items = view.get(key, [])
        if not isinstance(items, list):
            errors.append(error(f"$.{key}", "must be an array"))
            continue
        for i, item in enumerate(items):
            at = f"$.{key}[{i}]"
            if not isinstance(item, Mapping) or set(item) != {"text", "evidence"}:
                errors.append(error(at, 'an item is exactly {"text", "evidence"}'))
                continue
            if not isinstance(item["text"], str) or not item["text"].strip():
                errors.append(error(f"{at}.text", "must be a non-empty string"))
            cited = item["evidence"]
            if not isinstance(cited, list) or not cited:
                errors.append(error(f"{at}.evidence", "an item without evidence is not allowed"))
                continue
            for j, message_id in enumerate(cited):
                where = f"{at}.evidence[{j}]"
                if not isinstance(message_id, str) or message_id not in retrieved:
                    errors.append(error(where, f"{message_id!r} was never retrieved"))
                elif message_id not in evidence:
                    errors.append(
                        error(
                            where,
                            f"{message_id!r} is not among the {len(evidence)} evidence messages",
                        )
                    )
    return errors


_FILTER = {
    "type": "object",
    "properties": {
        "role": {"type": "string"},
        "time_range": {
            "type": "object",
            "properties": {"since": {"type": "string"}, "until": {"type": "string"}},
        },
    },
    "required": ["role", "time_range"],
}
# Both searches take a query and an explicit filter.
_SEARCH = {
    "type": "object",
    "properties": {"query_text": {"type": "string"}, "filter": _FILTER},
    "required": ["query_text", "filter"],
}
_ARGS: dict[str, dict[str, Any]] = {
    "messages_list": {
        "type": "object",
        "properties": {
            "role": {"type": "string"},
            "since": {"type": "string"},
            "until": {"type": "string"},
            "page_size": {"type": "integer"},
        },
        "required": ["role"],
    },
    "lexical_search": _SEARCH,
    "semantic_search": _SEARCH,
    "neighbors": {
        "type": "object",
        "properties": {
            "message_id": {"type": "string"},
            "before": {"type": "integer"},
            "after": {"type": "integer"},
        },
        "required": ["message_id"],
    },
}


# Seed 001 stops "when the evidence is enough": before any search has run there is none, so
# a first plan that stops (a small model's favourite, with a user who has messages) is wrong.
_SEARCH_FIRST = "no search has run yet and the user has messages: plan a search before stopping"


def plan_schema(allowed: Sequence[str], *, may_stop: bool = True) -> dict[str, Any]:
    """The JSON Schema of one plan, for ``schema`` output mode: a stop (when ``may_stop``: a
    search has run, or the user has no messages), or a call of one of the ``allowed`` tools
    with its arguments' shape (the contract's rules, explicit filters and ISO times among
    them, are checked after, as in every mode)."""
    branches: list[dict[str, Any]] = []
    if may_stop:
        branches.append(
            {
                "type": "object",
                "properties": {"stop": {"const": True}},
                "required": ["stop"],
                "additionalProperties": False,
            }
        )
    for tool in allowed:
        branches.append(
            {
                "type": "object",
                "properties": {
                    "stop": {"const": False},
                    "tool": {"const": tool},
                    "args": _ARGS.get(tool, {"type": "object"}),
                },
                "required": ["stop", "tool", "args"],
                "additionalProperties": False,
            }
        )
    return {"anyOf": branches}


def view_schema(evidence: Sequence[str]) -> dict[str, Any]:
    """The JSON Schema of ``memory_view``: items cite only the ``evidence`` message ids."""
    cited: dict[str, Any] = {"type": "array", "items": {"enum": list(evidence)}, "minItems": 1}
    if not evidence:
        cited = {"type": "array", "maxItems": 0}
    item = {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 1}, "evidence": cited},
        "required": ["text", "evidence"],
        "additionalProperties": False,
    }
    items = {"type": "array", "items": item} if evidence else {"type": "array", "maxItems": 0}
    return {
        "type": "object",
        "properties": dict.fromkeys(VIEW_KEYS, items),
        "required": list(VIEW_KEYS),
        "additionalProperties": False,
    }
