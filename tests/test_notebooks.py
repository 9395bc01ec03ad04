"""The notebooks in notebooks/: committed without outputs, and each runs on a fresh kernel.

Each runs as a user runs it: ``jupyter nbconvert --execute`` on a copy outside the checkout
(they need nothing from it), with the ``python3`` kernel (jupyter_client finds ipykernel's own
kernelspec and runs it with this interpreter, so no ``ipykernel install`` step is needed). They
write into temporary folders of their own and remove them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

pytestmark = [pytest.mark.L2, pytest.mark.notebook]

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = ("quickstart", "inspect_runs", "eval_report")

# A line each notebook's last cell prints, how many pictures (PNG) and Mermaid drawings (in
# Markdown, which Jupyter draws) it must display.
EXPECTED = {
    "quickstart": (r"quickstart: thread \w+ finished", 0, 0),
    "inspect_runs": (r"inspect_runs: 3 threads, fork finished", 1, 1),
    "eval_report": (r"eval_report: 3 buckets, good 0\.\d+, worse 0\.\d+", 1, 0),
}


def leftovers(nb: Any) -> list[str]:
    """Why a notebook is not clean: code cells with outputs or execution counts."""
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {index} has outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {index} has an execution count")
    return problems


def test_every_notebook_is_listed() -> None:
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)
    readme = (NOTEBOOKS / "README.md").read_text("utf-8")
    assert all(f"{name}.ipynb" in readme for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_no_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    assert leftovers(nb) == [], f"strip {name}.ipynb: clear its outputs before committing"


def test_leftovers_finds_outputs() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1"), nbformat.v4.new_markdown_cell("x")]
    assert leftovers(nb) == []
    nb.cells[0].execution_count = 3
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    assert leftovers(nb) == ["cell 0 has outputs", "cell 0 has an execution count"]


def _run(name: str, tmp_path: Path) -> Any:
    """Execute a copy of the notebook outside the checkout with ``jupyter nbconvert --execute``
    (what a user of ``skilldeck[notebooks]`` runs), its temporary files in a folder of ours,
    with no system program on its PATH (no Graphviz ``dot``)."""
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    shutil.copy(NOTEBOOKS / f"{name}.ipynb", work)
    # Only this virtualenv's programs: a fresh machine has no Graphviz (nor anything else).
    env = {**os.environ, "TMPDIR": str(scratch), "PATH": str(Path(sys.executable).parent)}
    assert shutil.which("dot", path=env["PATH"]) is None
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter"), "nbconvert", "--to", "notebook",
         "--execute", "--ExecutePreprocessor.timeout=180", "--output", "out.ipynb",
         f"{name}.ipynb"],
        cwd=work, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    leftovers = sorted(p.name for p in scratch.iterdir() if p.name.startswith("skilldeck"))
    assert leftovers == [], f"{name} left temporary folders behind: {leftovers}"
    return nbformat.read(work / "out.ipynb", as_version=4)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name: str, tmp_path: Path) -> None:
    nb = _run(name, tmp_path)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    line, pictures, drawings = EXPECTED[name]
    assert re.search(line, text), text[-2000:]
    shown = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(shown) == pictures
    mermaid = [
        o["data"]["text/markdown"]
        for o in outputs
        if o.get("data", {}).get("text/markdown", "").startswith("```mermaid\n")
    ]
    assert len(mermaid) == drawings
    for drawing in mermaid:  # the whole graph: every built-in skill's node and the router
        assert all(f"\t{n}(" in drawing for n in ("router", "litigation-intake", "card")), drawing
