"""Reading JSON and YAML that people and other projects write: bundles, cases, cassettes.

Plain ``json.loads`` and ``yaml.safe_load`` accept what such files should not hold:

- a key given twice (the last value silently wins);
- a YAML alias bomb: a few hundred bytes of anchors and aliases that expand to billions of
  values once anything walks the result (a schema check, ``json.dumps``, a deep copy);
- nesting deep enough to exhaust the recursion of whatever walks it next.

:func:`parse_json` and :func:`parse_yaml` refuse them with a :class:`DocumentError` that says
where and why, before anything else sees the value.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "MAX_VALUES", "DocumentError", "parse_json", "parse_yaml"]

#: Values a document may expand to, aliases followed (a real bundle or suite has thousands).
MAX_VALUES = 1_000_000
#: Nesting a document may have (a real one has a dozen levels).
MAX_DEPTH = 100


class DocumentError(ValueError):
    """A document that cannot be read: ``reason`` says why, with a line where one is known."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DocumentError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_json(text: str) -> Any:
    """``text`` as JSON, refusing duplicate keys and nesting deeper than :data:`MAX_DEPTH`.

    Raises:
        DocumentError: the text is not JSON, repeats a key, or nests too deep.
    """
    try:
        value = json.loads(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None
    _check_size(value)
    return value


class _Loader(yaml.SafeLoader):
    """``SafeLoader`` that refuses duplicate keys (PyYAML keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable) and key in seen:
                line = key_node.start_mark.line + 1
                raise DocumentError(f"duplicate key {key!r} (line {line})")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, *, aliases: bool = True) -> Any:
    """``text`` as YAML (so JSON too), refusing duplicate keys, alias bombs and deep nesting.

    Args:
        aliases: allow ``&anchor``/``*alias`` at all (front matter has no use for them).

    Raises:
        DocumentError: the text is not YAML, or is one of the documents above.
    """
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise DocumentError(f"invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:  # PyYAML composes recursively
        raise DocumentError(f"nested deeper than {MAX_DEPTH} levels") from None
    if node is None:
        return None
    _check_nodes(node, aliases)
    loader = _Loader(text)
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise DocumentError(f"invalid YAML: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()


def _check_nodes(root: yaml.Node, aliases: bool) -> None:
    """Count what ``root`` expands to, each shared node (an alias target) once per use, but
    computed once (memoised), so a bomb is found without being expanded."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    # Post-order over the node graph, iteratively (deep documents must not exhaust recursion).
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if not done:
            if key in sizes:
                if not aliases:
                    raise DocumentError(f"aliases are not allowed here (line {_line(node)})")
                continue
            if key in on_path:
                raise DocumentError(f"a recursive alias (line {_line(node)})")
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children)
            continue
        on_path.discard(key)
        sizes[key] = 1 + sum(sizes[id(c)] for c in children)
        depths[key] = 1 + max((depths[id(c)] for c in children), default=0)
        if sizes[key] > MAX_VALUES:
            raise DocumentError(
                f"expands to more than {MAX_VALUES:,} values (line {_line(node)}): an alias "
                "bomb? Write the values out instead of nesting aliases"
            )
        if depths[key] > MAX_DEPTH:
            raise DocumentError(f"nested deeper than {MAX_DEPTH} levels (line {_line(node)})")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _check_size(value: Any) -> None:
    """Depth of a parsed JSON value (JSON has no aliases: its size is its text's)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise DocumentError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
