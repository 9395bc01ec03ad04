"""skilldeck's own plugin: the built-in tool families, execution modes and graders.

:func:`skilldeck.plugins.load_plugins` imports this module first, by the same code that
imports an installed plugin's; each module below registers what it adds with the decorators
a plugin uses (``@tool_family``, ``@execution_mode``, ``@grader``, ``@environment``). The
engine core imports none of them, so an installed plugin's families and modes stand where
these do.
"""

from skilldeck.evals.graders import card, pkm, recall
from skilldeck.nodes import planner, retrieval
from skilldeck.tools import (
    cards,
    elements,
    facts,
    files,
    knowledge_tools,
    matters,
    memory_tools,
    skill_files,
)
from skilldeck.tools import pkm as pkm_family

__all__: list[str] = []

#: The modules this plugin registers from, by extension point.
MODULES = {
    "tool families": (
        files,
        elements,
        cards,
        pkm_family,
        facts,
        memory_tools,
        knowledge_tools,
        matters,
        skill_files,
    ),
    "execution modes": (planner, retrieval),
    "graders and eval environments": (card, pkm, recall),
}
