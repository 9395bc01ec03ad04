"""Graph nodes: the router, one skill runner per skill, tool execution and the ask_user card.

The execution modes other than ``single`` (:mod:`skilldeck.nodes.planner`,
:mod:`skilldeck.nodes.retrieval`) are not imported here: they register from skilldeck's
built-in plugin (see :mod:`skilldeck.nodes.modes`).
"""

from skilldeck.nodes.card import CardNode, answers_schema, apply_answers, validate_answers
from skilldeck.nodes.context import CARD_NODE, ROUTER_NODE, START_NODE, TOOLS_NODE, NodeContext
from skilldeck.nodes.modes import execution_mode, execution_modes, find_execution_mode
from skilldeck.nodes.route_model import ModelRouter
from skilldeck.nodes.router import (
    AUTO_CONTEXT,
    RouterNode,
    StartNode,
    candidates,
    decide,
    entry,
    route,
    start_update,
)
from skilldeck.nodes.skill import SkillNode, parse_output
from skilldeck.nodes.tools import ToolsNode

__all__ = [
    "AUTO_CONTEXT",
    "CARD_NODE",
    "ROUTER_NODE",
    "START_NODE",
    "TOOLS_NODE",
    "CardNode",
    "ModelRouter",
    "NodeContext",
    "RouterNode",
    "SkillNode",
    "StartNode",
    "ToolsNode",
    "answers_schema",
    "apply_answers",
    "candidates",
    "decide",
    "entry",
    "execution_mode",
    "execution_modes",
    "find_execution_mode",
    "parse_output",
    "route",
    "start_update",
    "validate_answers",
]
