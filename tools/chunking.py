"""Cutting documents into chunks a retriever can cite: ``file#Lstart-Lend`` with a heading.

Markdown and text are split into paragraphs (blank lines), under the nearest heading path
(``Guide > Install``); consecutive paragraphs are packed into chunks of at most ``CHUNK_TOKENS``
estimated tokens, and a longer paragraph is cut at lines, then sentences, then words. PDF text
is chunked page by page.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from skilldeck.skills.tokens import estimate_tokens
from skilldeck.tools.local_files import decode_text

__all__ = [
    "CHUNK_TOKENS",
    "DOCUMENT_SUFFIXES",
    "Chunk",
    "chunk_document",
    "chunk_id",
    "document_chunks",
]

CHUNK_TOKENS = 220
DOCUMENT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".pdf"})
_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document, cited as ``file#Lstart-Lend``.

    Attributes:
        id: Derived from the file, lines, heading and text, so it changes with them.
        file: Path relative to the indexed folder, posix.
        start_line: First line, from 1.
        end_line: Last line.
        heading: The Markdown heading path, e.g. ``Guide > Install`` (``Page 3`` in a PDF).
        text: The chunk's text.
    """

    id: str
    file: str
    start_line: int
    end_line: int
    heading: str
    text: str


# -- chunking ----------------------------------------------------------------------------------
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SENTENCE = re.compile(r"[^.!?;。！？；]*(?:[.!?;。！？；]+|$)\s*")
_WORD = re.compile(r"\S+\s*")


@dataclass(frozen=True, slots=True)
class _Piece:
    start: int
    end: int
    text: str


def _split_text(text: str, limit: int) -> list[str]:
    """``text`` cut at sentences, then words, then characters into parts of <= ``limit``."""
    if estimate_tokens(text) <= limit:
        return [text]
    for pattern in (_SENTENCE, _WORD):
        parts = [p for p in pattern.findall(text) if p]
        if len(parts) > 1:
            return [small for part in parts for small in _split_text(part, limit)]
    # One unbroken run (CJK text has no spaces): a character is at most one token.
    return [text[i : i + limit] for i in range(0, len(text), limit)]


def _paragraph_pieces(lines: Sequence[tuple[int, str]], limit: int) -> list[_Piece]:
    """A paragraph as one piece, or as line and sentence pieces if it is over ``limit``."""
    text = "\n".join(line for _, line in lines)
    if estimate_tokens(text) <= limit:
        return [_Piece(lines[0][0], lines[-1][0], text)]
    return [
        _Piece(number, number, part)
        for number, line in lines
        for part in _split_text(line, limit)
        if part.strip()
    ]


def _pack(pieces: Iterable[_Piece], limit: int) -> list[_Piece]:
    """Greedily join consecutive pieces while the result fits ``limit`` tokens."""
    packed: list[_Piece] = []
    for piece in pieces:
        if packed:
            last = packed[-1]
            gap = piece.start - last.end
            # Same line: the pieces are sentences that kept their own spacing.
            joined = (
                last.text + piece.text
                if gap == 0
                else last.text.rstrip() + "\n" * min(gap, 2) + piece.text
            )
            if estimate_tokens(joined) <= limit:
                packed[-1] = _Piece(last.start, piece.end, joined)
                continue
        packed.append(piece)
    return packed


def _sections(
    lines: Iterable[tuple[int, str]], markdown: bool, heading: str
) -> list[tuple[str, list[list[tuple[int, str]]]]]:
    """Paragraphs (runs of non-blank lines) grouped by the heading path above them."""
    sections: list[tuple[str, list[list[tuple[int, str]]]]] = [(heading, [])]
    path: list[tuple[int, str]] = []
    paragraph: list[tuple[int, str]] = []
    fence: str | None = None

    def flush() -> None:
        if paragraph:
            sections[-1][1].append(paragraph.copy())
            paragraph.clear()

    for number, line in lines:
        if markdown:
            fenced = _FENCE.match(line)
            if fenced:
                mark = fenced.group(1)
                if fence is None:
                    fence = mark
                elif mark[0] == fence[0] and len(mark) >= len(fence):
                    fence = None
            elif fence is None and (match := _HEADING.match(line)):
                flush()
                level = len(match.group(1))
                path = [(lv, title) for lv, title in path if lv < level]
                path.append((level, match.group(2).strip()))
                titles = [heading] if heading else []
                sections.append((" > ".join(titles + [title for _, title in path]), []))
                continue
        # Blank lines inside a code fence belong to the code, not a paragraph break.
        if line.strip() or fence is not None:
            paragraph.append((number, line.rstrip()))
        else:
            flush()
    flush()
    return [(title, paragraphs) for title, paragraphs in sections if paragraphs]


def chunk_id(*parts: object) -> str:
    blob = "\0".join(str(part) for part in parts)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def chunk_document(
    text: str,
    file: str,
    *,
    markdown: bool = True,
    heading: str = "",
    first_line: int = 1,
    max_tokens: int = CHUNK_TOKENS,
) -> list[Chunk]:
    """Cut a document into chunks of at most ``max_tokens`` estimated tokens.

    Paragraphs (separated by blank lines) are packed in order into chunks that never cross a
    heading; a paragraph too long for one chunk is cut at lines, then sentences, then words.

    Args:
        text: The document.
        file: Its path relative to the indexed folder, posix.
        markdown: Read ``#`` headings (outside code fences) into each chunk's heading path.
        heading: A heading above the whole text, e.g. ``Page 3`` of a PDF.
        first_line: The number of the text's first line.
        max_tokens: The chunk size, estimated with ``estimate_tokens``.
    """
    numbered = enumerate(text.splitlines(), start=first_line)
    chunks: list[Chunk] = []
    for title, paragraphs in _sections(numbered, markdown, heading):
        pieces = [piece for para in paragraphs for piece in _paragraph_pieces(para, max_tokens)]
        for piece in _pack(pieces, max_tokens):
            body = piece.text.strip()
            if body:
                ident = chunk_id(file, piece.start, piece.end, title, body)
                chunks.append(Chunk(ident, file, piece.start, piece.end, title, body))
    return chunks


def _pdf_chunks(data: bytes, file: str) -> list[Chunk]:
    """Chunks of a PDF's text, page by page; lines are numbered across the extracted text."""
    from pypdf import PdfReader  # imported here: only PDF files need it

    chunks: list[Chunk] = []
    line = 1
    for number, page in enumerate(PdfReader(io.BytesIO(data)).pages, start=1):
        text = page.extract_text() or ""
        chunks += chunk_document(
            text, file, markdown=False, heading=f"Page {number}", first_line=line
        )
        line += len(text.splitlines())
    return chunks


def document_chunks(data: bytes, file: str) -> list[Chunk]:
    suffix = Path(file).suffix.lower()
    if suffix == ".pdf":
        return _pdf_chunks(data, file)
    text = decode_text(data)
    if text is None:
        raise ValueError(f"{file} is not a text file")
    return chunk_document(text, file, markdown=suffix in _MARKDOWN_SUFFIXES)
