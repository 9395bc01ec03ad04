"""Running the service for real (issue 36): Prometheus metrics, read with
``prometheus_client``'s own parser from real ``skilldeck serve`` processes, and graceful
restarts: SIGTERM drains the runs to their next checkpoint, then the process exits 0, and a
restarted server goes on with the threads."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import (
    DEMO_ANSWERS,
    DEMO_FILES,
    INTAKE_FINAL,
    own_matter,
    write_serve_root,
)
from endpoint import Answer, serve, text
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from serving import DEMO_RUN, SLOW_RUN, DemoServer, free_port, sse

from skilldeck import Continue, Settings, SkillDeck
from skilldeck.server import create_app, hash_key
from skilldeck.skills import builtin_skills_dir

pytestmark = [pytest.mark.L2, pytest.mark.server]

KEY = "sdk_operations_test_key_0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., DemoServer]]:
    """``start(root, checkpoint, options=(), env=None)``: a server, waited for; every server
    started is stopped (by pid) after the test."""
    started: list[DemoServer] = []

    def launch(
        root: Path,
        checkpoint: str,
        options: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> DemoServer:
        server = DemoServer(root, checkpoint, KEY, options, env)
        started.append(server)
        server.wait()
        return server

    yield launch
    for server in started:
        server.stop()


def _root(tmp_path: Path, slow_s: float) -> tuple[Path, str]:
    """A serve root whose ``slow`` step sleeps ``slow_s``, and its SQLite checkpoint URL with
    the demo matter made for the key's user."""
    root = write_serve_root(tmp_path / f"root-{slow_s:g}", {hash_key(KEY): "carol"}, slow_s)
    url = f"sqlite:///{root / 'serve.sqlite'}"
    own_matter(url, "demo-matter", "carol")
    return root, url


def scrape(http: httpx.Client, path: str = "/metrics") -> Samples:
    """Every sample of the metrics, parsed by ``prometheus_client``'s parser."""
    response = http.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when it is not there yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, found), v in samples.items() if n == name and wanted <= found)


# -- item 2: metrics --------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_metrics_are_off_by_default_and_behind_the_api_keys_or_at_their_own_address(
    start: Callable[..., DemoServer], tmp_path: Path
) -> None:
    root, url = _root(tmp_path, 0.1)
    plain = start(root, url)
    with plain.client() as http:
        off = http.get("/metrics")
    assert off.status_code == 404 and off.json()["error"]["code"] == "NOT_FOUND"

    on = start(root, url, ["--metrics"])
    with on.client({}) as anonymous, on.client({"Authorization": "Bearer wrong"}) as wrong:
        for refused in (anonymous.get("/metrics"), wrong.get("/metrics")):
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"]["code"] == "UNAUTHORIZED"
            assert "skilldeck_" not in refused.text
    with on.client() as http:
        samples = scrape(http)
    assert value(samples, "skilldeck_interrupts_pending") == 0
    assert value(samples, "skilldeck_run_queue_depth") == 0

    # At an address of their own: there without a key, and not on the service.
    address = f"127.0.0.1:{free_port()}"
    apart = start(root, url, env={"SKILLDECK_METRICS_ADDRESS": address})
    with httpx.Client(base_url=f"http://{address}", timeout=30) as exporter:
        assert value(scrape(exporter), "skilldeck_runs_running") == 0
    with apart.client() as http:
        assert http.get("/metrics").status_code == 404


@pytest.mark.timeout(240)
def test_metrics_count_a_demo_run_to_its_card_and_its_resume_across_processes(
    start: Callable[..., DemoServer], tmp_path: Path
) -> None:
    root, url = _root(tmp_path, 0.1)
    one = start(root, url, env={"SKILLDECK_METRICS": "1"})
    two = start(root, url, env={"SKILLDECK_METRICS": "1"})  # the same database
    with one.client() as first, two.client() as second:
        before = scrape(first)
        assert value(before, "skilldeck_runs_started_total", kind="run") == 0
        thread = first.post("/threads").json()["thread_id"]
        response = first.post(f"/threads/{thread}/runs", json=DEMO_RUN)
        events = sse(response.text)
        name, card = events[-1]
        assert name == "card", response.text

        after_card = scrape(first)
        assert value(after_card, "skilldeck_runs_started_total", kind="run") == 1
        assert value(after_card, "skilldeck_runs_ended_total", status="interrupted", code="") == 1
        calls = [data for event, data in events if event == "tool_call"]
        assert calls and total(after_card, "skilldeck_tool_calls_total") == len(calls)
        for call in calls:
            counted = value(
                after_card, "skilldeck_tool_calls_total", tool=call["name"], status=call["status"]
            )
            assert counted == sum(1 for c in calls if c["name"] == call["name"])
        skill = card["skill"]
        model_calls = total(after_card, "skilldeck_model_calls_total", skill=skill, outcome="ok")
        made = first.get(f"/threads/{thread}").json()["state"]["calls"][skill]
        assert model_calls == made  # one per call the thread records
        latencies = total(after_card, "skilldeck_model_call_duration_seconds_count", skill=skill)
        assert latencies == model_calls
        assert value(after_card, "skilldeck_interrupts_pending") == 1
        assert value(after_card, "skilldeck_interrupt_age_seconds_bucket", le="+Inf") == 1
        assert 0 <= value(after_card, "skilldeck_interrupt_oldest_age_seconds") < 60
        assert value(after_card, "skilldeck_runs_running") == 0
        assert value(after_card, "skilldeck_run_queue_depth") == 0
        # The other process ran nothing, and sees the card from the thread index.
        other = scrape(second)
        assert value(other, "skilldeck_interrupts_pending") == 1
        assert total(other, "skilldeck_runs_started_total") == 0

        # The card is answered on the other process.
        body = {"answers": DEMO_ANSWERS, "interrupt_id": card["interrupt_id"]}
        done = second.post(f"/threads/{thread}/resume", json=body)
        assert sse(done.text)[-1][0] == "done", done.text
        other = scrape(second)
        assert value(other, "skilldeck_runs_started_total", kind="resume") == 1
        assert value(other, "skilldeck_runs_ended_total", status="finished", code="") == 1
        for samples in (other, scrape(first)):
            assert value(samples, "skilldeck_interrupts_pending") == 0
            assert value(samples, "skilldeck_interrupt_age_seconds_bucket", le="+Inf") == 0
        assert value(scrape(first), "skilldeck_runs_ended_total", status="finished", code="") == 0


@pytest.mark.timeout(120)
def test_model_tokens_latency_and_transport_retries_are_counted_by_skill_and_model() -> None:
    """Against a local OpenAI-compatible endpoint that fails once with 503, then answers with
    usage (11 tokens in, 7 out, per reply)."""
    parse = {"tool": "file__parse", "arguments": {"file_id": "complaint.txt"}}
    steps: list[Any] = [Answer(status=503), text(json.dumps(parse))]
    steps.append(text(json.dumps({"final": INTAKE_FINAL})))
    intake = builtin_skills_dir() / "litigation-intake"
    with serve(steps) as endpoint:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            model="compatible:local-model",
            api_key="local",
            base_url=endpoint.url,
            output_mode="schema",
            files_root=str(DEMO_FILES),
            metrics=True,
        )
        with SkillDeck([intake], checkpointer="memory://", settings=settings) as deck:
            own_matter(deck, "demo-matter", "carol")
            app = create_app(deck, api_keys={hash_key(KEY): "carol"})
            with TestClient(app, headers=AUTH) as http:
                thread = http.post("/threads").json()["thread_id"]
                ran = http.post(f"/threads/{thread}/runs", json=DEMO_RUN)
                assert sse(ran.text)[-1][0] == "done", ran.text
                samples = scrape(http)
    labels = {"skill": "litigation-intake", "model": "local-model"}
    retried = {"skill": labels["skill"], "reason": "http_503"}
    assert value(samples, "skilldeck_transport_retries_total", **retried) == 1
    assert value(samples, "skilldeck_model_calls_total", **labels, outcome="error") == 1
    assert value(samples, "skilldeck_model_calls_total", **labels, outcome="ok") == 2
    assert value(samples, "skilldeck_model_call_duration_seconds_count", **labels) == 3
    assert value(samples, "skilldeck_model_tokens_total", **labels, direction="input") == 22
    assert value(samples, "skilldeck_model_tokens_total", **labels, direction="output") == 14
    assert value(samples, "skilldeck_tool_calls_total", tool="file__parse", status="ok") == 1
    assert value(samples, "skilldeck_runs_ended_total", status="finished", code="") == 1


# -- item 5: graceful restarts ----------------------------------------------------------------
def _slow_run_mid_step(server: DemoServer, thread: str) -> tuple[httpx.Client, httpx.Response]:
    """Start the slow run of ``thread`` and return once its first step is checkpointed and the
    slow step is running; the client and the open stream."""
    http = server.client()
    response = http.send(
        http.build_request("POST", f"/threads/{thread}/runs", json=SLOW_RUN), stream=True
    )
    assert response.status_code == 200
    deadline = time.monotonic() + 20
    while len(http.get(f"/threads/{thread}/history").json()["checkpoints"]) < 3:
        assert time.monotonic() < deadline, server.log.read_text()
        time.sleep(0.05)
    return http, response


def _drained_exit(server: DemoServer, within_s: float) -> float:
    """Wait for the process to exit after SIGTERM; how long it took. It must exit 0."""
    sent = time.monotonic()
    server.proc.wait(within_s)
    took = time.monotonic() - sent
    assert server.proc.returncode == 0, server.log.read_text()
    return took


@pytest.mark.timeout(180)
def test_sigterm_drains_a_run_to_its_checkpoint_and_a_restarted_server_continues_it(
    start: Callable[..., DemoServer], tmp_path: Path
) -> None:
    root, url = _root(tmp_path, 3.0)
    first = start(root, url, ["--drain-timeout", "30"])
    with first.client() as http:
        thread, other = (http.post("/threads").json()["thread_id"] for _ in range(2))
        assert http.get("/readyz").status_code == 200
    stream_client, stream = _slow_run_mid_step(first, thread)
    try:
        sent = time.monotonic()
        first.proc.send_signal(signal.SIGTERM)
        with first.client() as http:
            deadline = time.monotonic() + 5
            while (ready := http.get("/readyz")).status_code == 200:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert ready.status_code == 503 and ready.json()["status"] == "draining"
            assert http.get("/livez").status_code == 200  # alive: it is finishing its runs
            refused = http.post(f"/threads/{other}/runs", json=SLOW_RUN)
            assert refused.status_code == 503 and refused.headers["retry-after"]
            assert refused.json()["error"]["code"] == "SHUTTING_DOWN"
        events = sse(stream.read().decode())
    finally:
        stream.close()
        stream_client.close()
    # The slow step finished, was checkpointed, and the run stopped there.
    assert [name for name, _ in events].count("step") == 2, events
    name, stopped = events[-1]
    assert name == "error" and stopped["code"] == "STOPPED", events
    took = _drained_exit(first, 30)
    assert time.monotonic() - sent < 30 and took < 30

    second = start(root, url)
    with second.client() as http:
        # Its claims were given back: resumable at once, not after a dead process's grace.
        view = http.get(f"/threads/{thread}").json()
        assert view["status"] == "resumable", view
        assert http.get(f"/threads/{other}").json()["status"] == "new"  # the refused run
        before = http.get(f"/threads/{thread}/history").json()["checkpoints"]
        started = time.monotonic()
        going_on = http.post(f"/threads/{thread}/continue")
        name, card = sse(going_on.text)[-1]
        assert name == "card", going_on.text
        assert time.monotonic() - started < 3.0  # the slow step is not run again
        after = http.get(f"/threads/{thread}/history").json()["checkpoints"]
        ids = [row["checkpoint_id"] for row in before]
        assert [row["checkpoint_id"] for row in after[: len(before)]] == ids
        assert [row["source"] for row in after].count("input") == 1
        body = {"answers": {"note": "kept"}, "interrupt_id": card["interrupt_id"]}
        done = http.post(f"/threads/{thread}/resume", json=body)
        assert sse(done.text)[-1][0] == "done", done.text
        assert http.get(f"/threads/{thread}").json()["state"]["note"] == "kept"


@pytest.mark.timeout(180)
def test_a_drain_timeout_shorter_than_the_step_still_exits_and_leaves_the_thread_resumable(
    start: Callable[..., DemoServer], tmp_path: Path
) -> None:
    root, url = _root(tmp_path, 8.0)
    first = start(root, url, ["--drain-timeout", "1"])
    with first.client() as http:
        thread = http.post("/threads").json()["thread_id"]
    stream_client, stream = _slow_run_mid_step(first, thread)
    try:
        first.proc.send_signal(signal.SIGTERM)
        took = _drained_exit(first, 30)
        events = sse(stream.read().decode())
    finally:
        stream.close()
        stream_client.close()
    assert took < 6, first.log.read_text()  # 1 s to drain, well before the 8 s step ends
    name, ended = events[-1]
    assert name == "error" and ended["code"] == "SHUTTING_DOWN", events
    assert "SKILLDECK_DRAIN_TIMEOUT_S" in ended["message"]

    second = start(root, url)
    with second.client() as http:
        # The step never reached its checkpoint: the thread goes on from the one before, once
        # the dead process's lease is seen gone (10 s), so nothing runs the thread twice.
        deadline = time.monotonic() + 40
        while (view := http.get(f"/threads/{thread}").json())["status"] != "resumable":
            assert view["status"] == "running" and time.monotonic() < deadline, view
            time.sleep(0.5)
        going_on = http.post(f"/threads/{thread}/continue")
        name, card = sse(going_on.text)[-1]
        assert name == "card", going_on.text
        body = {"answers": {"note": "kept"}, "interrupt_id": card["interrupt_id"]}
        assert sse(http.post(f"/threads/{thread}/resume", json=body).text)[-1][0] == "done"


@pytest.mark.timeout(120)
def test_a_stream_whose_stop_is_set_ends_after_its_step_and_the_thread_continues(
    demo_deck: SkillDeck,
) -> None:
    """The engine's side of the drain: ``deck.stream(stop=...)`` stops between steps, at a
    checkpoint, gives its claims back, and ``Continue`` goes on to the card."""
    own_matter(demo_deck, "demo-matter", "carol")
    stop = threading.Event()
    events = []
    for event in demo_deck.stream(
        DEMO_RUN["input"], context="matter", matter_id="demo-matter", user_id="carol", stop=stop
    ):
        events.append(event)
        stop.set()  # after the first step
    assert [e.event for e in events] == ["step", "error"], events
    assert events[-1].code == "STOPPED"
    thread = events[0].thread_id
    assert demo_deck.get_thread(thread).status == "resumable"
    assert demo_deck.claims.live([thread]) == set()
    result = demo_deck.run(Continue(thread))
    assert result.status == "interrupted", result.error
