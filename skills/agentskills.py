"""The Agent Skills standard's front matter rules (agentskills.io specification).

A skill copied from the Agent Skills ecosystem must load unedited, so the rules are applied the
way the standard's client guide asks: a skill that breaks one loads with a warning that names
the rule (``skilldeck check --strict`` fails on it); only what leaves nothing to run or route
by (no description, front matter that is not YAML even after the guide's quoting fix) is an
error. The rules themselves are the reference validator's (``skills-ref``, the
``agentskills`` extra), not a copy; without it, each skill gets one warning that says so.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skilldeck._internal.documents import DocumentError, parse_yaml

__all__ = ["UNCHECKED", "allowed_tools", "parse_front_matter", "skill_name", "spec_warnings"]

#: The warning of a front matter that could not be held to the standard's rules.
UNCHECKED = (
    "not checked against the Agent Skills standard: its reference validator is not installed "
    "(pip install 'skilldeck[agentskills]')"
)

# A plain value with ": " inside (``description: Use when: ...``) is not YAML, and yet common
# in the wild; the client guide's fix is to quote it.
_UNQUOTED = re.compile(r"^(?P<key>[A-Za-z_][\w-]*):[ \t]+(?P<value>[^'\"|>\[{&*!#\s].*:[ \t].*)$")
# Node names a LangGraph graph refuses or reserves.
_UNUSABLE = re.compile(r"[:|]|^__|^\s*$")


def parse_front_matter(text: str) -> tuple[Any, list[int]]:
    """The front matter's YAML value, and the lines read as quoted strings: a line
    ``key: value: more`` is read as the string the author meant (1-based line numbers).

    Raises:
        DocumentError: the text is not YAML even so.
    """
    try:
        return parse_yaml(text, aliases=False), []
    except DocumentError:
        lines = text.splitlines()
        fixed = [_quoted(line) for line in lines]
        quoted = [i + 1 for i, (a, b) in enumerate(zip(lines, fixed, strict=True)) if a != b]
        if not quoted:
            raise
        return parse_yaml("\n".join(fixed), aliases=False), quoted


def _quoted(line: str) -> str:
    match = _UNQUOTED.match(line)
    if match is None:
        return line
    value = match.group("value").rstrip().replace("'", "''")
    return f"{match.group('key')}: '{value}'"


def spec_warnings(front: Mapping[str, Any], folder: Path) -> list[str]:
    """Every rule of the specification that ``front`` breaks, in the reference validator's
    words (empty: the front matter follows the standard); without the validator, that the
    rules went unchecked."""
    try:
        from skills_ref.validator import validate_metadata
    except ImportError:
        return [UNCHECKED]
    return list(validate_metadata(dict(front), folder))


def skill_name(front: Mapping[str, Any], folder: Path) -> tuple[str, str | None]:
    """The name a plain Agent Skill loads under, and why it is not the front matter's.

    The front matter's ``name`` (NFKC) names the skill even when it differs from the folder,
    as the standard's clients do; a name a graph cannot hold falls back to the folder's.
    """
    raw = front.get("name")
    if isinstance(raw, str):
        name = unicodedata.normalize("NFKC", raw.strip())
        if not _UNUSABLE.search(name):
            return name, None
        return folder.name, f"name {raw!r} cannot name a graph node; loaded as {folder.name!r}"
    return folder.name, f"no usable name in the front matter; loaded as {folder.name!r}"


def allowed_tools(value: Any) -> tuple[list[str], str | None]:
    """The tool names of ``allowed-tools`` (a space-separated string, or a list), each without
    its argument pattern (``Bash(git:*)`` is ``Bash``), and a problem if the value is neither."""
    if value is None:
        return [], None
    if isinstance(value, str):
        items = value.split()
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        return [], "allowed-tools must be a space-separated string of tool names"
    names = [item.split("(", 1)[0] for item in items if item]
    return list(dict.fromkeys(n for n in names if n)), None
