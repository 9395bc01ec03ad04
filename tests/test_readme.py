"""Every code block of the README runs, so the README can never drift from the product.

Python blocks run with pytest-examples (their ``#>`` comments are checked against what they
print); shell blocks run in bash in a folder of their own. The first shell block is the
quickstart: its two commands (set up a virtualenv and run the demo; run the tests) are what
``.ci/run`` runs on a fresh machine, which this file checks; running them here would install
the project inside its own test run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_blocks import README, Block, blocks, langgraph_server, quickstart
from pytest_examples import CodeExample, EvalExample, find_examples
from shell import run_block

from skilldeck import demo

pytestmark = pytest.mark.L2

ROOT = README.parent
SHELL = [b for b in blocks(README) if b.lang == "bash"]
# The quickstart is what CI runs; LangGraph's server needs a copy of the repository to start in
# (tests/test_langgraph_server.py runs that block).
RUN_HERE = [b for b in SHELL[1:] if b != langgraph_server()]
PYTHON = [e for e in find_examples(README) if e.prefix.startswith("python")]


def test_every_code_block_has_a_runner() -> None:
    """A block in another language would be code that nothing runs."""
    languages = {b.lang for b in blocks(README)}
    assert languages <= {"bash", "python", "text", ""}, languages
    assert len(PYTHON) == sum(b.lang == "python" for b in blocks(README))
    untagged = [b for b in blocks(README) if b.lang == ""]
    # Untagged blocks are pictures (a folder tree, a flow), never commands.
    assert all(not b.code.lstrip().startswith(("skilldeck", "pip", "python")) for b in untagged)


def test_the_quickstart_is_what_ci_runs() -> None:
    """The first command installs what the demo needs (the core, no extra) and runs it; the
    second adds the test tools and runs every test (on a worker a core), then lists the
    slowest."""
    setup, tests = quickstart()
    assert setup.startswith(
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && skilldeck demo "
        "--answers"
    )
    assert "[" not in setup.split(" && skilldeck demo")[0]  # no extra
    assert re.fullmatch(
        r'\. \.venv/bin/activate && pip install -e "\.\[dev\]" && '
        r"python -m pytest -n auto --dist loadfile --durations=\d+",
        tests,
    ), tests
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    for n in (1, 2):
        assert f"tests/markdown_blocks.py command {n}" in ci


@pytest.mark.wheel
def test_the_first_hour_leaves_nothing_for_git_to_show(tmp_path: Path) -> None:
    """What the quickstart and the console block leave in the repository's root, and what the
    demo writes where its state lives there (SKILLDECK_HOME=. or a .skilldeck/), is ignored."""
    home = tmp_path / "home"
    done = subprocess.run(
        ["skilldeck", "demo", "--answers", json.dumps(demo.ANSWERS)],
        env={**os.environ, "SKILLDECK_HOME": str(home), "PATH": _with_venv()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    state = sorted(p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file())
    assert state  # the demo's checkpoints
    left = [".venv/bin/python", "keys.json", *state, *(f".skilldeck/{name}" for name in state)]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *left], cwd=ROOT, capture_output=True, text=True
    )
    assert sorted(ignored.stdout.split()) == sorted(left)


def _with_venv() -> str:
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def test_the_embed_section_starts_with_your_own_skills() -> None:
    """Embedding starts from the reader's own folder of skills, not the built-in demo."""
    text = README.read_text("utf-8")
    section = text.index("## Embed it in your app")
    first = next(
        b for b in blocks(README) if b.lang == "python" and b.line > text[:section].count("\n")
    )
    assert 'SkillDeck("my-skills/"' in first.code
    assert "demo" not in first.code


@pytest.mark.parametrize("example", PYTHON, ids=str)
def test_python_block(
    example: CodeExample,
    eval_example: EvalExample,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SKILLDECK_HOME", str(tmp_path / "home"))
    for key in ("SKILLDECK_MODEL", "SKILLDECK_BASE_URL", "SKILLDECK_FILES_ROOT"):
        monkeypatch.delenv(key, raising=False)
    eval_example.set_config(line_length=100)
    eval_example.run_print_check(example)


@pytest.mark.subprocess
@pytest.mark.parametrize("block", RUN_HERE, ids=str)
def test_shell_block(block: Block, tmp_path: Path) -> None:
    done = run_block(block.code, tmp_path)
    assert done.returncode == 0, f"{block}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
