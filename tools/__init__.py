"""Tools that skills call: the registry and the built-in tool families."""

from __future__ import annotations

from pathlib import Path

from skilldeck.tools.elements import element_tools, extract_elements
from skilldeck.tools.files import file_tools, jailed_path
from skilldeck.tools.registry import IDENTITY_KEYS, ToolRegistry, ToolResult

__all__ = [
    "IDENTITY_KEYS",
    "ToolRegistry",
    "ToolResult",
    "default_registry",
    "element_tools",
    "extract_elements",
    "file_tools",
    "jailed_path",
]


def default_registry(files_root: str | Path = ".") -> ToolRegistry:
    """A registry with the built-in tools, files jailed to ``files_root``."""
    return ToolRegistry([*file_tools(files_root), *element_tools()])
