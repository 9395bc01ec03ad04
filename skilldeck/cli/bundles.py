"""Commands for skill authors: ``new`` writes a working bundle, ``check`` lists every problem,
``trust`` lets a bundle's scripts run, ``route`` shows which skill a request would go to and
why.

Exit codes of ``check``: 0 no errors (``--strict``: no warnings either), 1 problems found,
2 bad input (a folder that does not exist). ``route`` exits 0 whatever it decides (1 with
``--fail-on-none`` when no skill fits).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from skilldeck.cli._shared import (
    EXIT_FAILED,
    JsonOpt,
    ModelOpt,
    SkillsOpt,
    TrustOpt,
    err,
    fail,
    out,
)
from skilldeck.errors import SkillDeckError

__all__ = ["check", "new", "route", "trust"]


def new(
    name: Annotated[str, typer.Argument(help="The skill's name: lowercase, digits, '-', '_'.")],
    into: Annotated[
        Path, typer.Option("--dir", help="Where to create the bundle folder NAME.")
    ] = Path("."),
    as_json: JsonOpt = False,
) -> None:
    """Write a working skill bundle NAME: it asks one card and finishes, with a scripted model
    and one eval case, so `skilldeck run` and `skilldeck eval run` work on it at once. It is
    yours, so it is trusted: scripts you add to it run (see `skilldeck trust --help`)."""
    from skilldeck.skills.template import write_template
    from skilldeck.skills.trust import MARKER

    try:
        folder = write_template(name, into)
    except SkillDeckError as exc:
        fail(exc, as_json)
    files = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != MARKER
    )
    if as_json:
        print(json.dumps({"folder": str(folder), "files": files, "trusted": True}))
        return
    out.print(
        f"wrote {folder}/ (trusted here: its scripts will run)", highlight=False, soft_wrap=True
    )
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
    trust: TrustOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check skill bundles without running them: print every problem at once. The scripts of
    a bundle that is not trusted are not imported (a warning names them)."""
    from skilldeck.check import check_skills

    try:
        report = check_skills(folders, trust=trust or ())
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


def trust(
    folders: Annotated[
        list[Path], typer.Argument(help="Bundle folders, or folders of bundles, to trust.")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Let bundles run their scripts (scripts/*.py), from now on, in this SKILLDECK_HOME.

    Scripts run in skilldeck's process with its privileges and environment (API keys
    included): read them first. The trust holds while the bundle stays where it is (edit it
    freely); a folder put in its place, or the bundle moved, is not trusted. Delete the
    bundle's .skilldeck-trust file to take it back.
    """
    from skilldeck.skills.loader import skill_folders
    from skilldeck.skills.trust import record_trust

    try:
        bundles = [b for f in folders for b in skill_folders(f.expanduser().resolve())]
        if not bundles:
            raise SkillDeckError(
                f"no skill bundle in {', '.join(map(str, folders))}: a bundle has a SKILL.md"
            )
        for bundle in bundles:
            record_trust(bundle)
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps({"trusted": [str(b) for b in bundles]}))
        return
    for bundle in bundles:
        out.print(f"trusted {escape(str(bundle))}", highlight=False)


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


def route(
    request: Annotated[str, typer.Argument(help="The request, as a user would make it.")],
    context: Annotated[
        str, typer.Option(help="The run's context; 'auto' routes by the skills' descriptions.")
    ] = "auto",
    skills: SkillsOpt = None,
    model: ModelOpt = None,
    router: Annotated[
        str | None,
        typer.Option(help="auto, lexical or model (default: SKILLDECK_ROUTER, else auto)."),
    ] = None,
    fail_on_none: Annotated[
        bool, typer.Option("--fail-on-none", help="Exit 1 when no skill fits.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show which skill a run of REQUEST would start with, the strategy that decided it, and
    for each skill why it was or was not a candidate; nothing runs."""
    from skilldeck.cli._shared import open_deck

    if router not in (None, "auto", "lexical", "model"):
        fail(SkillDeckError(f"--router must be auto, lexical or model, not {router!r}"), as_json)
    overrides: dict[str, Any] = {"router": router} if router else {}
    try:
        with open_deck(skills, "sqlite:///:memory:", model, **overrides) as deck:
            decision = deck.route(request, context=context)
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps(decision.to_dict(), ensure_ascii=False))
    else:
        chosen = decision.skill or "none"
        by = f" via {decision.model}" if decision.model else ""
        out.print(f"[bold]{escape(chosen)}[/] ({decision.strategy}{by}): {escape(decision.reason)}")
        for row in decision.skills:
            mark = "[green]✓[/]" if row.candidate else "[dim]·[/]"
            score = f" coverage {row.coverage:.0%}" if row.coverage is not None else ""
            line = f"  {mark} {escape(row.skill)}{score}: {escape(row.reason)}"
            out.print(line, highlight=False, soft_wrap=True)
    if fail_on_none and decision.skill is None:
        raise typer.Exit(EXIT_FAILED)
