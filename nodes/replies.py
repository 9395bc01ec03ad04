"""Output modes: how a skill's model is asked, and how its reply is read.

``schema``
    Each call carries a strict JSON Schema (``response_format: json_schema``) derived from the
    contract (:func:`~skilldeck.skills.contract.turn_schema`): the reply is one allowed tool
    call ``{"tool", "arguments"}`` or the final output ``{"final": {...}}``. Endpoints that
    compile schemas to grammars (llama.cpp, vLLM, Ollama, OpenAI) make every reply
    well-formed by construction, even from a small model.
``tool``
    Native tool calls; the final output comes through a ``submit_output`` call (or as text).
``json``
    JSON mode: the reply is a JSON object, a tool call in the same envelope as ``schema``
    mode, or the output.

In ``schema`` and ``json`` modes the model never sees native tool messages: its earlier calls
are shown as the envelopes it wrote, and their results as user messages. The transcript keeps
the canonical form (tool calls and tool messages) whatever the mode. A model that writes a
tool call as text in ``tool`` or ``json`` mode (often fenced, or in ``<tool_call>`` tags) is
read as calling it, but only a tool the skill may call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

__all__ = ["OUTPUT_MODES", "SUBMIT_TOOL", "Reply", "read_reply", "to_wire"]

OUTPUT_MODES = ("schema", "tool", "json")
SUBMIT_TOOL = "submit_output"

_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*\n(.*)\n?```\Z", re.DOTALL)
_TAGGED = re.compile(r"\A<tool_call>\s*(.*?)\s*</tool_call>\Z", re.DOTALL)
_ARGUMENT_KEYS = ("arguments", "args", "parameters")


@dataclass(frozen=True, slots=True)
class Reply:
    """A model reply as the engine reads it.

    ``calls`` are the tool calls it makes (``{"id", "name", "args"}``), else ``output`` is the
    candidate final output, else ``errors`` say why there is neither.
    """

    calls: list[dict[str, Any]]
    output: dict[str, Any] | None
    errors: list[dict[str, str]]
    #: The reply with its calls as native tool calls: what the transcript keeps.
    message: AIMessage


def _unwrap(text: str) -> str:
    text = text.strip()
    for pattern in (_FENCE, _TAGGED):
        match = pattern.match(text)
        if match:
            text = match.group(1).strip()
    return text


def _as_call(value: Any, allowed: Collection[str]) -> tuple[str, dict[str, Any]] | None:
    """``value`` as a tool call, if it is one of an allowed tool: ``{"tool"|"name": T,
    "arguments"|"args"|"parameters": {...}}`` and nothing else."""
    if not isinstance(value, Mapping) or len(value) != 2:
        return None
    name = value.get("tool", value.get("name"))
    keys = [k for k in _ARGUMENT_KEYS if k in value]
    if not isinstance(name, str) or name not in allowed or len(keys) != 1:
        return None
    arguments = value[keys[0]]
    if isinstance(arguments, str):  # some models send the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return (name, dict(arguments)) if isinstance(arguments, Mapping) else None


def read_reply(message: AIMessage, mode: str, allowed: Collection[str], call_id: str) -> Reply:
    """Read ``message`` in output ``mode``; ``allowed`` are the tools the skill may call now
    and ``call_id`` prefixes the ids of calls read from text. Text that is no call is left for
    :func:`~skilldeck.nodes.skill.parse_output` (``output`` is ``None``, no ``errors``)."""
    native = [
        {"id": str(c["id"]), "name": c["name"], "args": dict(c["args"])}
        for c in message.tool_calls
        if c["name"] != SUBMIT_TOOL
    ]
    if native or message.tool_calls or not isinstance(message.content, str):
        return Reply(native, None, [], message)
    text = _unwrap(message.content)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return Reply([], None, [], message)
    if isinstance(value, Mapping) and set(value) == {"final"} and mode != "tool":
        final = value["final"]
        if not isinstance(final, dict):
            return Reply([], None, [{"path": "$.final", "message": "must be an object"}], message)
        return Reply([], final, [], message)
    # One call, or (json and tool modes: no grammar forbids it) a list of calls.
    written = value if isinstance(value, list) and value else [value]
    found = [_as_call(item, allowed) for item in written]
    if any(f is None for f in found):
        return Reply([], None, [], message)
    calls = [
        {"id": f"{call_id}_{i}", "name": name, "args": args}
        for i, (name, args) in enumerate(f for f in found if f is not None)
    ]
    native_form = AIMessage(
        content="",
        tool_calls=calls,
        response_metadata=message.response_metadata,
        usage_metadata=message.usage_metadata,
    )
    return Reply(calls, None, [], native_form)


def to_wire(conversation: Sequence[BaseMessage], mode: str) -> list[BaseMessage]:
    """The conversation as the model is shown it in ``mode`` (see the module docstring)."""
    if mode == "tool":
        return list(conversation)
    wire: list[BaseMessage] = []
    for message in conversation:
        if isinstance(message, AIMessage) and message.tool_calls:
            calls = [{"tool": c["name"], "arguments": c["args"]} for c in message.tool_calls]
            text = json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
            wire.append(AIMessage(content=text))
        elif isinstance(message, ToolMessage):
            wire.append(HumanMessage(f"Result of {message.name}:\n{message.content}"))
        else:
            wire.append(message)
    return wire
