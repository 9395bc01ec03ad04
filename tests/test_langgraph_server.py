"""LangGraph's own server serves the deck: ``langgraph dev`` with the shipped ``langgraph.json``,
in a new virtualenv that has skilldeck's core (no extras) and ``langgraph-cli[inmem]``, runs
the demo to its card (an interrupt) and resumes it with LangGraph's own SDK.

The server needs its own environment: ``langgraph-api`` pins versions the dev tools do not
share (``jsonschema-rs`` below 0.45). So this test also proves that the core installs and
runs without the vectors extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT
from langgraph_sdk import get_sync_client
from serving import free_port

pytestmark = pytest.mark.L2

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("langgraph")
    source = work / "source"  # the tracked files: pip builds in the tree it is given
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    install = [venv / "bin" / "pip", "install", "-q", "langgraph-cli[inmem]>=0.4,<0.5", source]
    done = subprocess.run(install, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SKILLDECK_")},
        "SKILLDECK_MODEL": f"scripted:{DEMO_SCRIPT}",
        "SKILLDECK_FILES_ROOT": str(DEMO_FILES),
        "SKILLDECK_HOME": str(work / "home"),
    }
    command = [
        *(venv / "bin" / "langgraph", "dev", "--port", str(port), "--no-browser", "--no-reload"),
        *("--allow-blocking", "--config", source / "langgraph.json"),
    ]
    log = (work / "server.log").open("w")
    # From the copy: the dev server reads the graph's path, and keeps its state (.langgraph_api/),
    # relative to its working directory.
    proc = subprocess.Popen(command, cwd=source, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (work / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (work / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()


def test_langgraph_dev_runs_the_deck_to_its_card_and_resumes_it(server: str) -> None:
    client = get_sync_client(url=server)
    assert [a["graph_id"] for a in client.assistants.search()] == ["skilldeck"]
    thread = client.threads.create()["thread_id"]
    config = {"configurable": {"user_id": "alice", "matter_id": "demo-matter"}}
    run = {
        "context": "matter",
        "input": {"documents": ["complaint.txt"]},
        "matter_id": "demo-matter",
    }
    client.runs.wait(thread, "skilldeck", input=run, config=config)  # type: ignore[arg-type]
    paused = client.threads.get_state(thread)
    assert paused["values"]["status"] == "interrupted"
    (pending,) = paused["interrupts"]
    assert pending["value"]["questions"][0]["field_key"].startswith("profile.defendant")
    resume = {"resume": {pending["id"]: DEMO_ANSWERS}}
    client.runs.wait(thread, "skilldeck", command=resume, config=config)  # type: ignore[arg-type]
    done = client.threads.get_state(thread)["values"]
    assert done["status"] == "finished"
    assert done["profile"]["defendant"]["name"] == DEMO_ANSWERS["profile.defendant.name"]
