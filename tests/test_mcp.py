"""Tools from MCP servers, against a real MCP server the tests start (``mcp_server.py``, over
stdio and streamable HTTP): listed as ``mcp:<server>/<tool>`` (wildcards too), held to the same
allowlist and identity binding as built-in tools, and a server that dies or stalls mid-call
gives the run a tool error, never a hang."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import write_bundle
from serving import free_port

from skilldeck import SkillDeck
from skilldeck.check import check_skills
from skilldeck.checkpoints.inspect import transcript
from skilldeck.errors import BundleError, SkillDeckError
from skilldeck.settings import Settings

pytestmark = [pytest.mark.L2, pytest.mark.subprocess]

SERVER = Path(__file__).parent / "mcp_server.py"
FINISH = {"response": "done", "profile": {}, "data": {}, "control": {"action": "finish"}}


def stdio_config(folder: Path) -> Path:
    config = {"mcpServers": {"t": {"command": sys.executable, "args": [str(SERVER)]}}}
    (folder / "mcp.json").write_text(json.dumps(config))
    return folder / "mcp.json"


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


def results(deck: SkillDeck, thread_id: str) -> list[tuple[str, str]]:
    """Each tool result of the thread's first turn: (tool, content)."""
    messages = transcript(deck, thread_id)[0]["messages"]
    return [(m["name"], m["content"]) for m in messages if m["role"] == "tool"]


@pytest.fixture
def mcp_skills(skills_dir: Path) -> Path:
    write_bundle(skills_dir, "agent", meta={"tools": ["mcp:t/echo", "mcp:t/whoami", "mcp:t/die",
                 "mcp:t/stall", "mcp:t/refuse", "mcp:t/search_*"]})  # fmt: skip
    stdio_config(skills_dir)
    return skills_dir


def test_listed_tools_run_with_identity_bound_by_the_runtime(
    mcp_skills: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    turns = [
        call("mcp:t/echo", text="hi"),  # the alias a skill lists, or
        call("mcp__t__whoami", note="n"),  # the name the model is given
        call("mcp__t__whoami", note="n", user_id="someone-else"),
        call("mcp__t__search_web", query="q"),
        call("mcp__t__refuse"),
        {"output": FINISH},
    ]
    deck = make_deck(mcp_skills, {"agent": turns}, max_tool_rounds=6, trust=[mcp_skills])
    assert deck.bundles[0].tools == (
        "mcp__t__echo",
        "mcp__t__whoami",
        "mcp__t__die",
        "mcp__t__stall",
        "mcp__t__refuse",
        "mcp__t__search_docs",
        "mcp__t__search_web",
    )
    schema = deck.tools.get("mcp__t__whoami").tool_call_schema
    assert isinstance(schema, dict) and set(schema["properties"]) == {"note"}
    result = deck.run(context="ctx", user_id="u-1", matter_id="m-1")
    assert result.status == "finished", result.error
    said = results(deck, result.thread_id)
    assert said[0] == ("mcp:t/echo", "echo: hi")
    assert said[1] == ("mcp__t__whoami", "user=u-1 matter=m-1 note=n")
    assert "bound by the runtime" in said[2][1] and "someone-else" not in said[2][1]
    assert said[3] == ("mcp__t__search_web", "web about q")
    assert "the tool reported an error" in said[4][1] and "refused on purpose" in said[4][1]
    statuses = [c["status"] for c in result.state["attempt"]["tool_calls"]]
    assert statuses == ["ok", "ok", "error", "ok", "error"]


def test_a_tool_the_skill_does_not_list_is_refused(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "agent", meta={"tools": ["mcp:t/echo"]})
    stdio_config(skills_dir)
    turns = {"agent": [call("mcp__t__whoami", note="n"), {"output": FINISH}]}
    deck = make_deck(skills_dir, turns, trust=[skills_dir])
    result = deck.run(context="ctx", user_id="u-1")
    assert result.status == "finished"
    assert result.state["attempt"]["tool_calls"][0]["status"] == "refused"
    assert "is not allowed for skill 'agent'" in results(deck, result.thread_id)[0][1]


def test_a_server_that_dies_or_stalls_mid_call_is_a_tool_error(
    mcp_skills: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    turns = [
        call("mcp__t__die"),
        call("mcp__t__stall", seconds=60),
        call("mcp__t__echo", text="again"),
        {"output": FINISH},
    ]
    # The timeout covers starting the server too: 10 s leaves a loaded machine room for that,
    # and is still far below the stall.
    deck = make_deck(
        mcp_skills, {"agent": turns}, mcp_timeout_s=10, max_tool_rounds=4, trust=[mcp_skills]
    )
    started = time.monotonic()
    result = deck.run(context="ctx")
    assert time.monotonic() - started < 55
    assert result.status == "finished", result.error
    said = results(deck, result.thread_id)
    assert said[0][1].startswith("Error: the MCP server failed")
    assert "did not answer within 10 s" in said[1][1]
    assert said[2][1] == "echo: again"  # the next call gets a fresh server


@contextmanager
def mcp_over_http(port: int, query: str = "") -> Iterator[str]:
    """The test server on streamable HTTP at ``port``: its URL (with ``query``), while it runs."""
    proc = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)],
                            stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp{query}"
    try:
        for _ in range(100):
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def http_server() -> Iterator[str]:
    with mcp_over_http(free_port()) as url:
        yield url


def test_streamable_http_servers_and_settings_config(
    skills_dir: Path, tmp_path: Path, http_server: str, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "agent", meta={"tools": ["mcp:web/*"]})
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"web": {"url": http_server}}}))
    turns = {"agent": [call("mcp__web__echo", text="over http"), {"output": FINISH}]}
    deck = make_deck(skills_dir, turns, mcp_config=str(config))
    assert "mcp__web__stall" in deck.bundles[0].tools
    result = deck.run(context="ctx")
    assert result.status == "finished"
    assert results(deck, result.thread_id) == [("mcp__web__echo", "echo: over http")]


def test_configuration_errors_say_what_to_fix(
    skills_dir: Path, tmp_path: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "agent", meta={"tools": ["mcp:t/echo"]})
    trust = [skills_dir]  # the mcp.json beside the skills is theirs: read when they are trusted
    with pytest.raises(SkillDeckError, match=r"MCP server 't' is not configured"):
        make_deck(skills_dir, trust=trust)
    (skills_dir / "mcp.json").write_text('{"mcpServers": {"t": {"args": []}}}')
    with pytest.raises(SkillDeckError, match=r"mcp.json: \$.mcpServers.t: .*'command'"):
        make_deck(skills_dir, trust=trust)
    config = {"mcpServers": {"t": {"command": sys.executable, "args": ["-c", "pass"]}}}
    (skills_dir / "mcp.json").write_text(json.dumps(config))
    with pytest.raises(SkillDeckError, match=r"MCP server 't' .* did not list its tools"):
        make_deck(skills_dir, mcp_timeout_s=5, trust=trust)
    stdio_config(skills_dir)
    write_bundle(skills_dir, "agent", meta={"tools": ["mcp:t/nothing_*"]})
    with pytest.raises(BundleError, match=r"no MCP tool matches 'mcp:t/nothing_\*'"):
        make_deck(skills_dir, trust=trust)
    report = check_skills(skills_dir, settings=Settings(), trust=trust)
    assert report.errors[0].message.startswith("no MCP tool matches")


def test_no_server_is_contacted_when_no_skill_names_one(skills_dir: Path) -> None:
    write_bundle(skills_dir, "agent")
    (skills_dir / "mcp.json").write_text("not json")  # never read
    deck = SkillDeck(skills_dir, settings=Settings(checkpoint_url="sqlite:///:memory:"))
    deck.close()


def test_a_broken_servers_error_text_stays_in_the_log(
    skills_dir: Path,
    tmp_path: Path,
    make_deck: Callable[..., SkillDeck],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server reached with its key in the URL breaks after listing its tools (here: another
    service takes its port and answers 500); httpx's error names the URL, key and all. The
    model reads the public reason, the log the redacted text."""
    leaked = "sk-proj-LEAKED0123456789abcdefXYZ"
    port = free_port()
    with mcp_over_http(port, f"?api_key={leaked}") as url:
        write_bundle(skills_dir, "agent", meta={"tools": ["mcp:web/echo"]})
        (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": {"web": {"url": url}}}))
        turns = {"agent": [call("mcp__web__echo", text="x"), {"output": FINISH}]}
        deck = make_deck(skills_dir, turns, mcp_config=str(tmp_path / "servers.json"))

    class Broken(BaseHTTPRequestHandler):
        def fail(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(500)
            self.end_headers()

        do_GET = do_POST = do_DELETE = fail

        def log_message(self, *args: Any) -> None:
            pass

    broken = ThreadingHTTPServer(("127.0.0.1", port), Broken)
    threading.Thread(target=broken.serve_forever, daemon=True).start()
    try:
        result = deck.run(context="ctx")
    finally:
        broken.shutdown()
        broken.server_close()
    assert result.status == "finished", result.error
    (said,) = results(deck, result.thread_id)
    assert said[1] == (
        "Error: the MCP server failed: HTTPStatusError (HTTP 500); the details are in the "
        "server log"
    )
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "skilldeck")
    assert "api_key=[redacted]" in logged and leaked not in logged
