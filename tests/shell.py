"""Run a documentation shell block as a reader would: bash, in a folder of its own, with the
project's ``skilldeck`` on the PATH and a private state folder; anything it starts in the
background (a server) is stopped afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["run_block"]


def _env(cwd: Path, bin_dir: Path | None) -> dict[str, str]:
    # A reader's shell has no test settings: no model, endpoint or stores of ours leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDECK_")}
    env["SKILLDECK_HOME"] = str(cwd / "home")
    env["PATH"] = f"{bin_dir or Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "100"
    return env


def run_block(
    code: str, cwd: Path, *, timeout: float = 600, bin_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``bash -euo pipefail`` in ``cwd``, ``bin_dir`` (a virtualenv's, say;
    default: this Python's) first on the PATH; its result (check the returncode)."""
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=cwd,
        env=_env(cwd, bin_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: background jobs die with it
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
