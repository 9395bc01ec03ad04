"""Graph nodes: the router, one skill runner per skill, tool execution and the ask_user card."""

from skilldeck.nodes.card import CardNode, answers_schema, apply_answers, validate_answers
from skilldeck.nodes.context import CARD_NODE, ROUTER_NODE, START_NODE, TOOLS_NODE, NodeContext
from skilldeck.nodes.planner import PlannerSkillNode
from skilldeck.nodes.retrieval import RetrievalSkillNode
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

#: The node class of each ``execution_config.mode``.
MODES: dict[str, type[SkillNode]] = {
    "single": SkillNode,
    "retrieval": RetrievalSkillNode,
    "planner": PlannerSkillNode,
}

__all__ = [
    "AUTO_CONTEXT",
    "CARD_NODE",
    "MODES",
    "ROUTER_NODE",
    "START_NODE",
    "TOOLS_NODE",
    "CardNode",
    "ModelRouter",
    "NodeContext",
    "PlannerSkillNode",
    "RetrievalSkillNode",
    "RouterNode",
    "SkillNode",
    "StartNode",
    "ToolsNode",
    "answers_schema",
    "apply_answers",
    "candidates",
    "decide",
    "entry",
    "parse_output",
    "route",
    "start_update",
    "validate_answers",
]
