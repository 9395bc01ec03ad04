"""Tools that skills call: the registry and the built-in tool families."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from skilldeck.tools.elements import element_tools, extract_elements
from skilldeck.tools.files import file_tools, jailed_path
from skilldeck.tools.memory import Memory
from skilldeck.tools.memory_tools import MEMORY_ALIASES, memory_tools
from skilldeck.tools.registry import IDENTITY_KEYS, ToolRegistry, ToolResult

__all__ = [
    "IDENTITY_KEYS",
    "MEMORY_ALIASES",
    "Memory",
    "ToolRegistry",
    "ToolResult",
    "default_registry",
    "element_tools",
    "extract_elements",
    "file_tools",
    "jailed_path",
    "memory_tools",
]


def default_registry(
    files_root: str | Path = ".", *, memory: Callable[[], Memory] | None = None
) -> ToolRegistry:
    """A registry with the built-in tools, files jailed to ``files_root``.

    ``memory`` (called on first use) adds the ``memory__*`` tools, with seed 001's bare names
    (``lexical_search``, ...) as aliases.
    """
    registry = ToolRegistry([*file_tools(files_root), *element_tools()])
    if memory is not None:
        for tool in memory_tools(memory):
            registry.register(tool, aliases=[MEMORY_ALIASES[tool.name]])
    return registry
