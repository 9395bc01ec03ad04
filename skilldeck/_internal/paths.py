"""Dot paths over JSON-native values (``profile.plaintiff.name``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

_MISSING = object()


def split(path: str) -> list[str]:
    return path.split(".")


def get_path(value: Any, path: str, default: Any = None) -> Any:
    """Read ``path`` from nested dicts; a missing step gives ``default``."""
    for part in split(path):
        if not isinstance(value, Mapping) or part not in value:
            return default
        value = value[part]
    return value


def set_path(target: dict[str, Any], path: str, value: Any) -> None:
    """Write ``value`` at ``path``, creating dicts on the way (in place)."""
    parts = split(path)
    node = target
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``update`` into a copy of ``base``: dicts merge key by key, other values replace."""
    merged = dict(base)
    for key, value in update.items():
        old = merged.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(old, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
