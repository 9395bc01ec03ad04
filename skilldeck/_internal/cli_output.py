"""How every ``skilldeck`` command reports a failure: one line on stderr (or JSON), exit 2."""

from __future__ import annotations

import json
from typing import NoReturn

import typer
from rich.console import Console

from skilldeck.errors import SkillDeckError

__all__ = ["err", "fail"]

#: Diagnostics and progress go to stderr, so stdout stays the command's result.
err = Console(stderr=True)


def fail(exc: SkillDeckError, as_json: bool = False) -> NoReturn:
    """Print ``exc`` (as ``{"status": "error", "error": ...}`` with ``as_json``) and exit 2."""
    if as_json:
        print(json.dumps({"status": "error", "error": exc.to_dict()}, ensure_ascii=False))
    else:
        # soft_wrap: a long message (a path, a JSON path) stays on one line, whole.
        err.print(f"[bold red]error[/] [{exc.code.value}] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)
