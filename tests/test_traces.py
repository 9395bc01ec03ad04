"""Traces (issue 36, item 1), read back from a real OTLP receiver: Arize Phoenix (``phoenix
serve``), in a virtualenv of its own (``.venv-phoenix`` in the checkout, made on first use and
kept: Phoenix pins libraries the dev tools do not share), started by the tests on free ports
with a temporary working directory, and stopped by pid.

Each run is a process of its own (``skilldeck serve``, or Python on the deck's API) configured
by the standard ``OTEL_*`` variables only, whose spans are then read from Phoenix's REST API:
the tree (run, skill turn, attempt, model and tool calls, interrupt), the GenAI attributes and
skilldeck's own, no card answers or prompts by default, and the ``traceparent`` carried to the
model endpoint's HTTP requests, to the MCP server's ``_meta`` and into the service's responses.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import (
    DEMO_ANSWERS,
    own_matter,
    write_bundle,
    write_serve_root,
)
from endpoint import Answer, serve, text
from phoenix_venv import phoenix_venv
from servers import CHROMIUM_INSTALL, program
from serving import DEMO_RUN, DemoServer, free_port, sse, stop_group

from skilldeck.server import hash_key

pytestmark = [pytest.mark.L2, pytest.mark.server, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
SERVER = Path(__file__).parent / "mcp_server.py"
KEY = "sdk_traces_test_key_0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
Span = dict[str, Any]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``phoenix serve`` on free ports of 127.0.0.1; its URL (the OTLP/HTTP receiver too)."""
    program = phoenix_venv()
    work = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))},
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_WORKING_DIR": str(work),
    }
    log = (work / "phoenix.log").open("w")
    proc = subprocess.Popen(
        [str(program), "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (work / "phoenix.log").read_text()[-3000:]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, (work / "phoenix.log").read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        stop_group(proc)
        log.close()


def otel_env(phoenix: str) -> dict[str, str]:
    """The standard variables that send a process's traces to ``phoenix`` (and nothing else)."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix,
        "OTEL_SERVICE_NAME": "skilldeck-tests",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s, not 5 s
    }


def new_traceparent() -> tuple[str, str, str]:
    """A caller's ``traceparent``, its trace id and its span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def parse_traceparent(value: str) -> tuple[str, str]:
    """The trace id and span id of a ``traceparent``."""
    version, trace_id, span_id, flags = value.split("-")
    assert (version, flags) == ("00", "01") and len(trace_id) == 32 and len(span_id) == 16
    return trace_id, span_id


def read_trace(
    phoenix: str, trace_id: str, ended: str = "skilldeck.run", timeout: float = 60
) -> list[Span]:
    """The spans of ``trace_id`` as Phoenix stores them, once every ``ended`` span has arrived
    and no new span came for a second (the exporter sends in batches)."""
    deadline = time.monotonic() + timeout
    seen: list[Span] = []
    settled = 0
    while True:
        response = httpx.get(
            f"{phoenix}/v1/projects/default/spans",
            params={"trace_id": trace_id, "limit": 1000},
            timeout=10,
        )
        spans = response.json()["data"] if response.status_code == 200 else []
        settled = settled + 1 if len(spans) == len(seen) and spans else 0
        seen = spans
        if settled >= 4 and any(s["name"] == ended for s in spans):
            return spans
        assert time.monotonic() < deadline, f"trace {trace_id} incomplete in Phoenix: {spans}"
        time.sleep(0.25)


def children(spans: list[Span], parent: Span) -> list[Span]:
    """The spans under ``parent``, in the order they started."""
    under = [s for s in spans if s["parent_id"] == parent["context"]["span_id"]]
    return sorted(under, key=lambda s: s["start_time"])


def ancestors(spans: list[Span], span: Span) -> list[str]:
    """The ids of the spans above ``span``, nearest first, up to the first one not in
    ``spans`` (a remote parent: the caller's)."""
    found, parent = [], span["parent_id"]
    while parent is not None:
        found.append(parent)
        parent = next((s["parent_id"] for s in spans if s["context"]["span_id"] == parent), None)
    return found


def only_id(spans: list[Span], span_id: str) -> Span:
    (found,) = [s for s in spans if s["context"]["span_id"] == span_id]
    return found


def only(spans: list[Span], name: str) -> Span:
    (found,) = [s for s in spans if s["name"] == name]
    return found


def values(spans: list[Span]) -> str:
    """Every attribute of ``spans`` as one text (to look for what must not be there)."""
    return json.dumps([s["attributes"] for s in spans] + [s.get("events") for s in spans])


@pytest.fixture
def served(phoenix: str, tmp_path: Path) -> Iterator[DemoServer]:
    """``skilldeck serve`` of the demo, tracing to Phoenix by the standard variables only."""
    root = write_serve_root(tmp_path / "root", {hash_key(KEY): "carol"}, 0.1)
    checkpoint = f"sqlite:///{root / 'serve.sqlite'}"
    own_matter(checkpoint, "demo-matter", "carol")
    server = DemoServer(root, checkpoint, KEY, env=otel_env(phoenix))
    try:
        yield server.wait()
    finally:
        server.stop()


def test_a_demo_run_over_http_is_one_span_tree_under_the_callers_traceparent(
    phoenix: str, served: DemoServer
) -> None:
    with httpx.Client(base_url=served.url, headers=AUTH, timeout=60) as http:
        thread = http.post("/threads").json()["thread_id"]
        assert "traceparent" not in http.post("/threads").headers  # no run, no run's span
        parent, trace_id, caller = new_traceparent()
        ran = http.post(f"/threads/{thread}/runs", json=DEMO_RUN, headers={"traceparent": parent})
        events = sse(ran.text)
        assert events[-1][0] == "card", ran.text
        card = events[-1][1]
        state = http.get(f"/threads/{thread}").json()["state"]
        answered_parent, answered_trace, _ = new_traceparent()
        body = {"answers": DEMO_ANSWERS, "interrupt_id": card["interrupt_id"]}
        done = http.post(
            f"/threads/{thread}/resume", json=body, headers={"traceparent": answered_parent}
        )
        assert sse(done.text)[-1][0] == "done", done.text

    # The response names the run's span, in the caller's trace.
    answered_id, run_id = parse_traceparent(ran.headers["traceparent"])
    assert answered_id == trace_id and run_id != caller
    spans = read_trace(phoenix, trace_id)
    run = only(spans, "skilldeck.run")
    assert run["context"]["span_id"] == run_id
    # Under the caller's span: directly, or under the spans FastAPI makes of the request (its
    # own telemetry, on when a tracer provider is set: FastAPI 0.16x and later).
    above = ancestors(spans, run)
    assert above[-1] == caller, above
    http_spans = [only_id(spans, a)["name"] for a in above[:-1]]
    assert http_spans in ([], ["fastapi.endpoint", "POST /threads/{thread_id}/runs"]), http_spans
    assert run["attributes"]["skilldeck.thread_id"] == thread
    assert run["attributes"]["skilldeck.run.kind"] == "run"
    assert run["attributes"]["skilldeck.run.status"] == "interrupted"
    assert run["attributes"]["skilldeck.interrupt.id"] == card["interrupt_id"]
    assert run["attributes"]["gen_ai.operation.name"] == "invoke_agent"

    # run -> skill turn -> attempt -> model calls, tool calls, interrupt
    skill = card["skill"]
    (turn,) = [s for s in children(spans, run) if s["name"] != "route"]  # a one-skill context
    assert turn["name"] == f"skill {skill}"
    assert turn["attributes"]["skilldeck.skill"] == skill
    assert turn["attributes"]["gen_ai.agent.name"] == skill
    assert turn["attributes"]["skilldeck.turn.action"] == "ask_user"
    (attempt,) = children(spans, turn)
    assert attempt["name"] == "attempt 1"
    assert attempt["attributes"]["skilldeck.attempt"] == 1
    assert attempt["attributes"]["skilldeck.attempt.action"] == "ask_user"
    under = children(spans, attempt)
    chats = [s for s in under if s["attributes"].get("gen_ai.operation.name") == "chat"]
    tools = [s for s in under if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert len(chats) == state["calls"][skill]  # one span per model call the thread records
    called = [data["name"] for name, data in events if name == "tool_call"]
    assert [t["attributes"]["gen_ai.tool.name"] for t in tools] == called
    assert all(t["attributes"]["skilldeck.tool.status"] == "ok" for t in tools)
    for chat in chats:
        attributes = chat["attributes"]
        assert chat["span_kind"] == "LLM"
        assert attributes["gen_ai.system"] == attributes["gen_ai.provider.name"]
        assert attributes["gen_ai.request.model"] == "scripted:script.yaml"  # no host path
        assert chat["name"] == f"chat {attributes['gen_ai.request.model']}"
        assert attributes["gen_ai.response.finish_reasons"]
        assert attributes["skilldeck.skill"] == skill and attributes["skilldeck.attempt"] == 1
    interrupt = under[-1]
    assert interrupt["name"] == f"interrupt {skill}"
    assert interrupt["attributes"]["skilldeck.interrupt.id"] == card["interrupt_id"]
    asked = [q["field_key"] for q in card["questions"]]
    assert interrupt["attributes"]["skilldeck.card.field_keys"] == asked
    assert len(under) == len(chats) + len(tools) + 1

    # The resume is a run of its own, under its caller's traceparent: the card takes the
    # answers, the skill goes on. No answer, prompt or reply is recorded by default.
    resumed = read_trace(phoenix, answered_trace)
    again = only(resumed, "skilldeck.run")
    assert again["attributes"]["skilldeck.run.kind"] == "resume"
    assert again["attributes"]["skilldeck.run.status"] == "finished"
    assert again["attributes"]["skilldeck.card.answers"] == len(DEMO_ANSWERS)
    assert [s["name"] for s in children(resumed, again)] == [f"card {skill}", f"skill {skill}"]
    said = values(spans + resumed)
    for answer in DEMO_ANSWERS.values():
        assert answer not in said
    assert "gen_ai.input.messages" not in said and "gen_ai.output.messages" not in said
    assert "complaint" not in said.lower()  # the documents' text, or even their names
    show_in_phoenix(phoenix, trace_id, skill)


def show_in_phoenix(phoenix: str, trace_id: str, skill: str) -> None:
    """Phoenix's page of the trace, in headless Chromium: it draws the tree; its screenshot is
    kept as ``trace.png`` in ``SKILLDECK_SCREENSHOTS`` when set (docs/images/trace.png comes
    from here: ``SKILLDECK_SCREENSHOTS=docs/images pytest tests/test_traces.py -k demo_run``)."""
    from playwright.sync_api import sync_playwright

    chromium = program("chromium", CHROMIUM_INSTALL)
    projects = httpx.get(f"{phoenix}/v1/projects", timeout=10).json()["data"]
    project = next(p["id"] for p in projects if p["name"] == "default")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(f"{phoenix}/projects/{project}/traces/{trace_id}")
            for name in ("skilldeck.run", f"skill {skill}", f"interrupt {skill}"):
                page.get_by_text(name, exact=True).first.wait_for()
            page.get_by_text("attempt 1", exact=True).first.click()
            page.get_by_text("skilldeck.attempt.action").first.wait_for()
            page.wait_for_timeout(1000)  # the panel's transition
            png = page.screenshot()
        finally:
            browser.close()
    keep = os.environ.get("SKILLDECK_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "trace.png").write_bytes(png)


def test_the_operations_guide_shows_a_trace_from_this_test() -> None:
    guide = (ROOT / "docs" / "operations.md").read_text("utf-8")
    assert "](images/trace.png)" in guide
    assert (ROOT / "docs" / "images" / "trace.png").stat().st_size > 10_000


#: A skill of one MCP tool that reports the ``_meta`` of its request.
AGENT_META = {"tools": ["mcp:t/trace_context"], "execution_config": {"output_mode": "schema"}}
RUN_AGENT = """
import json, sys
from opentelemetry import context, propagate
from skilldeck import Settings, SkillDeck

skills, config, url, parent = sys.argv[1:5]
settings = Settings(_env_file=None, model="compatible:local-model", api_key="local",
                    base_url=url, output_mode="schema", mcp_config=config, max_retries=2)
with SkillDeck([skills], checkpointer="memory://", settings=settings, trust=[skills]) as deck:
    token = context.attach(propagate.extract({"traceparent": parent}))  # the caller's span
    result = deck.run(context="ctx", user_id="u-1")
    context.detach(token)
    print(json.dumps({"status": result.status, "thread_id": result.thread_id}))
"""


def test_the_model_endpoint_and_the_mcp_server_get_the_calls_traceparent(
    phoenix: str, skills_dir: Path, tmp_path: Path
) -> None:
    """A skill on an OpenAI-compatible endpoint (recording its requests; it answers 503 once)
    calls a tool of a real MCP server, answers wrongly once, then rightly: the endpoint's
    requests carry each model call's ``traceparent`` as a header (the retried one too), the MCP
    request its tool call's in ``_meta``; the spans carry the endpoint's token counts, the retry
    and the contract's errors, and (the operator opted in with ``SKILLDECK_TRACE_CONTENT=1``)
    what was said."""
    write_bundle(skills_dir, "agent", meta=AGENT_META)
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"t": {"command": sys.executable, "args": [str(SERVER)]}}})
    )
    finish = {"response": "done", "profile": {}, "data": {}, "control": {"action": "finish"}}
    steps: list[Any] = [
        Answer(status=503),  # no reply: the transport retries the call
        text(json.dumps({"tool": "mcp__t__trace_context", "arguments": {}})),
        text(json.dumps({"final": {**finish, "control": {"action": "dance"}}})),  # rejected
        text(json.dumps({"final": finish})),
    ]
    parent, trace_id, caller = new_traceparent()
    with serve(steps) as endpoint:
        ran = subprocess.run(
            [sys.executable, "-c", RUN_AGENT, str(skills_dir), str(config), endpoint.url, parent],
            env={**os.environ, **otel_env(phoenix), "SKILLDECK_TRACE_CONTENT": "1"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert json.loads(ran.stdout.strip().splitlines()[-1])["status"] == "finished", ran.stdout
        sent = [h.get("traceparent", "") for h in endpoint.headers]
        # The tool's result (the _meta it was sent) is in the next request's conversation.
        told = re.findall(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", json.dumps(endpoint.requests[2]))
    spans = read_trace(phoenix, trace_id)
    run = only(spans, "skilldeck.run")
    assert run["parent_id"] == caller
    (turn,) = children(spans, run)
    first, second = children(spans, turn)
    assert (first["name"], second["name"]) == ("attempt 1", "attempt 2")
    assert first["attributes"]["skilldeck.attempt.action"] == "rejected"
    assert first["attributes"]["skilldeck.contract.errors"] >= 1
    assert first["attributes"]["skilldeck.contract.error_codes"]
    assert any("control" in p for p in first["attributes"]["skilldeck.contract.error_paths"])
    assert second["attributes"]["skilldeck.attempt.action"] == "finish"

    chats = sorted(
        (s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"),
        key=lambda s: s["start_time"],
    )
    # Each request to the endpoint carried its model call's span as its traceparent.
    assert [parse_traceparent(h) for h in sent] == [
        (trace_id, c["context"]["span_id"]) for c in chats
    ]
    failed, *replied = chats
    assert failed["status_code"] == "ERROR" and failed["attributes"]["error.type"]  # its class
    (retried,) = first["events"]
    assert retried["name"] == "skilldeck.transport_retry"
    assert retried["attributes"]["reason"] == "http_503"
    for chat in replied:
        attributes = chat["attributes"]
        assert attributes["gen_ai.provider.name"] == attributes["gen_ai.system"] == "openai"
        assert attributes["gen_ai.request.model"] == "local-model"
        assert (
            attributes["gen_ai.usage.input_tokens"],
            attributes["gen_ai.usage.output_tokens"],
        ) == (11, 7)
        assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    # The MCP server read the tool call's span from the request's _meta.
    (tool,) = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert tool["parent_id"] == first["context"]["span_id"]
    assert tool["attributes"]["gen_ai.tool.name"] == "mcp__t__trace_context"
    assert [parse_traceparent(t) for t in told] == [(trace_id, tool["context"]["span_id"])]
    # Opted in: the prompts, the replies, the tool's arguments and result, the errors' text.
    asked = json.loads(replied[0]["attributes"]["gen_ai.input.messages"])
    assert asked[0]["role"] == "system" and asked[-1]["role"] == "user"
    reply = json.loads(replied[0]["attributes"]["gen_ai.output.messages"])
    assert "mcp__t__trace_context" in reply[0]["content"]
    assert tool["attributes"]["gen_ai.tool.call.arguments"] == "{}"
    assert "traceparent" in tool["attributes"]["gen_ai.tool.call.result"]
    assert first["attributes"]["skilldeck.contract.error_messages"]
