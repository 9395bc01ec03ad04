"""What every benchmark script shares: logging and progress on stderr, medians.

Benchmarks run as scripts (``python bench/NAME.py``), so they import this as ``common``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["err", "log", "median", "progress_bar"]

# stdout carries the one JSON object of --json; everything for people goes to stderr.
err = Console(stderr=True)


def log(message: str) -> None:
    err.print(f"[dim]{datetime.now():%H:%M:%S}[/dim] {message}")


def progress_bar() -> Progress:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    return Progress(*columns, TimeElapsedColumn(), console=err)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")
