"""The fenced code blocks of the project's markdown, for the tests that run them.

``python tests/markdown_blocks.py command N`` prints the README's N-th quickstart command (the
non-comment lines of its first ``bash`` block): ``.ci/run`` runs the two of them verbatim, so
the README's setup and test commands are what CI proves on a fresh machine.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["README", "Block", "blocks", "langgraph_server", "quickstart"]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_TITLE = re.compile(r'title="([^"]+)"')


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its ``title="..."`` (a file it stands for), its code
    and the line it starts on."""

    lang: str
    title: str | None
    code: str
    line: int

    def __str__(self) -> str:
        return f"line {self.line} ({self.lang or 'no language'})"


def blocks(path: Path) -> list[Block]:
    """Every fenced code block of the markdown file ``path``, in order."""
    text = path.read_text("utf-8")
    found = []
    for match in _FENCE.finditer(text):
        info = match.group(1).strip()
        title = _TITLE.search(info)
        found.append(
            Block(
                lang=info.split(" ", 1)[0] if info else "",
                title=title.group(1) if title else None,
                code=match.group(2),
                line=text[: match.start()].count("\n") + 1,
            )
        )
    return found


def quickstart(path: Path = README) -> list[str]:
    """The commands of the README's first ``bash`` block (one per non-comment line)."""
    first = next(b for b in blocks(path) if b.lang == "bash")
    lines = [line.strip() for line in first.code.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def langgraph_server(path: Path = README) -> Block:
    """The README's block that starts LangGraph's server (``langgraph dev``) from the
    repository's root: ``tests/test_langgraph_server.py`` runs it, in a copy of the checkout."""
    (found,) = [b for b in blocks(path) if b.lang == "bash" and "\nlanggraph dev" in b.code]
    return found


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "command":
        sys.exit("usage: markdown_blocks.py command N")
    print(quickstart()[int(sys.argv[2]) - 1])
