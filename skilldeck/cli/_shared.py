"""What every command shares: options, opening a deck, reporting failures, exit codes.

Command modules import only typer and rich at their top: ``skilldeck --help`` and
``skilldeck threads`` must start in a fraction of a second, so LangGraph, LangChain, Chroma and
pydantic-settings are imported inside the commands that need them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from skilldeck.errors import SkillDeckError

if TYPE_CHECKING:
    from skilldeck.deck import SkillDeck
    from skilldeck.settings import Settings

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "CheckpointOpt",
    "JsonOpt",
    "ModelOpt",
    "SkillsOpt",
    "TrustOpt",
    "checkpoint_url",
    "err",
    "fail",
    "json_object",
    "make_settings",
    "open_deck",
    "out",
    "say_where",
    "skills_paths",
]

#: A run ended ``failed`` or ``no_skill`` (``recall`` and ``eval compare`` use it too).
EXIT_FAILED = 1
#: Bad input: the request was refused and nothing changed.
EXIT_USAGE = 2
#: Ctrl-C.
EXIT_INTERRUPTED = 130


def _console(*, stderr: bool = False) -> Console:
    """A console whose width follows ``COLUMNS`` and the terminal at each command. Rich fixes
    the width for good when ``COLUMNS`` is set as a console is made; these live as long as the
    process, which may run many commands (a notebook, a test runner)."""
    console = Console(stderr=stderr)
    console._width = None  # rich's own default: read COLUMNS, then the terminal, at each use
    return console


#: The command's result goes to stdout; diagnostics and progress go to stderr.
out = _console()
err = _console(stderr=True)

SkillsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--skills",
        help="Skills folder, bundle folder or built-in skill name (repeatable); default: all "
        "built-in skills.",
    ),
]
TrustOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--trust",
        help="Let this bundle folder, folder of bundles or glob run its scripts (repeatable; "
        "they run in this process, with its environment). Built-in bundles and those made by "
        "`skilldeck new` are trusted already; see also SKILLDECK_TRUSTED_SKILLS.",
    ),
]
CheckpointOpt = Annotated[
    str | None,
    typer.Option(
        "--checkpoint",
        help="Checkpoint URL (default: SKILLDECK_CHECKPOINT_URL, else checkpoints.sqlite in "
        "SKILLDECK_HOME).",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Model for every skill: MODEL, PROVIDER:MODEL, scripted:FILE or rules (no model).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def fail(exc: SkillDeckError, as_json: bool = False) -> NoReturn:
    """Print ``exc`` (as ``{"status": "error", "error": ...}`` with ``as_json``) and exit 2."""
    if as_json:
        print(json.dumps({"status": "error", "error": exc.to_dict()}, ensure_ascii=False))
    else:
        # soft_wrap: a long message (a path, a JSON path) stays on one line, whole. The message
        # is text, not markup: `skilldeck[service]` must not be read as a style and dropped.
        message = escape(f"[{exc.code.value}] {exc}")
        err.print(f"[bold red]error[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_USAGE)


def json_object(text: str, what: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object; :class:`SkillDeckError` naming ``what`` otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SkillDeckError(f"{what} is not valid JSON: {exc.msg} (char {exc.pos})") from None
    if not isinstance(value, dict):
        raise SkillDeckError(f'{what} must be a JSON object, e.g. \'{{"key": "value"}}\'')
    return value


def skills_paths(skills: list[str] | None) -> list[Path] | None:
    """``--skills`` values as folders: a path, or the name of a built-in skill (so commands
    work from any directory); ``None`` for the built-in skills."""
    if not skills:
        return None
    from skilldeck.skills.loader import builtin_skills_dir

    paths = []
    for value in skills:
        path = Path(value).expanduser()
        builtin = builtin_skills_dir() / value
        if not path.exists() and "/" not in value and (builtin / "SKILL.md").is_file():
            path = builtin
        elif not path.exists():
            raise SkillDeckError(
                f"--skills {value!r}: no such folder, and no built-in skill of that name "
                f"(built-in: {', '.join(_builtin_names())})"
            )
        paths.append(path)
    return paths


def _builtin_names() -> list[str]:
    from skilldeck.skills.loader import builtin_skills_dir

    return sorted(p.parent.name for p in builtin_skills_dir().glob("*/SKILL.md"))


def make_settings(model: str | None = None, **overrides: Any) -> Settings:
    """Host settings from the environment, with ``--model`` and command overrides."""
    from skilldeck.settings import Settings

    values: dict[str, Any] = {"model": model} if model else {}
    return Settings(**values, **overrides)


def open_deck(
    skills: list[str] | None,
    checkpoint: str | None,
    model: str | None,
    *,
    existing: bool = False,
    trust: list[str] | None = None,
    **overrides: Any,
) -> SkillDeck:
    """A deck for one command; ``existing`` refuses to create a missing checkpoint database;
    ``trust``: the ``--trust`` values."""
    from skilldeck.checkpoints.open import open_persistence
    from skilldeck.deck import SkillDeck

    settings = make_settings(model, **overrides)
    paths = skills_paths(skills)
    persistence = open_persistence(
        checkpoint or settings.checkpoint_url,
        timeout=settings.sqlite_timeout_s,
        must_exist=existing,
    )
    try:
        return SkillDeck(paths, checkpointer=persistence, settings=settings, trust=trust or ())
    except BaseException:
        persistence.close()
        raise


def checkpoint_url(checkpoint: str | None) -> str:
    """The checkpoint URL a command uses, without loading the settings (fast commands)."""
    import os

    from skilldeck._internal.home import state_home

    return (
        checkpoint
        or os.environ.get("SKILLDECK_CHECKPOINT_URL")
        or state_home().sqlite_url("checkpoints.sqlite")
    )


def say_where(checkpoint: str | None, as_json: bool) -> None:
    """One dim stderr line naming where the command keeps or reads its state."""
    if as_json:
        return
    from skilldeck._internal.home import state_home
    from skilldeck._internal.postgres import redact

    if checkpoint or _env_checkpoint():
        where = f"checkpoints: {redact(checkpoint_url(checkpoint))}"
    else:
        where = f"state: {state_home().describe()}"
    err.print(f"[dim]{where}[/]", highlight=False, soft_wrap=True)


def _env_checkpoint() -> bool:
    import os

    return bool(os.environ.get("SKILLDECK_CHECKPOINT_URL"))
