"""skilldeck's own plugin: the built-in tool families, execution modes and graders.

:func:`skilldeck.plugins.load_plugins` imports this module first, by the same code that
imports an installed plugin's; each module below registers what it adds with the decorators
a plugin uses (``@tool_family``, ``@execution_mode``, ``@grader``, ``@environment``). The
engine core imports none of them, so an installed plugin's families and modes stand where
these do.
"""

import skilldeck.evals.graders.card
import skilldeck.evals.graders.pkm
import skilldeck.evals.graders.recall
import skilldeck.nodes.planner
import skilldeck.nodes.retrieval
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
    "execution modes": (skilldeck.nodes.planner, skilldeck.nodes.retrieval),
    "graders and eval environments": (
        skilldeck.evals.graders.card,
        skilldeck.evals.graders.pkm,
        skilldeck.evals.graders.recall,
    ),
}
