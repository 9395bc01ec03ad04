"""``pkm__*`` tools: the markdown files of a PARA knowledge base in a matter's workspace.

The knowledge base is the ``PKM/`` folder of the workspace (``files_root/matter_id``); every
path is relative to it (``Areas/Health/Sleep.md``) and jailed to it. Only ``.md`` files are
listed, read or written. Writes go to a temporary file that replaces the target in one rename,
so a failed write never leaves half a file. A refused call writes nothing.

The tools do not enforce reading before editing: that is the skill's discipline, and the eval
graders check it from the transcript. ``pkm__write`` replaces a whole file on purpose, so a
careless model *can* destroy notes and the graders can catch it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel, ConfigDict, Field

from skilldeck.errors import ToolError
from skilldeck.tools.bm25 import BM25Index
from skilldeck.tools.files import jailed_path, matter_folder
from skilldeck.tools.registry import CHOICES, ToolHost, tool_family
from skilldeck.tools.text import Tokenizer
from skilldeck.tools.workspace import write_text_atomic

__all__ = ["MAX_ENTRY_CHARS", "PARA_FOLDERS", "PKM_DIR", "pkm_tools"]

PKM_DIR = "PKM"
PARA_FOLDERS = ("Projects", "Areas", "Resources", "Archives")
MAX_READ_CHARS = 40_000
#: The longest text one pkm__append adds.
MAX_ENTRY_CHARS = 1_000
MAX_LIST_FILES = 500
# Free strings a small model fills are bounded in the tools' schemas, so a grammar ends a
# repetition loop at the bound instead of at the output token limit.
MAX_QUERY_CHARS = 300
MAX_NEW_NOTE_CHARS = 1_500
#: Notes a search returns: a record belongs in one or two; a few more show the alternatives.
SEARCH_LIMIT = 5
_TOKENIZER = Tokenizer(stem=True, stopwords=True)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")

MatterId = Annotated[str | None, InjectedToolArg]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _ListArgs(_Args):
    folder: str = Field(default="", description='"" for all of PKM/, or a folder inside it.')
    matter_id: MatterId = None


class _SearchArgs(_Args):
    query: str = Field(
        max_length=MAX_QUERY_CHARS,
        description="Words of the record; the notes that share most come first.",
    )
    matter_id: MatterId = None


class _PathArgs(_Args):
    # No example path: a small model reads the example file, whatever the record is about.
    path: str = Field(description="A markdown file, relative to PKM/, as pkm__list shows it.")
    matter_id: MatterId = None


class _TextArgs(_PathArgs):
    text: str = Field(description="Markdown text.")


class _NewNoteArgs(_PathArgs):
    text: str = Field(
        max_length=MAX_NEW_NOTE_CHARS,
        description="The new note: a # title, one line on what it is for, then the entry.",
    )


class _EntryArgs(_PathArgs):
    # An append adds an entry; the cap is in the tool's schema, so a grammar ends a text that
    # a small model starts copying the whole note into, instead of the output token limit.
    text: str = Field(
        max_length=MAX_ENTRY_CHARS,
        description=f"The entry to add, at most {MAX_ENTRY_CHARS:,} characters: the new text "
        "only, not the note again.",
    )


def _parts(path: str) -> tuple[str, ...]:
    """The parts of a PKM-relative path, with the mistakes models make named precisely."""
    if not path.strip():
        raise ToolError("path is empty; give a markdown file relative to PKM/")
    if "\\" in path:
        raise ToolError(f"path {path!r} uses backslashes; use '/' between folders")
    if PurePosixPath(path).is_absolute():
        raise ToolError(f"path {path!r} is absolute; give a path relative to PKM/")
    parts = PurePosixPath(path).parts
    if ".." in parts:
        raise ToolError(f"path {path!r} must not contain '..'; give the path from PKM/ down")
    if parts and parts[0] == PKM_DIR:
        raise ToolError(f"paths are relative to PKM/: use {'/'.join(parts[1:])!r}, not {path!r}")
    return parts


def _markdown_files(top: Path, start: Path) -> Iterator[tuple[Path, PurePosixPath]]:
    """The markdown files under ``start`` and their paths relative to ``top``, sorted; hidden
    ones (``.obsidian``, ``.trash``) and links that lead out of ``top`` left out."""
    if not start.is_dir():
        return
    for file in sorted(start.rglob("*.md")):
        rel = PurePosixPath(file.relative_to(top).as_posix())
        hidden = any(p.startswith(".") for p in rel.parts)
        if not hidden and file.is_file() and file.resolve().is_relative_to(top):
            yield file, rel


def _first_heading(text: str) -> str | None:
    for line in text.splitlines():
        match = _HEADING.match(line)
        if match:
            return match.group(1)
    return None


def pkm_tools(root: str | Path | None) -> list[BaseTool]:
    """``pkm__list``, ``pkm__search``, ``pkm__read``, ``pkm__append``, ``pkm__create`` and
    ``pkm__write``."""
    base = Path(root) if root is not None else None

    def pkm_root(matter_id: str | None) -> Path:
        return jailed_path(matter_folder(base, matter_id), PKM_DIR)

    def locate(path: str, matter_id: str | None) -> Path:
        """The file ``path`` names: a jailed ``.md`` path (it may not exist yet)."""
        _parts(path)
        if not path.endswith(".md"):
            raise ToolError(f"{path!r} is not a markdown file; PKM tools handle only .md files")
        top = pkm_root(matter_id)
        try:
            target = jailed_path(top, path)
        except ToolError:
            raise ToolError(f"path {path!r} leads outside PKM/") from None
        if target.is_dir():
            raise ToolError(f"{path!r} is a folder, not a markdown file")
        return target

    def existing(path: str, matter_id: str | None) -> Path:
        target = locate(path, matter_id)
        if not target.is_file():
            raise ToolError(
                f"no file {path!r} in PKM/; call pkm__list to see the files, or pkm__create "
                "to start a new one"
            )
        return target

    def read_existing(target: Path, path: str) -> str:
        try:
            return target.read_text("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path!r} is not UTF-8 text") from None

    def checked_text(text: str) -> str:
        if not text.strip():
            raise ToolError("text is empty; nothing to write")
        return text if text.endswith("\n") else text + "\n"

    def list_files(folder: str = "", matter_id: str | None = None) -> dict[str, object]:
        top = pkm_root(matter_id)
        start = top
        if folder.strip("/"):
            _parts(folder)
            try:
                start = jailed_path(top, folder.strip("/"))
            except ToolError:
                raise ToolError(f"folder {folder!r} leads outside PKM/") from None
            # A PARA folder is part of the method even before its first note.
            if not start.is_dir() and folder.strip("/") not in PARA_FOLDERS:
                raise ToolError(
                    f'no folder {folder!r} in PKM/; call pkm__list with folder "" to see all'
                )
        files: list[dict[str, object]] = []
        folders: set[str] = set()
        total = 0
        for file, rel in _markdown_files(top, start) if start.is_dir() else ():
            folders.add(rel.parent.as_posix())
            total += 1
            if total <= MAX_LIST_FILES:
                text = file.read_text("utf-8", errors="replace")
                files.append({"path": rel.as_posix(), "title": _first_heading(text)})
        result: dict[str, object] = {
            "folder": folder.strip("/"),
            "files": files,
            "folders": sorted(folders - {"."}),
            "truncated": total > MAX_LIST_FILES,
        }
        if not files:
            result["note"] = "no markdown files here; create one under " + ", ".join(
                f"{f}/" for f in PARA_FOLDERS
            )
        return result

    def nameable(identity: Mapping[str, Any]) -> dict[str, list[str]]:
        """What a call can name now (``metadata["choices"]``), from one walk of the notes that
        every tool shares: the files a read, an append or a replace can take, and the folders a
        listing can (all of ``PKM/``, the PARA folders and every folder that holds a note; a
        small model otherwise lists a note's path as if it were a folder)."""
        top = pkm_root(identity.get("matter_id"))
        notes = [rel for _, rel in _markdown_files(top, top)]
        held = {rel.parent.as_posix() for rel in notes} - {"."}
        return {
            "path": [rel.as_posix() for rel in notes[:MAX_LIST_FILES]],
            "folder": ["", *PARA_FOLDERS, *sorted(held - set(PARA_FOLDERS))],
        }

    def search(query: str, matter_id: str | None = None) -> dict[str, object]:
        """The notes that match ``query`` best by BM25 over their path, headings and text: a
        knowledge base has a few hundred notes at most, so the index is built per call."""
        terms = _TOKENIZER.tokens(query)
        top = pkm_root(matter_id)
        index, notes = BM25Index(), []
        for file, rel in _markdown_files(top, top):
            text = file.read_text("utf-8", errors="replace")
            words = " ".join([*rel.with_suffix("").parts, text])
            index.add(_TOKENIZER.tokens(words.replace("-", " ").replace("_", " ")))
            notes.append({"path": rel.as_posix(), "title": _first_heading(text)})
            if len(notes) >= MAX_LIST_FILES:
                break
        # A query of no words (an emoji) finds nothing: a search that comes before a skip.
        found = [notes[doc] for doc, _ in index.top(terms, SEARCH_LIMIT)] if terms else []
        result: dict[str, object] = {"query": query, "files": found}
        if not found:
            result["note"] = "no note shares a word with the query; see pkm__list, or pkm__create"
        return result

    def read(path: str, matter_id: str | None = None) -> dict[str, object]:
        text = read_existing(existing(path, matter_id), path)
        return {
            "path": path,
            "text": text[:MAX_READ_CHARS],
            "truncated": len(text) > MAX_READ_CHARS,
        }

    def append(path: str, text: str, matter_id: str | None = None) -> dict[str, object]:
        target = existing(path, matter_id)
        addition = checked_text(text)
        old = read_existing(target, path)
        # The new text starts on its own line; blank lines are the model's choice of style.
        joined = old + ("" if not old or old.endswith("\n") else "\n") + addition
        write_text_atomic(target, joined)
        return {"ok": True, "path": path, "action": "appended", "chars": len(addition)}

    def create(path: str, text: str, matter_id: str | None = None) -> dict[str, object]:
        parts = _parts(path)
        if len(parts) < 2 or parts[0] not in PARA_FOLDERS:
            raise ToolError(
                f"{path!r} must be inside one of the PARA folders: "
                + ", ".join(f"{f}/" for f in PARA_FOLDERS)
            )
        target = locate(path, matter_id)
        if target.exists():
            raise ToolError(
                f"{path!r} already exists; read it with pkm__read and add to it with pkm__append"
            )
        content = checked_text(text)
        write_text_atomic(target, content)
        return {"ok": True, "path": path, "action": "created", "chars": len(content)}

    def write(path: str, text: str, matter_id: str | None = None) -> dict[str, object]:
        target = existing(path, matter_id)
        content = checked_text(text)
        write_text_atomic(target, content)
        return {"ok": True, "path": path, "action": "replaced", "chars": len(content)}

    return [
        StructuredTool.from_function(
            list_files,
            name="pkm__list",
            description="The markdown files under a PKM/ folder, each with its first heading.",
            args_schema=_ListArgs,
            metadata={CHOICES: nameable},
        ),
        StructuredTool.from_function(
            search,
            name="pkm__search",
            description="The PKM notes that best match some words (BM25), best first, with "
            "their first headings.",
            args_schema=_SearchArgs,
        ),
        StructuredTool.from_function(
            read,
            name="pkm__read",
            description="The full text of a PKM markdown file.",
            args_schema=_PathArgs,
            metadata={CHOICES: nameable},
        ),
        StructuredTool.from_function(
            append,
            name="pkm__append",
            description="Append an entry to the end of an existing PKM markdown file.",
            args_schema=_EntryArgs,
            metadata={CHOICES: nameable},
        ),
        StructuredTool.from_function(
            create,
            name="pkm__create",
            description=(
                "Create a new PKM markdown file under Projects/, Areas/, Resources/ or "
                "Archives/; refuses a file that already exists."
            ),
            args_schema=_NewNoteArgs,
        ),
        StructuredTool.from_function(
            write,
            name="pkm__write",
            description=(
                "Replace the whole text of an existing PKM markdown file. Destroys what is not "
                "in the new text: prefer pkm__append."
            ),
            args_schema=_TextArgs,
            metadata={CHOICES: nameable},
        ),
    ]


@tool_family("pkm")
def _pkm_family(host: ToolHost) -> list[BaseTool]:
    return pkm_tools(host.files_root)
