"""The memory tools as LangChain tools: ``memory__*`` with seed 001's bare names as aliases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel, ConfigDict, Field

from skilldeck.errors import ToolError
from skilldeck.tools.memory import Memory
from skilldeck.tools.registry import ToolHost, tool_family

__all__ = ["MEMORY_ALIASES", "memory_tools"]

UserId = Annotated[str | None, InjectedToolArg]

MEMORY_ALIASES = {
    "memory__messages_list": "messages_list",
    "memory__lexical_search": "lexical_search",
    "memory__semantic_search": "semantic_search",
    "memory__neighbors": "neighbors",
}


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TimeRange(_Args):
    since: str | None = Field(default=None, description="ISO 8601, inclusive; Z allowed.")
    until: str | None = Field(default=None, description="ISO 8601, exclusive; Z allowed.")


class Filter(_Args):
    role: str | None = Field(default=None, description="user, assistant, ... or 'any'.")
    time_range: TimeRange | None = None


class ListArgs(_Args):
    since: str | None = Field(default=None, description="ISO 8601, inclusive; Z allowed.")
    until: str | None = Field(default=None, description="ISO 8601, exclusive; Z allowed.")
    role: str | None = Field(default=None, description="user, assistant, ... or 'any'.")
    page_size: int = Field(default=50, ge=1, le=200)
    cursor: str | None = None
    user_id: UserId = None


class LexicalArgs(_Args):
    query_text: str = Field(description='Words to match; "quoted phrases" match contiguously.')
    filter: Filter | None = Field(default=None, description="Required: role and time_range.")
    page_size: int = Field(default=20, ge=1, le=100)
    cursor: str | None = None
    user_id: UserId = None


class SemanticArgs(_Args):
    query_text: str | None = None
    query_embedding: list[float] | None = None
    filter: Filter | None = Field(default=None, description="Required: role and time_range.")
    top_k: int = Field(default=10, ge=1, le=100)
    min_score: float | None = Field(default=None, ge=-1, le=1)
    user_id: UserId = None


class NeighborsArgs(_Args):
    message_id: str
    before: int = Field(default=8, ge=0, le=50)
    after: int = Field(default=0, ge=0, le=50)
    user_id: UserId = None


def _user(user_id: str | None) -> str:
    if not user_id:
        raise ToolError("memory tools need a user: start the run with user_id")
    return user_id


def _dump(value: BaseModel | None) -> dict[str, Any] | None:
    return None if value is None else value.model_dump(exclude_none=True)


def memory_tools(memory: Callable[[], Memory]) -> list[BaseTool]:
    """The four memory tools; ``memory`` is called on first use, so opening is lazy."""

    def messages_list(user_id: str | None = None, **kw: Any) -> dict[str, Any]:
        return memory().messages_list(_user(user_id), **kw)

    def lexical_search(user_id: str | None = None, **kw: Any) -> dict[str, Any]:
        kw["filter"] = _dump(kw.get("filter"))
        return memory().lexical_search(_user(user_id), **kw)

    def semantic_search(user_id: str | None = None, **kw: Any) -> dict[str, Any]:
        kw["filter"] = _dump(kw.get("filter"))
        return memory().semantic_search(_user(user_id), **kw)

    def neighbors(user_id: str | None = None, **kw: Any) -> dict[str, Any]:
        return memory().neighbors(_user(user_id), **kw)

    specs: list[tuple[Callable[..., dict[str, Any]], type[BaseModel], str]] = [
        (messages_list, ListArgs, "List messages in time order. Needs role and since/until."),
        (lexical_search, LexicalArgs, "BM25 keyword search. Needs filter.role and a time range."),
        (semantic_search, SemanticArgs, "Semantic search. Needs filter.role and a time range."),
        (neighbors, NeighborsArgs, "Messages around an anchor in its thread (before=8)."),
    ]
    return [
        StructuredTool.from_function(
            fn, name=f"memory__{fn.__name__}", description=doc, args_schema=schema
        )
        for fn, schema, doc in specs
    ]


@tool_family("memory", aliases=MEMORY_ALIASES)
def _memory_family(host: ToolHost) -> list[BaseTool]:
    memory = host.stores.get("memory")
    return memory_tools(memory) if memory is not None else []
