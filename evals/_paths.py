"""Paths into an outcome (``state.profile.x``, ``card.questions[0].field_key``) and text views."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from skilldeck.errors import EvalConfigError

__all__ = ["check_path", "text_of", "value_at"]

_PART = re.compile(r"[^.\[\]]+|\[\d+\]")
_VALID = re.compile(r"^(\$\.)?[^.\[\]]+(\.[^.\[\]]+|\[\d+\])*$")


def check_path(path: str) -> str:
    """``path`` if it is a dotted path with ``[i]`` list indices; raise otherwise."""
    if not _VALID.match(path):
        raise EvalConfigError(
            f"path {path!r} is not a dotted path: write it like 'state.profile.name' or "
            "'card.questions[0].field_key'"
        )
    return path


def value_at(value: Any, path: str) -> Any:
    """The value at ``path`` (a leading ``$.`` is allowed); ``None`` where a step is missing."""
    for part in _PART.findall(path.removeprefix("$.")):
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else None
        else:
            value = value.get(part) if isinstance(value, Mapping) else None
    return value


def text_of(value: Any) -> str:
    """A string as it is, anything else as JSON: what substring graders scan."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
