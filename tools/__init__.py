"""Tools that skills call: the registry, its tool families and the built-in families.

The public names are imported on first use (PEP 562): the engine imports the registry
(:mod:`skilldeck.tools.registry`) without the built-in families, which register from
skilldeck's built-in plugin (see :mod:`skilldeck.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skilldeck._internal.lazy import exports
from skilldeck.tools.registry import (
    IDENTITY_KEYS,
    ToolFamily,
    ToolHost,
    ToolRegistry,
    ToolResult,
    family_tools,
    tool_families,
    tool_family,
)

if TYPE_CHECKING:
    from skilldeck.tools.cards import TEMPLATES, card_tools
    from skilldeck.tools.elements import element_tools, extract_elements
    from skilldeck.tools.facts import fact_tools
    from skilldeck.tools.files import file_tools, jailed_path
    from skilldeck.tools.knowledge import KnowledgeBase
    from skilldeck.tools.knowledge_tools import KNOWLEDGE_ALIASES, knowledge_tools
    from skilldeck.tools.matters import MATTER_TOOLS, MatterRecords, matter_tools
    from skilldeck.tools.memory import Memory
    from skilldeck.tools.memory_tools import MEMORY_ALIASES, memory_tools
    from skilldeck.tools.pkm import pkm_tools

__all__ = [
    "IDENTITY_KEYS",
    "KNOWLEDGE_ALIASES",
    "MATTER_TOOLS",
    "MEMORY_ALIASES",
    "TEMPLATES",
    "KnowledgeBase",
    "MatterRecords",
    "Memory",
    "ToolFamily",
    "ToolHost",
    "ToolRegistry",
    "ToolResult",
    "card_tools",
    "default_registry",
    "element_tools",
    "extract_elements",
    "fact_tools",
    "family_tools",
    "file_tools",
    "jailed_path",
    "knowledge_tools",
    "matter_tools",
    "memory_tools",
    "pkm_tools",
    "tool_families",
    "tool_family",
]

_SOURCES = {
    "TEMPLATES": "skilldeck.tools.cards",
    "card_tools": "skilldeck.tools.cards",
    "element_tools": "skilldeck.tools.elements",
    "extract_elements": "skilldeck.tools.elements",
    "fact_tools": "skilldeck.tools.facts",
    "file_tools": "skilldeck.tools.files",
    "jailed_path": "skilldeck.tools.files",
    "KnowledgeBase": "skilldeck.tools.knowledge",
    "KNOWLEDGE_ALIASES": "skilldeck.tools.knowledge_tools",
    "knowledge_tools": "skilldeck.tools.knowledge_tools",
    "MATTER_TOOLS": "skilldeck.tools.matters",
    "MatterRecords": "skilldeck.tools.matters",
    "matter_tools": "skilldeck.tools.matters",
    "Memory": "skilldeck.tools.memory",
    "MEMORY_ALIASES": "skilldeck.tools.memory_tools",
    "memory_tools": "skilldeck.tools.memory_tools",
    "pkm_tools": "skilldeck.tools.pkm",
}

__getattr__, __dir__ = exports(__name__, globals(), _SOURCES)


def default_registry(
    files_root: str | Path | None = None,
    *,
    memory: Callable[[], Memory] | None = None,
    knowledge: Callable[[], KnowledgeBase] | None = None,
    matters: Callable[[], MatterRecords] | None = None,
    claim_matters: bool = True,
) -> ToolRegistry:
    """A registry with the tools of every registered family (skilldeck's and the installed
    plugins'), files jailed to the run's matter folder in ``files_root`` (``None``: the file
    tools answer that no files root is configured).

    ``memory`` and ``knowledge`` (each called on first use) add the ``memory__*`` and
    ``knowledge__*`` tools and ``file__local_search``, with the seeds' bare names
    (``lexical_search``, ``rag_retrieve``, ``local_file_search``, ...) as aliases.
    ``matters`` (called at each use; a deck passes its thread index) adds ``matters__get`` and
    ``matters__update``; ``claim_matters``: a matter nobody owns becomes the run's user's.
    """
    stores: dict[str, Callable[[], Any] | None] = {
        "memory": memory,
        "knowledge": knowledge,
        "matters": matters,
    }
    host = ToolHost(
        files_root=Path(files_root) if files_root is not None else None,
        stores={name: store for name, store in stores.items() if store is not None},
        claim_matters=claim_matters,
    )
    return ToolRegistry().extended(family_tools(host))
