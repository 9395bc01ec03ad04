"""``skilldeck eval``: run suites, compare reports, promote buckets, calibrate the judge.

Exit codes: 0 done, 1 ``compare`` found a regression or a mixed change, 2 bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from skilldeck.cli._shared import EXIT_FAILED, SkillsOpt, TrustOpt, err, fail, skills_paths
from skilldeck.errors import EvalConfigError, SkillDeckError

if TYPE_CHECKING:
    from skilldeck.evals.runner import TrialResult
    from skilldeck.evals.suites import Suite

__all__ = ["eval_app"]

eval_app = typer.Typer(
    help="Evaluate skills: run suites on the real graph, compare reports, promote buckets.",
    no_args_is_help=True,
)
out = Console()

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _suite(
    skill: str | None, suite: Path | None, skills: list[str] | None, trust: list[str] | None
) -> Suite:
    from skilldeck.evals.memex import is_memex_suite, load_memex_suite
    from skilldeck.evals.suites import load_suite, suite_for_skill

    paths, trusted = skills_paths(skills) or [], trust or ()
    if suite is not None and is_memex_suite(suite):  # --skill picks the agent it grades
        return load_memex_suite(suite, skill=skill, skills_path=paths, trust=trusted)
    if (skill is None) == (suite is None):
        raise EvalConfigError("give exactly one of --skill NAME or --suite FILE")
    if suite is not None:
        return load_suite(suite, trust=trusted)
    return suite_for_skill(str(skill), paths, trusted)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _bucket_table(report: dict[str, Any]) -> Table:
    ks = list(report["summary"]["pass_at_k"])
    table = Table(title=f"{report['suite']}: {len(report['tasks'])} tasks × {report['epochs']}")
    for column in (
        "bucket",
        "kind",
        "trials",
        "mean score",
        "pass rate",
        *(f"pass@{k}" for k in ks),
    ):
        table.add_column(column, overflow="fold")
    for key, b in report["buckets"].items():
        table.add_row(
            key,
            b["kind"],
            str(b["trials"]),
            _fmt(b["mean_score"]),
            _fmt(b["pass_rate"]),
            *(_fmt(b["pass_at_k"][k]) for k in ks),
        )
    return table


@eval_app.command("run")
def run(
    skill: Annotated[str | None, typer.Option(help="Run this skill's cases.yaml.")] = None,
    suite: Annotated[
        Path | None,
        typer.Option(help="Run a suite file, or a suite folder in Memex's layout (suite.json)."),
    ] = None,
    skills: SkillsOpt = None,
    trust: TrustOpt = None,
    model: Annotated[
        str | None,
        typer.Option(help="Model for every skill: PROVIDER:MODEL, scripted:FILE or rules."),
    ] = None,
    judge_model: Annotated[
        str | None, typer.Option(help="Judge model; without it judge graders are not scored.")
    ] = None,
    epochs: Annotated[int, typer.Option(min=1, help="Trials per task.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Trials run at once.")] = 1,
    record: Annotated[
        Path | None, typer.Option(help="Record model turns to this cassette.")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Report folder (default SKILLDECK_HOME/evals/SUITE)."),
    ] = None,
    checkpoint: Annotated[
        str | None, typer.Option(help="Checkpoint URL (default: sqlite in the report folder).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a suite on the real graph and write report.json, report.md and report.html."""
    from skilldeck._internal.home import state_home
    from skilldeck.evals.judge import Judge
    from skilldeck.evals.report import write_reports
    from skilldeck.evals.runner import run_suite

    try:
        chosen = _suite(skill, suite, skills, trust)
        judge = Judge.from_spec(judge_model) if judge_model else None
        folder = out_dir or state_home().path / "evals" / chosen.name
        total = sum(t.trials or epochs for t in chosen.tasks)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            disable=as_json,
        ) as progress:
            bar = progress.add_task(f"eval {chosen.name}", total=total)

            def advance(result: TrialResult) -> None:
                mark = {True: "pass", False: "fail", None: "n/s"}[result.passed]
                progress.update(bar, advance=1, description=f"{result.outcome.trial_id} {mark}")

            report = run_suite(
                chosen,
                out=folder,
                model=model,
                judge=judge,
                epochs=epochs,
                concurrency=concurrency,
                record=record,
                checkpoint=checkpoint,
                on_trial=advance,
            )
        paths = write_reports(report, folder)
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        body = {k: report[k] for k in ("suite", "run_id", "summary", "buckets", "graders")}
        print(json.dumps({**body, "files": {k: str(p) for k, p in paths.items()}}))
        return
    out.print(_bucket_table(report))
    for kind, path in paths.items():
        out.print(f"{kind}: {path}", highlight=False)


@eval_app.command("compare")
def compare(
    base: Annotated[Path, typer.Argument(help="The baseline report.json.")],
    new: Annotated[Path, typer.Argument(help="The new report.json.")],
    metric: Annotated[str, typer.Option(help="mean_score or pass_rate.")] = "mean_score",
    tolerance: Annotated[
        float, typer.Option(help="Capability-bucket changes within this count as none.")
    ] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Per-bucket deltas; exit 1 when a regression bucket drops, when buckets move both ways,
    or when buckets only drop."""
    from skilldeck.evals.compare import compare_reports
    from skilldeck.evals.report import load_report

    try:
        if metric not in ("mean_score", "pass_rate"):
            raise EvalConfigError(f"--metric {metric!r}: use mean_score or pass_rate")
        result = compare_reports(
            load_report(base),
            load_report(new),
            metric="pass_rate" if metric == "pass_rate" else "mean_score",
            tolerance=tolerance,
        )
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps(result.to_dict()))
    else:
        table = Table(title=f"{metric}: {base} -> {new}")
        for column in ("bucket", "kind", "base", "new", "delta", "change"):
            table.add_column(column, overflow="fold")
        colours = {"improved": "green", "dropped": "red"}
        for r in result.rows:
            change = f"[{colours[r.change]}]{r.change}[/]" if r.change in colours else r.change
            delta = "-" if r.delta is None else f"{r.delta:+.3f}"
            table.add_row(r.bucket, r.kind, _fmt(r.base), _fmt(r.new), delta, change)
        out.print(table)
        for reason in result.reasons:
            err.print(f"[bold red]fail[/] {escape(reason)}", highlight=False, soft_wrap=True)
        if result.ok:
            out.print("[green]ok[/]: no bucket dropped")
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


@eval_app.command("export-failures")
def export_failures(
    report: Annotated[Path, typer.Argument(help="The report.json of a run.")],
    out_dir: Annotated[Path, typer.Option("--out", help="A new folder to write.")],
    skills: SkillsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write each failing trial's grader rationales, workspace diff and transcript, with the
    skills' current SKILL.md and the report, for one round of prompt iteration."""
    from skilldeck.evals.export import export_failures as export
    from skilldeck.evals.report import load_report
    from skilldeck.skills import builtin_skills_dir, load_skills

    try:
        folders = export(
            load_report(report), out_dir, load_skills(skills_paths(skills) or builtin_skills_dir())
        )
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps({"out": str(out_dir), "trials": [str(f) for f in folders]}))
    else:
        out.print(f"{len(folders)} failing trial(s) written to {out_dir}; start at README.md")


@eval_app.command("promote")
def promote_bucket(
    bucket: Annotated[str, typer.Argument(help="SKILL/BUCKET (or a bare bucket with --suite).")],
    suite: Annotated[Path | None, typer.Option(help="The suite file to record it in.")] = None,
    skills: SkillsOpt = None,
    trust: TrustOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move a bucket from capability to regression (recorded in the suite file's ``kinds``;
    for a skill's own suite, ``<bundle>/evals/suite.yaml``)."""
    from skilldeck.evals.suites import load_suite, promote, skill_suite_path, suite_for_skill

    try:
        if suite is not None:
            target, known = suite, load_suite(suite, trust=trust or ()).buckets()
        else:
            if "/" not in bucket:
                raise EvalConfigError("give SKILL/BUCKET, or --suite FILE for a bare bucket name")
            skill = bucket.split("/", 1)[0]
            chosen = suite_for_skill(skill, skills_paths(skills) or [], trust or ())
            target, known = skill_suite_path(chosen.bundle(skill)), chosen.buckets()
        changed = promote(bucket, target, known)
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps({"bucket": bucket, "suite_file": str(target), "changed": changed}))
    elif changed:
        out.print(f"{bucket} is now a regression bucket ({target})", highlight=False)
    else:
        out.print(f"{bucket} was already a regression bucket ({target})", highlight=False)


@eval_app.command("calibrate")
def calibrate_judge(
    report: Annotated[Path, typer.Argument(help="A report.json with judge verdicts.")],
    labels: Annotated[Path, typer.Argument(help="Human labels: [{task, grader, label}].")],
    as_json: JsonOpt = False,
) -> None:
    """Agreement of the judge with human labels: accuracy and Cohen's kappa."""
    from skilldeck.evals.calibration import calibrate, load_labels
    from skilldeck.evals.report import load_report

    try:
        result = calibrate(load_report(report), load_labels(labels))
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps(result.to_dict()))
        return
    out.print(
        f"{result.pairs} pair(s): accuracy {_fmt(result.accuracy)}, kappa {_fmt(result.kappa)}, "
        f"{result.not_scored} not scored, {len(result.unmatched)} label(s) unmatched",
        highlight=False,
    )
