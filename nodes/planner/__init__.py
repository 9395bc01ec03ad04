"""The ``planner`` execution mode (seed 001): a bounded ``{stop, tool, args}`` loop, then a
cited ``memory_view``.

- :mod:`.node`: the skill node that runs the loop and the synthesis.
- :mod:`.contract`: the checks every plan and view must pass.
- :mod:`.loop`: what the rounds retrieved, and the evidence selected from it.
- :mod:`skilldeck.nodes.planner_rules`: the planner that stands in for a model.
"""

from skilldeck.nodes.planner.contract import PLANNER_TOOLS, VIEW_KEYS, check_plan, check_view
from skilldeck.nodes.planner.loop import ANCHORS, SESSION_GAP_S, Loop
from skilldeck.nodes.planner.node import PlannerSkillNode

__all__ = [
    "ANCHORS",
    "PLANNER_TOOLS",
    "SESSION_GAP_S",
    "VIEW_KEYS",
    "Loop",
    "PlannerSkillNode",
    "check_plan",
    "check_view",
]
