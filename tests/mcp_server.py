"""A small MCP server for the tests (FastMCP from the official SDK): ``python mcp_server.py``
serves stdio, ``python mcp_server.py --http PORT`` streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
import sys
import time

from mcp.server.fastmcp import Context, FastMCP

server = FastMCP("test-tools", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@server.tool()
def whoami(note: str, user_id: str | None = None, matter_id: str | None = None) -> str:
    """Say who is asking (identity comes from the runtime)."""
    return f"user={user_id} matter={matter_id} note={note}"


@server.tool()
def search_docs(query: str) -> str:
    """Search the docs."""
    return f"docs about {query}"


@server.tool()
def search_web(query: str) -> str:
    """Search the web."""
    return f"web about {query}"


@server.tool()
def trace_context(ctx: Context) -> str:  # type: ignore[type-arg]
    """The ``_meta`` the request carried, as JSON (a trace context's ``traceparent``)."""
    meta = ctx.request_context.meta
    return json.dumps(meta.model_dump(exclude_none=True) if meta is not None else {})


@server.tool()
def die() -> str:
    """The server process dies in the middle of the call."""
    os._exit(3)


@server.tool()
def stall(seconds: float) -> str:
    """Answer after ``seconds``."""
    time.sleep(seconds)
    return "late"


@server.tool()
def refuse() -> str:
    """Fail as a tool (an MCP error result)."""
    raise ValueError("refused on purpose")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.settings.host, server.settings.port = "127.0.0.1", int(sys.argv[2])
        server.run("streamable-http")
    else:
        server.run("stdio")
