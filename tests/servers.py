"""Real PostgreSQL and ``chroma run`` servers for the tests (fixtures imported by conftest),
and the system programs some tests need (:func:`program`).

In CI, ``.ci/run`` starts both servers and sets ``SKILLDECK_TEST_POSTGRES_URL`` and
``SKILLDECK_TEST_CHROMA_URL``; the fixtures use them. Otherwise a fixture starts a private server
for the session through ``.ci/services`` (the same script CI uses). Without the binaries a test
that needs a server is skipped, or fails when ``SKILLDECK_REQUIRE_SERVICES=1`` (CI), so a broken
CI setup cannot pass by skipping.

- ``postgres_url``: a fresh, empty database per test, dropped afterwards.
- ``chroma_url``: the session's Chroma server; tests keep apart by using their own user ids.
- ``private_postgres``: a cluster of the test module's own, which a test may restart.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

__all__ = [
    "CHROMIUM_INSTALL",
    "DOT_INSTALL",
    "Services",
    "chroma_url",
    "fresh_database",
    "postgres_server",
    "postgres_url",
    "private_postgres",
    "program",
]

SERVICES_SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "services"
DOT_INSTALL = "apt-get install graphviz (macOS: brew install graphviz)"
CHROMIUM_INSTALL = "apt-get install chromium"


def program(name: str, install: str) -> str:
    """The path of the system program ``name``. Without it the test is skipped with the
    command that installs it, or fails under ``SKILLDECK_REQUIRE_SERVICES=1`` (CI installs
    every program, so a broken CI setup cannot pass by skipping)."""
    found = shutil.which(name)
    if found:
        return found
    message = f"needs the {name} program: {install}"
    if os.environ.get("SKILLDECK_REQUIRE_SERVICES"):
        pytest.fail(message)
    pytest.skip(message)


MISSING_BINARY = 78  # .ci/services' exit code when postgres or chroma is not installed


@dataclass
class Services:
    """Servers started by ``.ci/services`` with their state in ``state``."""

    state: Path
    env: dict[str, str]

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SERVICES_SCRIPT), *args],
            env={**os.environ, "SKILLDECK_SERVICES_DIR": str(self.state)},
            capture_output=True,
            text=True,
            timeout=120,
        )

    @classmethod
    def start(cls, which: str) -> Services:
        """Start ``which`` (postgres, chroma); skip or fail the test if it is not installed."""
        # Not under pytest's tmp_path: that is private to root, and postgres must reach it.
        services = cls(Path(tempfile.mkdtemp(prefix=f"skilldeck-{which}-")), {})
        proc = services._run("start", which)
        if proc.returncode:
            services.stop()
            message = f".ci/services start {which} failed: {proc.stderr.strip()}"
            if proc.returncode == MISSING_BINARY and not os.environ.get(
                "SKILLDECK_REQUIRE_SERVICES"
            ):
                pytest.skip(message)
            pytest.fail(message)
        for line in proc.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            services.env[name] = shlex.split(value)[0]
        return services

    def restart_postgres(self) -> None:
        proc = self._run("restart", "postgres")
        assert proc.returncode == 0, proc.stderr

    def stop(self) -> None:
        self._run("stop")


def _server(name: str, which: str) -> Iterator[str]:
    url = os.environ.get(name)
    if url:
        yield url
        return
    services = Services.start(which)
    try:
        yield services.env[name]
    finally:
        services.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a database on the session's PostgreSQL server (tests use ``postgres_url``)."""
    yield from _server("SKILLDECK_TEST_POSTGRES_URL", "postgres")


@pytest.fixture(scope="session")
def chroma_url() -> Iterator[str]:
    """The session's ``chroma run`` server, ``http://127.0.0.1:PORT``."""
    yield from _server("SKILLDECK_TEST_CHROMA_URL", "chroma")


def fresh_database(server_url: str) -> Iterator[str]:
    """Create an empty database on the server of ``server_url``; drop it when done."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            # FORCE: a test that failed may have left a pool open.
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database of its own for one test: ``postgresql://.../t_<random>``."""
    yield from fresh_database(postgres_server)


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[Services]:
    """A PostgreSQL cluster the module owns (``env["SKILLDECK_TEST_POSTGRES_URL"]``), for
    tests that restart the server; the shared one must stay up for everyone else."""
    services = Services.start("postgres")
    try:
        yield services
    finally:
        services.stop()
