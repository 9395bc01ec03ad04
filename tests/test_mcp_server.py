"""``skilldeck mcp``: a deck served over MCP, driven by real clients: the official ``mcp``
Python client over stdio and streamable HTTP (with an elicitation callback that answers,
declines and cancels) and the official MCP Inspector's CLI. The demo's intake runs on the
scripted provider and its cassette (``skilldeck/demo/litigation-intake.yaml``) to its card,
which is asked by elicitation; a card left unanswered stays pending in the checkpoints and is
answered later, from another server process, through the ``resume`` tool, also after the
server was killed with an elicitation open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from servers import program
from serving import ServeProcess, free_port

from skilldeck import SkillDeck, SkillDeckError, demo
from skilldeck.server.keys import hash_key
from skilldeck.server.mcp import SESSIONS_PER_USER, elicitation_form
from skilldeck.settings import Settings
from skilldeck.skills import builtin_skills_dir, load_bundle

pytestmark = [pytest.mark.L2]

ROOT = Path(__file__).resolve().parents[1]
#: Where `.ci/run` installs the MCP Inspector's CLI (npm install --prefix).
INSPECTOR_DIR = Path(os.environ.get("SKILLDECK_MCP_INSPECTOR_DIR", ROOT / ".cache/mcp-inspector"))
INSPECTOR_INSTALL = (
    "npm install --prefix .cache/mcp-inspector @modelcontextprotocol/inspector-cli@1.0.3"
)
ARGS = {"documents": ["complaint.txt"], "matter_id": demo.MATTER_ID}
Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


def accept(content: dict[str, Any]) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


def server_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a server process: none of the test session's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDECK_")}
    return {**env, "SKILLDECK_HOME": str(home), **extra}


def mcp_command(checkpoint: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "skilldeck.cli", "mcp", "--demo", "--checkpoint", checkpoint,
            *args]  # fmt: skip


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mcp.sqlite'}"


class Client:
    """What a client saw of a tool call: its elicitations, progress and log messages."""

    def __init__(self, session: ClientSession, seen: dict[str, list[Any]]) -> None:
        self.session, self.seen = session, seen
        self.session_id: str | None = None  # the MCP session's id (streamable HTTP)

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            self.seen["progress"].append((value, message))

        return await self.session.call_tool(name, arguments, progress_callback=progress)


@asynccontextmanager
async def stdio_session(
    checkpoint: str, home: Path, elicit: Elicit | None, *args: str, **env: str
) -> AsyncIterator[Client]:
    """A stdio client of a new `skilldeck mcp` process (stopped when the block ends)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=mcp_command(checkpoint, "--user", "ann", *args)[1:],
        env=server_env(home, **env),
    )
    async with stdio_client(params) as (read, write), session_of(read, write, elicit) as client:
        yield client


@asynccontextmanager
async def http_session(url: str, key: str, elicit: Elicit | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"}
    timeout = httpx.Timeout(60, read=300)
    async with (
        httpx.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, session_id),
        session_of(read, write, elicit) as client,
    ):
        client.session_id = session_id()
        yield client


@asynccontextmanager
async def session_of(read: Any, write: Any, elicit: Elicit | None) -> AsyncIterator[Client]:
    seen: dict[str, list[Any]] = {"elicit": [], "progress": [], "log": []}

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        seen["log"].append(params.data)

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen["elicit"].append(params)
        assert elicit is not None
        return await elicit(context, params)

    callback = on_elicit if elicit is not None else None
    async with ClientSession(
        read, write, elicitation_callback=callback, logging_callback=on_log
    ) as session:
        await session.initialize()
        yield Client(session, seen)


def answering(*replies: dict[str, Any] | str) -> Elicit:
    """An elicitation callback that gives ``replies`` in turn: content to accept, or
    ``"decline"``/``"cancel"``."""
    left = list(replies)

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        reply = left.pop(0)
        if isinstance(reply, str):
            return types.ElicitResult(action=reply)  # type: ignore[arg-type]
        return accept(reply)

    return elicit


def thread_of(checkpoint: str, thread_id: str) -> tuple[Any, list[dict[str, Any]]]:
    """The thread and its history as another process reads them from the checkpoints."""
    with SkillDeck(checkpointer=checkpoint, settings=Settings()) as deck:
        return deck.get_thread(thread_id), deck.history(thread_id)


def text_of(result: types.CallToolResult) -> str:
    """The text of a tool result (its first content block)."""
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def check_structured(tools: types.ListToolsResult, name: str, result: types.CallToolResult) -> None:
    (tool,) = [t for t in tools.tools if t.name == name]
    assert tool.outputSchema is not None
    jsonschema.validate(result.structuredContent, tool.outputSchema)


@pytest.mark.subprocess
@pytest.mark.timeout(180)
def test_the_demo_runs_to_its_card_answered_by_elicitation_over_stdio(
    checkpoint: str, tmp_path: Path
) -> None:
    """The demo's intake from an MCP client: tools listed with their schemas, the card asked
    as a flat form, the answers applied, the run finished; a progress notification per step
    (rising across the resume) and a log message per tool call of the skill."""

    async def main() -> tuple[types.ListToolsResult, types.CallToolResult, Client]:
        async with stdio_session(checkpoint, tmp_path / "home", answering(demo.ANSWERS)) as c:
            tools = await c.session.list_tools()
            return tools, await c.call("litigation-intake", ARGS), c

    tools, result, client = anyio.run(main)
    names = [t.name for t in tools.tools]
    assert names == [*(b for b in sorted(names) if b not in ("run", "resume")), "run", "resume"]
    intake = next(t for t in tools.tools if t.name == "litigation-intake")
    assert intake.description == load_bundle(builtin_skills_dir() / "litigation-intake").description
    assert intake.inputSchema["required"] == ["documents"]  # the bundle's input schema
    assert {"documents", "matter_id", "thread_id"} <= set(intake.inputSchema["properties"])
    recall = next(t for t in tools.tools if t.name == "nomemory-recall")
    assert "request" in recall.inputSchema["properties"]

    (asked,) = client.seen["elicit"]
    assert asked.requestedSchema == {
        "type": "object",
        "properties": {
            "profile.defendant.name": {
                "title": "Who is the defendant (被告)? The documents do not name them.",
                "type": "string",
            },
            "profile.defendant.type": {
                "title": "Is the defendant a person or an organisation?",
                "type": "string",
                "enum": ["person", "organisation"],
                "enumNames": ["Person", "Organisation"],
            },
        },
        "required": ["profile.defendant.name", "profile.defendant.type"],
    }
    assert not result.isError, result.content
    body = result.structuredContent
    assert body is not None
    assert body["status"] == "finished" and body["card"] is None
    assert body["profile"]["defendant"] == {"name": "Acme Logistics Ltd.", "type": "organisation"}
    assert body["profile"]["intake_status"] == "completed"
    assert len(body["data"]["evidence_list"]) == 4
    assert result.content[0].text == body["response"]  # type: ignore[union-attr]
    check_structured(tools, "litigation-intake", result)
    values = [v for v, _ in client.seen["progress"]]
    assert len(values) >= 4 and values == sorted(set(values)), values
    calls = [m for m in client.seen["log"] if "name" in m]
    assert [m["name"] for m in calls] == ["file__parse", "element__extract", "file__parse"]
    _, history = thread_of(checkpoint, body["thread_id"])
    assert sum(1 for row in history if row["answers"]) == 1


@pytest.mark.subprocess
@pytest.mark.timeout(180)
def test_refused_answers_are_asked_again_with_the_errors(checkpoint: str, tmp_path: Path) -> None:
    """Answers the deck refuses (the same check as every resume) are asked again, the errors
    in the message; nothing of them is applied."""
    wrong = {"profile.defendant.name": "", "profile.defendant.type": "organisation"}

    async def main() -> tuple[types.CallToolResult, Client]:
        elicit = answering(wrong, demo.ANSWERS)
        async with stdio_session(checkpoint, tmp_path / "home", elicit) as c:
            return await c.call("litigation-intake", ARGS), c

    result, client = anyio.run(main)
    first, second = client.seen["elicit"]
    assert "refused" not in first.message
    assert "Your last answers were refused: profile.defendant.name:" in second.message
    assert result.structuredContent is not None
    assert result.structuredContent["status"] == "finished"
    _, history = thread_of(checkpoint, result.structuredContent["thread_id"])
    assert [row["answers"] for row in history if row["answers"]] == [demo.ANSWERS]


@pytest.mark.subprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize("action", ["decline", "cancel", None])
def test_an_unanswered_card_stays_pending_and_another_process_answers_it(
    action: str | None, checkpoint: str, tmp_path: Path
) -> None:
    """Declined, cancelled, or asked of a client without elicitation: the result says the card
    is pending and names the thread and the interrupt; a new server process (a new client)
    answers it through ``resume``, and the run finishes with the answers applied once."""
    home = tmp_path / "home"

    async def first() -> types.CallToolResult:
        elicit = answering(action) if action is not None else None
        async with stdio_session(checkpoint, home, elicit) as c:
            return await c.call("litigation-intake", ARGS)

    pending = anyio.run(first)
    body = pending.structuredContent
    assert body is not None and body["status"] == "interrupted"
    assert body["pending"] == {"decline": "declined", "cancel": "cancelled"}.get(
        action or "", "unsupported"
    )
    card = body["card"]
    text = pending.content[0].text  # type: ignore[union-attr]
    assert (
        f"thread_id {body['thread_id']}" in text and f"interrupt_id {card['interrupt_id']}" in text
    )
    thread, _ = thread_of(checkpoint, body["thread_id"])
    assert thread.status == "interrupted" and thread.card["interrupt_id"] == card["interrupt_id"]

    async def later() -> types.CallToolResult:
        async with stdio_session(checkpoint, home, None) as c:
            arguments = {"thread_id": body["thread_id"], "interrupt_id": card["interrupt_id"]}
            return await c.call("resume", {**arguments, "answers": demo.ANSWERS})

    done = anyio.run(later)
    assert done.structuredContent is not None
    assert done.structuredContent["status"] == "finished", done.content
    thread, history = thread_of(checkpoint, body["thread_id"])
    assert thread.state["profile"]["defendant"]["name"] == "Acme Logistics Ltd."
    assert [row["answers"] for row in history if row["answers"]] == [demo.ANSWERS]


@pytest.mark.L2
def test_a_card_becomes_a_flat_form_or_none() -> None:
    """Each input type as MCP's flat form schema; a card that needs more is not a form."""

    def q(kind: str, **more: Any) -> Any:
        return {"question": f"{kind}?", "field_key": kind, "input_type": kind, "required": True,
                **more}  # fmt: skip

    options = [{"label": "One", "value": 1}, {"label": "Yes", "value": True}]
    form = elicitation_form(
        [
            q("text"),
            q("number", minimum=0, maximum=9),
            q("integer"),
            q("boolean"),
            q("select", options=options),
        ]
    )
    assert form is not None
    props = form.schema["properties"]
    assert props["number"] == {"title": "number?", "type": "number", "minimum": 0, "maximum": 9}
    assert props["select"]["enum"] == ["1", "true"] and props["select"]["enumNames"] == [
        "One",
        "Yes",
    ]
    assert form.answers({"select": "true", "text": "x", "boolean": None}) == {
        "select": True,
        "text": "x",
    }
    assert elicitation_form([q("file_ids")]) is None
    multi = [q("multi_select", options=[{"label": "A", "value": "a"}])]
    assert elicitation_form(multi, "2025-06-18") is None
    later = elicitation_form(multi, "2025-11-25")
    assert later is not None
    assert later.schema["properties"]["multi_select"]["items"] == {"type": "string", "enum": ["a"]}
    clash = [{"label": "a", "value": "1"}, {"label": "b", "value": 1}]
    assert elicitation_form([q("select", options=clash)]) is None


@pytest.fixture
def http_server(tmp_path: Path, checkpoint: str) -> Iterator[Callable[[], ServeProcess]]:
    """Starts `skilldeck mcp --http` on the test's checkpoints (again after a kill), with the
    keys of alice and bob (``tmp_path/*.key``); every process is stopped at the end."""
    keys = {hash_key("alice-key"): "alice", hash_key("bob-key"): "bob"}
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    port = free_port()
    started: list[ServeProcess] = []

    def start() -> ServeProcess:
        command = mcp_command(checkpoint, "--http", "--port", str(port), "--keys",
                              str(tmp_path / "keys.json"))  # fmt: skip
        log = tmp_path / f"server-{len(started)}.log"
        process = ServeProcess(command, port, log, env=server_env(tmp_path / "home"))
        started.append(process)
        return process.wait()

    try:
        yield start
    finally:
        for process in started:
            process.stop()


@pytest.mark.server
@pytest.mark.timeout(240)
def test_streamable_http_uses_api_keys_and_keeps_users_apart(
    http_server: Callable[[], ServeProcess], checkpoint: str
) -> None:
    """Over HTTP every request carries a key of `skilldeck serve`'s (else 401); the run is the
    key's user's; another user can neither answer the card nor name the matter."""
    server = http_server()
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = httpx.post(f"{server.url}/mcp", json={}, headers=headers)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "UNAUTHORIZED"
    assert httpx.get(f"{server.url}/mcp").status_code == 401

    async def main() -> tuple[types.CallToolResult, ...]:
        async with http_session(server.url, "alice-key", answering("decline")) as alice:
            pending = await alice.call("litigation-intake", ARGS)
        body = pending.structuredContent
        assert body is not None
        card = body["card"]
        async with http_session(server.url, "bob-key", answering(demo.ANSWERS)) as bob:
            arguments = {"thread_id": body["thread_id"], "interrupt_id": card["interrupt_id"]}
            stolen = await bob.call("resume", {**arguments, "answers": demo.ANSWERS})
            matter = await bob.call("litigation-intake", ARGS)
        async with http_session(server.url, "alice-key", answering(demo.ANSWERS)) as alice:
            done = await alice.call("resume", {"thread_id": body["thread_id"]})
        return pending, stolen, matter, done

    _pending, stolen, matter, done = anyio.run(main)
    assert stolen.isError and "THREAD_NOT_FOUND" in stolen.content[0].text  # type: ignore[union-attr]
    assert matter.isError and "MATTER_NOT_FOUND" in matter.content[0].text  # type: ignore[union-attr]
    assert done.structuredContent is not None
    assert done.structuredContent["status"] == "finished", done.content
    thread, history = thread_of(checkpoint, done.structuredContent["thread_id"])
    assert thread.state["user_id"] == "alice"
    assert [row["answers"] for row in history if row["answers"]] == [demo.ANSWERS]


@pytest.mark.server
@pytest.mark.timeout(240)
def test_an_mcp_session_is_bound_to_the_user_whose_key_opened_it(
    http_server: Callable[[], ServeProcess], checkpoint: str
) -> None:
    """Bob, with a key of his own and alice's session id, can neither answer the card alice's
    session has open (POST of the elicitation's response), call a tool in her session, read
    its stream (GET) nor end it (DELETE): each is 404 as for an unknown session, so the id is
    not even confirmed; her card stays as it was and her session goes on."""
    server = http_server()
    asked, release = anyio.Event(), anyio.Event()
    elicitation: dict[str, Any] = {}

    async def hold(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        elicitation["id"] = context.request_id
        asked.set()
        await release.wait()
        return types.ElicitResult(action="decline")

    async def intrude(session_id: str, request_id: Any) -> list[tuple[str, int]]:
        bob = {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": session_id}
        answer = {"jsonrpc": "2.0", "id": request_id,
                  "result": {"action": "accept", "content": demo.ANSWERS}}  # fmt: skip
        listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
        seen: list[tuple[str, int]] = []
        url = f"{server.url}/mcp"
        async with httpx.AsyncClient(timeout=30) as http:
            for key in ({"Authorization": "Bearer bob-key"}, {"X-API-Key": "bob-key"}):
                headers = {**bob, **key}
                for what, body in (("answer", answer), ("tools/list", listing)):
                    posted = await http.post(url, json=body, headers=headers)
                    seen.append((what, posted.status_code))
                async with http.stream("GET", url, headers=headers) as stream:
                    seen.append(("GET", stream.status_code))
            deleted = await http.delete(url, headers={**bob, "Authorization": "Bearer bob-key"})
            seen.append(("DELETE", deleted.status_code))
            nobody = await http.post(url, json=listing, headers=bob)
            seen.append(("no key", nobody.status_code))
        return seen

    async def main() -> tuple[types.CallToolResult, types.ListToolsResult]:
        async with http_session(server.url, "alice-key", hold) as alice:
            assert alice.session_id is not None
            results: list[types.CallToolResult] = []
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    results.append(await alice.call("litigation-intake", ARGS))

                group.start_soon(call)
                with anyio.fail_after(120):
                    await asked.wait()
                seen = await intrude(alice.session_id, elicitation["id"])
                # Before her call or session could hang on what bob did to them.
                assert seen == [
                    *[("answer", 404), ("tools/list", 404), ("GET", 404)] * 2,
                    ("DELETE", 404),
                    ("no key", 401),
                ]
                release.set()
            tools = await alice.session.list_tools()  # her session is still hers
        return results[0], tools

    result, tools = anyio.run(main)
    assert "litigation-intake" in {t.name for t in tools.tools}
    body = result.structuredContent
    assert body is not None and body["status"] == "interrupted", result.content
    assert body["pending"] == "declined"
    thread, history = thread_of(checkpoint, body["thread_id"])
    assert thread.state["user_id"] == "alice" and thread.state["profile"].get("defendant") is None
    assert not [row for row in history if row["answers"]]


@pytest.mark.server
@pytest.mark.timeout(120)
def test_a_user_holds_a_bounded_number_of_mcp_sessions(
    http_server: Callable[[], ServeProcess],
) -> None:
    """One user cannot take all the server's sessions: past SESSIONS_PER_USER open sessions
    another is refused (429) until one ends; another user still gets one."""
    server = http_server()
    url = f"{server.url}/mcp"
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "opener", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}

    def open_session(key: str) -> httpx.Response:
        headers = {**accept, "Authorization": f"Bearer {key}"}
        return httpx.post(url, json=initialize, headers=headers, timeout=30)

    opened = [open_session("alice-key") for _ in range(SESSIONS_PER_USER)]
    assert [r.status_code for r in opened] == [200] * SESSIONS_PER_USER
    refused = open_session("alice-key")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "TOO_MANY_SESSIONS"
    assert open_session("bob-key").status_code == 200
    session_id = opened[0].headers["mcp-session-id"]
    ended = httpx.delete(
        url, headers={**accept, "Authorization": "Bearer alice-key", "Mcp-Session-Id": session_id}
    )
    assert ended.status_code == 200
    assert open_session("alice-key").status_code == 200


@pytest.mark.server
@pytest.mark.timeout(240)
def test_a_server_killed_with_an_elicitation_open_leaves_the_card_to_resume(
    http_server: Callable[[], ServeProcess], checkpoint: str
) -> None:
    """kill -9 of the server while a client has the card's form open; a new server on the
    same checkpoints, a new client answers the card through ``resume``: the run finishes, the
    answers applied exactly once."""
    server = http_server()
    asked = anyio.Event()
    card: dict[str, Any] = {}

    async def hold(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        card["message"] = params.message
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def first() -> None:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                async with http_session(server.url, "alice-key", hold) as alice:
                    await alice.call("litigation-intake", ARGS)

            group.start_soon(call)
            with anyio.fail_after(120):
                await asked.wait()
            server.kill()
            group.cancel_scope.cancel()  # the client would wait for the dead server's stream

    anyio.run(first)
    with SkillDeck(checkpointer=checkpoint, settings=Settings()) as deck:
        (row,) = deck.threads(user_id="alice")
        thread = deck.get_thread(row.thread_id)
    assert thread.status == "interrupted" and thread.card is not None
    assert thread.card["interrupt_id"] in card["message"]
    again = http_server()

    async def later() -> types.CallToolResult:
        async with http_session(again.url, "alice-key", None) as alice:
            arguments = {"thread_id": row.thread_id, "interrupt_id": thread.card["interrupt_id"]}
            return await alice.call("resume", {**arguments, "answers": demo.ANSWERS})

    done = anyio.run(later)
    assert done.structuredContent is not None
    assert done.structuredContent["status"] == "finished", done.content
    thread, history = thread_of(checkpoint, row.thread_id)
    assert thread.state["profile"]["defendant"]["name"] == "Acme Logistics Ltd."
    assert [row["answers"] for row in history if row["answers"]] == [demo.ANSWERS]


def inspector() -> Path:
    """The MCP Inspector's CLI that `.ci/run` installs; skipped without it (failed under
    SKILLDECK_REQUIRE_SERVICES=1)."""
    cli = INSPECTOR_DIR / "node_modules/.bin/mcp-inspector-cli"
    if cli.is_file():
        return cli
    return Path(program(str(cli), INSPECTOR_INSTALL))


@pytest.mark.subprocess
@pytest.mark.timeout(240)
def test_the_mcp_inspector_lists_the_tools_and_calls_one(checkpoint: str, tmp_path: Path) -> None:
    """The official MCP Inspector's CLI (no elicitation): it lists the tools; calling the
    intake leaves the card pending, named in the result; its resume call answers it."""
    cli = inspector()
    program("node", "apt-get install nodejs (Node 20)")
    # 1.0.3 looks for its package.json relative to the working directory: run it from its
    # build folder, where it finds it.
    cwd = cli.resolve().parent
    server = mcp_command(checkpoint, "--user", "ann")

    def run(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [str(cli), "--cli", *server, *args],
            cwd=cwd,
            env=server_env(tmp_path / "home"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        value: dict[str, Any] = json.loads(done.stdout)
        return value

    listed = run("--method", "tools/list")
    names = {t["name"] for t in listed["tools"]}
    assert {"litigation-intake", "run", "resume"} <= names
    call = ["--method", "tools/call", "--tool-name"]
    pending = run(*call, "litigation-intake", "--tool-arg", 'documents=["complaint.txt"]',
                  "--tool-arg", f"matter_id={demo.MATTER_ID}")  # fmt: skip
    body = pending["structuredContent"]
    assert body["status"] == "interrupted" and body["pending"] == "unsupported"
    assert body["card"]["interrupt_id"] in pending["content"][0]["text"]
    done = run(*call, "resume", "--tool-arg", f"thread_id={body['thread_id']}",
               "--tool-arg", f"interrupt_id={body['card']['interrupt_id']}",
               "--tool-arg", f"answers={json.dumps(demo.ANSWERS)}")  # fmt: skip
    assert done["structuredContent"]["status"] == "finished", done
    assert done["structuredContent"]["profile"]["defendant"]["type"] == "organisation"


@pytest.mark.subprocess
@pytest.mark.timeout(180)
def test_the_services_limits_and_input_checks_hold_over_mcp(
    checkpoint: str, tmp_path: Path
) -> None:
    """A user past their threads a minute is refused as over HTTP, and an input the skill's
    schema refuses is an error result; neither changes anything."""

    async def main() -> list[types.CallToolResult]:
        home = tmp_path / "home"
        async with stdio_session(checkpoint, home, None, SKILLDECK_THREADS_PER_MINUTE="1") as c:
            bad = await c.call("litigation-intake", {"documents": [], "matter_id": "demo-matter"})
            first = await c.call("litigation-intake", ARGS)
            second = await c.call("run", {"request": "summarise my notes"})
            return [bad, first, second]

    bad, first, second = anyio.run(main)
    assert bad.isError and "$.documents: must list at least one value" in text_of(bad)
    assert first.structuredContent is not None
    assert first.structuredContent["status"] == "interrupted"
    assert second.isError and "TOO_MANY_THREADS" in second.content[0].text  # type: ignore[union-attr]
    with SkillDeck(checkpointer=checkpoint, settings=Settings()) as deck:
        assert len(deck.threads(user_id="ann")) == 1


@pytest.mark.subprocess
@pytest.mark.timeout(180)
def test_arguments_are_checked_before_anything_is_stored(checkpoint: str, tmp_path: Path) -> None:
    """Arguments the tool's schema refuses are refused with the deck's INVALID_INPUT, each
    problem at its JSON path; ids (thread_id, interrupt_id, matter_id) by the one id rule,
    before a matter is claimed or a thread made; a start the deck refuses keeps no thread."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("litigation-intake", {"documents": [1, "x"], "matter_id": demo.MATTER_ID, "y": 2}),
        ("litigation-intake", {"documents": ["complaint.txt"], "matter_id": "../../etc"}),
        ("litigation-intake", {**ARGS, "thread_id": "t" * 129}),
        ("run", {"request": "notes", "thread_id": "a/b"}),
        ("run", {"request": 5, "extra": True}),
        ("resume", {"thread_id": "t1", "interrupt_id": 42}),
        ("resume", {"thread_id": "t1", "answers": "yes", "elicit": "no"}),
        ("no-such-tool", {}),
        ("litigation-intake", {"documents": ["complaint.txt"]}),  # needs a matter
        ("run", {"request": "x" * 1_000_001}),  # over stdio nothing else bounds them
    ]

    async def main() -> list[types.CallToolResult]:
        async with stdio_session(checkpoint, tmp_path / "home", None) as c:
            return [await c.call(name, arguments) for name, arguments in calls]

    results = anyio.run(main)
    assert all(r.isError and r.structuredContent is None for r in results)
    texts = [text_of(r) for r in results]
    rule = "must be 1 to 128 letters, digits and . _ : -, starting with a letter or digit"
    expected = [
        ["error [INVALID_INPUT]", "$.documents[0]: must be text"],
        ["error [INVALID_INPUT]", f"matter_id '../../etc' {rule}"],
        ["error [INVALID_INPUT]", "thread_id is 129 characters long"],
        ["error [INVALID_INPUT]", f"thread_id 'a/b' {rule}"],
        ["error [INVALID_INPUT]", "$: may not have 'extra'", "$.request: must be text"],
        ["error [INVALID_INPUT]", "interrupt_id must be a string, not int"],
        ["error [INVALID_INPUT]", "$.answers: must be an object", "$.elicit: must be true or"],
        ["error [UNKNOWN_TOOL]", "no tool 'no-such-tool'"],
        ["error [MATTER_REQUIRED]"],
        ["error [INVALID_INPUT]", "1,000,0", "over the server's limit of 1,000,000"],
    ]
    for text, parts in zip(texts, expected, strict=True):
        assert all(part in text for part in parts), (text, parts)
    with SkillDeck(checkpointer=checkpoint, settings=Settings()) as deck:
        assert deck.threads(user_id="ann") == []
        assert deck.index.matter("../../etc") is None


@pytest.mark.subprocess
@pytest.mark.timeout(180)
# The client serializes the malformed reply the test builds on purpose (model_construct).
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_replies_that_are_not_what_the_form_asked_are_refused_and_asked_again(
    checkpoint: str, tmp_path: Path
) -> None:
    """A reply the protocol refuses (an answer that is an object) and one the deck refuses
    (a number for a text, a field the card did not ask) are each asked again with what was
    wrong; nothing of them is applied, and the right answers then finish the run."""
    name, kind = "profile.defendant.name", "profile.defendant.type"
    replies = [
        types.ElicitResult.model_construct(action="accept", content={name: {"first": "Acme"}}),
        accept({name: 5, kind: "organisation", "profile.plaintiff.name": "Mallory"}),
        accept(demo.ANSWERS),
    ]

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return replies.pop(0)

    async def main() -> tuple[types.CallToolResult, Client]:
        async with stdio_session(checkpoint, tmp_path / "home", elicit) as c:
            return await c.call("litigation-intake", ARGS), c

    result, client = anyio.run(main)
    first, second, third = (p.message for p in client.seen["elicit"])
    assert "refused" not in first
    assert "$: the reply is not an elicitation result" in second
    assert f"{name}: must be text" in third
    assert "profile.plaintiff.name: this card did not ask for it" in third
    body = result.structuredContent
    assert body is not None and body["status"] == "finished", result.content
    _, history = thread_of(checkpoint, body["thread_id"])
    assert [row["answers"] for row in history if row["answers"]] == [demo.ANSWERS]


def test_a_process_without_a_login_name_is_told_to_pass_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a container whose user has no password entry (and no USER), ``getpass`` raises: the
    stdio server then says how to name its user instead of failing with a traceback."""
    from skilldeck.server import mcp as mcp_server

    def no_name() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(mcp_server.getpass, "getuser", no_name)
    with pytest.raises(SkillDeckError, match="--user NAME"):
        mcp_server.local_user()
