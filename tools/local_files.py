"""``local_file_search``: line search over the text files of a folder, jailed to a root.

Seed 002 keeps local files apart from the knowledge base: they are another source and may change
at any time, so nothing is indexed. Every call reads the files afresh and scores each line by
how many distinct query tokens it holds; quoted phrases must appear contiguously. Paths are
jailed to the root: ``..``, absolute paths and symlinks (files or folders) that resolve outside
it are refused or skipped, as are hidden entries, binary files and files over 2 MB.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Any

from skilldeck.errors import ToolError
from skilldeck.tools.files import jailed_path
from skilldeck.tools.text import Tokenizer, parse_query

__all__ = [
    "MAX_FILE_BYTES",
    "TEXT_SUFFIXES",
    "decode_text",
    "local_file_search",
    "walk_files",
]

TEXT_SUFFIXES = frozenset({".md", ".txt", ".csv", ".json", ".yaml", ".yml", ".py", ".rst", ".html"})
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_LINE_CHARS = 500  # a minified JSON or HTML line would otherwise flood the result
_BINARY_PROBE = 8192
_TOKENIZER = Tokenizer(stem=True, stopwords=True)


def decode_text(data: bytes) -> str | None:
    """``data`` as text: UTF-8 (BOM allowed), else GB18030; None if it looks binary.

    GB18030 is the usual encoding of Chinese files saved by Windows tools; a NUL byte in the
    first 8 KB marks a binary file, as git and grep decide.
    """
    if b"\0" in data[:_BINARY_PROBE]:
        return None
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return None


def walk_files(root: Path, suffixes: frozenset[str]) -> Iterator[Path]:
    """Files under ``root`` with one of ``suffixes``, in sorted order.

    Hidden files and folders are skipped, and so is every symlink that resolves outside
    ``root``; symlinked folders are not descended into, so a link cycle cannot loop.
    """
    root = root.resolve()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(folder, name)
            if name.startswith(".") or path.suffix.lower() not in suffixes:
                continue
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                continue
            yield path


def _search_folder(root: Path, subdir: str | None) -> Path:
    """The folder to search: ``root`` or ``subdir`` inside it."""
    if subdir is None or subdir in ("", "."):
        return root.resolve()
    if ".." in PurePath(subdir).parts:
        raise ToolError(f"root {subdir!r} must not contain '..'; give a folder inside the root")
    try:
        folder = jailed_path(root, subdir)
    except ToolError:
        raise ToolError(
            f"root {subdir!r} must be a relative folder inside the files root"
        ) from None
    if not folder.is_dir():
        raise ToolError(f"root {subdir!r} is not a folder inside the files root")
    return folder


def _has_phrase(tokens: list[str], phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == phrase for i in range(len(tokens) - n + 1))


def _read(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        return decode_text(path.read_bytes())
    except OSError:  # vanished or unreadable between listing and reading: skip it
        return None


def local_file_search(
    root: Path, query: str, subdir: str | None = None, max_results: int = 20
) -> dict[str, Any]:
    """Lines of the text files under ``root`` (or its ``subdir``) that match ``query``.

    Args:
        root: The jail; nothing outside it is read.
        query: Words to find, case-insensitive; ``"quoted phrases"`` match contiguously.
        subdir: A folder relative to ``root`` to search instead of all of it.
        max_results: Most matches to return, 1 to 200.

    Returns:
        ``{"query", "root", "matches": [{"path", "line", "text", "score"}], "total",
        "truncated"}``; ``path`` is relative to ``root``, ``score`` the number of distinct
        query tokens on the line. Matches are ordered by score, then path and line.
    """
    if not 1 <= max_results <= 200:
        raise ToolError(f"max_results must be from 1 to 200, got {max_results}")
    parsed = parse_query(query, _TOKENIZER)
    if not parsed.terms:
        raise ToolError(f"query {query!r} has no searchable words")
    wanted = set(parsed.terms)
    base = root.resolve()
    folder = _search_folder(base, subdir)
    found: list[tuple[int, str, int, str]] = []
    for path in walk_files(folder, TEXT_SUFFIXES):
        text = _read(path)
        if text is None:
            continue
        relative = path.relative_to(base).as_posix()
        for number, line in enumerate(text.splitlines(), start=1):
            tokens = _TOKENIZER.tokens(line)
            score = len(wanted.intersection(tokens))
            if score and all(_has_phrase(tokens, p) for p in parsed.phrases):
                found.append((-score, relative, number, line.strip()[:MAX_LINE_CHARS]))
    found.sort()
    return {
        "query": query,
        "root": subdir or ".",
        "matches": [
            {"path": path, "line": line, "text": text, "score": -neg}
            for neg, path, line, text in found[:max_results]
        ],
        "total": len(found),
        "truncated": len(found) > max_results,
    }
