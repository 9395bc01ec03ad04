"""A JSON Schema as a grammar-constrained endpoint can enforce it.

Servers that compile a ``response_format`` schema into a grammar (llama.cpp, vLLM, Ollama,
OpenAI's strict mode) skip what a grammar cannot hold as it stands: prose keywords, and
conditionals (``if``/``then``/``else``); and each reads its own subset of regular expressions,
so a ``pattern`` is left to the check after the reply. A conditional on one property's value,
the common case in output contracts ("a save names at least one file", "``ask_user`` needs
questions"), can be written as an ``anyOf`` of the object with that value and the object
without it, which every such server enforces. :func:`for_grammar` does that where the result
means exactly what the conditional meant, and leaves the rest to the validation after the
reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["for_grammar"]

# Keywords for people, not for a grammar: a constrained decoder needs none of them, and some
# (a default of null on a string) contradict the types. (A state pin, ``x-state``, reaches
# the grammar as the ``const`` it stands for, a calls pin as its values and a result pin as the
# value returned: see skills/pins.py.)
_PROSE = frozenset(
    (
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "x-state",
        "x-calls",
        "x-result",
    )
)
# Regular expressions each grammar converter reads its own subset of, and one it misreads can
# loosen the whole grammar without an error: llama.cpp let a model write anything at all under
# pkm-agent's file-path pattern (bench/RESULTS.md). A pattern is checked after the reply.
_UNRELIABLE = frozenset(("pattern",))
_CONDITIONAL = frozenset(("if", "then", "else"))
# Keywords whose values are JSON data, never schemas: nothing in them is a keyword.
_DATA = frozenset(("const", "enum"))
# Keywords where holding both of two values is the stricter one.
_AT_LEAST = frozenset(("minItems", "minLength", "minProperties", "minimum"))
_AT_MOST = frozenset(("maxItems", "maxLength", "maxProperties", "maximum"))
# Keywords a branch may narrow; any other in a ``then``/``else`` keeps the conditional as is.
_NARROWABLE = _AT_LEAST | _AT_MOST | {"type", "enum", "const", "required", "properties"}


def for_grammar(schema: Any, prefix: str) -> Any:
    """``schema`` without prose or patterns, its ``$defs`` references renamed under ``prefix``,
    and each conditional on one required property's value unfolded into an ``anyOf``."""
    if isinstance(schema, list):
        return [for_grammar(item, prefix) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _PROSE or key in _UNRELIABLE or key == "$defs":
            continue
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = f"#/$defs/{prefix}{value.removeprefix('#/$defs/')}"
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {k: for_grammar(v, prefix) for k, v in value.items()}  # names as they are
        elif key in _DATA:
            out[key] = value  # values, not schemas: a pinned card's "title" is the card's
        else:
            out[key] = for_grammar(value, prefix)
    return _unfolded(_lifted(_bounded(out)))


def _bounded(node: dict[str, Any]) -> dict[str, Any]:
    """A list of unique items drawn from N listed values holds at most N: a grammar cannot
    hold ``uniqueItems``, but it holds that ``maxItems`` (a list of the one written file can
    no longer name it twice)."""
    values = _values(node.get("items"))
    if node.get("uniqueItems") is not True or values is None:
        return node
    most = node.get("maxItems")
    bound = len(values) if not isinstance(most, int) else min(most, len(values))
    return {**node, "maxItems": bound}


def _lifted(node: dict[str, Any]) -> dict[str, Any]:
    """A node whose ``allOf`` holds one bare conditional, with that conditional on the node."""
    parts = node.get("allOf")
    if not isinstance(parts, list) or "if" in node:
        return node
    bare = [p for p in parts if isinstance(p, Mapping) and p and set(p) <= _CONDITIONAL]
    if len(bare) != 1:
        return node
    rest = [p for p in parts if p is not bare[0]]
    lifted = {k: v for k, v in node.items() if k != "allOf"}
    if rest:
        lifted["allOf"] = rest
    return {**lifted, **bare[0]}


def _unfolded(node: dict[str, Any]) -> dict[str, Any]:
    """``node``'s conditional as an ``anyOf`` of its branches, when ``if`` tests one required
    property of an object against values, and that property lists what it may be; else
    ``node``."""
    condition = _condition(node)
    if condition is None:
        return node
    name, chosen, domain = condition
    base = {k: v for k, v in node.items() if k not in _CONDITIONAL}
    branches = []
    for values, extra in (
        ([v for v in domain if v in chosen], node.get("then")),
        ([v for v in domain if v not in chosen], node.get("else")),
    ):
        if not values:
            continue
        branch = _narrowed(base, {"properties": {name: {"enum": values}}})
        if branch is not None and isinstance(extra, Mapping):
            branch = _narrowed(branch, extra)
        if branch is None:
            return node
        if not _holds_nothing(branch):  # a pin can close a branch (a save with no write)
            branches.append(branch)
    if not branches:
        return node
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _condition(node: Mapping[str, Any]) -> tuple[str, list[Any], list[Any]] | None:
    """``(property, values that pass the if, every value it may take)`` of a conditional this
    module can unfold. The property must be required and the node an object: ``if`` holds for
    anything else (a missing property, a non-object), which no branch would say."""
    test = node.get("if")
    if not isinstance(test, Mapping) or node.get("type") != "object":
        return None
    props = test.get("properties")
    if set(test) - {"properties", "required"} or not isinstance(props, Mapping) or len(props) != 1:
        return None
    ((name, rule),) = props.items()
    required = node.get("required") or []
    if name not in required or set(test.get("required") or []) - {name}:
        return None
    chosen = _values(rule)
    domain = _values((node.get("properties") or {}).get(name))
    if chosen is None or domain is None or not isinstance(rule, Mapping):
        return None
    if set(rule) - {"const", "enum"}:
        return None
    return name, chosen, domain


def _values(rule: Any) -> list[Any] | None:
    """The values ``rule`` allows, when it lists them (``const``, ``enum``, or boolean)."""
    if not isinstance(rule, Mapping):
        return None
    if "const" in rule:
        return [rule["const"]]
    if isinstance(rule.get("enum"), list):
        return list(rule["enum"])
    return [True, False] if rule.get("type") == "boolean" else None


def _narrowed(schema: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any] | None:
    """One schema that holds exactly when both ``schema`` and ``extra`` hold, or ``None`` when
    that cannot be written here."""
    if set(extra) - _NARROWABLE:
        return None
    out = dict(schema)
    for key, value in extra.items():
        mine: Any = out.get(key)
        if key not in out or mine == value:
            if key == "properties" and not _known(out, value):
                return None
            out[key] = value
        elif key == "required":
            out[key] = [*mine, *(k for k in value if k not in mine)]
        elif key == "properties":
            if not _known(out, value):
                return None
            merged = dict(mine)
            for name, rule in value.items():
                inner = _narrowed(mine.get(name) or {}, rule) if isinstance(rule, Mapping) else None
                if inner is None:
                    return None
                merged[name] = inner
            out[key] = merged
        elif key in _AT_LEAST:
            out[key] = max(mine, value)
        elif key in _AT_MOST:
            out[key] = min(mine, value)
        elif key == "type":
            both = _types(mine) & _types(value)
            if not both:
                return None
            out[key] = sorted(both)[0] if len(both) == 1 else sorted(both)
        elif key == "enum" and isinstance(mine, list) and isinstance(value, list):
            out[key] = [v for v in mine if v in value]
            if not out[key]:
                return None
        else:
            return None
    return out


_BOUNDS = (
    ("minItems", "maxItems"),
    ("minLength", "maxLength"),
    ("minProperties", "maxProperties"),
    ("minimum", "maximum"),
)


def _holds_nothing(schema: Any) -> bool:
    """Whether no value can hold ``schema``: bounds that cross, an empty ``enum``, or a
    required property that holds nothing."""
    if not isinstance(schema, Mapping):
        return False
    if any(
        low in schema and high in schema and schema[low] > schema[high] for low, high in _BOUNDS
    ):
        return True
    if schema.get("enum") == []:
        return True
    props = schema.get("properties") or {}
    return any(_holds_nothing(props.get(name)) for name in schema.get("required") or ())


def _known(schema: Mapping[str, Any], props: Any) -> bool:
    """Whether ``props`` names only properties ``schema`` declares: narrowing adds no new one
    (under ``additionalProperties`` that would change what the schema allows)."""
    declared = schema.get("properties") or {}
    return isinstance(props, Mapping) and all(name in declared for name in props)


def _types(value: Any) -> set[str]:
    types = {value} if isinstance(value, str) else set(value)
    return types | {"integer"} if "number" in types else types
