"""Tool execution: runs the tool calls of a skill's turn, then hands control back to the skill.

Only tools the skill's meta lists run; any other call is refused and recorded, never executed.
Identity (``user_id``, ``matter_id``, ``thread_id``) comes from the run's config, never from the
model's arguments. Results go to the turn's transcript in the store; the state records only
the call's name, arguments, status, time, a reference and how many files it changed. Files a
call writes are staged (:mod:`skilldeck.tools.workspace`): they stand only if the skill's output
is accepted.
"""

from __future__ import annotations

import json
import time
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from langgraph.types import Command

from skilldeck.nodes.context import NodeContext
from skilldeck.nodes.offer import offered
from skilldeck.nodes.transcript import append_messages
from skilldeck.skills.pins import result_fields
from skilldeck.tools.registry import ToolResult, runtime_values
from skilldeck.tools.workspace import staged, written_by

__all__ = ["ToolsNode"]


class ToolsNode:
    """Executes ``state.turn.pending``; see the module docstring."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    def __call__(
        self, state: dict[str, Any], config: RunnableConfig, store: BaseStore
    ) -> Command[str]:
        turn = state["turn"]
        bundle = self.ctx.bundles[turn["skill"]]
        registry = self.ctx.registry
        allowed = {registry.resolve(name) for name in bundle.tools}
        configurable = config.get("configurable", {})
        identity = runtime_values(configurable, bundle.name, bundle.matter_fields)
        thread_id = str(configurable["thread_id"])
        messages: list[ToolMessage] = []
        records: list[dict[str, Any]] = []
        kept = result_fields(bundle.pins)
        for call in turn["pending"]:
            started = time.perf_counter()
            canonical = registry.resolve(call["name"])
            done = [*turn["tool_calls"], *records]
            withheld = offered(bundle, done, turn.get("earlier", [])).withheld
            if canonical is None or canonical not in allowed:
                status = "refused"
                result = ToolResult(
                    False,
                    f"Error: tool {call['name']!r} is not allowed for skill {bundle.name!r}; "
                    f"allowed tools: {', '.join(bundle.tools) or 'none'}",
                )
            elif call["name"] in withheld:  # not offered now (tool_choice, tool_limits)
                status = "refused"
                result = ToolResult(False, f"Error: {withheld[call['name']]}")
            else:
                with staged(store, thread_id, turn["id"], call["id"]):
                    result = registry.invoke(canonical, call["args"], identity)
                status = "ok" if result.ok else "error"
            messages.append(
                ToolMessage(
                    result.content,
                    tool_call_id=call["id"],
                    name=call["name"],
                    status="success" if result.ok else "error",
                )
            )
            records.append(
                {
                    "id": call["id"],
                    "name": call["name"],
                    # What a validate.py checks (which file was read) and what a repeated
                    # call is told apart by.
                    "args": call["args"],
                    "status": status,
                    "ms": round((time.perf_counter() - started) * 1000, 2),
                    "ref": f"{turn['id']}/{turn['pos'] + len(records):06d}",
                }
            )
            if result.ok and call["name"] in kept:
                records[-1]["returned"] = _returned(result.content, kept[call["name"]])
        # Which calls changed files: their results do not outlast a rejected attempt.
        wrote = written_by(store, thread_id, turn["id"])
        for record in records:
            if record["id"] in wrote:
                record["wrote"] = len(wrote[record["id"]])
        pos = append_messages(store, thread_id, turn["id"], turn["pos"], messages)
        update = {**turn, "pending": [], "pos": pos, "tool_calls": turn["tool_calls"] + records}
        return Command(goto=turn["skill"], update={"turn": update})


def _returned(content: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    """The ``fields`` of a call's JSON result that an output field is pinned to (``x-result``):
    only those reach the state, the result itself stays in the transcript."""
    try:
        value = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {f: value[f] for f in fields if value.get(f) is not None}
