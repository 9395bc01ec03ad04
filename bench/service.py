"""Service benchmark: the HTTP card flow under load and faults, on real ``skilldeck serve``
processes.

Usage::

    python bench/service.py [--runs 500] [--concurrency 50] [--fault-runs 200] [--json]

Every thread is one *flow*: ``POST /threads``, ``POST /threads/{id}/runs`` streamed to the demo's
card (the litigation-intake demo on the scripted model), then ``POST /threads/{id}/resume`` with
the demo's answers streamed to ``done``. ``--concurrency`` clients (asyncio + httpx) run flows
until ``--runs`` are done. Measurements:

A. **one server + SQLite**: ``--runs`` flows against one ``skilldeck serve``.
B. **two servers + PostgreSQL**: ``--runs`` flows against two ``skilldeck serve`` processes
   sharing a fresh database on a private PostgreSQL cluster (``.ci/services``); each thread runs
   on one server and is resumed on the other.
``--only deltas``: time to the first event, the first ``delta`` and the run's end with
``stream_deltas`` off and on (``--delta-runs`` each, interleaved, one server, ``schema`` mode;
the model is ``SKILLDECK_MODEL`` when set, else the demo's cassette).
``--only fairness``: another user's time to the first event while one user holds
``--hog-queued`` runs queued (each holds a worker ``--hold-s`` seconds: a scripted turn with
that latency), against an idle server of the same settings, ``--fair-trials`` trials each,
interleaved (issue 32, finding 4; default per-user limits, more queued runs and threads per
minute allowed so the one user can hold that many).
``--only slow``: ``/health`` latency on a fresh connection while ``--slow-senders`` clients
send slowly, a byte or a header line a second (half a body with a key, half headers), and
``--keyless-senders`` more send a body without a key, all connecting again whenever they are
cut off; ``--health-probes`` spread over ``--slow-window-s``, against the same server before
they connect (finding 6; default settings).
``--only peers``: the same demo flow on one ``skilldeck serve`` (SQLite) and on ``langgraph
dev`` (LangGraph's own server with the shipped ``langgraph.json``, in ``.venv-langgraph``,
made on first use, driven with LangGraph's SDK: ``runs.wait`` to the interrupt, ``runs.wait``
with the resume command to the end), sequentially and with ``--peer-clients`` clients,
``--peer-flows`` flows each in ``--peer-rounds`` rounds that alternate which server goes first;
and, interleaved with them, two ``skilldeck serve`` processes on one PostgreSQL database (run
on one, resume on the other; ``--no-peer-postgres`` leaves them out).

Faults (configuration B, ``--fault-runs`` flows each, on a fresh database):

a. ``kill -9`` of server 1 after 30% of the flows, of server 2 after 65%; each is restarted at
   once on its port (durability ``sync``, the default).
b. ``pg_ctl restart`` of the PostgreSQL cluster after 35% and after 70% of the flows.
c. clients that disconnect from every run and resume stream after its first event, then poll
   ``GET /threads/{id}`` until the card (or the end) shows up.

The client below is the recovery procedure the README documents: on a broken stream, a refused
connection, a 5xx or an ``error`` event it asks ``GET /threads/{id}`` (preferring the other
server) where the thread stands, and

- ``interrupted`` with the card it was waiting for: the run reached its card; answer it;
- ``new`` or ``running`` before its card was answered: the run died with its process (or its
  database connection); ``POST /runs`` again with the same input;
- ``running`` after the answers went in: the answers are checkpointed and the rest died;
  ``POST /runs`` again, which finishes the thread;
- ``finished``: nothing to do.

A 409 ``ALREADY_RESUMED`` while the card is still pending means another resume holds the card;
the client asks again after a pause. After every measurement each thread is checked: it is
``finished``, its state equals a reference run's (made in this process on ``memory://``), and
its history has exactly one card and exactly one answered card with the demo's answers.
Servers, databases and files live in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import yaml
from common import err, log, progress_bar
from rich.console import Console
from rich.table import Table

from skilldeck import Resume, Settings, SkillDeck, demo
from skilldeck.server import hash_key
from skilldeck.skills import builtin_skills_dir

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / ".ci" / "services"
KEY = "sdk_bench_service_key_0123456789abcdef"
USER = "bench"
RUN_BODY = {"input": demo.INPUT, "context": demo.CONTEXT, "matter_id": demo.MATTER_ID}
TERMINAL = ("card", "done", "error")
MAX_ATTEMPTS = 40  # per step of a flow; with the backoff below about 2 minutes
#: The load measurements' one API key stands for all their clients, who would be as many users:
#: the per-user limits of a service (runs at once and queued, threads a minute) are lifted.
ONE_KEY_MANY_CLIENTS = (
    *("--runs-per-user", "1000", "--queued-runs-per-user", "1000"),
    *("--threads-per-minute", "1000000"),
)
STATE_KEYS_IGNORED = ("attempt", "turn")  # per-run ids and timings
ATTEMPT_KEYS = ("skill", "attempt", "action", "validation_errors", "tool_calls", "model")


# -- processes --------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def own_demo_matter(checkpoint: str) -> None:
    """Make the demo's matter the bench user's, as an operator does (``skilldeck matters add``)
    before users run on it: the service serves only matters made for them."""
    from skilldeck.checkpoints.open import open_persistence

    persistence = open_persistence(checkpoint)
    try:
        if persistence.threads.matter(demo.MATTER_ID) is None:
            persistence.threads.add_matter(demo.MATTER_ID, USER)
    finally:
        persistence.close()


class Server:
    """One ``skilldeck serve`` process on a fixed port (``extra``: more of its options); it can
    be killed and started again."""

    def __init__(
        self,
        name: str,
        checkpoint: str,
        work: Path,
        model: str | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        self.name, self.checkpoint, self.work = name, checkpoint, work
        self.model = model or f"scripted:{demo.SCRIPT}"
        self.extra = list(extra)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.start_s: list[float] = []

    def command(self) -> list[str]:
        return [
            sys.executable,
            *("-m", "skilldeck.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)),
            *("--keys", str(self.work / "keys.json"), "--checkpoint", self.checkpoint),
            *("--model", self.model),
            *("--skills", str(builtin_skills_dir() / "litigation-intake")),
            *self.extra,
        ]

    def start(self) -> None:
        env = {
            **os.environ,
            "SKILLDECK_FILES_ROOT": str(demo.FILES),
            "SKILLDECK_DURABILITY": "sync",
        }
        if self.starts == 0:
            own_demo_matter(self.checkpoint)
        self.starts += 1
        log_file = (self.work / f"{self.name}.log").open("ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            self.command(), env=env, cwd=self.work, stdout=log_file, stderr=subprocess.STDOUT
        )
        log_file.close()  # the child has its own descriptor
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.work / self.name}.log")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not answer /health in 90 s")
            time.sleep(0.1)
        self.start_s.append(time.perf_counter() - t0)

    def kill(self) -> None:
        """``kill -9``: no shutdown, no flushing; in-flight requests die with the process."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


class Postgres:
    """A private PostgreSQL cluster started with ``.ci/services`` (the script CI uses)."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.url = ""

    def _run(self, *args: str) -> str:
        proc = subprocess.run(
            [str(SERVICES), *args],
            env={**os.environ, "SKILLDECK_SERVICES_DIR": str(self.state)},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if proc.returncode:
            raise RuntimeError(f".ci/services {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def start(self) -> None:
        for line in self._run("start", "postgres").splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            if name == "SKILLDECK_TEST_POSTGRES_URL":
                self.url = value.strip()

    def database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return urlunsplit(urlsplit(self.url)._replace(path=f"/{name}"))

    def restart(self) -> float:
        t0 = time.perf_counter()
        self._run("restart", "postgres")
        return time.perf_counter() - t0

    def stop(self) -> None:
        if self.url:
            self._run("stop")


# -- the client -------------------------------------------------------------------------------
@dataclass
class Outcome:
    """One streamed request: the terminal event, or how it failed."""

    status: int | None = None
    terminal: str | None = None  # card, done, error
    data: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None  # transport error class, "HTTP 409 CODE", "error event CODE"
    events: int = 0


@dataclass
class Flow:
    index: int
    run_on: int
    resume_on: int
    thread_id: str = ""
    interrupt_id: str = ""
    card_ms: float | None = None
    done_ms: float | None = None
    retries: int = 0
    ok: bool = False
    problem: str = ""


class Client:
    """``concurrency`` clients driving flows over HTTP, with the documented recovery."""

    def __init__(self, servers: Sequence[Server], *, disconnect: bool = False) -> None:
        self.servers = servers
        self.disconnect = disconnect
        timeout = httpx.Timeout(120.0, connect=5.0)
        headers = {"Authorization": f"Bearer {KEY}"}
        self.http = [
            httpx.AsyncClient(base_url=s.url, timeout=timeout, headers=headers) for s in servers
        ]
        self.requests = 0
        self.failures: Counter[str] = Counter()
        self.seen: Counter[str] = Counter()  # what the client saw and did (the README's cases)
        self.paused: set[str] = set()  # threads on a card, not answered yet (for fault a)

    async def aclose(self) -> None:
        for http in self.http:
            await http.aclose()

    def other(self, index: int) -> int:
        return (index + 1) % len(self.servers)

    def fail(self, what: str) -> None:
        self.failures[what] += 1

    # -- requests ---------------------------------------------------------------------------
    async def stream(
        self, server: int, path: str, body: dict[str, Any], *, leave: bool = False
    ) -> Outcome:
        """POST ``path`` and read its SSE stream to the terminal event (``leave``: close the
        connection after the first event)."""
        out = Outcome()
        self.requests += 1
        try:
            async with self.http[server].stream("POST", path, json=body) as response:
                out.status = response.status_code
                if response.status_code != 200:
                    await response.aread()
                    code = _error_code(response)
                    out.failure = f"HTTP {response.status_code} {code}"
                    return out
                name = None
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        name = line.removeprefix("event: ")
                    elif line.startswith("data: ") and name:
                        out.events += 1
                        if leave:
                            out.failure = "left"
                            return out
                        if name in TERMINAL:
                            out.terminal, out.data = name, json.loads(line.removeprefix("data: "))
                if out.terminal == "error":
                    out.failure = f"error event {out.data.get('code')}"
                elif out.terminal is None:
                    out.failure = "stream ended without a terminal event"
        except httpx.TransportError as exc:
            out.failure = type(exc).__name__
        return out

    async def call(self, server: int, method: str, path: str) -> httpx.Response | None:
        self.requests += 1
        try:
            response = await self.http[server].request(method, path)
        except httpx.TransportError as exc:
            self.fail(f"{method} {type(exc).__name__}")
            return None
        if response.status_code >= 500:
            self.fail(f"{method} HTTP {response.status_code} {_error_code(response)}")
            return None
        return response

    async def view(self, flow: Flow, server: int) -> dict[str, Any] | None:
        for attempt in range(MAX_ATTEMPTS):
            response = await self.call(server, "GET", f"/threads/{flow.thread_id}")
            if response is not None and response.status_code == 200:
                view: dict[str, Any] = response.json()
                return view
            server = self.other(server)
            await asyncio.sleep(_backoff(attempt))
        return None

    # -- one flow ---------------------------------------------------------------------------
    async def create(self, flow: Flow) -> None:
        server = flow.run_on
        for attempt in range(MAX_ATTEMPTS):
            response = await self.call(server, "POST", "/threads")
            if response is not None and response.status_code == 201:
                flow.thread_id = response.json()["thread_id"]
                return
            flow.retries += 1
            server = self.other(server)
            await asyncio.sleep(_backoff(attempt))
        raise RuntimeError("could not create a thread")

    async def until(
        self,
        flow: Flow,
        server: int,
        goal: str,
        request: tuple[str, dict[str, Any]],
        decide: Callable[[dict[str, Any]], tuple[str, dict[str, Any]] | dict[str, Any]],
    ) -> dict[str, Any]:
        """Send ``request`` until its stream ends with the ``goal`` event (its data). After a
        failure, ``decide`` reads where the thread stands (``GET``) and returns the request to
        send next, or the data of a goal already reached."""
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                flow.retries += 1
                await asyncio.sleep(_backoff(attempt - 1))
                view = await self.view(flow, server)
                if view is None:
                    continue
                decision = decide(view)
                if isinstance(decision, dict):
                    return decision
                request = decision
            path, body = request
            out = await self.stream(server, path, body)
            if out.terminal == goal:
                return out.data
            self.fail(f"{path.rsplit('/', 1)[-1]}: {out.failure}")
            if out.status is None or out.status >= 500 or out.terminal == "error":
                server = self.other(server)
        raise RuntimeError(f"thread {flow.thread_id}: no {goal} after {MAX_ATTEMPTS} attempts")

    async def run_to_card(self, flow: Flow) -> None:
        t0 = time.perf_counter()
        run = (f"/threads/{flow.thread_id}/runs", RUN_BODY)

        def decide(view: dict[str, Any]) -> tuple[str, dict[str, Any]] | dict[str, Any]:
            if view["status"] == "interrupted":
                self.seen["run: interrupted on GET -> answer the card"] += 1
                card: dict[str, Any] = view["card"]
                return card
            self.seen[f"run: {view['status']} on GET -> POST /runs again"] += 1
            return run

        card = await self.until(flow, flow.run_on, "card", run, decide)
        flow.interrupt_id = card["interrupt_id"]
        flow.card_ms = (time.perf_counter() - t0) * 1000
        self.paused.add(flow.thread_id)

    async def resume(self, flow: Flow) -> None:
        t0 = time.perf_counter()
        body = {"answers": demo.ANSWERS, "interrupt_id": flow.interrupt_id}
        answer = (f"/threads/{flow.thread_id}/resume", body)

        def decide(view: dict[str, Any]) -> tuple[str, dict[str, Any]] | dict[str, Any]:
            status = view["status"]
            if status == "finished":
                self.seen["resume: finished on GET -> done"] += 1
                return view
            if status == "interrupted":
                if view["card"]["interrupt_id"] != flow.interrupt_id:
                    raise RuntimeError(f"thread {flow.thread_id}: a second card appeared")
                self.seen["resume: interrupted on GET -> POST /resume again"] += 1
                return answer
            self.seen[f"resume: {status} on GET -> POST /runs again"] += 1
            return (f"/threads/{flow.thread_id}/runs", RUN_BODY)

        await self.until(flow, flow.resume_on, "done", answer, decide)
        flow.done_ms = (time.perf_counter() - t0) * 1000
        self.paused.discard(flow.thread_id)

    async def leave(self, flow: Flow, server: int, path: str, body: dict[str, Any]) -> str:
        """Start a stream, go away after its first event, then poll until the thread leaves
        ``running``; returns the status it reached."""
        out = await self.stream(server, path, body, leave=True)
        if out.failure != "left":
            raise RuntimeError(f"thread {flow.thread_id}: {path} failed: {out.failure}")
        view = await self.view(flow, self.other(server))
        assert view is not None
        self.seen[f"{path.rsplit('/', 1)[-1]}: {view['status']} on GET right after leaving"] += 1
        deadline = time.monotonic() + 120
        while view["status"] == "running" or (
            view["status"] == "interrupted" and view["card"]["interrupt_id"] == flow.interrupt_id
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"thread {flow.thread_id}: still {view['status']} after 120 s")
            await asyncio.sleep(0.1)
            view = await self.view(flow, self.other(server))
            assert view is not None
        if view["status"] == "interrupted":
            flow.interrupt_id = view["card"]["interrupt_id"]
        return str(view["status"])

    async def disconnected_flow(self, flow: Flow) -> None:
        t0 = time.perf_counter()
        path = f"/threads/{flow.thread_id}"
        if await self.leave(flow, flow.run_on, f"{path}/runs", RUN_BODY) != "interrupted":
            raise RuntimeError(f"thread {flow.thread_id}: the run did not reach its card")
        flow.card_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        body = {"answers": demo.ANSWERS, "interrupt_id": flow.interrupt_id}
        status = await self.leave(flow, flow.resume_on, f"{path}/resume", body)
        if status != "finished":
            raise RuntimeError(f"thread {flow.thread_id}: the resume ended {status}")
        flow.done_ms = (time.perf_counter() - t0) * 1000

    async def flow(self, flow: Flow) -> None:
        try:
            await self.create(flow)
            if self.disconnect:
                await self.disconnected_flow(flow)
            else:
                await self.run_to_card(flow)
                await self.resume(flow)
            flow.ok = True
        except Exception as exc:
            flow.problem = f"{type(exc).__name__}: {exc}"

    # -- checking ---------------------------------------------------------------------------
    async def check(self, flow: Flow, expected: dict[str, Any]) -> str:
        """'' when the thread is finished with the expected state and one answered card."""
        if not flow.thread_id:
            return "no thread"
        server = flow.index % len(self.servers)
        view = await self.view(flow, server)
        if view is None:
            return "GET failed"
        if view["status"] != "finished":
            return f"status {view['status']}"
        if normal_state(view["state"]) != expected:
            return "state differs from the reference run"
        response = await self.call(server, "GET", f"/threads/{flow.thread_id}/history")
        if response is None or response.status_code != 200:
            return "history failed"
        rows = response.json()["checkpoints"]
        cards = {row["card"]["interrupt_id"] for row in rows if row.get("card")}
        answered = [row["answers"] for row in rows if row.get("answers")]
        if len(cards) != 1:
            return f"{len(cards)} cards in the history"
        if answered != [demo.ANSWERS]:
            return f"{len(answered)} answered cards in the history"
        return ""


def _error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return response.text[:40]


def _backoff(attempt: int) -> float:
    return min(0.1 * 2**attempt, 3.0)


def normal_state(state: dict[str, Any]) -> dict[str, Any]:
    """A finished thread's state without per-run ids and timings."""
    normal = {k: v for k, v in state.items() if k not in STATE_KEYS_IGNORED}
    attempt = state.get("attempt") or {}
    normal["attempt"] = {k: attempt.get(k) for k in ATTEMPT_KEYS}
    normal["attempt"]["tool_calls"] = [  # durations and result refs differ from run to run
        {k: v for k, v in call.items() if k not in ("ms", "ref")}
        for call in attempt.get("tool_calls") or []
    ]
    return normal


def reference_state() -> dict[str, Any]:
    """The demo run to its card and resumed in this process: what every thread must end as."""
    settings = Settings(model=f"scripted:{demo.SCRIPT}", files_root=str(demo.FILES))
    with SkillDeck(
        [builtin_skills_dir() / "litigation-intake"], checkpointer="memory://", settings=settings
    ) as deck:
        paused = deck.run(demo.INPUT, context=demo.CONTEXT, matter_id=demo.MATTER_ID, user_id=USER)
        done = deck.run(Resume(paused.thread_id, demo.ANSWERS))
    if done.status != "finished":
        raise RuntimeError(f"the reference run ended {done.status}: {done.error}")
    return normal_state(done.state)


# -- measurements -----------------------------------------------------------------------------
Trigger = tuple[float, str, Callable[[], Awaitable[None]]]


async def drive(
    label: str,
    servers: Sequence[Server],
    runs: int,
    concurrency: int,
    expected: dict[str, Any],
    *,
    triggers: Sequence[Trigger] = (),
    disconnect: bool = False,
) -> dict[str, Any]:
    """Run ``runs`` flows ``concurrency`` at a time; fire each trigger once its share of flows
    has finished; then check every thread."""
    client = Client(servers, disconnect=disconnect)
    flows = [Flow(i, i % len(servers), (i + 1) % len(servers)) for i in range(runs)]
    queue: asyncio.Queue[Flow] = asyncio.Queue()
    for flow in flows:
        queue.put_nowait(flow)
    fired: list[dict[str, Any]] = []
    pending = sorted(triggers, key=lambda t: t[0])
    background: list[asyncio.Task[None]] = []
    done = 0

    with progress_bar() as bar:
        task = bar.add_task(label, total=runs)

        async def fire(name: str, action: Callable[[], Awaitable[None]]) -> None:
            event = {"fault": name, "at_flow": done, "paused_threads": len(client.paused)}
            t0 = time.perf_counter()
            await action()
            event["seconds"] = round(time.perf_counter() - t0, 2)
            fired.append(event)

        async def worker() -> None:
            nonlocal done
            while not queue.empty():
                flow = queue.get_nowait()
                await client.flow(flow)
                done += 1
                bar.advance(task)
                while pending and done >= pending[0][0] * runs:
                    _, name, action = pending.pop(0)
                    background.append(asyncio.create_task(fire(name, action)))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        await asyncio.gather(*background)

    log(f"{label}: {runs} flows in {wall:.1f} s; checking every thread")
    sem = asyncio.Semaphore(concurrency)

    async def check(flow: Flow) -> str:
        async with sem:
            return flow.problem or await client.check(flow, expected)

    problems = await asyncio.gather(*(check(f) for f in flows))
    await client.aclose()
    card = [f.card_ms for f in flows if f.card_ms is not None]
    finish = [f.done_ms for f in flows if f.done_ms is not None]
    bad = Counter(p for p in problems if p)
    result: dict[str, Any] = {
        "flows": runs,
        "concurrency": concurrency,
        "servers": len(servers),
        "wall_s": round(wall, 2),
        "flows_per_s": round(runs / wall, 1),
        "requests": client.requests,
        "run_to_card_ms": percentiles(card),
        "resume_to_done_ms": percentiles(finish),
        "failed_requests": sum(client.failures.values()),
        "failures": dict(client.failures.most_common()),
        "flows_retried": sum(1 for f in flows if f.retries),
        "retries": sum(f.retries for f in flows),
        "client_saw": dict(sorted(client.seen.items())),
        "finished_as_expected": runs - sum(bad.values()),
        "lost_or_wrong": sum(bad.values()),
        "problems": dict(bad.most_common(5)),
        "problem_threads": [f.thread_id for f, p in zip(flows, problems, strict=True) if p][:5],
        "faults": fired,
    }
    if bad:
        log(f"[red]{label}: {sum(bad.values())} threads wrong: {dict(bad.most_common(5))}[/red]")
    return result


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan")}
    ordered = sorted(values)

    def rank(q: float) -> float:  # nearest rank
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(rank(0.95), 1),
        "p99": round(rank(0.99), 1),
    }


def start_all(servers: Sequence[Server]) -> None:
    """Start the servers at once (each takes a few seconds to import and open its pool)."""
    import threading

    errors: list[BaseException] = []

    def start(server: Server) -> None:
        try:
            server.start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def workdir(tmp: Path, name: str) -> Path:
    work = tmp / name
    work.mkdir()
    (work / "keys.json").write_text(json.dumps({hash_key(KEY): USER}), "utf-8")
    return work


def measure(
    label: str,
    servers: Sequence[Server],
    args: argparse.Namespace,
    expected: dict[str, Any],
    runs: int,
    **kwargs: Any,
) -> dict[str, Any]:
    start_all(servers)
    try:
        result = asyncio.run(drive(label, servers, runs, args.concurrency, expected, **kwargs))
    finally:
        for server in servers:
            server.stop()
    result["server_start_s"] = [round(t, 2) for s in servers for t in s.start_s]
    return result


def kill_and_restart(server: Server) -> Callable[[], Awaitable[None]]:
    async def action() -> None:
        server.kill()
        log(f"killed {server.name} (kill -9); starting it again on port {server.port}")
        await asyncio.to_thread(server.start)
        log(f"{server.name} is back after {server.start_s[-1]:.1f} s")

    return action


def pg_restart(pg: Postgres) -> Callable[[], Awaitable[None]]:
    async def action() -> None:
        log("restarting PostgreSQL (pg_ctl restart)")
        seconds = await asyncio.to_thread(pg.restart)
        log(f"PostgreSQL restarted in {seconds:.1f} s")

    return action


def measure_deltas(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Time to the first event, the first ``delta`` and the run's end (its card, or done),
    with ``stream_deltas`` off and on, interleaved, one flow at a time on one server. The model
    is ``SKILLDECK_MODEL`` when set (a real endpoint: SKILLDECK_BASE_URL), else the demo's
    cassette; ``schema`` output mode, where replies are text to stream."""
    work = workdir(tmp, "deltas")
    model = os.environ.get("SKILLDECK_MODEL")
    server = Server("d1", f"sqlite:///{work / 'checkpoints.sqlite'}", work, model)
    os.environ["SKILLDECK_OUTPUT_MODE"] = "schema"
    server.start()
    headers = {"Authorization": f"Bearer {KEY}"}
    times: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}}
    try:
        with httpx.Client(base_url=server.url, headers=headers, timeout=600) as http:
            for i in range(args.delta_runs * 2):
                mode = "on" if i % 2 else "off"
                thread = http.post("/threads").json()["thread_id"]
                body = {"input": demo.INPUT, "context": "matter", "matter_id": demo.MATTER_ID,
                        "stream_deltas": mode == "on"}  # fmt: skip
                seen: dict[str, float] = {}
                t0 = time.perf_counter()
                with http.stream("POST", f"/threads/{thread}/runs", json=body) as response:
                    for line in response.iter_lines():
                        if not line.startswith("event: "):
                            continue
                        at = (time.perf_counter() - t0) * 1000
                        seen.setdefault("first_event", at)
                        if line == "event: delta":
                            seen.setdefault("first_delta", at)
                        if line in ("event: card", "event: done", "event: error"):
                            seen["end"] = at
                for what, at in seen.items():
                    times[mode].setdefault(what, []).append(at)
                log(f"deltas {mode}: run {i // 2 + 1}: {seen}")
    finally:
        server.stop()
        os.environ.pop("SKILLDECK_OUTPUT_MODE", None)
    out = {
        mode: {f"{what}_ms": round(statistics.median(v), 1) for what, v in runs.items()}
        for mode, runs in times.items()
    }
    return {"model": model or "scripted (the demo's cassette)", "runs": args.delta_runs, **out}


HOG_KEY = "sdk_bench_service_hog_key_0123456789ab"


def _bundle(root: Path, name: str, meta: dict[str, Any], data: dict[str, Any]) -> None:
    folder = root / name
    (folder / "assets").mkdir(parents=True)
    meta = {"name": name, "description": f"bench skill {name}", **meta}
    (folder / "skill.meta.json").write_text(json.dumps(meta), "utf-8")
    schema = {"properties": {"data": {"properties": data}}}
    (folder / "assets" / "output_schema.json").write_text(json.dumps(schema), "utf-8")
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: x\n---\nGo.\n", "utf-8")


def hold_skill(work: Path, hold_s: float) -> tuple[Path, Path]:
    """Skills of context ``hold`` that hold a worker: ``hold-start`` takes a quick step (so a
    run's first event says it started), then ``hold``'s one model turn takes ``hold_s``
    seconds; and a script with their turns and the demo's: (skills folder, script)."""
    skills = work / "skills"
    _bundle(
        skills,
        "hold-start",
        {"triggers": {"contexts": ["hold"], "state_conditions": ["state.started != true"]},
         "priority": 1},
        {"started": {"type": "boolean"}},
    )  # fmt: skip
    _bundle(
        skills,
        "hold",
        {"triggers": {"contexts": ["hold"]}, "requires": {"all": ["state.started == true"]}},
        {"note": {"type": "string"}},
    )
    script = yaml.safe_load(demo.SCRIPT.read_text("utf-8"))

    def turn(action: str, data: dict[str, Any]) -> dict[str, Any]:
        return {"response": "ok", "profile": {}, "data": data, "control": {"action": action}}

    script["skills"]["hold-start"] = [{"output": turn("continue", {"started": True})}]
    script["skills"]["hold"] = [{"output": turn("finish", {}), "latency_s": hold_s}]
    path = work / "script.json"
    path.write_text(json.dumps(script), "utf-8")
    return skills, path


async def first_event_ms(http: httpx.AsyncClient, body: dict[str, Any]) -> float:
    """A new thread's run: ms from the request to its first event (read on to its end, so the
    user has no run left going on)."""
    thread = (await http.post("/threads")).raise_for_status().json()["thread_id"]
    first = None
    t0 = time.perf_counter()
    async with http.stream("POST", f"/threads/{thread}/runs", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and line.startswith("event: "):
                first = (time.perf_counter() - t0) * 1000
    if first is None:
        raise RuntimeError(f"thread {thread}: the run's stream had no event")
    return first


class Hog:
    """One user keeping ``queued`` runs waiting behind the ones going on: each run holds a
    worker; whenever one of them starts (its first event), another is queued."""

    def __init__(self, url: str, queued: int, runs_per_user: int) -> None:
        self.target = queued + runs_per_user
        limits = httpx.Limits(max_connections=self.target + 50, max_keepalive_connections=50)
        self.http = httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {HOG_KEY}"}, timeout=None,
            limits=limits,
        )  # fmt: skip
        self.accepted = self.started = self.refused = 0
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def queued(self) -> int:
        return self.accepted - self.started

    def spawn(self) -> None:
        task = asyncio.create_task(self.one())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def one(self) -> None:
        thread = (await self.http.post("/threads")).raise_for_status().json()["thread_id"]
        body = {"context": "hold"}
        async with self.http.stream("POST", f"/threads/{thread}/runs", json=body) as response:
            if response.status_code != 200:
                self.refused += 1
                return
            self.accepted += 1
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    self.started += 1
                    self.spawn()  # keep the queue full
                    return  # gone: the run goes on in the server

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.http.aclose()


def measure_fairness(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Another user's time to the first event of a run (the demo) on a server where one user
    holds ``--hog-queued`` runs queued, and on an idle server with the same settings,
    ``--fair-trials`` each, interleaved."""
    work = workdir(tmp, "fairness")
    keys = {hash_key(KEY): USER, hash_key(HOG_KEY): "hog"}
    (work / "keys.json").write_text(json.dumps(keys), "utf-8")
    skills, script = hold_skill(work, args.hold_s)
    from skilldeck.settings import Settings as Defaults

    per_user = Defaults.model_fields["runs_per_user"].default  # the default is what we measure
    options = [
        *("--skills", str(skills)),
        *("--queued-runs-per-user", str(args.hog_queued)),
        *("--threads-per-minute", "100000"),
    ]
    servers = {
        name: Server(name, f"sqlite:///{work / name}.sqlite", work, f"scripted:{script}", options)
        for name in ("idle", "loaded")
    }
    start_all(list(servers.values()))
    probe = {"input": demo.INPUT, "context": demo.CONTEXT, "matter_id": demo.MATTER_ID}

    async def main() -> dict[str, Any]:
        hog = Hog(servers["loaded"].url, args.hog_queued, per_user)
        times: dict[str, list[float]] = {"idle": [], "loaded": []}
        queued_at_trials: list[int] = []
        headers = {"Authorization": f"Bearer {KEY}"}
        clients = {
            name: httpx.AsyncClient(base_url=server.url, headers=headers, timeout=120)
            for name, server in servers.items()
        }
        try:
            for http in clients.values():  # warm both (imports, first connections)
                for _ in range(3):
                    await first_event_ms(http, probe)
            for _ in range(hog.target):
                hog.spawn()
            deadline = time.monotonic() + 120
            while hog.queued < args.hog_queued or hog.started < per_user:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the hog got {hog.accepted} runs accepted, not more")
                await asyncio.sleep(0.1)
            log(f"fairness: one user holds {hog.queued} runs queued, {hog.started} started")
            for trial in range(args.fair_trials * 2):
                pair = ("idle", "loaded") if trial // 2 % 2 == 0 else ("loaded", "idle")
                name = pair[trial % 2]
                if name == "loaded":
                    queued_at_trials.append(hog.queued)
                times[name].append(await first_event_ms(clients[name], probe))
            refused = hog.refused
        finally:
            await hog.close()
            for http in clients.values():
                await http.aclose()
        out: dict[str, Any] = {name: percentiles(v) for name, v in times.items()}
        out["ratio_p50"] = round(out["loaded"]["p50"] / out["idle"]["p50"], 2)
        out["ratio_p95"] = round(out["loaded"]["p95"] / out["idle"]["p95"], 2)
        out["hog_queued_min"] = min(queued_at_trials)
        out["hog_refused"] = refused
        return out

    try:
        result = asyncio.run(main())
    finally:
        for server in servers.values():
            server.kill()  # a graceful stop would wait for every queued run
    return {
        "trials": args.fair_trials,
        "runs_per_user": per_user,
        "hog_queued": args.hog_queued,
        "hold_s": args.hold_s,
        **result,
    }


async def health_ms(
    http: httpx.AsyncClient, url: str, n: int, every_s: float = 0.02
) -> list[float]:
    """``n`` ``GET /health``, one every ``every_s`` seconds, each on a new connection: ms
    each."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        response = await http.get(url)
        took = time.perf_counter() - t0
        times.append(took * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"/health answered {response.status_code}")
        await asyncio.sleep(max(0.0, every_s - took))
    return times


class SlowSenders:
    """Clients that send a request slowly, a byte or a header line a second, and connect again
    whenever the server cuts them off: ``n`` that may stay connected a while (half send a body
    with a key, half send headers) and ``keyless`` that send a body without a key."""

    def __init__(self, port: int, n: int, keyless: int) -> None:
        self.port = port
        kinds = ["body with key", "headers"] * (n // 2) + ["body with key"] * (n % 2)
        self.kinds = kinds + ["body without key"] * keyless
        self.connected: Counter[str] = Counter()
        self.cut_off: Counter[str] = Counter()
        self.tasks: list[asyncio.Task[None]] = []

    @property
    def staying(self) -> int:
        """How many of those that may stay connected are."""
        return self.connected["body with key"] + self.connected["headers"]

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self.sender(kind)) for kind in self.kinds]

    def head(self, kind: str) -> bytes:
        if kind == "headers":
            return b"POST /threads HTTP/1.1\r\nHost: x\r\n"
        auth = f"Authorization: Bearer {KEY}\r\n" if kind == "body with key" else ""
        return (
            f"POST /threads/t/runs HTTP/1.1\r\nHost: x\r\n{auth}"
            "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"
        ).encode()

    async def sender(self, kind: str) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            self.connected[kind] += 1
            closed = asyncio.create_task(reader.read())  # until the server closes it
            try:
                writer.write(self.head(kind))
                while not closed.done():
                    writer.write(b"x-slow: 1\r\n" if kind == "headers" else b" ")
                    await writer.drain()
                    await asyncio.wait([closed], timeout=1.0)
                self.cut_off[kind] += 1
            except OSError:
                self.cut_off[kind] += 1
            finally:
                self.connected[kind] -= 1
                closed.cancel()
                writer.close()
            # Then again: at once if it may stay a while, else after a pause (not a flood).
            await asyncio.sleep(0.5 if kind == "body without key" else 0.0)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


SLOW_KINDS = ("body with key", "headers", "body without key")


def slow_sender_process(
    port: int, n: int, keyless: int, go: Any, stop: Any, staying: Any, cut_off: Any
) -> None:
    """The slow senders, in a process of their own (so the client that times ``/health`` has
    an event loop to itself): they connect once ``go`` is set, publish how many stay connected
    in ``staying`` until ``stop`` is set, then how often each kind was cut off in ``cut_off``."""

    async def main() -> None:
        senders = SlowSenders(port, n, keyless)
        await asyncio.to_thread(go.wait)
        senders.start()
        while not stop.is_set():
            staying.value = senders.staying
            await asyncio.sleep(0.05)
        await senders.stop()
        for i, kind in enumerate(SLOW_KINDS):
            cut_off[i] = senders.cut_off[kind]

    asyncio.run(main())


def measure_slow(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """``/health`` latency while ``--slow-senders`` slow clients are connected, and before."""
    import multiprocessing

    work = workdir(tmp, "slow")
    server = Server("slow", f"sqlite:///{work / 'checkpoints.sqlite'}", work)
    server.start()
    spawn = multiprocessing.get_context("spawn")
    go, stop = spawn.Event(), spawn.Event()
    staying, cut_off = spawn.Value("i", 0), spawn.Array("i", len(SLOW_KINDS))
    child = spawn.Process(
        target=slow_sender_process,
        args=(server.port, args.slow_senders, args.keyless_senders, go, stop, staying, cut_off),
    )
    child.start()

    async def main() -> dict[str, Any]:
        limits = httpx.Limits(max_keepalive_connections=0)  # a new connection each time
        async with httpx.AsyncClient(timeout=30, limits=limits) as http:
            url = f"{server.url}/health"
            every = args.slow_window_s / args.health_probes
            await health_ms(http, url, 20)  # warm
            before = await health_ms(http, url, args.health_probes, every)
            go.set()
            deadline = time.monotonic() + 60
            while staying.value < args.slow_senders:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {staying.value} slow senders connected")
                await asyncio.sleep(0.1)
            connected: list[int] = []
            during: list[float] = []
            for _ in range(args.health_probes):
                connected.append(staying.value)
                during.extend(await health_ms(http, url, 1, every))
        return {
            "before_ms": percentiles(before),
            "during_ms": percentiles(during),
            "during_max_ms": round(max(during), 1),
            "slow_senders_connected_min": min(connected),
            "slow_senders_connected_median": statistics.median(connected),
        }

    try:
        result = asyncio.run(main())
    finally:
        stop.set()
        go.set()
        child.join(60)
        server.kill()
    return {
        "slow_senders": args.slow_senders,
        "keyless_senders": args.keyless_senders,
        "probes": args.health_probes,
        "window_s": args.slow_window_s,
        **result,
        "cut_off": dict(zip(SLOW_KINDS, cut_off[:], strict=True)),
    }


# -- peers: one skilldeck serve against langgraph dev ----------------------------------------
#: LangGraph's own server lives in a virtualenv of its own (``langgraph-api`` pins versions the
#: dev tools do not share), made as the README's "LangGraph's server" block makes it, with this
#: checkout installed editable so that the server runs the code measured here (one that exists
#: already is used as it is).
LANGGRAPH_VENV = ROOT / ".venv-langgraph"
LANGGRAPH_CLI = "langgraph-cli[inmem]>=0.4,<0.5"
LANGGRAPH_GRAPH = "skilldeck"  # the graph's id in langgraph.json
PEERS = ("skilldeck", "langgraph")
PG_PAIR = "skilldeck ×2 + PostgreSQL"


def langgraph_venv() -> Path:
    """``.venv-langgraph`` in the checkout, made on first use (a few minutes)."""
    langgraph = LANGGRAPH_VENV / "bin" / "langgraph"
    if not langgraph.exists():
        log(f"making {LANGGRAPH_VENV} with {LANGGRAPH_CLI} and this checkout (editable)")
        subprocess.run([sys.executable, "-m", "venv", str(LANGGRAPH_VENV)], check=True)
        pip = [str(LANGGRAPH_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, LANGGRAPH_CLI, "-e", str(ROOT)], check=True)
    return LANGGRAPH_VENV


class LangGraphDev:
    """``langgraph dev`` serving the shipped ``langgraph.json`` with the demo's settings (the
    README's block): the scripted model, the demo's files, the litigation-intake skill, the
    bench user's API key and matter; its state in ``work``."""

    def __init__(self, work: Path, venv: Path, jobs: int) -> None:
        self.work, self.venv, self.jobs = work, venv, jobs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        skill = str(builtin_skills_dir() / "litigation-intake")
        matters = f"sqlite:///{self.work / 'matters.sqlite'}"
        own_demo_matter(matters)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDECK_")}
        env.update(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            VIRTUAL_ENV=str(self.venv),
            LANGGRAPH_CLI_NO_ANALYTICS="1",
            SKILLDECK_MODEL=f"scripted:{demo.SCRIPT}",
            SKILLDECK_FILES_ROOT=str(demo.FILES),
            SKILLDECK_SKILLS=skill,
            SKILLDECK_TRUSTED_SKILLS=skill,
            SKILLDECK_CHECKPOINT_URL=matters,
            SKILLDECK_API_KEYS=str(self.work / "keys.json"),
        )
        # The server resolves langgraph.json's paths against its working directory and keeps
        # its state (.langgraph_api/) there: a folder of links to the checkout's files.
        where = self.work / "langgraph-root"
        where.mkdir()
        for entry in ROOT.iterdir():
            if not entry.name.startswith("."):
                (where / entry.name).symlink_to(entry)
        command = [
            str(self.venv / "bin" / "langgraph"),
            *("dev", "--port", str(self.port)),
            *("--no-browser", "--no-reload", "--allow-blocking"),
            *("--n-jobs-per-worker", str(self.jobs)),
        ]
        with (self.work / "langgraph.log").open("ab") as out:
            self.proc = subprocess.Popen(
                command,
                env=env,
                cwd=where,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the server and its children stop with the group
            )
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"langgraph dev exited; see {self.work / 'langgraph.log'}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("langgraph dev did not answer /ok in 180 s")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@dataclass
class Timed:
    """One flow's times (ms): run request to card, resume request to done, and all of it
    (thread creation included)."""

    card_ms: float
    done_ms: float
    flow_ms: float


class LangGraphClient:
    """The demo flow through LangGraph's SDK: a thread, ``runs.wait`` to the interrupt (the
    card), ``runs.wait`` with ``Command(resume={interrupt_id: answers})`` to the end."""

    def __init__(self, url: str) -> None:
        from langgraph_sdk import get_client

        self.sdk = get_client(url=url, api_key=KEY, timeout=120)
        self.config: Any = {"configurable": {"matter_id": demo.MATTER_ID}}

    async def flow(self) -> Timed:
        t0 = time.perf_counter()
        thread = (await self.sdk.threads.create())["thread_id"]
        t1 = time.perf_counter()
        paused = await self.sdk.runs.wait(
            thread, LANGGRAPH_GRAPH, input=RUN_BODY, config=self.config
        )
        interrupts = paused.get("__interrupt__") if isinstance(paused, dict) else None
        if not interrupts:  # a server that does not return the interrupts with the values
            interrupts = (await self.sdk.threads.get_state(thread))["interrupts"]
        (card,) = interrupts
        t2 = time.perf_counter()
        resume: Any = {"resume": {card["id"]: demo.ANSWERS}}
        done = await self.sdk.runs.wait(thread, LANGGRAPH_GRAPH, command=resume, config=self.config)
        t3 = time.perf_counter()
        if not isinstance(done, dict) or done.get("status") != "finished":
            raise RuntimeError(f"thread {thread}: the resume ended {done!r:.200}")
        return Timed((t2 - t1) * 1000, (t3 - t2) * 1000, (t3 - t0) * 1000)

    async def aclose(self) -> None:
        await self.sdk.http.client.aclose()


class SkilldeckClient:
    """The same flow on ``skilldeck serve`` (the load measurements' client): ``POST /threads``,
    the run streamed to its card on one server, the resume streamed to ``done`` on the next."""

    def __init__(self, servers: Sequence[Server]) -> None:
        self.client = Client(servers)
        self.n = 0

    async def flow(self) -> Timed:
        flow = Flow(self.n, self.n % len(self.client.servers), 0)
        flow.resume_on = self.client.other(flow.run_on)
        self.n += 1
        t0 = time.perf_counter()
        await self.client.flow(flow)
        if not flow.ok or flow.card_ms is None or flow.done_ms is None:
            raise RuntimeError(f"thread {flow.thread_id}: {flow.problem}")
        return Timed(flow.card_ms, flow.done_ms, (time.perf_counter() - t0) * 1000)

    async def aclose(self) -> None:
        await self.client.aclose()


async def flows_at(client: SkilldeckClient | LangGraphClient, n: int, clients: int) -> list[Timed]:
    """``n`` flows, ``clients`` at a time."""
    out: list[Timed] = []
    left = iter(range(n))

    async def one_client() -> None:
        for _ in left:
            out.append(await client.flow())

    await asyncio.gather(*(one_client() for _ in range(clients)))
    return out


def measure_peers(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The demo flow on one ``skilldeck serve`` (SQLite) and on ``langgraph dev``, side by side:
    sequentially and with ``--peer-clients`` clients, ``--peer-flows`` flows each, in
    ``--peer-rounds`` rounds that alternate which server goes first; then the same on two
    ``skilldeck serve`` processes sharing a PostgreSQL database (run on one, resume on the
    other), interleaved with the others."""
    venv = langgraph_venv()
    work = workdir(tmp, "peers")
    one = Server(
        "peer", f"sqlite:///{work / 'checkpoints.sqlite'}", work, extra=ONE_KEY_MANY_CLIENTS
    )
    # Runs at once: its default (10) or one per client, so that no client waits in its queue.
    langgraph = LangGraphDev(work, venv, max(10, args.peer_clients))
    pg = Postgres(tmp / "pg-peers")
    pair: list[Server] = []
    try:
        if args.peer_postgres:
            pg.start()
            url = pg.database("bench_peers")
            pair = [Server(f"pg{i + 1}", url, work, extra=ONE_KEY_MANY_CLIENTS) for i in (0, 1)]
        start_all([one, *pair])
        langgraph.start()
        result = asyncio.run(_peers(args, one, langgraph, pair))
    finally:
        langgraph.stop()
        for server in (one, *pair):
            server.stop()
        pg.stop()
    return result


async def _peers(
    args: argparse.Namespace, one: Server, langgraph: LangGraphDev, pair: Sequence[Server]
) -> dict[str, Any]:
    clients: dict[str, SkilldeckClient | LangGraphClient] = {
        "skilldeck": SkilldeckClient([one]),
        "langgraph": LangGraphClient(langgraph.url),
    }
    if pair:
        clients[PG_PAIR] = SkilldeckClient(pair)
    names = list(clients)
    out: dict[str, Any] = {
        "flows": args.peer_flows,
        "rounds": args.peer_rounds,
        "langgraph": _langgraph_versions(langgraph.venv),
    }
    try:
        for client in clients.values():  # warm each: imports, connections, caches
            await flows_at(client, 3, 1)
        for mode, width in (("sequential", 1), (f"{args.peer_clients} clients", args.peer_clients)):
            times: dict[str, list[Timed]] = {name: [] for name in names}
            rates: dict[str, list[float]] = {name: [] for name in names}
            per_round = -(-args.peer_flows // args.peer_rounds)
            for r in range(args.peer_rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    t0 = time.perf_counter()
                    got = await flows_at(clients[name], per_round, width)
                    rates[name].append(len(got) / (time.perf_counter() - t0))
                    times[name].extend(got)
                log(f"peers {mode}: round {r + 1}/{args.peer_rounds} done ({', '.join(order)})")
            out[mode] = {
                name: {
                    "flows": len(times[name]),
                    "flow_ms": percentiles([t.flow_ms for t in times[name]]),
                    "run_to_card_ms": percentiles([t.card_ms for t in times[name]]),
                    "resume_to_done_ms": percentiles([t.done_ms for t in times[name]]),
                    "flows_per_s_median": round(statistics.median(rates[name]), 1),
                }
                for name in names
            }
            sd, lg = out[mode]["skilldeck"]["flow_ms"], out[mode]["langgraph"]["flow_ms"]
            out[mode]["langgraph_over_skilldeck"] = {
                q: round(lg[q] / sd[q], 2) for q in ("p50", "p95")
            }
    finally:
        for client in clients.values():
            await client.aclose()
    out["skilldeck_ahead"] = all(
        out[mode]["langgraph_over_skilldeck"][q] > 1
        for mode in out
        if isinstance(out[mode], dict) and "langgraph_over_skilldeck" in out[mode]
        for q in ("p50", "p95")
    )
    return out


def _langgraph_versions(venv: Path) -> dict[str, str]:
    """The versions of LangGraph's server packages in ``venv``."""
    code = (
        "import importlib.metadata as m\n"
        "for p in ('langgraph-cli', 'langgraph-api', 'langgraph-runtime-inmem', 'langgraph'):\n"
        "    print(p, m.version(p))\n"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def run_all(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    expected = reference_state()
    report: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "command": "python bench/service.py " + " ".join(sys.argv[1:]),
        "runs": args.runs,
        "concurrency": args.concurrency,
        "fault_runs": args.fault_runs,
        "results": {},
    }
    results = report["results"]
    t0 = time.perf_counter()
    only = set(args.only or ["A", "B", "kill", "pg_restart", "disconnect"])
    if args.skip_faults:
        only -= {"kill", "pg_restart", "disconnect"}
    # Measurements of one or two servers of their own, without PostgreSQL.
    standalone = {
        "deltas": measure_deltas,
        "fairness": measure_fairness,
        "slow": measure_slow,
        "peers": measure_peers,
    }
    for key, measure_one in standalone.items():
        if key in only:
            log(f"{key}: measuring")
            report[key] = measure_one(args, tmp)
            only.discard(key)
    if not only:
        report["wall_s"] = round(time.perf_counter() - t0, 1)
        report["ok"] = all(
            report[k].get("ok", True) for k in standalone if isinstance(report.get(k), dict)
        )
        return report
    if "A" in only:
        work = workdir(tmp, "a")
        log(f"A: 1 server + SQLite, {args.runs} flows, {args.concurrency} clients")
        url = f"sqlite:///{work / 'checkpoints.sqlite'}"
        server = Server("a1", url, work, extra=ONE_KEY_MANY_CLIENTS)
        results["A"] = measure("A: 1 server + SQLite", [server], args, expected, args.runs)

    pg = Postgres(tmp / "pg")
    pg.start()
    try:
        cases: list[tuple[str, str, int, dict[str, Any]]] = [
            ("B", "B: 2 servers + PostgreSQL", args.runs, {}),
            ("kill", "fault a: kill -9 servers", args.fault_runs, {}),
            ("pg_restart", "fault b: PostgreSQL restart", args.fault_runs, {}),
            ("disconnect", "fault c: clients disconnect", args.fault_runs, {"disconnect": True}),
        ]
        for key, label, runs, kwargs in cases:
            if key not in only:
                continue
            url = pg.database(f"bench_{key}")
            work = workdir(tmp, key)
            servers = [
                Server(f"{key}{i + 1}", url, work, extra=ONE_KEY_MANY_CLIENTS) for i in range(2)
            ]
            if key == "kill":
                kwargs["triggers"] = [
                    (0.30, "kill -9 server 1", kill_and_restart(servers[0])),
                    (0.65, "kill -9 server 2", kill_and_restart(servers[1])),
                ]
            elif key == "pg_restart":
                kwargs["triggers"] = [
                    (0.35, "pg_ctl restart", pg_restart(pg)),
                    (0.70, "pg_ctl restart", pg_restart(pg)),
                ]
            log(f"{label}: {runs} flows, {args.concurrency} clients")
            results[key] = measure(label, servers, args, expected, runs, **kwargs)
    finally:
        if args.keep:
            log(f"PostgreSQL kept: {pg.url}")
        else:
            pg.stop()
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["ok"] = all(r["lost_or_wrong"] == 0 for r in results.values())
    return report


# -- report -----------------------------------------------------------------------------------
def print_report(report: dict[str, Any]) -> None:
    wide = Console(stderr=True, width=max(160, err.width))
    if report["results"]:
        print_table(report, wide)
    print_extras(report, wide)


def print_table(report: dict[str, Any], wide: Console) -> None:
    table = Table(
        title=f"skilldeck service benchmark ({report['date']}, {report['machine']}); "
        f"{report['concurrency']} clients"
    )
    for column in ("measurement", "flows", "flows/s", "run→card p50/p95/p99 ms"):
        table.add_column(column, justify="left" if column == "measurement" else "right")
    for column in ("resume→done p50/p95/p99 ms", "failed req.", "flows retried", "lost/wrong"):
        table.add_column(column, justify="right")
    labels = {
        "A": "A: 1 server + SQLite",
        "B": "B: 2 servers + PostgreSQL (run on one, resume on the other)",
        "kill": "fault a: kill -9 server 1 at 30%, server 2 at 65%, restarted",
        "pg_restart": "fault b: PostgreSQL restarted at 35% and 70%",
        "disconnect": "fault c: clients disconnect after the first event",
    }

    def trio(p: dict[str, float]) -> str:
        return f"{p['p50']:.0f} / {p['p95']:.0f} / {p['p99']:.0f}"

    for key, row in report["results"].items():
        table.add_row(
            labels[key],
            str(row["flows"]),
            f"{row['flows_per_s']:.1f}",
            trio(row["run_to_card_ms"]),
            trio(row["resume_to_done_ms"]),
            str(row["failed_requests"]),
            str(row["flows_retried"]),
            str(row["lost_or_wrong"]),
        )
    wide.print(table)
    for key, row in report["results"].items():
        if row["failures"] or row["client_saw"] or row["faults"]:
            wide.print(f"[bold]{labels[key]}[/bold]")
            for fault in row["faults"]:
                wide.print(f"  fault: {fault}")
            for what, n in row["failures"].items():
                wide.print(f"  failed request: {what} × {n}")
            for what, n in row["client_saw"].items():
                wide.print(f"  client saw: {what} × {n}")


def print_extras(report: dict[str, Any], wide: Console) -> None:
    if "deltas" in report:
        wide.print(f"stream_deltas off / on (medians, ms): {report['deltas']}")
    if "fairness" in report:
        f = report["fairness"]
        wide.print(
            f"fairness: another user's first event, idle {f['idle']} ms, with one user holding "
            f">= {f['hog_queued_min']} runs queued {f['loaded']} ms: ratio p50 {f['ratio_p50']}, "
            f"p95 {f['ratio_p95']} ({f['trials']} trials each)"
        )
    if "slow" in report:
        s = report["slow"]
        wide.print(
            f"slow senders: /health before {s['before_ms']} ms; with >= "
            f"{s['slow_senders_connected_min']} of {s['slow_senders']} slow senders connected "
            f"{s['during_ms']} ms (max {s['during_max_ms']}); cut off: {s['cut_off']}"
        )
    if "peers" in report:
        print_peers(report["peers"], wide)
    verdict = "[green]nothing lost[/green]" if report["ok"] else "[red]threads lost or wrong[/red]"
    wide.print(f"{verdict}; wall time {report['wall_s']} s")


def print_peers(peers: dict[str, Any], wide: Console) -> None:
    table = Table(title=f"the demo flow, skilldeck serve and langgraph dev ({peers['langgraph']})")
    for column in ("clients", "server", "flows", "flow p50 / p95 ms", "run→card p50 / p95 ms"):
        table.add_column(column, justify="left" if column in ("clients", "server") else "right")
    table.add_column("resume→done p50 / p95 ms", justify="right")
    table.add_column("flows/s (median round)", justify="right")

    def pair(p: dict[str, float]) -> str:
        return f"{p['p50']:.0f} / {p['p95']:.0f}"

    for mode, rows in peers.items():
        if not (isinstance(rows, dict) and "langgraph_over_skilldeck" in rows):
            continue
        for name, row in rows.items():
            if name == "langgraph_over_skilldeck":
                continue
            table.add_row(
                mode,
                name,
                str(row["flows"]),
                pair(row["flow_ms"]),
                pair(row["run_to_card_ms"]),
                pair(row["resume_to_done_ms"]),
                f"{row['flows_per_s_median']:.1f}",
            )
        wide.print(
            f"{mode}: langgraph dev / skilldeck flow time {rows['langgraph_over_skilldeck']}"
        )
    wide.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=500, help="flows per load run (default 500)")
    parser.add_argument("--concurrency", type=int, default=50, help="clients (default 50)")
    parser.add_argument(
        "--fault-runs", type=int, default=200, help="flows per fault run (default 200)"
    )
    parser.add_argument("--skip-faults", action="store_true", help="only the two load runs")
    parser.add_argument(
        "--only",
        action="append",
        choices=[
            *("A", "B", "kill", "pg_restart", "disconnect"),
            *("deltas", "fairness", "slow", "peers"),
        ],
        help="run only these measurements (repeatable)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary directory and PostgreSQL"
    )
    parser.add_argument(
        "--delta-runs", type=int, default=5, help="runs each way for --only deltas (default 5)"
    )
    parser.add_argument(
        "--fair-trials", type=int, default=40, help="trials each way for --only fairness (40)"
    )
    parser.add_argument(
        "--hog-queued", type=int, default=100, help="runs the one user keeps queued (100)"
    )
    parser.add_argument(
        "--hold-s", type=float, default=60.0, help="seconds each of its runs holds a worker (60)"
    )
    parser.add_argument(
        "--slow-senders", type=int, default=300, help="slow clients for --only slow (300)"
    )
    parser.add_argument(
        "--keyless-senders",
        type=int,
        default=100,
        help="slow clients without a key besides them, reconnecting (100)",
    )
    parser.add_argument(
        "--health-probes", type=int, default=200, help="/health requests each way (200)"
    )
    parser.add_argument(
        "--slow-window-s",
        type=float,
        default=40.0,
        help="seconds the /health requests are spread over, each way: longer than the body "
        "deadline, so every kind of slow sender is cut off and comes back within it (40)",
    )
    parser.add_argument(
        "--peer-flows", type=int, default=96, help="flows per server and mode, --only peers (96)"
    )
    parser.add_argument(
        "--peer-rounds", type=int, default=3, help="rounds they are split in, alternating (3)"
    )
    parser.add_argument(
        "--peer-clients", type=int, default=16, help="concurrent clients, --only peers (16)"
    )
    parser.add_argument(
        "--no-peer-postgres",
        dest="peer_postgres",
        action="store_false",
        help="--only peers without two skilldeck processes on PostgreSQL",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="skilldeck-bench-service-"))
    tmp.chmod(0o755)  # the postgres user must reach the cluster's folder inside
    try:
        report = run_all(args, tmp)
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
    print_report(report)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
