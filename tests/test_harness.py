"""The test harness itself: the quick tiers leave the heavy tests out, a test with no tier stops
the run, every test has a deadline, and a process a test leaves behind fails the session (and
is killed). Each case runs an inner pytest session on a few generated tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.L2, pytest.mark.subprocess]

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PYTEST = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["pytest"]
CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from leftovers import Leftovers
from tiers import Tiers

@pytest.fixture
def server_fixture():
    return "a server"

def pytest_configure(config):
    config.pluginmanager.register(Leftovers(), "leftovers")
    config.pluginmanager.register(Tiers({{"server_fixture": "server"}}), "tiers")
"""
TESTS_TEXT = """
import pytest

pytestmark = pytest.mark.L2

def test_light():
    pass

@pytest.mark.L1
def test_prompt():
    pass

@pytest.mark.subprocess
def test_heavy_by_marker():
    pass

def test_heavy_by_fixture(server_fixture):
    pass
"""


def _session(tmp_path: Path, tests: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``tests`` with the project's pytest settings (markers, timeout)."""
    options = PYTEST["ini_options"]
    ini = ["[pytest]", f"addopts = {options['addopts']}", f"timeout = {options['timeout']}"]
    ini += [f"timeout_method = {options['timeout_method']}", "markers ="]
    ini += [f"    {marker}" for marker in options["markers"]]
    (tmp_path / "pytest.ini").write_text("\n".join(ini) + "\n", "utf-8")
    (tmp_path / "conftest.py").write_text(CONFTEST, "utf-8")
    (tmp_path / "test_inner.py").write_text(tests, "utf-8")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _passed(run: subprocess.CompletedProcess[str]) -> set[str]:
    return {line.split("::")[1] for line in run.stdout.splitlines() if line.startswith("PASSED")}


def test_the_quick_tiers_leave_the_heavy_tests_out(tmp_path: Path) -> None:
    everything = {"test_light", "test_prompt", "test_heavy_by_marker", "test_heavy_by_fixture"}
    assert _passed(_session(tmp_path, TESTS_TEXT)) == everything
    quick = _session(tmp_path, TESTS_TEXT, "-m", "L1 or L2")
    assert _passed(quick) == {"test_light", "test_prompt"}, quick.stdout
    assert "2 deselected" in quick.stdout
    assert _passed(_session(tmp_path, TESTS_TEXT, "-m", "L1")) == {"test_prompt"}
    heavy = _session(tmp_path, TESTS_TEXT, "-m", "server or subprocess")
    assert _passed(heavy) == {"test_heavy_by_marker", "test_heavy_by_fixture"}, heavy.stdout
    # naming a heavy marker keeps the rest of them: test_prompt is L2 too, by its module
    named = _session(tmp_path, TESTS_TEXT, "-m", "L2 and not server")
    assert _passed(named) == {"test_light", "test_prompt", "test_heavy_by_marker"}


def test_a_test_without_a_tier_stops_the_run(tmp_path: Path) -> None:
    run = _session(tmp_path, "def test_untiered():\n    pass\n")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "test_inner.py::test_untiered" in run.stderr and "pytestmark" in run.stderr


def test_a_test_past_its_deadline_fails_and_its_finally_runs(tmp_path: Path) -> None:
    tests = (
        "import pathlib, time, pytest\n"
        "@pytest.mark.L2\n@pytest.mark.timeout(1)\n"
        "def test_hangs():\n    try:\n        time.sleep(60)\n"
        "    finally:\n        pathlib.Path('cleaned').touch()\n"
    )
    run = _session(tmp_path, tests)
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout
    assert "Timeout (>1.0s)" in run.stdout and (tmp_path / "cleaned").exists()


def test_a_process_left_behind_fails_the_session_and_is_killed(tmp_path: Path) -> None:
    """A child in a group of its own and a daemon (its parent gone, adopted by init) are both
    found, named with the test that started them, and killed."""
    tests = (
        "import os, subprocess, sys, pytest\n"
        "pytestmark = pytest.mark.L2\n"
        "def test_clean():\n    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        "def test_leaks():\n"
        "    child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "    daemon = subprocess.run(['sh', '-c', 'sleep 301 >/dev/null 2>&1 & echo $!'],\n"
        "                            capture_output=True, text=True, check=True)\n"
        "    open('pids', 'w').write(f'{child.pid} {daemon.stdout.strip()}')\n"
    )
    run = _session(tmp_path, tests)
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout + run.stderr
    assert "2 passed" in run.stdout  # the tests passed: the session's check failed it
    pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert "processes left behind" in run.stdout
    for pid, command in zip(pids, ("sleep 300", "sleep 301"), strict=True):
        assert f"pid {pid} ({command}), started in test_inner.py::test_leaks" in run.stdout
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    clean = _session(tmp_path, tests.split("def test_leaks")[0])
    assert clean.returncode == pytest.ExitCode.OK and "left behind" not in clean.stdout
    assert os.environ.get("PYTEST_SKILLDECK_SESSION")  # this session marks its children too
