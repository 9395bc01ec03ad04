"""No test leaves a process behind: a pytest plugin that tests/conftest.py registers.

At the session's end, every process the tests started that is still alive fails the run: the
test process's descendants, and the processes that left them (a daemon, a child whose parent
was killed first) found by a mark in their environment that each child inherits. The mark
names the test that was running, so each is reported with the command it runs and the test
that started it, then killed with its process group: a failed check leaves nothing either.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator

import psutil
import pytest

__all__ = ["MARK", "Leftovers"]

#: The environment variable every process started by the test session inherits (named so
#: that tests/shell.py, which drops the SKILLDECK_* settings, keeps it).
MARK = "PYTEST_SKILLDECK_SESSION"


class Leftovers:
    """The plugin; see the module docstring."""

    def __init__(self) -> None:
        #: ``{session}|{test id}`` while a test runs, ``{session}|`` between tests.
        self.session = f"{os.getpid()}:{uuid.uuid4().hex}|"
        os.environ[MARK] = self.session

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        os.environ[MARK] = self.session + item.nodeid
        try:
            return (yield)
        finally:
            os.environ[MARK] = self.session

    @pytest.hookimpl(trylast=True)  # after pytest tears down the fixtures still set up
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        left = self.alive()
        if not left:
            return
        lines = [f"{len(left)} process(es) started by the tests are still running:"]
        for proc in left:
            with contextlib.suppress(psutil.Error):
                command = " ".join(proc.cmdline())[:300]
                lines.append(f"  pid {proc.pid} ({command}), started in {self.started_in(proc)}")
        self.kill(left)
        lines.append("Killed them. Stop what a test starts in a finally block or a fixture.")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "processes left behind", red=True)
            for line in lines:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def alive(self) -> list[psutil.Process]:
        """The live processes the session started (its descendants and the marked ones)."""
        me = psutil.Process()
        found = {proc.pid: proc for proc in me.children(recursive=True)}
        for proc in psutil.process_iter():
            if proc.pid in found or proc.pid == me.pid:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(MARK, "").startswith(self.session):
                    found[proc.pid] = proc
        return [proc for pid, proc in sorted(found.items()) if _running(proc)]

    def started_in(self, proc: psutil.Process) -> str:
        """The test that was running when ``proc`` (or the process it forked from) started."""
        with contextlib.suppress(psutil.Error):
            mark = proc.environ().get(MARK, "")
            if mark.startswith(self.session) and mark != self.session:
                return mark.removeprefix(self.session)
            if mark == self.session:
                return "no test (a session fixture's setup or teardown)"
        return "an unknown test (its environment was not inherited)"

    @staticmethod
    def kill(procs: list[psutil.Process]) -> None:
        """SIGKILL each process's group (its own children too), or the process itself when it
        shares the test session's group."""
        mine = os.getpgrp()
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                group = os.getpgid(proc.pid)
                if group != mine:
                    os.killpg(group, signal.SIGKILL)
                else:
                    os.kill(proc.pid, signal.SIGKILL)
        psutil.wait_procs(procs, timeout=10)


def _running(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    return False
