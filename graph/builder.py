"""Compile loaded skill bundles into a LangGraph ``StateGraph``.

Nodes: one per skill, ``tools``, ``card`` and ``router``. The entry edge goes straight to the
skill the run's request chose; after that every node routes itself with ``Command(goto=...)``,
and a skill that says ``continue`` runs the router's logic directly. So no step (and no
checkpoint) is spent on routing alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph

from skilldeck.errors import BundleError
from skilldeck.graph.state import RESERVED_KEYS, build_state_schema
from skilldeck.nodes import (
    CARD_NODE,
    ROUTER_NODE,
    START_NODE,
    TOOLS_NODE,
    CardNode,
    NodeContext,
    RouterNode,
    StartNode,
    ToolsNode,
    entry,
    execution_modes,
    find_execution_mode,
)
from skilldeck.nodes.output_modes import output_modes
from skilldeck.skills.bundle import READ_FILE_TOOL, SkillBundle
from skilldeck.skills.contract import Validator, compile_schema, format_errors
from skilldeck.skills.examples import EXAMPLES_FILE
from skilldeck.skills.problems import Problems
from skilldeck.tools.mcp import MCP_PREFIX, expand_mcp_names
from skilldeck.tools.registry import ToolHost, ToolRegistry, family_tools
from skilldeck.types import Problem

__all__ = ["build_graph", "deck_problems", "deck_tools"]

_RESERVED_NODES = (ROUTER_NODE, TOOLS_NODE, CARD_NODE, START_NODE)


def deck_tools(
    bundles: Sequence[SkillBundle],
    registry: ToolRegistry,
    extra: Sequence[tuple[BaseTool, str]] = (),
) -> tuple[tuple[SkillBundle, ...], ToolRegistry]:
    """The bundles as a deck runs them, and the deck's registry.

    The registry is a copy of ``registry`` (which may be shared) plus ``skill__read_file`` over
    the bundles' files (the ``skill`` tool family's, if ``registry`` lacks it) and the
    ``extra`` tools with their aliases (an MCP server's, aliased
    ``mcp:<server>/<tool>``). Each bundle's ``mcp:`` names (wildcards too) become the names they
    match, and an Agent Skill's ``allowed-tools`` join its tools where the registry has them
    (the others are warnings of :func:`deck_problems`)."""
    added: list[tuple[BaseTool, Sequence[str]]] = [(t, [alias]) for t, alias in extra]
    if registry.resolve(READ_FILE_TOOL) is None:
        added += family_tools(ToolHost(skills=tuple(bundles)), ["skill"])
    registry = registry.extended(added)
    mcp = {
        alias: name for alias, name in registry.aliases().items() if alias.startswith(MCP_PREFIX)
    }
    bound = []
    for bundle in bundles:
        allowed = expand_mcp_names(bundle.allowed_tools, mcp)
        known = [t for t in allowed if registry.resolve(t) is not None]
        tools = tuple(expand_mcp_names([*bundle.tools, *known], mcp))
        bound.append(replace(bundle, tools=tools) if tools != bundle.tools else bundle)
    return tuple(bound), registry


def deck_problems(bundles: Sequence[SkillBundle], registry: ToolRegistry) -> list[Problem]:
    """What keeps ``bundles`` from forming one deck, beyond each bundle's own files: execution
    and output modes no plugin registered, reserved names, data fields that collide with the
    engine's state keys, and tools the registry does not have (errors); ``allowed-tools`` it
    does not have (warnings: a skill from another agent names that agent's tools). Every one,
    so ``skilldeck check`` can show them all."""
    problems = Problems()
    # "auto": the host picks one of the output modes for the endpoint (models.output_mode).
    modes, outputs = execution_modes(), ("auto", *output_modes())
    for bundle in bundles:
        for tool in bundle.allowed_tools:
            if registry.resolve(tool) is None:
                problems.warn(
                    bundle.path / "SKILL.md",
                    "$.front_matter.allowed-tools",
                    f"tool {tool!r} is not available in this deck; the skill runs without it",
                    "agent-skills",
                )
        meta = bundle.path / "skill.meta.json"
        if bundle.execution.mode not in modes:
            problems.error(
                meta,
                "$.execution_config.mode",
                f"execution mode {bundle.execution.mode!r} is not available; "
                f"available: {', '.join(modes)} (a plugin adds modes: see docs/plugins.md)",
            )
        wanted = bundle.execution.output_mode
        if wanted is not None and wanted not in outputs:
            problems.error(
                meta,
                "$.execution_config.output_mode",
                f"output mode {wanted!r} is not available; available: {', '.join(outputs)} "
                "(a plugin adds output modes: see docs/plugins.md)",
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
            if registry.resolve(name) is not None:
                continue
            if name.startswith(MCP_PREFIX):
                served = sorted(a for a in registry.aliases() if a.startswith(MCP_PREFIX))
                message = (
                    f"no MCP tool matches {name!r}; the servers' tools: "
                    f"{', '.join(served) or 'none'}"
                )
            else:
                message = (
                    f"tool {name!r} is not registered; registered tools: "
                    f"{', '.join(registry.names()) or 'none'}"
                )
            problems.error(meta, f"$.tools[{i}]", message)
        _example_problems(problems, bundle, registry)
    return problems.items


def _example_problems(problems: Problems, bundle: SkillBundle, registry: ToolRegistry) -> None:
    """Each example's tool call holds to the tool's arguments schema, as the model's must."""
    if bundle.examples is None:
        return
    file = bundle.path / EXAMPLES_FILE
    validators: dict[str, Validator] = {}  # one per tool: a skill has many examples per tool
    for example in bundle.examples.items:
        if example.tool is None or registry.resolve(example.tool) is None:
            continue
        if example.tool not in validators:
            validators[example.tool] = compile_schema(registry.arguments_schema(example.tool))
        errors = format_errors(validators[example.tool], example.reply["arguments"])
        if errors:
            first = errors[0]
            problems.error(
                file,
                f"$[line {example.line}].reply.arguments{first['path'][1:]}",
                f"{first['message']} ({example.tool}'s arguments schema)",
            )


def build_graph(
    bundles: Sequence[SkillBundle], ctx: NodeContext, *, routes_itself: bool = False
) -> StateGraph[Any]:
    """The uncompiled graph of ``bundles``; compile it with a checkpointer and a store.

    A deck routes a run's first step before the graph starts; ``routes_itself`` adds a
    ``start`` node that does it inside the graph, for runs that LangGraph's own server starts.

    Raises:
        BundleError: the bundles do not form a deck (every problem of :func:`deck_problems`).
    """
    problems = [p for p in deck_problems(bundles, ctx.registry) if p.severity == "error"]
    if problems:
        raise BundleError.of(problems)
    skills = tuple(b.name for b in bundles)
    after_skill = (*skills, TOOLS_NODE, CARD_NODE, END)
    # The schema is built at run time, so mypy cannot tie the nodes' dict input to it.
    graph: Any = StateGraph(build_state_schema(bundles))

    def node(name: str, step: Callable[..., Any], destinations: Sequence[str]) -> None:
        # The steps are synchronous: LangGraph runs them in a worker thread on an async run,
        # inline on the synchronous API's loop (see skilldeck._internal.aio).
        graph.add_node(name, step, destinations=tuple(destinations))

    node(ROUTER_NODE, RouterNode(ctx), (*skills, END))
    for bundle in bundles:
        node(bundle.name, find_execution_mode(bundle.execution.mode)(ctx, bundle), after_skill)
    node(TOOLS_NODE, ToolsNode(ctx), skills)
    node(CARD_NODE, CardNode(), (*skills, CARD_NODE, ROUTER_NODE))
    if routes_itself:
        node(START_NODE, StartNode(ctx), (*skills, END))
        graph.add_edge(START, START_NODE)
    else:
        graph.add_conditional_edges(START, entry, [*skills, END])
    return cast("StateGraph[Any]", graph)
