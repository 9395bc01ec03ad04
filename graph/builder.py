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
from skilldeck.graph.state import RESERVED_KEYS, build_state_schema
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
from skilldeck.skills.problems import Problems
from skilldeck.tools.registry import ToolRegistry
from skilldeck.types import Problem

__all__ = ["build_graph", "deck_problems"]

_RESERVED_NODES = (ROUTER_NODE, TOOLS_NODE, CARD_NODE)


def deck_problems(bundles: Sequence[SkillBundle], registry: ToolRegistry) -> list[Problem]:
    """What keeps ``bundles`` from forming one deck, beyond each bundle's own files: execution
    modes, reserved names, data fields that collide with the engine's state keys, and tools the
    registry does not have. Every one, so ``skilldeck check`` can show them all."""
    problems = Problems()
    for bundle in bundles:
        meta = bundle.path / "skill.meta.json"
        if bundle.execution.mode not in MODES:
            problems.error(
                meta,
                "$.execution_config.mode",
                f"execution mode {bundle.execution.mode!r} is not available; "
                f"available: {', '.join(MODES)}",
            )
        if bundle.name in _RESERVED_NODES:
            problems.error(
                bundle.path, "$.name", f"{bundle.name!r} is a reserved node name; rename it"
            )
        for key in bundle.data_keys:
            if key in RESERVED_KEYS:
                problems.error(
                    bundle.path / "assets" / "output_schema.json",
                    f"$.properties.data.properties.{key}",
                    f"data field {key!r} collides with a reserved state key; rename it",
                )
        for i, name in enumerate(bundle.tools):
            if registry.resolve(name) is None:
                problems.error(
                    meta,
                    f"$.tools[{i}]",
                    f"tool {name!r} is not registered; registered tools: "
                    f"{', '.join(registry.names()) or 'none'}",
                )
    return problems.errors


def build_graph(bundles: Sequence[SkillBundle], ctx: NodeContext) -> StateGraph[Any]:
    """The uncompiled graph of ``bundles``; compile it with a checkpointer and a store.

    Raises:
        BundleError: the bundles do not form a deck (every problem of :func:`deck_problems`).
    """
    problems = deck_problems(bundles, ctx.registry)
    if problems:
        raise BundleError.of(problems)
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
