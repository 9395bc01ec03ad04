"""The retrieval tools of seed 002 as LangChain tools, with its bare names as aliases.

``knowledge__rag_retrieve`` and ``knowledge__table_rag_retrieve`` search the knowledge base;
``file__local_search`` searches the local files, a different source (seed 002 tries it last and
never takes one source's miss for the other's). Local search is jailed to the files root, or to
the matter's folder in it when the run binds a ``matter_id``, as the other ``file__*`` tools are.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel, ConfigDict, Field

from skilldeck.errors import ToolError
from skilldeck.tools.files import matter_folder
from skilldeck.tools.knowledge import KnowledgeBase
from skilldeck.tools.local_files import local_file_search
from skilldeck.tools.registry import ToolHost, tool_family

__all__ = ["KNOWLEDGE_ALIASES", "knowledge_tools"]

KNOWLEDGE_ALIASES = {
    "knowledge__rag_retrieve": "rag_retrieve",
    "knowledge__table_rag_retrieve": "table_rag_retrieve",
    "file__local_search": "local_file_search",
}

_QUERY = "Rewritten for recall: entity, time scope, attributes, synonyms and aliases."


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RagArgs(_Args):
    query: str = Field(min_length=1, description=_QUERY)
    top_k: int = Field(
        default=30, ge=1, le=100, description="30 for a fact, 50 for synthesis, 100 for recall."
    )


class TableArgs(_Args):
    query: str = Field(min_length=1, description=_QUERY)
    max_rows: int = Field(default=20, ge=1, le=200, description="Most rows to show.")


class LocalSearchArgs(_Args):
    query: str = Field(min_length=1, description='Words to find; "quoted phrases" contiguous.')
    root: str | None = Field(
        default=None, description="A folder inside the files root to search; default all of it."
    )
    max_results: int = Field(default=20, ge=1, le=200, description="Most lines to return.")
    matter_id: Annotated[str | None, InjectedToolArg] = None


def knowledge_tools(
    kb: Callable[[], KnowledgeBase], files_root: str | Path | None
) -> list[BaseTool]:
    """The three retrieval tools; ``kb`` is called on each knowledge-base call, so pass a
    lazy, cached factory (:class:`skilldeck.services.Lazy`) to open the base on first use."""
    base = Path(files_root) if files_root is not None else None

    def rag_retrieve(query: str, top_k: int = 30) -> dict[str, Any]:
        return kb().rag_retrieve(query, top_k)

    def table_rag_retrieve(query: str, max_rows: int = 20) -> dict[str, Any]:
        return kb().table_rag_retrieve(query, max_rows)

    def local_search(
        query: str, root: str | None = None, max_results: int = 20, matter_id: str | None = None
    ) -> dict[str, Any]:
        folder = matter_folder(base, matter_id)
        if not folder.is_dir():
            raise ToolError("there are no local files for this matter")
        return local_file_search(folder, query, root, max_results)

    return [
        StructuredTool.from_function(
            rag_retrieve,
            name="knowledge__rag_retrieve",
            description=(
                "Search the knowledge base's documents (hybrid keyword + semantic). For "
                "concepts, definitions, workflows, policies. Cite each chunk used."
            ),
            args_schema=RagArgs,
        ),
        StructuredTool.from_function(
            table_rag_retrieve,
            name="knowledge__table_rag_retrieve",
            description=(
                "Search the knowledge base's table rows (CSV/XLSX). For values, prices, "
                "quantities, lists, comparisons and unclear cases. Follow its [INSTRUCTION]."
            ),
            args_schema=TableArgs,
        ),
        StructuredTool.from_function(
            local_search,
            name="file__local_search",
            description=(
                "Search the lines of local text files (not the knowledge base: another "
                "source). Use after rag_retrieve and table_rag_retrieve fall short."
            ),
            args_schema=LocalSearchArgs,
        ),
    ]


@tool_family("knowledge", aliases=KNOWLEDGE_ALIASES)
def _knowledge_family(host: ToolHost) -> list[BaseTool]:
    kb = host.stores.get("knowledge")
    return knowledge_tools(kb, host.files_root) if kb is not None else []
