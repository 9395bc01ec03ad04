"""The code base stays lint-clean, formatted and strictly typed (ruff, mypy --strict)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typecheck import main, modules

ROOT = Path(__file__).resolve().parents[1]
#: The type check as the README documents it.
TYPECHECK = "python tests/typecheck.py"

pytestmark = pytest.mark.L2


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.subprocess
def test_ruff_lint_and_format() -> None:
    _run("ruff", "check", ".")
    _run("ruff", "format", "--check", ".")


@pytest.mark.slow
@pytest.mark.timeout(900)  # mypy --strict on the whole package: minutes on a cold cache
def test_mypy_strict_on_every_packaged_module() -> None:
    """The documented command checks each module the wheel installs, by its installed name."""
    assert f"`{TYPECHECK}`" in (ROOT / "README.md").read_text("utf-8")
    checked = dict(modules())
    assert checked["skilldeck.graph.builder"] == Path("graph/builder.py")
    assert checked["skilldeck.evals.graders"] == Path("evals/graders/__init__.py")
    # Every module of a package folder is packaged (none is left out of pyproject's list).
    roots = ("skilldeck", "graph", "nodes", "skills", "tools", "checkpoints", "evals")
    found = {
        p for d in roots for p in (ROOT / d).rglob("*.py") if (p.parent / "__init__.py").exists()
    }
    assert {ROOT / path for path in checked.values()} == found
    done = _run(sys.executable, *TYPECHECK.split()[1:])
    assert f"Success: no issues found in {len(checked)} source files" in done.stdout


def test_the_type_check_follows_package_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A module that setuptools installs from another folder is checked as what it is: an
    error across the mapping is found (plain ``mypy -p pkg`` finds no ``pkg.sub`` at all)."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "pkg" = "pkg", "pkg.sub" = "sub" }\n'
        'packages = ["pkg", "pkg.sub"]\n[tool.mypy]\nstrict = true\n'
    )
    for folder, files in {
        "pkg": {"__init__.py": "from pkg.sub.half import half\n\nHALF: str = half(4)\n"},
        "sub": {"__init__.py": "", "half.py": "def half(n: int) -> int:\n    return n // 2\n"},
    }.items():
        (tmp_path / folder).mkdir()
        for name, text in files.items():
            (tmp_path / folder / name).write_text(text)
    monkeypatch.chdir(tmp_path)  # main() works in the root it checks; back after the test
    status = main(["--cache-dir", str(tmp_path / "cache")], root=tmp_path)
    out = capsys.readouterr().out
    assert status == 1, out
    assert (
        'pkg/__init__.py:3: error: Incompatible types in assignment (expression has type "int"'
        in out
    )
    assert "checked 3 source files" in out
