"""Startup benchmark: wall time of `skilldeck --help`, `skilldeck threads` and a demo `run`.

Usage::

    python bench/startup.py [--reps 15] [--json]

Each command runs as a new process, ``--reps`` times, interleaved with a bare
``python -c 'import langgraph.graph'`` (the floor of any command that builds a graph) and a bare
``python -c pass``; medians are reported, with each command's ratio to the langgraph import of
the same run, since the machine is shared and noisy. The state folder is a temporary one, which
holds a few demo threads so that ``threads`` lists something. Targets: ``--help`` and
``threads`` at most 0.3 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import arguments, log, median, progress_bar, report_header, show_report
from rich.console import Console
from rich.table import Table

BIN = Path(sys.executable).parent
TARGET_S = 0.3


def _commands(home: Path) -> dict[str, list[str]]:
    skilldeck = str(BIN / "skilldeck")
    answers = '{"profile.defendant.name": "Acme", "profile.defendant.type": "organisation"}'
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import langgraph.graph": [sys.executable, "-c", "import langgraph.graph"],
        "skilldeck --help": [skilldeck, "--help"],
        "skilldeck threads": [skilldeck, "threads"],
        "skilldeck demo (run, card, resume)": [skilldeck, "demo", "--answers", answers],
    }


def _time(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def measure(reps: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="skilldeck-startup-") as folder:
        home = Path(folder)
        env = {**os.environ, "SKILLDECK_HOME": str(home)}
        env.pop("SKILLDECK_MODEL", None)
        commands = _commands(home)
        for _ in range(3):  # some threads to list (and a warm page cache)
            _time(commands["skilldeck demo (run, card, resume)"], env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        with progress_bar() as bar:
            task = bar.add_task("startup", total=reps * len(commands))
            for rep in range(reps):
                names = list(commands) if rep % 2 == 0 else list(reversed(commands))
                for name in names:
                    times[name].append(_time(commands[name], env))
                    bar.advance(task)
    floor = median(times["import langgraph.graph"])
    rows = {
        name: {
            "median_s": round(median(values), 3),
            "min_s": round(min(values), 3),
            "vs_langgraph_import": round(median(values) / floor, 2),
        }
        for name, values in times.items()
    }
    return report_header(reps=reps, target_s=TARGET_S, commands=rows)


def show(report: dict[str, object]) -> None:
    table = Table("command", "median s", "min s", "× import langgraph.graph", title="startup")
    commands = report["commands"]
    assert isinstance(commands, dict)
    for name, row in commands.items():
        table.add_row(
            name, f"{row['median_s']:.3f}", f"{row['min_s']:.3f}", f"{row['vs_langgraph_import']}"
        )
    Console().print(table)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--reps", type=int, default=15, help="runs of each command")
    args = parser.parse_args()
    log(f"{args.reps} runs of each command")
    return show_report(measure(args.reps), args.json, show)


if __name__ == "__main__":
    raise SystemExit(main())
