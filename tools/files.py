"""``file__*`` tools: information about and text of the files of a matter.

Files live under a root folder, one sub-folder per ``matter_id``. Every matter tool works in
the run's matter folder only (:func:`matter_folder`): a run without a matter gets an error, never
the whole root, and every path is jailed to the folder (``..``, absolute paths and symlinks that
lead out are refused).
"""

from __future__ import annotations

import itertools
import mimetypes
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel, Field

from skilldeck._internal.ids import id_problem
from skilldeck.errors import ToolError
from skilldeck.tools.registry import CHOICES, ToolHost, tool_family

__all__ = ["file_tools", "jailed_path", "matter_folder"]

MAX_PARSE_CHARS = 20_000
#: The most files of a matter a listing walks.
MAX_WALK = 1000
#: The most file ids a ``schema`` mode grammar lists; a matter with more is not narrowed.
MAX_CHOICES = 200


def jailed_path(root: Path, relative: str) -> Path:
    """Resolve ``relative`` inside ``root``; raise :class:`ToolError` if it escapes."""
    if not relative or Path(relative).is_absolute():
        raise ToolError(f"file id {relative!r} must be a relative path inside the files root")
    root = root.resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise ToolError(f"file id {relative!r} leads outside the files root")
    return path


def matter_folder(root: Path | None, matter_id: str | None) -> Path:
    """The run's matter folder under the files root: the only place matter tools read and
    write. A run without a matter, or a host without a files root, gets a :class:`ToolError`."""
    if root is None:
        raise ToolError(
            "no files root is configured: the host must set SKILLDECK_FILES_ROOT (the folder "
            "that holds one folder per matter)"
        )
    if not matter_id:
        raise ToolError("this tool works in a matter's files, and the run has no matter_id")
    if id_problem(matter_id) is not None:  # an id is one folder name: never "..", never "a/b"
        raise ToolError(f"matter_id {matter_id!r} is not one folder name")
    return jailed_path(root, matter_id)


def _file_ids(folder: Path) -> list[str]:
    """The matter's file ids (paths relative to its folder), in name order; the walk stops at
    :data:`MAX_WALK` files so a huge folder cannot stall a call."""
    found = itertools.islice((p for p in folder.rglob("*") if p.is_file()), MAX_WALK)
    return sorted(p.relative_to(folder).as_posix() for p in found)


def _listing(folder: Path, limit: int = 20) -> str:
    """The matter's file ids, the first ``limit`` in name order."""
    ids = _file_ids(folder)
    if not ids:
        return "the matter has no files"
    shown = ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
    return f"its file ids are: {shown}"


class _FileArgs(BaseModel):
    file_id: str = Field(description="Path of the file, relative to the matter's folder.")
    matter_id: Annotated[str | None, InjectedToolArg] = None


def file_tools(root: str | Path | None) -> list[BaseTool]:
    """``file__get_info`` and ``file__parse`` over the matter folders of ``root``."""
    base = Path(root) if root is not None else None

    def locate(file_id: str, matter_id: str | None) -> Path:
        folder = matter_folder(base, matter_id)
        path = jailed_path(folder, file_id)
        if not path.is_file():
            # The ids that do exist give the caller (often a model) something to copy.
            raise ToolError(f"no file {file_id!r} in this matter; {_listing(folder)}")
        return path

    def existing(identity: Mapping[str, Any]) -> dict[str, list[str]]:
        """The file ids a call can name now (``metadata["choices"]``): a model that asks for
        a file the matter does not have is held to the ones it has. None, or too many to
        list, narrow nothing (the tools' own error then says what exists)."""
        ids = _file_ids(matter_folder(base, identity.get("matter_id")))
        return {"file_id": ids} if 0 < len(ids) <= MAX_CHOICES else {}

    def get_info(file_id: str, matter_id: str | None = None) -> dict[str, object]:
        path = locate(file_id, matter_id)
        return {
            "file_id": file_id,
            "name": path.name,
            "bytes": path.stat().st_size,
            "mime_type": mimetypes.guess_type(path.name)[0] or "application/octet-stream",
        }

    def parse(file_id: str, matter_id: str | None = None) -> dict[str, object]:
        path = locate(file_id, matter_id)
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{file_id!r} is not a UTF-8 text file") from None
        return {
            "file_id": file_id,
            "text": text[:MAX_PARSE_CHARS],
            "truncated": len(text) > MAX_PARSE_CHARS,
        }

    return [
        StructuredTool.from_function(
            get_info,
            name="file__get_info",
            description="Name, size and type of a file.",
            args_schema=_FileArgs,
            metadata={CHOICES: existing},
        ),
        StructuredTool.from_function(
            parse,
            name="file__parse",
            description="The text content of a file.",
            args_schema=_FileArgs,
            metadata={CHOICES: existing},
        ),
    ]


@tool_family("file")
def _file_family(host: ToolHost) -> list[BaseTool]:
    return file_tools(host.files_root)
