"""The code base stays lint-clean, formatted and strictly typed (ruff, mypy --strict)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("graph", "nodes", "skills", "tools", "checkpoints", "evals")


def _run(*args: str, cwd: Path = ROOT) -> None:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_lint_and_format() -> None:
    _run("ruff", "check", ".")
    _run("ruff", "format", "--check", ".")


def test_mypy_strict(tmp_path: Path) -> None:
    """mypy sees the installed layout: the root folders are subpackages of ``skilldeck``."""
    staged = tmp_path / "skilldeck"
    staged.mkdir()
    for item in (ROOT / "skilldeck").iterdir():
        (staged / item.name).symlink_to(item)
    for package in PACKAGES:
        (staged / package).symlink_to(ROOT / package)
    _run(
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / ".mypy_cache"),
        "-p",
        "skilldeck",
        cwd=tmp_path,
    )
