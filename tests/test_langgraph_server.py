"""LangGraph's own server serves the deck: the README's block, run in a copy of the repository,
starts ``langgraph dev`` with the shipped ``langgraph.json`` in a new virtualenv that has
skilldeck's core (no extras, installed from the copy, not editable) and ``langgraph-cli[inmem]``;
the demo runs to its card (an interrupt) and is resumed with LangGraph's own SDK, under the
identity and ownership rules of ``skilldeck serve`` (API keys, thread owners, matter grants).

The server needs its own environment: ``langgraph-api`` pins versions the dev tools do not
share (``jsonschema-rs`` below 0.45). So this test also proves that the core installs and
runs without the vectors extra.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import markdown_blocks
import pytest
from conftest import DEMO_ANSWERS
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from serving import free_port, stop_group

from skilldeck import SkillDeck

pytestmark = [pytest.mark.L2, pytest.mark.server]

ROOT = Path(__file__).resolve().parents[1]
#: A second user, added after the README's setup (which makes alice and her matter).
SECOND_USER = ("skilldeck keys new --user bob --file keys.json > bob.key\n"
               "skilldeck matters add bob-matter --owner bob")  # fmt: skip
KEYS: dict[str, str] = {}  # each user's key, read from the files the setup wrote


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
    script = "\n".join(
        [*setup, SECOND_USER, f"exec {start} --port {port} --no-browser --no-reload"]
    )
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
        KEYS.update({u: (checkout / f"{u}.key").read_text().strip() for u in ("alice", "bob")})
        yield url
    finally:
        try:
            stop_group(proc)
        finally:
            log.close()


def _client(server: str, user: str) -> SyncLangGraphClient:
    return get_sync_client(url=server, api_key=KEYS[user])


def test_langgraph_dev_runs_the_deck_to_its_card_and_resumes_it(server: str) -> None:
    client = _client(server, "alice")
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


def _status(call: Callable[[], object]) -> int:
    """The HTTP status a refused SDK call answered."""
    with pytest.raises(httpx.HTTPStatusError) as refused:
        call()
    return refused.value.response.status_code


def test_the_server_knows_its_users_by_their_api_keys(server: str) -> None:
    assert httpx.get(f"{server}/ok").status_code == 200  # health needs no key
    for headers in ({}, {"X-API-Key": "sdk_not-a-key"}, {"Authorization": "Bearer nope"}):
        assert httpx.post(f"{server}/threads", json={}, headers=headers).status_code == 401
    bearer = {"Authorization": f"Bearer {KEYS['bob']}"}
    made = httpx.post(f"{server}/threads", json={"metadata": {"owner": "alice"}}, headers=bearer)
    assert made.json()["metadata"]["owner"] == "bob"  # the server names the owner


def test_a_user_never_reaches_another_users_thread_or_matter(server: str) -> None:
    alice, bob = _client(server, "alice"), _client(server, "bob")
    thread = alice.threads.create()["thread_id"]
    matter = {"configurable": {"matter_id": "demo-matter"}}
    start = {
        "context": "matter",
        "input": {"documents": ["complaint.txt"]},
        "matter_id": "demo-matter",
    }
    alice.runs.wait(thread, "skilldeck", input=start, config=matter)  # type: ignore[arg-type]
    (pending,) = alice.threads.get_state(thread)["interrupts"]

    # Bob cannot see alice's thread, find it, read its state or history, or run or resume it.
    assert _status(lambda: bob.threads.get(thread)) == 404
    assert thread not in [t["thread_id"] for t in bob.threads.search(limit=100)]
    assert _status(lambda: bob.threads.get_state(thread)) == 404
    assert _status(lambda: bob.threads.get_history(thread)) == 404
    resume = {"resume": {pending["id"]: DEMO_ANSWERS}}
    assert _status(lambda: bob.runs.wait(thread, "skilldeck", command=resume)) == 404  # type: ignore[arg-type]
    assert _status(lambda: bob.runs.wait(thread, "skilldeck", input=start)) == 404
    assert alice.threads.get_state(thread)["interrupts"] == [pending]  # nothing moved

    # Nor run on alice's matter from a thread of his own, by the input or by the config.
    own = bob.threads.create()["thread_id"]
    assert _status(lambda: bob.runs.wait(own, "skilldeck", input=start)) == 404
    assert _status(lambda: bob.runs.wait(own, "skilldeck", input={**start, "matter_id": None},
                                         config=matter)) == 404  # fmt: skip
    mixed = {**start, "matter_id": "bob-matter"}
    assert _status(lambda: bob.runs.wait(own, "skilldeck", input=mixed, config=matter)) == 422
    assert not bob.threads.get_state(own)["values"]  # nothing ran

    # The store (the deck's transcripts) and assistants' config are not the clients'.
    assert _status(lambda: bob.store.search_items(("skilldeck", "transcript"))) == 403
    assert _status(lambda: bob.assistants.create("skilldeck", config=matter)) == 403


def test_a_run_is_its_callers_whatever_user_id_it_names(server: str) -> None:
    bob = _client(server, "bob")
    own = bob.threads.create()["thread_id"]
    forged = {"configurable": {"user_id": "alice", "matter_id": "bob-matter"}}
    start = {"context": "nothing-runs-here", "input": {}, "user_id": "alice"}
    bob.runs.wait(own, "skilldeck", input=start, config=forged)  # type: ignore[arg-type]
    values = bob.threads.get_state(own)["values"]
    assert values["status"] == "no_skill"
    assert (values.get("user_id"), values.get("matter_id")) == ("bob", "bob-matter")
    (run,) = bob.runs.list(own)
    assert run["kwargs"]["config"]["configurable"]["user_id"] == "bob"


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


def test_the_graph_factory_builds_one_deck_per_server_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LangGraph's server calls the graph factory for every run and copies what it returns:
    the deck behind it is built once, not once per run (and left open)."""
    from skilldeck import langgraph_app
    from skilldeck.server import hash_key
    from skilldeck.skills import builtin_skills_dir

    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({hash_key("sdk_factory_test_key_0123456789"): "alice"}), "utf-8")
    monkeypatch.setenv("SKILLDECK_API_KEYS", str(keys))
    monkeypatch.setenv("SKILLDECK_SKILLS", str(builtin_skills_dir() / "litigation-intake"))
    built: list[object] = []

    def deck(*args: Any, **kwargs: Any) -> SkillDeck:
        built.append(SkillDeck(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(langgraph_app, "SkillDeck", deck)
    langgraph_app._keys.cache_clear()
    try:
        first = langgraph_app.graph()
        assert langgraph_app.graph() is first and len(built) == 1
    finally:
        langgraph_app.graph.cache_clear()
        langgraph_app._keys.cache_clear()
