"""Compile loaded skill bundles into a LangGraph ``StateGraph``.

Nodes: one per skill, ``tools``, ``card`` and ``router``. The entry edge goes straight to the
skill the run's request chose; after that every node routes itself with ``Command(goto=...)``,
and a skill that says ``continue`` runs the router's logic directly. So no step (and no
checkpoint) is spent on routing alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from langgraph.graph import END, START, StateGraph

from skilldeck.errors import BundleError
from skilldeck.graph.state import build_state_schema
from skilldeck.nodes import (
    CARD_NODE,
    MODES,
    ROUTER_NODE,
    TOOLS_NODE,
    CardNode,
    NodeContext,
    RouterNode,
    ToolsNode,
    entry,
)
from skilldeck.skills.bundle import SkillBundle

__all__ = ["build_graph", "check_tools"]

_RESERVED_NODES = (ROUTER_NODE, TOOLS_NODE, CARD_NODE)


def check_tools(ctx: NodeContext) -> None:
    """Every tool a skill lists must be registered: fail at build time, not mid-run."""
    for bundle in ctx.bundles.values():
        for i, name in enumerate(bundle.tools):
            if ctx.registry.resolve(name) is None:
                raise BundleError(
                    str(bundle.path / "skill.meta.json"),
                    f"$.tools[{i}]",
                    f"tool {name!r} is not registered; registered tools: "
                    f"{', '.join(ctx.registry.names()) or 'none'}",
                )


def build_graph(bundles: Sequence[SkillBundle], ctx: NodeContext) -> StateGraph[Any]:
    """The uncompiled graph of ``bundles``; compile it with a checkpointer and a store."""
    for bundle in bundles:
        if bundle.execution.mode not in MODES:
            raise BundleError(
                str(bundle.path / "skill.meta.json"),
                "$.execution_config.mode",
                f"execution mode {bundle.execution.mode!r} is not available; "
                f"available: {', '.join(MODES)}",
            )
        if bundle.name in _RESERVED_NODES:
            raise BundleError(
                str(bundle.path), "$.name", f"{bundle.name!r} is a reserved node name; rename it"
            )
    check_tools(ctx)
    skills = tuple(b.name for b in bundles)
    after_skill = (*skills, TOOLS_NODE, CARD_NODE, END)
    # The schema is built at run time, so mypy cannot tie the nodes' dict input to it.
    graph: Any = StateGraph(build_state_schema(bundles))
    graph.add_node(ROUTER_NODE, RouterNode(ctx), destinations=(*skills, END))
    for bundle in bundles:
        graph.add_node(
            bundle.name, MODES[bundle.execution.mode](ctx, bundle), destinations=after_skill
        )
    graph.add_node(TOOLS_NODE, ToolsNode(ctx), destinations=skills)
    graph.add_node(CARD_NODE, CardNode(), destinations=(*skills, CARD_NODE, ROUTER_NODE))
    graph.add_conditional_edges(START, entry, [*skills, END])
    return cast("StateGraph[Any]", graph)
