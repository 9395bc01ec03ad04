"""The state schema and the builder that compiles skills into a LangGraph ``StateGraph``."""

from skilldeck.graph.builder import build_graph, deck_problems, deck_tools
from skilldeck.graph.state import (
    RESERVED_KEYS,
    RunStatus,
    SkillDeckState,
    build_state_schema,
    merge_profile,
)

__all__ = [
    "RESERVED_KEYS",
    "RunStatus",
    "SkillDeckState",
    "build_graph",
    "build_state_schema",
    "deck_problems",
    "deck_tools",
    "merge_profile",
]
