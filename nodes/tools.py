"""Tool execution: runs the tool calls of a skill's turn, then hands control back to the skill.

Only tools the skill's meta lists run; any other call is refused and recorded, never executed.
Identity (``user_id``, ``matter_id``, ``thread_id``) comes from the run's config, never from the
model's arguments. Results go to the turn's transcript in the store, each call's record
(name, arguments, status, time, a reference, how many files it changed) beside them; the turn
in the state keeps only the round's calls and how many calls of each tool worked. Files a
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

import skilldeck.nodes.transcript as transcript
from skilldeck.graph.records import ToolCall, ToolStatus
from skilldeck.graph.state import RunView
from skilldeck.nodes.context import NodeContext
from skilldeck.nodes.offer import offered
from skilldeck.skills.pins import result_fields
from skilldeck.tools.registry import ToolResult, runtime_values
from skilldeck.tools.workspace import staged, written_by

__all__ = ["ToolsNode"]


class ToolsNode:
    """Executes the turn's pending calls; see the module docstring."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    def __call__(
        self, state: dict[str, Any], config: RunnableConfig, store: BaseStore
    ) -> Command[str]:
        turn = RunView(state).turn
        assert turn is not None  # the skill node routes here only with calls pending
        bundle = self.ctx.bundles[turn.skill]
        registry = self.ctx.registry
        allowed = {registry.resolve(name) for name in bundle.tools}
        configurable = config.get("configurable", {})
        identity = runtime_values(configurable, bundle.name, bundle.matter_fields)
        thread_id = str(configurable["thread_id"])
        messages: list[ToolMessage] = []
        done: list[ToolCall] = []
        kept = result_fields(bundle.pins)
        for call in turn.pending:
            started = time.perf_counter()
            canonical = registry.resolve(call.name)
            withheld = offered(bundle, turn.counted(done), turn.standing).withheld
            if canonical is None or canonical not in allowed:
                status: ToolStatus = "refused"
                result = ToolResult(
                    False,
                    f"Error: tool {call.name!r} is not allowed for skill {bundle.name!r}; "
                    f"allowed tools: {', '.join(bundle.tools) or 'none'}",
                )
            elif call.name in withheld:  # not offered now (tool_choice, tool_limits)
                status = "refused"
                result = ToolResult(False, f"Error: {withheld[call.name]}")
            else:
                with staged(store, thread_id, turn.id, call.id):
                    result = registry.invoke(canonical, call.args, identity)
                status = "ok" if result.ok else "error"
            messages.append(
                ToolMessage(
                    result.content,
                    tool_call_id=call.id,
                    name=call.name,
                    status="success" if result.ok else "error",
                )
            )
            returned = (
                _returned(result.content, kept[call.name])
                if result.ok and call.name in kept
                else None
            )
            done.append(
                call.model_copy(
                    update={
                        "status": status,
                        "ms": round((time.perf_counter() - started) * 1000, 2),
                        # Where the result is in the turn's conversation.
                        "ref": f"{turn.id}/{turn.length + len(done):06d}",
                        "returned": returned,
                    }
                )
            )
        # Which calls changed files: their results do not outlast a rejected attempt.
        wrote = written_by(store, thread_id, turn.id)
        ran = tuple(
            c.model_copy(update={"wrote": len(wrote[c.id])}) if c.id in wrote else c for c in done
        )
        head = transcript.append(store, turn.id, turn.head, messages, ran, turn.attempt)
        after = turn.model_copy(
            update={
                "pending": (),
                "head": head,
                "length": turn.length + len(messages),
                "ran": ran,
                "worked": turn.counted(ran),
            }
        )
        return Command(goto=turn.skill, update={"turn": after.dump()})


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
