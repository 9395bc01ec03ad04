"""Tools that skills call: the registry and the built-in tool families."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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
from skilldeck.tools.registry import IDENTITY_KEYS, ToolRegistry, ToolResult

__all__ = [
    "IDENTITY_KEYS",
    "KNOWLEDGE_ALIASES",
    "MATTER_TOOLS",
    "MEMORY_ALIASES",
    "TEMPLATES",
    "KnowledgeBase",
    "MatterRecords",
    "Memory",
    "ToolRegistry",
    "ToolResult",
    "card_tools",
    "default_registry",
    "element_tools",
    "extract_elements",
    "fact_tools",
    "file_tools",
    "jailed_path",
    "knowledge_tools",
    "matter_tools",
    "memory_tools",
    "pkm_tools",
]


def default_registry(
    files_root: str | Path | None = None,
    *,
    memory: Callable[[], Memory] | None = None,
    knowledge: Callable[[], KnowledgeBase] | None = None,
    matters: Callable[[], MatterRecords] | None = None,
    claim_matters: bool = True,
) -> ToolRegistry:
    """A registry with the built-in tools, files jailed to the run's matter folder in
    ``files_root`` (``None``: the file tools answer that no files root is configured).

    ``memory`` and ``knowledge`` (each called on first use) add the ``memory__*`` and
    ``knowledge__*`` tools and ``file__local_search``, with the seeds' bare names
    (``lexical_search``, ``rag_retrieve``, ``local_file_search``, ...) as aliases.
    ``matters`` (called at each use; a deck passes its thread index) adds ``matters__get`` and
    ``matters__update``; ``claim_matters``: a matter nobody owns becomes the run's user's.
    """
    registry = ToolRegistry(
        [
            *file_tools(files_root),
            *element_tools(),
            *card_tools(files_root),
            *pkm_tools(files_root),
            *fact_tools(files_root),
        ]
    )
    if memory is not None:
        for tool in memory_tools(memory):
            registry.register(tool, aliases=[MEMORY_ALIASES[tool.name]])
    if knowledge is not None:
        for tool in knowledge_tools(knowledge, files_root):
            registry.register(tool, aliases=[KNOWLEDGE_ALIASES[tool.name]])
    if matters is not None:
        for tool in matter_tools(matters, claim=claim_matters):
            registry.register(tool)
    return registry
