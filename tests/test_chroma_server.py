"""Semantic memory against a real ``chroma run`` server, as several app processes share it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from skilldeck.tools.vectors import VectorIndex, open_chroma

pytestmark = pytest.mark.L2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("chroma")
    assert binary, "the chroma CLI ships with chromadb"
    data: Path = tmp_path_factory.mktemp("chroma-server")
    port = _free_port()
    server = subprocess.Popen(
        [binary, "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("chroma run did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_two_app_processes_share_one_chroma_server(chroma_url: str) -> None:
    writer = VectorIndex(open_chroma(url=chroma_url))
    reader = VectorIndex(open_chroma(url=chroma_url))  # another process's client and cache
    writer.add("u", ["a"], ["I drink green tea every morning"], ["user"], [100.0], ["t"])
    assert [h.id for h in reader.query("u", text="tea", role="user", since=0.0)] == ["a"]
    writer.add("u", ["b"], ["Green tea with jasmine is my favourite"], ["user"], [200.0], ["t"])
    filtered = reader.query("u", text="jasmine tea", role="user", since=150.0)
    assert [h.id for h in filtered] == ["b"]  # the reader's cache reloaded from the server
    assert reader.query("someone-else", text="tea") == []
