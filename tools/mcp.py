"""Tools served over MCP (stdio and streamable HTTP), through ``langchain-mcp-adapters``.

Servers are configured in a ``mcp.json`` (the common ``{"mcpServers": {name: {...}}}`` shape:
``command``/``args``/``env``/``cwd`` for stdio, ``url``/``headers`` for streamable HTTP) beside
the skills, or named by ``SKILLDECK_MCP_CONFIG``. A skill lists a server's tools as
``mcp:<server>/<tool>``, or a family with a wildcard (``mcp:<server>/search_*``,
``mcp:<server>/*``); each is registered under a name a model accepts, ``mcp__<server>__<tool>``.

They run under the rules of the built-in tools: only listed tools run, and identity arguments
(``user_id``, ``matter_id``, ``thread_id``) that a server's tool declares are hidden from the
model and bound by the runtime, so the model can never pass them. Each call opens its own
session (the adapters' default) and has a deadline: a server that dies or stalls mid-call gives
the model a tool error it can act on, and nothing waits forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jsonschema import Draft202012Validator
from langchain_core.tools import BaseTool, ToolException

from skilldeck._internal import tracing
from skilldeck._internal.documents import DocumentError, parse_json
from skilldeck._internal.redact import log_error
from skilldeck.errors import MissingExtraError, SkillDeckError, ToolError, UntrustedScriptsError
from skilldeck.skills.bundle import SkillBundle
from skilldeck.tools.registry import IDENTITY_KEYS

if TYPE_CHECKING:  # the mcp extra's
    from langchain_mcp_adapters.interceptors import MCPToolCallRequest, MCPToolCallResult

__all__ = [
    "MCP_PREFIX",
    "McpServer",
    "McpTool",
    "expand_mcp_names",
    "load_mcp_config",
    "mcp_servers_in",
    "mcp_tools",
    "tools_for_skills",
]

#: How a skill names an MCP tool: ``mcp:<server>/<tool>``.
MCP_PREFIX = "mcp:"
_NAME = re.compile(r"mcp:(?P<server>[A-Za-z0-9_.-]+)/(?P<tool>[^/\s]+)")
_SAFE = re.compile(r"[^A-Za-z0-9_]")
T = TypeVar("T")
log = logging.getLogger("skilldeck")

_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mcpServers": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "cwd": {"type": "string"},
                    "url": {"type": "string", "pattern": "^https?://"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "transport": {"enum": ["stdio", "streamable_http", "http"]},
                },
                "oneOf": [{"required": ["command"]}, {"required": ["url"]}],
            },
        }
    },
    "required": ["mcpServers"],
}


@dataclass(frozen=True, slots=True)
class McpServer:
    """One configured server: its name, the adapters' connection, and the file it came from."""

    name: str
    connection: Mapping[str, Any]
    source: str


def load_mcp_config(file: Path) -> dict[str, McpServer]:
    """The servers of one ``mcp.json``.

    Raises:
        SkillDeckError: the file is not JSON of that shape (naming the file and the key).
    """
    try:
        value = parse_json(file.read_text("utf-8"))
    except DocumentError as exc:  # our own words: where the JSON is wrong
        raise SkillDeckError(f"{file}: cannot read the MCP configuration: {exc}") from None
    except UnicodeDecodeError:
        raise SkillDeckError(f"{file}: the MCP configuration is not UTF-8 text") from None
    except OSError as exc:
        raise SkillDeckError(f"{file}: cannot read the MCP configuration: {exc.strerror}") from None
    errors = sorted(Draft202012Validator(_CONFIG_SCHEMA).iter_errors(value), key=str)
    if errors:
        where = "$" + "".join(f".{p}" for p in errors[0].absolute_path)
        raise SkillDeckError(
            f"{file}: {where}: {errors[0].message} (each server has a 'command' (stdio) or a "
            "'url' (streamable HTTP))"
        )
    servers = {}
    for name, spec in value["mcpServers"].items():
        if "command" in spec:
            connection: dict[str, Any] = {
                "transport": "stdio",
                "command": spec["command"],
                "args": list(spec.get("args", ())),
            }
            if "env" in spec:
                connection["env"] = dict(spec["env"])
            if "cwd" in spec:
                connection["cwd"] = str((file.parent / spec["cwd"]).resolve())
        else:
            connection = {"transport": "streamable_http", "url": spec["url"]}
            if "headers" in spec:
                connection["headers"] = dict(spec["headers"])
        servers[name] = McpServer(name, connection, str(file))
    return servers


def mcp_servers_in(names: Iterable[str]) -> set[str]:
    """The servers that ``mcp:<server>/...`` names refer to."""
    return {m.group("server") for n in names if (m := _NAME.fullmatch(n))}


def registered_name(server: str, tool: str) -> str:
    """The name an MCP tool is registered under: one a model's tool calls accept."""
    return _SAFE.sub("_", f"mcp__{server}__{tool}")[:64]


def expand_mcp_names(names: Sequence[str], available: Mapping[str, str]) -> list[str]:
    """``names`` with each ``mcp:`` entry replaced by the registered names it matches
    (``available``: ``mcp:<server>/<tool>`` to registered name); an entry that matches nothing
    is kept, for the deck's check to report."""
    out: list[str] = []
    for name in names:
        if not name.startswith(MCP_PREFIX):
            out.append(name)
            continue
        matched = [reg for alias, reg in available.items() if fnmatchcase(alias, name)]
        out.extend(matched or [name])
    return list(dict.fromkeys(out))


def run_sync(make: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """Run a coroutine to completion from synchronous code, within ``timeout_s``: in this
    thread, or in a worker thread when this one already runs an event loop."""

    async def bounded() -> T:
        return await asyncio.wait_for(make(), timeout_s)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    # In this thread's context: the run's callbacks and its trace context go with the call.
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(context.run, asyncio.run, bounded()).result()


class McpTool(BaseTool):
    """An MCP server's tool as a skill calls it: identity arguments hidden and bound by the
    runtime (``runtime_args``), arguments checked against the server's schema, a deadline."""

    inner: BaseTool
    runtime_args: frozenset[str] = frozenset()
    timeout_s: float = 30.0

    def _run(self, **kwargs: Any) -> str:
        visible = {k: v for k, v in kwargs.items() if k not in self.runtime_args}
        schema = self.args_schema if isinstance(self.args_schema, dict) else {}
        problems = [e.message for e in Draft202012Validator(schema).iter_errors(visible)]
        if problems:
            raise ToolError(f"invalid arguments for {self.name}: {problems[0]}")
        try:
            result = run_sync(lambda: self.inner.ainvoke(kwargs), self.timeout_s)
        except ToolException as exc:  # the tool's own error result (isError)
            raise ToolError(
                f"the tool reported an error: {_text(exc.args[0] if exc.args else exc)}"
            ) from None
        except TimeoutError:
            raise ToolError(
                f"the MCP server did not answer within {self.timeout_s:g} s; the call was "
                "abandoned (try again, or do without it)"
            ) from None
        except Exception as exc:  # a dead or broken server: its text goes to the log only
            frame = "the MCP server failed: {}; the details are in the server log"
            reason = log_error(log, f"{self.name} failed", exc, level=logging.WARNING, frame=frame)
            raise ToolError(str(reason)) from None
        return _text(result)


def _text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, tuple):  # (content, artifact)
        result = result[0]
    if isinstance(result, list):
        parts = [b.get("text", "") if isinstance(b, dict) else str(b) for b in result]
        return "\n".join(p for p in parts if p)
    return str(getattr(result, "content", result))


class _TraceContextMeta:
    """A tool call interceptor (tracing on): the call's request carries the run's trace context
    in its ``_meta`` (``traceparent``, ``tracestate``), as the MCP trace-context proposal has
    it. The adapters' own call cannot pass ``_meta``, so it is made here, on a session of its
    own as the adapters make one per call."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    async def __call__(
        self,
        request: MCPToolCallRequest,
        handler: Callable[[MCPToolCallRequest], Awaitable[MCPToolCallResult]],
    ) -> MCPToolCallResult:
        meta = tracing.trace_meta()
        if not meta:
            return await handler(request)
        from langchain_mcp_adapters.sessions import create_session

        failed: Exception | None = None
        result: MCPToolCallResult | None = None
        async with create_session(self.connection) as session:
            await session.initialize()
            try:
                result = await session.call_tool(request.name, request.args, meta=meta)
            except Exception as exc:  # raised outside the session, which may swallow it
                failed = exc
        if failed is not None:
            raise failed
        assert result is not None  # the call returned, or failed above
        return result


def mcp_tools(
    servers: Mapping[str, McpServer], wanted: Iterable[str], timeout_s: float
) -> list[tuple[McpTool, str]]:
    """The tools of the ``wanted`` servers, each with its ``mcp:<server>/<tool>`` alias.

    Raises:
        SkillDeckError: a wanted server is not configured, or does not list its tools.
    """
    try:
        from langchain_mcp_adapters.client import MultiServerMCPClient
    except ImportError:
        raise MissingExtraError("langchain-mcp-adapters", "mcp") from None

    out: list[tuple[McpTool, str]] = []
    for name in sorted(wanted):
        server = servers.get(name)
        if server is None:
            known = ", ".join(sorted(servers)) or "none"
            raise SkillDeckError(
                f"MCP server {name!r} is not configured (servers: {known}); add it to a "
                "mcp.json beside the skills or to SKILLDECK_MCP_CONFIG"
            )
        connection: Any = dict(server.connection)
        traced: list[Any] | None = None  # the adapters' protocol is not typed to be met
        if tracing.tracer() is not None:
            traced = [_TraceContextMeta(connection)]
        client = MultiServerMCPClient({name: connection}, tool_interceptors=traced)

        def listing(c: Any = client, n: str = name) -> Awaitable[list[BaseTool]]:
            return c.get_tools(server_name=n)  # type: ignore[no-any-return]

        what = f"MCP server {name!r} ({server.source}) did not list its tools"
        try:
            listed = run_sync(listing, timeout_s)
        except TimeoutError:
            raise SkillDeckError(f"{what}: timed out after {timeout_s:g} s") from None
        except Exception as exc:
            reason = log_error(log, what, exc, frame="{}; the details are in the log")
            raise SkillDeckError(f"{what}: {reason}") from None
        for tool in listed:
            schema = dict(tool.args_schema) if isinstance(tool.args_schema, dict) else {}
            props = dict(schema.get("properties") or {})
            hidden = frozenset(k for k in props if k in IDENTITY_KEYS)
            visible = {
                **schema,
                "properties": {k: v for k, v in props.items() if k not in hidden},
                "required": [r for r in schema.get("required", ()) if r not in hidden],
            }
            tool.handle_tool_error = False  # its error results raise: ours say they are errors
            wrapped = McpTool(
                name=registered_name(name, tool.name),
                description=tool.description or f"{tool.name} (MCP server {name})",
                args_schema=visible,
                inner=tool,
                runtime_args=hidden,
                timeout_s=timeout_s,
            )
            out.append((wrapped, f"{MCP_PREFIX}{name}/{tool.name}"))
    return out


def tools_for_skills(
    bundles: Sequence[SkillBundle], config: str | None, timeout_s: float
) -> list[tuple[McpTool, str]]:
    """The tools of every MCP server that ``bundles`` name (in ``tools`` or ``allowed-tools``),
    from ``config`` and the ``mcp.json`` beside trusted skills; no server is contacted when no
    skill names one.

    Raises:
        UntrustedScriptsError: a server is configured only in a ``mcp.json`` beside bundles
            the deck does not trust.
        SkillDeckError: a configuration is wrong, or a server is missing or does not answer.
    """
    wanted = mcp_servers_in(t for b in bundles for t in (*b.tools, *b.allowed_tools))
    if not wanted:
        return []
    files = [Path(config)] if config else []
    if files and not files[0].is_file():
        raise SkillDeckError(f"SKILLDECK_MCP_CONFIG {config!r} is not a file")
    # A mcp.json beside the skills came with them: its commands run only if a bundle beside
    # it is trusted, as the bundles' own scripts do.
    beside = dict.fromkeys(b.path.parent / "mcp.json" for b in bundles)
    trusted = {b.path.parent / "mcp.json" for b in bundles if b.trusted}
    files += [f for f in beside if f.is_file() and f in trusted]
    servers: dict[str, McpServer] = {}
    for file in files:
        for name, server in load_mcp_config(file).items():
            servers.setdefault(name, server)  # the first file that names a server wins
    for file in (f for f in beside if f.is_file() and f not in trusted):
        for name in sorted((wanted & load_mcp_config(file).keys()) - servers.keys()):
            user = next(b for b in bundles if name in mcp_servers_in((*b.tools, *b.allowed_tools)))
            raise UntrustedScriptsError(user.name, str(user.path), [f"{file} (server {name!r})"])
    return mcp_tools(servers, wanted, timeout_s)
