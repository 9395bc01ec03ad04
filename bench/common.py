"""What every benchmark script shares: its parser and report header, logging and progress on
stderr, medians.

Benchmarks run as scripts (``python bench/NAME.py``), so they import this as ``common``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["arguments", "err", "log", "median", "progress_bar", "report_header", "show_report"]

# stdout carries the one JSON object of --json; everything for people goes to stderr.
err = Console(stderr=True)


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A script's parser, described by its docstring's first line, with ``--json``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def report_header(**fields: Any) -> dict[str, Any]:
    """When and where a benchmark ran, then ``fields``: how every report starts."""
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cpu, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}",
        **fields,
    }


def show_report(
    report: dict[str, Any], as_json: bool, show: Callable[[dict[str, Any]], None]
) -> int:
    """Print ``report`` as one JSON object (``--json``) or with ``show`` for people; exit 0."""
    if as_json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        show(report)
    return 0


def log(message: str) -> None:
    err.print(f"[dim]{datetime.now():%H:%M:%S}[/dim] {message}")


def progress_bar() -> Progress:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    return Progress(*columns, TimeElapsedColumn(), console=err)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")
