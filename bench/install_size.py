"""Install size: packages and disk of a new virtualenv with skilldeck and each extra, and the
README's first command (install, then the demo) as a new user runs it.

Usage::

    python bench/install_size.py [--extras core,vectors,...] [--json]
    python bench/install_size.py --quickstart [--reps 3] [--baseline] [--no-cache] [--json]

The wheel is built once from the checkout's tracked files; each extra is installed into a
virtualenv of its own (pip's cache makes the downloads cheap after the first). Reported: the
packages ``pip list`` shows besides pip and setuptools, and the virtualenv's size on disk.

``--quickstart`` runs the README's first quickstart command verbatim (what ``.ci/run`` runs,
read with ``tests/markdown_blocks.py``) in a fresh copy of the tracked files, ``--reps`` times:
its wall time (median and every run), then the packages and size of the ``.venv`` it made.
``--baseline`` also runs it the way it was before (``pip install -e ".[dev]"``), in the same
run. ``--no-cache`` runs pip without its cache (``PIP_NO_CACHE_DIR``): every package is
downloaded, as on a new machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import arguments, log, median, report_header, show_report
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = (
    "core",
    "vectors",
    "vectors-client",
    "documents",
    "service",
    "postgres",
    "notebooks",
    "mcp",
    "agentskills",
    "all",
    "dev",
)


def _run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{args}: {done.stderr[-2000:]}")
    return done.stdout


def copy_checkout(into: Path) -> Path:
    """The checkout's tracked files, copied into ``into`` (what a clone holds)."""
    for name in filter(None, _run("git", "ls-files", "-z", cwd=ROOT).split("\0")):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


def build_wheel(work: Path) -> Path:
    source = copy_checkout(work / "source")
    _run(sys.executable, "-m", "build", "--wheel", "--outdir", work / "dist", cwd=source)
    (wheel,) = (work / "dist").glob("skilldeck-*.whl")
    return wheel


def measure(wheel: Path, extra: str, work: Path) -> dict[str, object]:
    venv = work / f"venv-{extra}"
    _run(sys.executable, "-m", "venv", venv, cwd=work)
    spec = str(wheel) if extra == "core" else f"{wheel}[{extra}]"
    _run(venv / "bin" / "pip", "install", "-q", spec, cwd=work)
    return venv_size(venv)


def venv_size(venv: Path) -> dict[str, object]:
    """The packages ``pip list`` shows in ``venv`` besides pip and setuptools, and its MB."""
    listed = _run(venv / "bin" / "pip", "list", "--format=freeze", cwd=venv).splitlines()
    packages = [p for p in listed if p.split("==")[0].lower() not in ("pip", "setuptools")]
    size = int(_run("du", "-sm", venv, cwd=venv).split()[0])
    return {"packages": len(packages), "mb": size}


def readme_command(number: int) -> str:
    """The README's quickstart command ``number``, read as ``.ci/run`` reads it."""
    script = ROOT / "tests" / "markdown_blocks.py"
    return _run(sys.executable, script, "command", str(number), cwd=ROOT).strip()


def run_quickstart(command: str, work: Path, *, cache: bool) -> dict[str, Any]:
    """Run ``command`` with bash in a new copy of the checkout; its seconds, then the size of
    the ``.venv`` it made."""
    clone = copy_checkout(Path(tempfile.mkdtemp(prefix="clone-", dir=work)))
    # A reader's shell: no virtualenv of ours, no test settings, state in the clone.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKILLDECK_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(sys.prefix)
    )
    env["SKILLDECK_HOME"] = str(clone / ".skilldeck")
    if not cache:
        env["PIP_NO_CACHE_DIR"] = "1"
    started = time.perf_counter()
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode or "finished thread" not in done.stdout:
        raise SystemExit(f"{command}: exit {done.returncode}\n{done.stderr[-2000:]}")
    row = {"seconds": round(seconds, 1), **venv_size(clone / ".venv")}
    shutil.rmtree(clone)
    return row


def quickstart(reps: int, baseline: bool, cache: bool, work: Path) -> dict[str, object]:
    """The README's first command ``reps`` times (and the old one, with ``[dev]``, as often)."""
    command = readme_command(1)
    commands = {"readme": command}
    if baseline:
        commands["before, with the dev extra"] = command.replace(
            "pip install -e .", 'pip install -e ".[dev]"'
        )
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in commands}
    for rep in range(reps):
        for name, text in commands.items():  # interleaved: both see the same machine
            log(f"{name}, run {rep + 1} of {reps}")
            runs[name].append(run_quickstart(text, work, cache=cache))
    return {
        name: {
            "command": commands[name],
            "seconds_median": round(median([r["seconds"] for r in rows]), 1),
            "seconds": [r["seconds"] for r in rows],
            "packages": rows[-1]["packages"],
            "mb": rows[-1]["mb"],
        }
        for name, rows in runs.items()
    }


def show(report: dict[str, object]) -> None:
    sizes = report.get("extras")
    if isinstance(sizes, dict):
        table = Table("install", "packages", "MB on disk", title="install size")
        for extra, row in sizes.items():
            name = "skilldeck" if extra == "core" else f"skilldeck[{extra}]"
            table.add_row(name, str(row["packages"]), str(row["mb"]))
        Console().print(table)
    runs = report.get("quickstart")
    if isinstance(runs, dict):
        table = Table(
            "command", "seconds (median)", "every run", "packages", "MB on disk",
            title=f"the README's first command (pip cache: {report['pip_cache']})",
        )  # fmt: skip
        for name, row in runs.items():
            table.add_row(
                name, str(row["seconds_median"]), ", ".join(map(str, row["seconds"])),
                str(row["packages"]), str(row["mb"]),
            )  # fmt: skip
        Console().print(table)
        for name, row in runs.items():
            Console().print(f"{name}: {row['command']}", soft_wrap=True, highlight=False)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--extras", default=",".join(EXTRAS), help="comma-separated extras")
    parser.add_argument(
        "--quickstart", action="store_true", help="measure the README's first command instead"
    )
    parser.add_argument("--reps", type=int, default=3, help="runs of the quickstart command")
    parser.add_argument(
        "--baseline", action="store_true", help='also the command as it was, with ".[dev]"'
    )
    parser.add_argument("--no-cache", action="store_true", help="pip without its cache")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="skilldeck-size-") as folder:
        work = Path(folder)
        if args.quickstart:
            runs = quickstart(args.reps, args.baseline, not args.no_cache, work)
            cache = "off" if args.no_cache else "warm"
            return show_report(report_header(pip_cache=cache, quickstart=runs), args.json, show)
        wheel = build_wheel(work)
        sizes = {}
        for extra in args.extras.split(","):
            log(f"installing {extra}")
            sizes[extra] = measure(wheel, extra, work)
    return show_report(report_header(extras=sizes), args.json, show)


if __name__ == "__main__":
    raise SystemExit(main())
