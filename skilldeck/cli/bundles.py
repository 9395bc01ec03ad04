"""Commands for skill authors: ``new`` writes a working bundle, ``check`` lists every problem.

Exit codes of ``check``: 0 no errors (``--strict``: no warnings either), 1 problems found,
2 bad input (a folder that does not exist).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from skilldeck.cli._shared import EXIT_FAILED, JsonOpt, err, fail, out
from skilldeck.errors import SkillDeckError

__all__ = ["check", "new"]


def new(
    name: Annotated[str, typer.Argument(help="The skill's name: lowercase, digits, '-', '_'.")],
    into: Annotated[
        Path, typer.Option("--dir", help="Where to create the bundle folder NAME.")
    ] = Path("."),
    as_json: JsonOpt = False,
) -> None:
    """Write a working skill bundle NAME: it asks one card and finishes, with a scripted model
    and one eval case, so `skilldeck run` and `skilldeck eval run` work on it at once."""
    from skilldeck.skills.template import write_template

    try:
        folder = write_template(name, into)
    except SkillDeckError as exc:
        fail(exc, as_json)
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    if as_json:
        print(json.dumps({"folder": str(folder), "files": files}))
        return
    out.print(f"wrote {folder}/", highlight=False)
    for file in files:
        out.print(f"  {file}", highlight=False)
    out.print(
        "\ntry it:\n"
        f"  skilldeck run --skills {folder} --context {name}\n"
        f"  skilldeck eval run --skills {folder} --skill {name}\n"
        f"then edit SKILL.md and see docs/skills.md; check your edits with: "
        f"skilldeck check {folder}",
        highlight=False,
    )


def check(
    folders: Annotated[
        list[Path], typer.Argument(help="Skills folders or bundle folders to check.")
    ],
    strict: Annotated[
        bool, typer.Option(help="Fail on warnings too (Agent Skills rules a bundle breaks).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check skill bundles without running them: print every problem at once."""
    from skilldeck.check import check_skills

    try:
        report = check_skills(folders)
    except SkillDeckError as exc:
        fail(exc, as_json)
    ok = report.ok(strict=strict)
    if as_json:
        body = {
            "ok": ok,
            "bundles": [b.name for b in report.bundles],
            "problems": [p.to_dict() for p in report.problems],
        }
        print(json.dumps(body, ensure_ascii=False))
    else:
        for folder in report.folders:
            _print_folder(folder, report.of(folder))
        outside = [p for p in report.problems if not any(p in report.of(f) for f in report.folders)]
        for problem in outside:
            _print_problem(problem.severity, problem.file, problem.json_path, problem.message)
        errors, warnings = len(report.errors), len(report.warnings)
        summary = f"{len(report.folders)} bundle(s): {errors} error(s), {warnings} warning(s)"
        (out if ok else err).print(("ok: " if ok else "") + summary, highlight=False)
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def _print_folder(folder: Path, problems: list) -> None:  # type: ignore[type-arg]
    if not problems:
        out.print(f"[green]ok[/] {escape(str(folder))}", highlight=False)
        return
    out.print(f"[bold]{escape(str(folder))}[/]", highlight=False)
    for p in problems:
        file = Path(p.file)
        shown = file.relative_to(folder).as_posix() if file.is_relative_to(folder) else p.file
        _print_problem(p.severity, shown or ".", p.json_path, p.message)


def _print_problem(severity: str, file: str, path: str, message: str) -> None:
    colour = "red" if severity == "error" else "yellow"
    out.print(
        f"  [{colour}]{severity}[/] {escape(file)} {escape(path)}: {escape(message)}",
        highlight=False,
        soft_wrap=True,
    )
