"""The tool registry: LangChain tools by name, grouped in the families of seed 004.

Tool names follow ``family__action`` (``file__parse``, ``memory__lexical_search``). A tool may
have bare aliases (seed 001's ``lexical_search``). Identity arguments (``user_id``,
``matter_id``, ``thread_id``) are declared as ``InjectedToolArg``: the model never sees them and
may not pass them; the runtime binds them from the run's config. So is ``skill``, the calling
skill, for the tools that read a skill's own files, and ``matter_fields``, the matter record
fields the calling skill declares it may write (``outputs.matter``), for ``matters__update``.

A tool may say which values an argument can take right now (the files that exist): its
``metadata["choices"]`` is a function of those runtime arguments that returns ``{argument:
[values]}``. In ``schema`` mode the grammar of the next call then allows only them; the tool's
own check stands in every mode.

A tool may also give its arguments a stricter schema for grammars only: its
``metadata["grammar"]`` (a JSON Schema) is what ``schema`` mode's grammar holds a call to, when
the tool's rules are too long to send as its parameters in every prompt (``card__save`` ties a
card's ``ui_config`` to its template). It must allow only arguments the tool accepts.

Tools come in families: ``@tool_family("name")`` registers a function that makes a family's
tools from the deck's :class:`ToolHost` (its files root, stores and skills), and
:func:`family_tools` makes them. skilldeck's own families (``file``, ``element``, ``card``,
``pkm``, ``fact``, ``memory``, ``knowledge``, ``matters``, ``skill``) register that way from its
built-in plugin, as an installed plugin's do (see :mod:`skilldeck.plugins`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.tools import BaseTool
from pydantic import ValidationError

from skilldeck._internal.redact import log_error
from skilldeck._internal.registry import Registry
from skilldeck.errors import ErrorCode, SkillDeckError, ToolError

if TYPE_CHECKING:
    from skilldeck.skills.bundle import SkillBundle

__all__ = [
    "CHOICES",
    "GRAMMAR",
    "IDENTITY_KEYS",
    "RUNTIME_KEYS",
    "SERVER_USER_KEY",
    "ToolFamily",
    "ToolHost",
    "ToolRegistry",
    "ToolResult",
    "family_tools",
    "run_identity",
    "runtime_values",
    "tool_families",
    "tool_family",
]

IDENTITY_KEYS = ("user_id", "matter_id", "thread_id")
#: What the runtime binds: identity, the skill that makes the call, and what it may write.
RUNTIME_KEYS = (*IDENTITY_KEYS, "skill", "matter_fields")
#: Where LangGraph's own server puts the user its auth handler authenticated; the server sets
#: it after the client's ``configurable``, so no client chooses it (see
#: :mod:`skilldeck.langgraph_app`).
SERVER_USER_KEY = "langgraph_auth_user_id"
#: The ``metadata`` key of a tool's current argument values (see the module docstring).
CHOICES = "choices"
#: The ``metadata`` key of a tool's arguments schema for grammars (see the module docstring).
GRAMMAR = "grammar"

log = logging.getLogger("skilldeck")


def run_identity(configurable: Mapping[str, Any]) -> dict[str, Any]:
    """The run's identity (:data:`IDENTITY_KEYS`) from its config. Under LangGraph's own
    server the user is the one it authenticated, whatever ``user_id`` the client sent (none,
    without an auth handler)."""
    identity = {k: configurable.get(k) for k in IDENTITY_KEYS}
    if SERVER_USER_KEY in configurable:
        identity["user_id"] = configurable[SERVER_USER_KEY] or None
    return identity


def runtime_values(
    configurable: Mapping[str, Any], skill: str, matter_fields: Sequence[str] = ()
) -> dict[str, Any]:
    """What the runtime binds to a call of ``skill``'s: identity from the run's config, and
    the matter fields ``skill`` declares it may write."""
    return run_identity(configurable) | {"skill": skill, "matter_fields": tuple(matter_fields)}


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one tool call produced: ``ok`` with ``content``, or an error message for the model."""

    ok: bool
    content: str


class ToolRegistry:
    """Tools available to skills, by name and alias."""

    def __init__(self, tools: Iterable[BaseTool] = ()) -> None:
        self._tools: dict[str, BaseTool] = {}
        self._aliases: dict[str, str] = {}
        self._known: dict[str, set[str] | None] = {}  # each tool's arguments, once computed
        for tool in tools:
            self.register(tool)

    def register(self, tool: BaseTool, *, aliases: Iterable[str] = ()) -> None:
        """Add ``tool`` under its own name and ``aliases``. Names must be unique."""
        for name in (tool.name, *aliases):
            if name in self._tools or name in self._aliases:
                raise SkillDeckError(
                    f"tool name {name!r} is already registered; pick another name or alias",
                    code=ErrorCode.UNKNOWN_TOOL,
                )
        self._tools[tool.name] = tool
        self._aliases.update({alias: tool.name for alias in aliases})

    def resolve(self, name: str) -> str | None:
        """The canonical name of ``name`` (itself or an alias), or ``None``."""
        return name if name in self._tools else self._aliases.get(name)

    def get(self, name: str) -> BaseTool:
        canonical = self.resolve(name)
        if canonical is None:
            raise SkillDeckError(
                f"no tool named {name!r}; registered tools: {', '.join(sorted(self._tools))}",
                code=ErrorCode.UNKNOWN_TOOL,
            )
        return self._tools[canonical]

    def extended(self, tools: Iterable[tuple[BaseTool, Iterable[str]]]) -> ToolRegistry:
        """A copy of this registry with ``tools`` (each with its aliases) added; this one is
        unchanged, as a registry may be shared by several decks."""
        copy = ToolRegistry()
        copy._tools, copy._aliases = dict(self._tools), dict(self._aliases)
        for tool, aliases in tools:
            copy.register(tool, aliases=aliases)
        return copy

    def aliases(self) -> dict[str, str]:
        """Every alias and the name it stands for."""
        return dict(self._aliases)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def _arguments(self, name: str) -> set[str] | None:
        """The arguments the model may pass to ``name`` (``None``: the tool does not say)."""
        canonical = self.resolve(name) or name
        if canonical not in self._known:
            props = self.arguments_schema(name).get("properties")
            self._known[canonical] = set(props) if isinstance(props, dict) else None
        return self._known[canonical]

    def identity_params(self, name: str) -> set[str]:
        """The runtime arguments (:data:`RUNTIME_KEYS`) ``name`` takes, bound by the runtime.

        A tool whose arguments are a JSON Schema (an MCP server's) names them in its
        ``runtime_args``; a pydantic one marks them ``InjectedToolArg``."""
        tool = self.get(name)
        declared = getattr(tool, "runtime_args", None)
        if declared is not None:
            return set(declared) & set(RUNTIME_KEYS)
        full_schema: Any = tool.get_input_schema()
        call_schema: Any = tool.tool_call_schema
        full = set(full_schema.model_json_schema().get("properties", {}))
        visible = set(call_schema.model_json_schema().get("properties", {}))
        return (full - visible) & set(RUNTIME_KEYS)

    def arguments_schema(self, name: str, *, grammar: bool = False) -> dict[str, Any]:
        """The JSON Schema of the arguments the model passes to ``name``; with ``grammar``,
        the tool's stricter one for grammars, if it has one."""
        tool = self.get(name)
        strict = (tool.metadata or {}).get(GRAMMAR) if grammar else None
        if isinstance(strict, dict):
            return strict
        schema: Any = tool.tool_call_schema
        return schema if isinstance(schema, dict) else schema.model_json_schema()

    def has_choices(self, name: str) -> bool:
        """Whether ``name`` says which values its arguments can take right now."""
        return callable((self.get(name).metadata or {}).get(CHOICES))

    def choices(
        self, names: Iterable[str], identity: Mapping[str, Any]
    ) -> dict[str, dict[str, list[Any]]]:
        """The values each of ``names``' arguments can take now, for the run of ``identity``:
        ``{tool: {argument: [values]}}``, leaving out the tools that do not say or cannot tell
        (their own check stands). A function several tools share (the files and folders that
        exist) runs once for the same runtime arguments, and each tool takes the values of its
        own arguments from it."""
        found: dict[tuple[int, tuple[tuple[str, Any], ...]], dict[str, list[Any]]] = {}
        out: dict[str, dict[str, list[Any]]] = {}
        for name in names:
            find = (self.get(name).metadata or {}).get(CHOICES)
            if not callable(find):
                continue
            bound = {k: identity.get(k) for k in sorted(self.identity_params(name))}
            key = (id(find), tuple(bound.items()))
            if key not in found:
                try:
                    found[key] = {str(a): list(v) for a, v in dict(find(bound)).items()}
                except Exception:  # no workspace yet, say: nothing to narrow by
                    found[key] = {}
            own = {a: v for a, v in found[key].items() if a in self.get(name).args}
            if own:
                out[name] = own
        return out

    def invoke(self, name: str, args: Mapping[str, Any], identity: Mapping[str, Any]) -> ToolResult:
        """Run ``name`` with the model's ``args`` and the run's ``identity`` (the
        :data:`RUNTIME_KEYS` values).

        Errors are returned, not raised, so they can be fed back to the model: identity keys in
        ``args``, arguments that fail the tool's schema, and :class:`ToolError` from the tool.
        Any other exception of the tool reaches the model as its public reason only (its text,
        which may hold paths, data or a server's secrets, goes to the log, redacted).
        """
        forged = sorted(set(args) & set(IDENTITY_KEYS))
        if forged:
            return ToolResult(
                False,
                f"Error: argument(s) {', '.join(forged)} are bound by the runtime from the run's "
                "config; call the tool without them",
            )
        tool = self.get(name)
        known = self._arguments(name)
        unknown = sorted(set(args) - known) if known is not None else []
        if unknown:  # a misspelt argument must not pass for a missing one (User_Id, Query)
            return ToolResult(
                False,
                f"Error: unknown argument(s) {', '.join(map(repr, unknown))} for {name}; its "
                f"arguments are: {', '.join(sorted(known or ())) or 'none'}",
            )
        bound = {k: identity[k] for k in self.identity_params(name) if identity.get(k) is not None}
        payload: dict[str, Any] = {**args, **bound}
        try:
            result = tool.invoke(payload)
        except ToolError as exc:  # the tool's own words, written for the model
            return ToolResult(False, f"Error: {exc}")
        except ValidationError as exc:  # the model's arguments are wrong: it reads why
            return ToolResult(False, f"Error: invalid arguments for {name}: {exc}")
        except Exception as exc:
            # A failing tool is news for the model, not a reason to strand the run.
            frame = "{}; the details are in the server log"
            reason = log_error(log, f"tool {name} failed", exc, level=logging.WARNING, frame=frame)
            return ToolResult(False, f"Error: {name} failed: {reason}")
        return ToolResult(True, result if isinstance(result, str) else _to_json(result))


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


# -- tool families ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ToolHost:
    """What a tool family makes its tools from.

    ``stores`` are the deck's stores by name (``memory``, ``knowledge``, ``matters``), each a
    function that opens the store on first call (or returns it): a family whose store the host
    does not have makes no tools. ``skills`` are the deck's skills (the ``skill`` family reads
    their files); ``claim_matters``: the deck's matter policy is ``claim`` (a matter nobody
    owns becomes the run's user's).
    """

    files_root: Path | None = None
    stores: Mapping[str, Callable[[], Any]] = field(default_factory=dict)
    skills: Sequence[SkillBundle] = ()
    claim_matters: bool = True


@dataclass(frozen=True, slots=True)
class ToolFamily:
    """A registered family: ``make(host)`` makes its tools; ``aliases`` are each tool's other
    names (``{tool name: (alias, ...)}``)."""

    name: str
    make: Callable[[ToolHost], Iterable[BaseTool]]
    aliases: Mapping[str, tuple[str, ...]]


MakeTools = TypeVar("MakeTools", bound=Callable[[ToolHost], Iterable[BaseTool]])
_FAMILIES: Registry[ToolFamily] = Registry("tool family", '@tool_family("name")')


def tool_family(
    name: str, *, aliases: Mapping[str, str | Sequence[str]] | None = None
) -> Callable[[MakeTools], MakeTools]:
    """Register a function ``(host: ToolHost) -> tools`` as the tool family ``name``;
    ``aliases`` gives tools other names (``{"memory__lexical_search": "lexical_search"}``).

    Raises:
        PluginError: another function holds ``name``.
    """
    named = {
        tool: (alias,) if isinstance(alias, str) else tuple(alias)
        for tool, alias in (aliases or {}).items()
    }

    def register(make: MakeTools) -> MakeTools:
        _FAMILIES.add(name, ToolFamily(name, make, named), origin=make)
        return make

    return register


def tool_families() -> list[str]:
    """The registered families' names (the installed plugins' included), in the order they
    registered."""
    return _FAMILIES.names()


def family_tools(
    host: ToolHost, families: Iterable[str] | None = None
) -> list[tuple[BaseTool, tuple[str, ...]]]:
    """The tools of ``families`` (default: every registered one) made for ``host``, each with
    its aliases: what :meth:`ToolRegistry.extended` takes.

    Raises:
        SkillDeckError: a family is not registered (``UNKNOWN_TOOL``).
    """
    chosen: list[ToolFamily] = []
    for name in _FAMILIES.names() if families is None else families:
        family = _FAMILIES.get(name)
        if family is None:
            raise SkillDeckError(_FAMILIES.unknown(name), code=ErrorCode.UNKNOWN_TOOL)
        chosen.append(family)
    return [(tool, f.aliases.get(tool.name, ())) for f in chosen for tool in f.make(host)]
