"""Arize Phoenix, the OTLP receiver the trace tests read spans back from, in a virtualenv of its
own (``.venv-phoenix`` in the checkout, gitignored): not in ``[dev]``, as the issue asks.

It is made on first use and reused after; a marker file says the install finished. The install
takes minutes (Phoenix brings its UI, a database layer and data libraries), so ``.ci/run`` runs
``python3 tests/phoenix_venv.py`` in the background while the rest installs; a test that asks
meanwhile waits for it on the lock.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

__all__ = ["PHOENIX", "PHOENIX_VENV", "phoenix_venv"]

ROOT = Path(__file__).resolve().parents[1]
#: Phoenix's virtualenv, made once per checkout and reused.
PHOENIX_VENV = ROOT / ".venv-phoenix"
PHOENIX = "arize-phoenix>=20,<21"


def phoenix_venv() -> Path:
    """``phoenix`` of :data:`PHOENIX_VENV`, installed from PyPI if it is not yet (under a lock:
    test workers, and ``.ci/run``'s early install, may ask at once)."""
    done = PHOENIX_VENV / "installed.txt"
    with open(ROOT / ".venv-phoenix.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file() or done.read_text() != PHOENIX:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(PHOENIX_VENV)], check=True)
            pip = [str(PHOENIX_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
            subprocess.run([*pip, PHOENIX], check=True)
            done.write_text(PHOENIX)
    return PHOENIX_VENV / "bin" / "phoenix"


if __name__ == "__main__":
    print(phoenix_venv())
