"""Real ``skilldeck serve`` processes for the tests: a free port, a process that is waited
for until it answers ``/health`` and is stopped however the test ends, and the server of a
serve root (``conftest.write_serve_root``) with the demo's runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import httpx
from conftest import DEMO_FILES, serve_command

__all__ = [
    "DEMO_RUN",
    "SLOW_RUN",
    "DemoServer",
    "ServeProcess",
    "free_port",
    "sse",
    "stop_group",
]

#: The demo's intake on its matter, as the body of ``POST /threads/{id}/runs``.
DEMO_RUN: dict[str, Any] = {
    "input": {"documents": ["complaint.txt"]},
    "context": "matter",
    "matter_id": "demo-matter",
}
#: A run of a serve root's ``slow`` context: a quick step, a slow one, then a card.
SLOW_RUN: dict[str, Any] = {"context": "slow"}


def sse(body: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a server-sent events body."""
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """End a process started with ``start_new_session=True`` and everything it started:
    SIGTERM to its group, up to 30 s for the process to exit, then SIGKILL to what is left of
    the group (a child that outlived its parent too)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeProcess:
    """A server process listening on ``port`` of 127.0.0.1; its output goes to ``log``."""

    def __init__(
        self,
        command: Sequence[str],
        port: int,
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.port, self.log = port, log
        self.url = f"http://127.0.0.1:{port}"
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                list(command),
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait(self, timeout: float = 60) -> Self:
        """Return once ``/health`` answers 200; fail with the log if the process dies first."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"server did not start:\n{self.log.read_text()}"
            time.sleep(0.1)

    def kill(self) -> None:
        """``kill -9``: no shutdown; in-flight requests die with the process."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after 30 s; the exit code (``skilldeck serve`` drains its runs
        and exits 0; another uvicorn app re-raises the signal it caught: ``-SIGTERM``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


class DemoServer(ServeProcess):
    """``skilldeck serve`` of a serve root (``conftest.write_serve_root``) on ``checkpoint``,
    on a free port, with the demo's files and ``options``; its clients send ``key``."""

    def __init__(
        self,
        root: Path,
        checkpoint: str,
        key: str,
        options: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        port = free_port()
        command = [*serve_command(root, port, checkpoint), *options]
        environment = {"SKILLDECK_FILES_ROOT": str(DEMO_FILES), **(env or {})}
        super().__init__(command, port, root / f"server-{port}.log", environment)
        self.auth = {"Authorization": f"Bearer {key}"}

    def client(self, headers: Mapping[str, str] | None = None) -> httpx.Client:
        """A client of this server that sends ``headers`` (by default the key)."""
        sent = self.auth if headers is None else headers
        return httpx.Client(base_url=self.url, headers=dict(sent), timeout=60)
