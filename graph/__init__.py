"""The state schema, the run's records, and the builder that compiles skills into a LangGraph
``StateGraph``.

The names are imported on first use (PEP 562): the nodes read the records and the state view
(:mod:`skilldeck.graph.records`, :mod:`skilldeck.graph.state`) without importing the builder,
which imports the nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skilldeck._internal.lazy import exports

if TYPE_CHECKING:
    from skilldeck.graph.builder import build_graph, deck_problems, deck_tools
    from skilldeck.graph.state import (
        RESERVED_KEYS,
        RunStatus,
        RunView,
        SkillDeckState,
        build_state_schema,
        merge_profile,
    )

_SOURCES = {
    **dict.fromkeys(("build_graph", "deck_problems", "deck_tools"), "skilldeck.graph.builder"),
    **dict.fromkeys(
        (
            "RESERVED_KEYS",
            "RunStatus",
            "RunView",
            "SkillDeckState",
            "build_state_schema",
            "merge_profile",
        ),
        "skilldeck.graph.state",
    ),
}

__all__ = [
    "RESERVED_KEYS",
    "RunStatus",
    "RunView",
    "SkillDeckState",
    "build_graph",
    "build_state_schema",
    "deck_problems",
    "deck_tools",
    "merge_profile",
]

__getattr__, __dir__ = exports(__name__, globals(), _SOURCES)
