"""The ``rules`` provider: a skill's own no-model mode, as a chat model.

A bundle may ship ``scripts/rules.py`` with ``respond(state, results) -> turn``: given the
state the skill sees and the results of the tool calls it made so far (each ``{"name",
"args", "ok", "content"}``, ``content`` parsed from JSON where it is JSON), it returns the next
turn in the scripted provider's shape, ``{"tool_calls": [{"name", "args"}]}`` or ``{"output":
{...}}``. ``--model rules:scripts/rules.py`` (or just ``rules``) runs every skill that has one
without a model; so a suite can be run and measured offline (``rules:planner`` is the same
idea for the planner mode). Everything else is a real run: the tools node runs the calls (the
allowlist and identity binding hold), and the output is held to the skill's contract.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from skilldeck.errors import ModelConfigError
from skilldeck.scripted import TurnModel, turn_message

__all__ = ["DEFAULT_RULES", "RespondFn", "RulesChatModel", "read_turn"]

#: Where a bundle keeps its rules (``--model rules`` means ``rules:scripts/rules.py``).
DEFAULT_RULES = "scripts/rules.py"
RespondFn = Callable[[Mapping[str, Any], list[dict[str, Any]]], Mapping[str, Any]]


def read_turn(messages: Sequence[BaseMessage]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The state view the turn opened with, and the results of its tool calls so far."""
    state: dict[str, Any] = {}
    opening = next((m for m in messages if isinstance(m, HumanMessage)), None)
    if opening is not None:
        # The state follows the worked examples, if the turn shows any.
        view = str(opening.content).partition("## State\n")[2]
        state = json.loads(view.split("\n## Prepared context\n")[0])
    calls: dict[Any, Any] = {
        c["id"]: c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls
    }
    results = []
    for message in messages:
        if isinstance(message, ToolMessage):
            call: dict[str, Any] = calls.get(message.tool_call_id, {})
            content: Any = message.content
            with contextlib.suppress(json.JSONDecodeError):
                content = json.loads(str(content))
            results.append(
                {
                    "name": message.name or call.get("name"),
                    "args": call.get("args", {}),
                    "ok": message.status != "error",
                    "content": content,
                }
            )
    return state, results


class RulesChatModel(TurnModel):
    """Runs a bundle's ``scripts/rules.py`` in place of a model."""

    label: str
    respond: RespondFn

    @classmethod
    def from_source(cls, source: str | Path) -> RulesChatModel:
        """The model of the rules file ``source``, imported now: the deck calls it only for a
        file outside every bundle or in one it trusts (see :mod:`skilldeck.skills.trust`)."""
        from skilldeck._internal.pyfile import import_function

        path = Path(source)
        if not path.is_file():
            raise ModelConfigError(
                f"rules file {str(path)!r} does not exist: a skill runs without a model only "
                f"when its bundle has {DEFAULT_RULES} with respond(state, results)"
            )
        respond = import_function(
            path.parent.parent.name, path, "respond", "respond(state, results)"
        )
        return cls(label=str(path), respond=respond)

    @property
    def _llm_type(self) -> str:
        return "rules"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        state, results = read_turn(messages)
        turn = dict(self.respond(state, results))
        message = turn_message(turn, "rules", len(results), kwargs.get("response_format"))
        message.response_metadata = {"model_name": f"rules:{self.label}"}
        return ChatResult(generations=[ChatGeneration(message=message)])
