"""``skill__read_file``: a skill reads its own ``references/``, ``scripts/`` and ``assets/``.

Tier 3 of the Agent Skills standard's progressive disclosure: the system prompt lists a
skill's files, and the model reads one when its instructions call for it, instead of every
file riding in every prompt. The calling skill is bound by the runtime (like identity), so a
skill reads only its own files: only those the loader listed, and never through a symlink that
leaves the bundle (checked again at read time, since a file may change after loading).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel, ConfigDict, Field

from skilldeck.errors import ToolError
from skilldeck.skills.bundle import READ_FILE_TOOL
from skilldeck.skills.loader import MAX_FILE_BYTES
from skilldeck.tools.registry import ToolHost, tool_family

__all__ = ["MAX_READ_CHARS", "skill_file_tool"]

#: Characters one call returns; a longer file is read in pages with ``offset``.
MAX_READ_CHARS = 20_000


class _ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description='A file of this skill, as listed: "references/guide.md".')
    offset: int = Field(default=0, ge=0, description="The character to start from (paging).")
    skill: Annotated[str | None, InjectedToolArg] = None


def skill_file_tool(files: Mapping[str, tuple[Path, tuple[str, ...]]]) -> BaseTool:
    """The tool over ``files``: each skill's folder and the relative paths it may read."""

    def read(path: str, offset: int = 0, skill: str | None = None) -> str:
        if skill is None or skill not in files:
            raise ToolError(f"{READ_FILE_TOOL} reads the calling skill's files; no skill is bound")
        folder, listed = files[skill]
        wanted = path.strip().removeprefix("./")
        if wanted not in listed:
            close = difflib.get_close_matches(wanted, listed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ToolError(
                f"{path!r} is not a file of skill {skill!r}{hint}; its files: "
                f"{', '.join(listed) or 'none'}"
            )
        file = folder / wanted
        if not file.resolve().is_relative_to(folder.resolve()):
            raise ToolError(f"{path!r} links outside the skill's folder; it is not read")
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ToolError(
                f"{path!r} is {size:,} bytes; files of at most {MAX_FILE_BYTES:,} bytes are read"
            )
        data = file.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return f"{path} is a binary file of {len(data):,} bytes; it has no text to read"
        page = text[offset : offset + MAX_READ_CHARS]
        end = offset + len(page)
        if end < len(text):
            page += f"\n[… {len(text) - end:,} more characters: call again with offset={end}]"
        return page

    return StructuredTool.from_function(
        read,
        name=READ_FILE_TOOL,
        description=(
            "Read one of this skill's own files (references, scripts, assets) listed under "
            "'Files' in the instructions."
        ),
        args_schema=_ReadArgs,
    )


@tool_family("skill")
def _skill_family(host: ToolHost) -> list[BaseTool]:
    """The deck's skills' own files (none without skills: the graph builder adds it, over
    the skills it compiles, to a registry that lacks it)."""
    if not host.skills:
        return []
    return [skill_file_tool({b.name: (b.path, tuple(f for f, _ in b.files)) for b in host.skills})]
