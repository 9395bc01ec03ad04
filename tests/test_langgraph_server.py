"""LangGraph's own server serves the deck: the README's block, run in a copy of the repository,
starts ``langgraph dev`` with the shipped ``langgraph.json`` in a new virtualenv that has
skilldeck's core (no extras, installed from the copy, not editable) and ``langgraph-cli[inmem]``;
the demo runs to its card (an interrupt) and is resumed with LangGraph's own SDK.

The server needs its own environment: ``langgraph-api`` pins versions the dev tools do not
share (``jsonschema-rs`` below 0.45). So this test also proves that the core installs and
runs without the vectors extra.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import markdown_blocks
import pytest
from conftest import DEMO_ANSWERS
from langgraph_sdk import get_sync_client
from serving import free_port

pytestmark = pytest.mark.L2

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's tracked files: pip builds in the tree it is given."""
    source = tmp_path_factory.mktemp("langgraph") / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    return source


@pytest.fixture(scope="module")
def server(checkout: Path) -> Iterator[str]:
    """The README's block, run in the copy's root as a reader runs it (its virtualenv, a
    non-editable install, its settings); ``langgraph dev`` gets a free port and no browser."""
    *setup, start = markdown_blocks.langgraph_server().code.strip().splitlines()
    assert start.startswith("langgraph dev")
    port = free_port()
    script = "\n".join([*setup, f"exec {start} --port {port} --no-browser --no-reload"])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SKILLDECK_")},
        "SKILLDECK_HOME": str(checkout.parent / "home"),
    }
    log = (checkout.parent / "server.log").open("w")
    # The dev server keeps its state (.langgraph_api/) in its working directory: the copy.
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=checkout,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the server and anything it starts stop with its group
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900  # the install comes first
        while True:
            assert proc.poll() is None, (checkout.parent / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (checkout.parent / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
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


def test_python_in_the_checkouts_root_imports_a_whole_package(server: str, checkout: Path) -> None:
    """``python`` in the root of a checkout installed with ``pip install .`` imports the
    checkout's skilldeck/ folder first (the working directory leads sys.path): the folder must
    be a whole package, whose subpackages live beside it."""
    code = (
        "import skilldeck, skilldeck.graph\n"
        "from skilldeck import SkillDeck, demo\n"
        "with SkillDeck(checkpointer='memory://') as deck:\n"
        "    print(sorted(b.name for b in deck.bundles), demo.FILES.is_dir())\n"
    )
    python = checkout / ".venv-langgraph" / "bin" / "python"
    done = subprocess.run([python, "-c", code], cwd=checkout, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'litigation-intake'" in done.stdout and done.stdout.strip().endswith("True")
