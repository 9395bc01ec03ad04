"""A wheel install works as well as an editable one.

The wheel is built from the tracked files (a copy, so the checkout gets no build folders),
installed into a new virtualenv, and run from a folder outside the checkout: every built-in
skill's eval suite must run there and score what it scores here. What is under test is the
wheel's own files, so the new virtualenv takes the wheel alone and reads its dependencies from
this environment (installed from scratch by the README's commands): resolving and installing
them again cost a minute and a half of every test run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from skilldeck import demo
from skilldeck.evals import load_suite, run_suite, suite_for_skill
from skilldeck.skills import builtin_skills_dir

pytestmark = [pytest.mark.L2, pytest.mark.wheel]

ROOT = Path(__file__).resolve().parents[1]
# Each built-in skill with the model its cases run on ("" for the rule-based paths).
SKILLS = {
    "card-agent": "scripted:evals/scripted.yaml",
    "pkm-agent": "scripted:evals/scripted.yaml",
    "nomemory-recall": "",
    "rag-retrieve": "",
    "litigation-intake": "demo",
}


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv with the built wheel installed, its dependencies this environment's:
    its bin/."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    tracked = _run("git", "ls-files", "-z", cwd=ROOT).split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run(sys.executable, "-m", "build", "--wheel", "--outdir", work / "dist", cwd=source)
    (wheel,) = (work / "dist").glob("skilldeck-*.whl")
    _run(sys.executable, "-m", "venv", work / "venv", cwd=work)
    bin_dir = work / "venv" / "bin"
    _run(bin_dir / "pip", "install", "-q", "--no-deps", wheel, cwd=work)
    # A path line in a .pth file only extends sys.path, after the venv's own site-packages:
    # this environment's .pth files (the editable install's finder among them) are not run,
    # so ``import skilldeck`` finds the wheel's copy.
    purelib = sysconfig.get_paths()["purelib"]
    (own,) = (work / "venv" / "lib").glob("python*/site-packages")
    (own / "_dependencies.pth").write_text(purelib + "\n", "utf-8")
    return bin_dir


def _env(home: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SKILLDECK_", "PYTHON"))}
    return {**keep, "SKILLDECK_HOME": str(home)}


def test_the_wheel_holds_the_card_consoles_assets(installed: Path, tmp_path: Path) -> None:
    code = "import skilldeck, pathlib; print(pathlib.Path(skilldeck.__file__).parent)"
    where = Path(_run(installed / "python", "-c", code, cwd=tmp_path, env=_env(tmp_path)).strip())
    static = where / "server" / "console" / "static"
    assert where.is_relative_to(installed.parent), where  # the new venv's copy
    assert sorted(p.name for p in static.iterdir()) == ["console.css", "console.js", "index.html"]


def test_the_wheel_holds_every_bundle_file(installed: Path, tmp_path: Path) -> None:
    code = "import skilldeck.skills as s, pathlib; print(pathlib.Path(s.__file__).parent)"
    where = Path(_run(installed / "python", "-c", code, cwd=tmp_path, env=_env(tmp_path)).strip())
    assert where.is_relative_to(installed.parent), where  # not the checkout
    shipped = {p.relative_to(where).as_posix() for p in where.rglob("*") if p.is_file()}
    mine = {
        p.relative_to(builtin_skills_dir()).as_posix()
        for p in builtin_skills_dir().rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert mine - shipped == set()


def _suite(skill: str, folder: Path) -> list[str]:
    """``--skill NAME``, or for litigation-intake a suite file that adds the demo's matters."""
    if SKILLS[skill] != "demo":
        return ["--skill", skill]
    suite = folder / "suite.yaml"
    suite.write_text(yaml.safe_dump({"skills": [skill], "fixtures": [str(demo.FILES)]}))
    return ["--suite", str(suite)]


def _model(skill: str, demo_script: str) -> list[str]:
    model = SKILLS[skill]
    if model == "demo":
        model = f"scripted:{demo_script}"
    return ["--model", model] if model else []


@pytest.mark.parametrize("skill", sorted(SKILLS))
def test_every_builtin_suite_runs_from_the_wheel(
    installed: Path, skill: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SKILLDECK_MODEL", raising=False)
    env = _env(tmp_path / "home")
    demo_script = _run(
        installed / "python", "-c", "from skilldeck import demo; print(demo.SCRIPT)",
        cwd=tmp_path, env=env,
    ).strip()  # fmt: skip
    assert Path(demo_script).is_relative_to(installed.parent)
    out = tmp_path / "out"
    command = [
        installed / "skilldeck", "eval", "run", *_suite(skill, tmp_path),
        *_model(skill, demo_script), "--out", out, "--json",
    ]  # fmt: skip
    body: dict[str, Any] = json.loads(_run(*command, cwd=tmp_path, env=env))
    # The same suite, run here from the checkout, scores the same.
    model = _model(skill, str(demo.SCRIPT))
    how, what = _suite(skill, tmp_path)
    suite = suite_for_skill(what) if how == "--skill" else load_suite(Path(what))
    here = run_suite(suite, out=tmp_path / "here", model=model[1] if model else None)
    assert body["summary"]["trials"] == here["summary"]["trials"] > 0
    assert body["summary"]["pass_rate"] == here["summary"]["pass_rate"]
    assert {k: b["mean_score"] for k, b in body["buckets"].items()} == {
        k: b["mean_score"] for k, b in here["buckets"].items()
    }
