"""Type-check skilldeck as it is installed: ``python tests/typecheck.py [mypy options]``.

The checkout keeps graph/, nodes/, skills/, tools/, checkpoints/ and evals/ beside skilldeck/;
setuptools installs them as ``skilldeck.graph`` and so on (``package-dir`` in pyproject.toml),
and a checkout's ``skilldeck/__init__.py`` serves them by extending the package's ``__path__``.
mypy names a module by its folders alone: it reads neither ``package-dir`` nor ``__path__``
(an editable install's import hook is invisible to it too), so ``mypy skilldeck`` checks the
files in skilldeck/ only and finds no ``skilldeck.graph``. This runs mypy, with the options of
pyproject's ``[tool.mypy]`` plus any given here, on every module the wheel installs, each under
its installed name, from the same ``packages`` and ``package-dir`` lists setuptools builds the
wheel from: nothing is staged or copied, and a new module is checked as soon as it is packaged.
``tests/test_quality.py`` runs this command.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

__all__ = ["ROOT", "main", "modules"]

ROOT = Path(__file__).resolve().parents[1]


def modules(root: Path = ROOT) -> list[tuple[str, Path]]:
    """Each module the wheel installs, ``(installed name, file relative to root)``."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    folders: dict[str, str] = setuptools.get("package-dir", {})
    found = []
    for package in setuptools["packages"]:
        folder = _folder(package, folders)
        if not (root / folder / "__init__.py").is_file():
            raise SystemExit(f"pyproject.toml lists package {package}, but {folder} has none")
        for path in sorted((root / folder).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found.append((name, path.relative_to(root)))
    return found


def _folder(package: str, folders: dict[str, str]) -> Path:
    """Where setuptools reads ``package`` from: its longest prefix that ``package-dir`` maps,
    then the rest of its name as folders."""
    parts = package.split(".")
    for end in range(len(parts), 0, -1):
        if (prefix := ".".join(parts[:end])) in folders:
            return Path(folders[prefix], *parts[end:])
    return Path(folders.get("", "."), *parts)


def main(argv: list[str], root: Path = ROOT) -> int:
    """Run mypy on the project in ``root``; its exit status (0: no errors)."""
    os.chdir(root)  # pyproject's options, the cache and the paths in messages are the root's
    targets, options = process_options(
        ["--config-file", "pyproject.toml", *argv], require_targets=False
    )
    if targets:
        raise SystemExit("give mypy options only: the modules are the packaged ones")
    sources = [BuildSource(str(path), name, None) for name, path in modules(root)]
    messages: list[str] = []

    def show(_file: str | None, new: list[str], _serious: bool) -> None:
        messages.extend(new)
        for line in new:
            print(line, flush=True)

    try:
        build.build(sources, options, flush_errors=show, stdout=sys.stdout, stderr=sys.stderr)
    except CompileError:  # a blocking error (a syntax error): its messages were shown
        return 2
    errors = [m for m in messages if ": error:" in m]
    files = {m.split(":", 1)[0] for m in errors}
    if errors:
        print(f"Found {len(errors)} errors in {len(files)} files", end=" ")
        print(f"(checked {len(sources)} source files)")
        return 1
    print(f"Success: no issues found in {len(sources)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
