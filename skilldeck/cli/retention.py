"""``skilldeck prune``: delete expired threads (and thin finished ones) for embedders, who run
no ``skilldeck serve`` and its background prune."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.progress import TaskID

from skilldeck.cli._shared import CheckpointOpt, JsonOpt, fail, open_deck, out, say_where
from skilldeck.cli.stores import _progress
from skilldeck.errors import SkillDeckError

__all__ = ["prune"]

_PHASES = {"delete": "deleting expired threads", "thin": "thinning finished threads"}


def prune(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be deleted; delete nothing.")
    ] = False,
    thin: Annotated[
        bool | None,
        typer.Option(
            "--thin/--no-thin",
            help="Also delete every checkpoint of a finished thread but its last (ends time "
            "travel to them); default: SKILLDECK_THIN_FINISHED.",
        ),
    ] = None,
    batch: Annotated[
        int, typer.Option(min=1, help="Threads read per batch (each is deleted on its own).")
    ] = 200,
    checkpoint: CheckpointOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete expired threads: their checkpoints, transcripts, index rows and claims.

    A thread expires its time-to-live (SKILLDECK_THREAD_TTL, or its run's ttl) after its last
    activity. Never deleted: a thread whose card waits, one a run holds, transcript rows a
    fork still reads. Safe beside serving processes and other prunes on the same database."""
    say_where(checkpoint, as_json)
    try:
        with open_deck(None, checkpoint, None, existing=True) as deck:
            if as_json:
                report = deck.prune(thin=thin, dry_run=dry_run, batch=batch)
            else:
                with _progress() as bar:
                    tasks: dict[str, TaskID] = {}

                    def advance(phase: str, done: int, total: int) -> None:
                        if phase not in tasks:
                            tasks[phase] = bar.add_task(_PHASES[phase], total=total)
                        bar.update(tasks[phase], completed=done)

                    report = deck.prune(thin=thin, dry_run=dry_run, batch=batch, progress=advance)
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps(report.to_dict()))
        return
    verb = "would delete" if dry_run else "deleted"
    line = f"{verb} {report.deleted} of {report.expired} expired threads"
    kept = [f"{report.busy} held by a run"] if report.busy else []
    kept += [f"{report.pending} with a card waiting"] if report.pending else []
    if kept:
        line += f" (kept: {', '.join(kept)})"
    if report.finished or report.thinned:
        thinned = "would thin" if dry_run else "thinned"
        line += f"; {thinned} {report.thinned} finished threads"
        if not dry_run:
            line += f" ({report.checkpoints_removed} checkpoints removed)"
    out.print(f"{line} in {report.seconds:.2f} s", highlight=False)
