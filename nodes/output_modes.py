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

Each mode is one :class:`OutputMode` object, registered by name with ``@output_mode("name")``
(a plugin adds its own the same way, see :mod:`skilldeck.plugins`): it binds the model for a
reply (:meth:`~OutputMode.bind`) or a JSON step (:meth:`~OutputMode.bind_step`), shows the
conversation as the model reads it (:meth:`~OutputMode.wire`), reads the reply
(:meth:`~OutputMode.read`), and says what the system prompt tells the model of the output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from skilldeck._internal.registry import Registry
from skilldeck.errors import SkillDeckError
from skilldeck.skills.contract import turn_schema
from skilldeck.skills.pins import pinned

if TYPE_CHECKING:
    from skilldeck.tools.registry import ToolRegistry

__all__ = [
    "SUBMIT_TOOL",
    "JsonMode",
    "Offer",
    "OutputMode",
    "Reply",
    "SchemaMode",
    "ToolMode",
    "find_output_mode",
    "output_mode",
    "output_modes",
]

SUBMIT_TOOL = "submit_output"

_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*\n(.*)\n?```\Z", re.DOTALL)
_TAGGED = re.compile(r"\A<tool_call>\s*(.*?)\s*</tool_call>\Z", re.DOTALL)
_ARGUMENT_KEYS = ("arguments", "args", "parameters")
_ENVELOPE = (
    'Each reply is one JSON object: {"tool": NAME, "arguments": {...}} calls a tool (its '
    'result comes back to you), and {"final": OUTPUT} ends your turn with the output.'
)


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


@dataclass(frozen=True, slots=True)
class Offer:
    """What one reply may hold: the request an output mode binds a model for.

    ``use``: ``tools`` (a tool call or the output), ``final`` (the output only) or ``calls`` (a
    tool call only). ``tools`` are the names of the tools offered now, in the deck's
    ``registry``; ``output_schema`` is the skill's, ``pins`` the output fields whose values the
    run fixes (``None``: none now); ``first_tool`` the tool a ``calls`` reply must call
    (``None``: any). ``grammar_tools()`` gives the offered tools' arguments schemas for a
    grammar, with the values they can take now (computed on request: it may read files).
    """

    use: Literal["tools", "final", "calls"]
    tools: tuple[str, ...]
    registry: ToolRegistry
    output_schema: Mapping[str, Any]
    pins: Mapping[tuple[str, ...], Any] | None
    first_tool: str | None
    grammar_tools: Callable[[], dict[str, dict[str, Any]]]


class OutputMode:
    """How a skill's model is asked for a reply and how the reply is read: one object per
    mode, without state (the engine makes one per registered class).

    The base class is a text mode: calls travel as ``{"tool", "arguments"}`` envelopes, results
    as user messages, and the reply's text is read for calls and for the output. A subclass
    sets the class attributes and implements :meth:`bind`.
    """

    #: The name it is registered under (set by :func:`output_mode`).
    name: ClassVar[str] = ""
    #: What the system prompt says of how the output is returned.
    how: ClassVar[str] = ""
    #: Tools are bound natively (otherwise the system prompt lists them, and calls and results
    #: travel as text).
    native_tools: ClassVar[bool] = False
    #: The system prompt carries the output's JSON Schema (no grammar or function does).
    schema_in_prompt: ClassVar[bool] = False
    #: A reply ``{"final": OUTPUT}`` is the output (otherwise it is read as it is).
    final_envelope: ClassVar[bool] = True
    #: A binding may hold one run's values (pinned fields, the values tools' arguments can take
    #: now): then it is made per call and never kept.
    holds_values: ClassVar[bool] = False

    def bind(self, model: Any, offer: Offer) -> Any:
        """``model`` bound for a reply that may hold what ``offer`` says."""
        raise NotImplementedError

    def bind_step(self, model: Any, name: str, schema: Mapping[str, Any] | None) -> Any:
        """``model`` bound for a JSON step called ``name`` (a plan, a rewrite, a view, a
        routing answer) whose answer ``schema`` describes: with :meth:`step_format`."""
        return model.bind(response_format=self.step_format(name, schema))

    def step_format(self, name: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``response_format`` of a JSON step (JSON mode; ``schema`` mode holds it to
        ``schema``)."""
        return {"type": "json_object"}

    def wire(self, conversation: Sequence[BaseMessage]) -> list[BaseMessage]:
        """``conversation`` as the model is shown it (see the module docstring)."""
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

    def read(self, message: AIMessage, allowed: Collection[str], call_id: str) -> Reply:
        """Read ``message``; ``allowed`` are the tools the skill may call now and ``call_id``
        prefixes the ids of calls read from text. Text that is no call is left for
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
        if isinstance(value, Mapping) and set(value) == {"final"} and self.final_envelope:
            final = value["final"]
            if not isinstance(final, dict):
                errors = [{"path": "$.final", "message": "must be an object"}]
                return Reply([], None, errors, message)
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

    def example_reply(self, tool: str | None, reply: Mapping[str, Any]) -> tuple[str, Any]:
        """How a worked example's ``reply`` (a call of ``tool``, or ``{"final": ...}`` when
        ``tool`` is ``None``) is shown: a lead-in and the value written as JSON after it."""
        return ("", reply) if tool is not None else ("final output ", reply["final"])


M = TypeVar("M", bound=type[OutputMode])
_MODES: Registry[type[OutputMode]] = Registry("output mode", '@output_mode("name")')
_OBJECTS: dict[type[OutputMode], OutputMode] = {}


def output_mode(name: str) -> Callable[[M], M]:
    """Register an :class:`OutputMode` subclass (constructed without arguments) as the output
    mode ``name`` (what ``execution_config.output_mode`` names).

    Raises:
        PluginError: another class holds ``name``.
    """

    def register(cls: M) -> M:
        if not (isinstance(cls, type) and issubclass(cls, OutputMode)):
            raise TypeError(f"output mode {name!r} must be an OutputMode subclass, not {cls!r}")
        _MODES.add(name, cls)
        cls.name = name
        return cls

    return register


def output_modes() -> list[str]:
    """The registered output modes' names (the installed plugins' included)."""
    return _MODES.names()


def find_output_mode(name: str) -> OutputMode:
    """The output mode ``name``.

    Raises:
        SkillDeckError: no output mode of that name is registered.
    """
    cls = _MODES.get(name)
    if cls is None:
        raise SkillDeckError(_MODES.unknown(name))
    found = _OBJECTS.get(cls)
    if found is None:
        found = _OBJECTS.setdefault(cls, cls())
    return found


@output_mode("schema")
class SchemaMode(OutputMode):
    """Every reply held to one strict JSON Schema: an allowed call, or the output."""

    how = _ENVELOPE
    holds_values = True

    def bind(self, model: Any, offer: Offer) -> Any:
        offered = {} if offer.use == "final" else offer.grammar_tools()
        output = pinned(offer.output_schema, offer.pins) if offer.pins else offer.output_schema
        return self.bind_step(
            model, "reply", turn_schema(output, offered, final=offer.use != "calls")
        )

    def step_format(self, name: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
        if schema is None:
            return super().step_format(name, schema)
        return {
            "type": "json_schema",
            "json_schema": {"name": name, "strict": True, "schema": schema},
        }

    def example_reply(self, tool: str | None, reply: Mapping[str, Any]) -> tuple[str, Any]:
        return "", reply  # the envelope the grammar holds, ``{"final": ...}`` included


@output_mode("tool")
class ToolMode(OutputMode):
    """Native tool calls; the output through a ``submit_output`` call."""

    how = f'Return it by calling the "{SUBMIT_TOOL}" tool with the object as its arguments.'
    native_tools = True
    final_envelope = False

    def bind(self, model: Any, offer: Offer) -> Any:
        specs: list[Any] = [offer.registry.get(t) for t in offer.tools]
        if offer.use == "calls":  # no submit_output, and a call is required
            first = offer.first_tool
            choice = offer.registry.get(first).name if first else "required"
            return model.bind_tools(specs, tool_choice=choice)
        return model.bind_tools([*(specs if offer.use == "tools" else []), _submit(offer)])

    def wire(self, conversation: Sequence[BaseMessage]) -> list[BaseMessage]:
        return list(conversation)

    def example_reply(self, tool: str | None, reply: Mapping[str, Any]) -> tuple[str, Any]:
        # A call is described, not written as JSON: a model that sees calls written as
        # content starts writing its own calls that way.
        if tool is None:
            return super().example_reply(tool, reply)
        return f"call {tool} with ", reply["arguments"]


@output_mode("json")
class JsonMode(OutputMode):
    """JSON mode: a call in the envelope, or the output object itself."""

    how = (
        _ENVELOPE.replace('{"final": OUTPUT}', "the output object itself")
        + " No prose and no code fence."
    )
    schema_in_prompt = True

    def bind(self, model: Any, offer: Offer) -> Any:
        # A reply out of turn is refused after it (see the skill node).
        return model.bind(response_format={"type": "json_object"})


def _submit(offer: Offer) -> dict[str, Any]:
    """The function that carries the final output in ``tool`` mode."""
    return {
        "type": "function",
        "function": {
            "name": SUBMIT_TOOL,
            "description": "Submit the final output of the skill (the four-part contract).",
            "parameters": offer.output_schema,
        },
    }


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
