"""``fact__read``: one raw record of a Memex-style workspace, by its ``fact_id``.

Raw records live in the matter's ``Facts/YYYY/MM/DD.md``, each under a header
``## <id:ts_N> HH:MM:SS "{json}"`` (the quoted JSON holds the record's metadata), its text on
the lines after it. A ``fact_id`` names the file and the record: ``2026/05/25.md#ts_1``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel, ConfigDict, Field

from skilldeck.errors import ToolError
from skilldeck.tools.files import jailed_path, matter_folder
from skilldeck.tools.registry import ToolHost, tool_family

__all__ = ["FACTS_DIR", "fact_tools", "read_fact"]

FACTS_DIR = "Facts"
_FACT_ID = re.compile(r"(?P<file>\d{4}/\d{2}/\d{2}\.md)#(?P<id>[A-Za-z0-9_-]+)")
_HEADER = re.compile(
    r"^## <id:(?P<id>[A-Za-z0-9_-]+)>\s*(?P<time>\d{1,2}:\d{2}(?::\d{2})?)?\s*(?P<meta>.*)$"
)


def _meta(raw: str) -> Any:
    """The header's metadata: a quoted JSON string of an object, or ``None``."""
    value: Any = raw.strip()
    for _ in range(2):  # "{\"k\": 1}" decodes to a string, which decodes to the object
        if not isinstance(value, str) or not value:
            break
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def read_fact(workspace: Path, fact_id: str) -> dict[str, Any]:
    """The record ``fact_id`` of ``workspace/Facts/``: its id, time, metadata and text.

    Raises:
        ToolError: the id is malformed, or the file or the record does not exist.
    """
    match = _FACT_ID.fullmatch(fact_id.strip())
    if match is None:
        raise ToolError(
            f"fact_id {fact_id!r} must look like 2026/05/25.md#ts_1 (the day's file, then #id)"
        )
    path = jailed_path(workspace, f"{FACTS_DIR}/{match.group('file')}")
    if not path.is_file():
        raise ToolError(f"there is no {FACTS_DIR}/{match.group('file')} in the workspace")
    lines = path.read_text("utf-8").splitlines()
    found: dict[str, Any] | None = None
    body: list[str] = []
    for line in lines:
        header = _HEADER.match(line)
        if header is not None:
            if found is not None:
                break
            if header.group("id") == match.group("id"):
                found = {"time": header.group("time"), "meta": _meta(header.group("meta"))}
            continue
        if found is not None:
            body.append(line)
    if found is None:
        raise ToolError(f"{FACTS_DIR}/{match.group('file')} has no record {match.group('id')!r}")
    return {"fact_id": fact_id, **found, "content": "\n".join(body).strip()}


class _ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fact_id: str = Field(description='The record\'s fact_id, e.g. "2026/05/25.md#ts_1".')
    matter_id: Annotated[str | None, InjectedToolArg] = None


def fact_tools(root: str | Path | None) -> list[BaseTool]:
    """``fact__read``, reading under ``root/<matter_id>/Facts``."""
    base = Path(root) if root is not None else None

    def read(fact_id: str, matter_id: str | None = None) -> dict[str, Any]:
        return read_fact(matter_folder(base, matter_id), fact_id)

    return [
        StructuredTool.from_function(
            read,
            name="fact__read",
            description="Read one raw record (its text, time and metadata) by its fact_id.",
            args_schema=_ReadArgs,
        )
    ]


@tool_family("fact")
def _fact_family(host: ToolHost) -> list[BaseTool]:
    return fact_tools(host.files_root)
