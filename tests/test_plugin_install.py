"""An installed plugin adds a tool, an execution mode and a grader: docs/plugins.md's weather
plugin is pip-installed into a new virtualenv next to skilldeck, and the page's commands run
there (``skilldeck check``, ``run`` and ``eval run``, each a subprocess).

The virtualenv is a plain ``python -m venv`` (no system site-packages). skilldeck itself is
installed into it (``pip install --no-deps -e`` of a copy of this checkout's files): its
distribution, its entry points and its ``skilldeck`` command are the virtualenv's own. Its
dependencies (LangGraph, LangChain, ...) come from this test's environment through a ``.pth``
file, so no package is downloaded; a ``.pth`` line only adds a folder to ``sys.path`` (the
``.pth`` files inside it, such as this environment's editable skilldeck finder, are not run),
so the only skilldeck the virtualenv can import is the one installed into it, which the test
checks. The plugin package is built and installed by pip as a user's would be.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from markdown_blocks import blocks
from shell import run_block

pytestmark = [pytest.mark.L2, pytest.mark.wheel]

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plugins.md"


def _run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv with skilldeck installed (not the plugin): its ``bin/``."""
    work = tmp_path_factory.mktemp("plugin-venv")
    source = work / "skilldeck-source"  # the checkout's files: the build writes no egg-info here
    listed = _run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run(sys.executable, "-m", "venv", work / "venv", cwd=work)
    bin_dir = work / "venv" / "bin"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run(bin_dir / "python", "-c", purelib, cwd=work).strip())
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "_skilldeck_test_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    _run(bin_dir / "pip", "install", "-q", "--no-deps", "-e", source, cwd=work)
    return bin_dir


def test_an_installed_plugin_adds_its_tool_mode_and_grader(venv: Path, tmp_path: Path) -> None:
    for block in blocks(DOC):
        if block.title:
            (tmp_path / block.title).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / block.title).write_text(block.code, "utf-8")
    where = json.loads(
        _run(
            venv / "python", "-c",
            "import json, skilldeck, importlib.metadata as m; "
            "d = m.distribution('skilldeck'); "
            "print(json.dumps([skilldeck.__file__, str(d.locate_file(''))]))",
            cwd=tmp_path,
        )
    )  # fmt: skip
    assert Path(where[0]).is_relative_to(venv.parent.parent / "skilldeck-source"), where
    assert Path(where[1]).is_relative_to(venv.parent), where  # the virtualenv's own install
    # Before the plugin is installed, nothing of it is there.
    before = run_block("skilldeck check weather-skills", tmp_path, bin_dir=venv)
    assert before.returncode != 0
    assert "execution mode 'lookup' is not available" in before.stdout + before.stderr
    assert "tool 'weather__forecast' is not registered" in before.stdout + before.stderr
    (commands,) = [b for b in blocks(DOC) if b.lang == "bash"]
    done = run_block(commands.code, tmp_path, bin_dir=venv)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    loaded = _run(
        venv / "python", "-c",
        "from skilldeck.plugins import load_plugins; "
        "print([(p.name, p.module, p.distribution) for p in load_plugins()])",
        cwd=tmp_path,
    )  # fmt: skip
    assert "('weather', 'weather_plugin', 'weather-plugin')" in loaded
    report = json.loads((tmp_path / "weather-report" / "report.json").read_text("utf-8"))
    grades = [g for t in report["tasks"] for tr in t["trials"] for g in tr["grades"]]
    assert {g["name"] for g in grades} == {"forecast_mentions", "json_path_equals"}, grades
