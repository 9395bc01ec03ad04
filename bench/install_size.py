"""Install size: packages and disk of a new virtualenv with skilldeck and each extra.

Usage::

    python bench/install_size.py [--extras core,vectors,...] [--json]

The wheel is built once from the checkout's tracked files; each extra is installed into a
virtualenv of its own (pip's cache makes the downloads cheap after the first). Reported: the
packages ``pip list`` shows besides pip and setuptools, and the virtualenv's size on disk.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import arguments, log, report_header, show_report
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
    "all",
    "dev",
)


def _run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{args}: {done.stderr[-2000:]}")
    return done.stdout


def build_wheel(work: Path) -> Path:
    source = work / "source"
    for name in filter(None, _run("git", "ls-files", "-z", cwd=ROOT).split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run(sys.executable, "-m", "build", "--wheel", "--outdir", work / "dist", cwd=source)
    (wheel,) = (work / "dist").glob("skilldeck-*.whl")
    return wheel


def measure(wheel: Path, extra: str, work: Path) -> dict[str, object]:
    venv = work / f"venv-{extra}"
    _run(sys.executable, "-m", "venv", venv, cwd=work)
    spec = str(wheel) if extra == "core" else f"{wheel}[{extra}]"
    _run(venv / "bin" / "pip", "install", "-q", spec, cwd=work)
    listed = _run(venv / "bin" / "pip", "list", "--format=freeze", cwd=work).splitlines()
    packages = [p for p in listed if p.split("==")[0].lower() not in ("pip", "setuptools")]
    size = int(_run("du", "-sm", venv, cwd=work).split()[0])
    return {"packages": len(packages), "mb": size}


def show(report: dict[str, object]) -> None:
    table = Table("install", "packages", "MB on disk", title="install size")
    sizes = report["extras"]
    assert isinstance(sizes, dict)
    for extra, row in sizes.items():
        name = "skilldeck" if extra == "core" else f"skilldeck[{extra}]"
        table.add_row(name, str(row["packages"]), str(row["mb"]))
    Console().print(table)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--extras", default=",".join(EXTRAS), help="comma-separated extras")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="skilldeck-size-") as folder:
        work = Path(folder)
        wheel = build_wheel(work)
        sizes = {}
        for extra in args.extras.split(","):
            log(f"installing {extra}")
            sizes[extra] = measure(wheel, extra, work)
    return show_report(report_header(extras=sizes), args.json, show)


if __name__ == "__main__":
    raise SystemExit(main())
