"""Engine benchmark: step overhead, checkpoint growth (over steps and over one turn's tool
rounds) and cold-process resume latency.

Usage::

    python bench/engine.py [--reps 300] [--resume-reps 7] [--steps 1000] [--rounds 200] [--json]
    python bench/engine.py --tracing-only [--reps 300]   # section 6 alone

Everything is written to a temporary directory that is removed at the end. Five measurements,
all in one run so that ratios compare numbers taken on the same (noisy, shared) machine:

1. **Engine overhead**: a 10-skill chain on the ``scripted`` model, timed per skill step,
   against a bare LangGraph chain of 10 nodes on ``SqliteSaver`` with the same connection
   settings and durability. ``--reps`` pairs of runs are interleaved (alternating which goes
   first), each run on a fresh thread; the medians and their ratio are reported. Then, for
   information and in pairs of their own, the bare chain against itself with nodes that also do
   what every skill step must: one call of the same scripted model through LangChain and one
   transcript row in a ``SqliteStore`` sharing the saver's connection (a floor under any engine
   that records its model turns). When the ratio is over target, one engine run is profiled
   with cProfile.
2. **Checkpoint growth**: one thread of a single skill that bumps a counter ``--steps`` times.
   Checkpoint bytes (``checkpoints`` + ``writes`` blobs) are summed up to skill step 10 and up to
   the last step, from the same thread; the file size after a WAL truncate is reported too.
3. **One long turn**: one skill reads its ``--rounds`` reference files with
   ``skill__read_file``, one call a tool round, in a single turn, then answers. Checkpoint bytes
   (as in 2.) are summed up to the tools step of round 10 and of the last round, per round; the
   single checkpoint after each of those rounds is reported too. The turn is checkpointed at
   every step, so it must not carry the turn's calls (the transcript holds them).
4. **Resume latency**: the built-in litigation-intake demo runs to its card here; a fresh
   ``python`` process then builds a deck on the same SQLite file (timed separately) and times
   only ``deck.run(Resume(...))``.
5. **Forks**: the demo runs to its end (card answered), recording every request its model is
   sent (the messages and the call's parameters, as JSON bytes, from the model's callbacks).
   Then it is forked at every checkpoint of its thread and each fork is run to its end (its
   card answered the same way); each fork's requests must be byte-identical to the original's
   from that point on.
6. **Tracing**: the chain of 1. with tracing off and on, ``--reps`` interleaved pairs, ms per
   skill step and the ratio of the medians. Off is how a deck runs when no ``OTEL_*`` variable
   names an exporter (it found no tracer when it opened: its runs build no span). On is the
   OpenTelemetry SDK with a batch span processor exporting to memory, the whole span tree of
   each run built and exported (needs the ``otel`` extra). Measured last: once a tracer
   provider is set, every deck opened after it is traced.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict

from common import arguments, log, median, progress_bar, report_header, show_report
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage, messages_to_dict
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.store.sqlite import SqliteStore
from rich.console import Console
from rich.table import Table

import skilldeck
import skilldeck.checkpoints
import skilldeck.graph
import skilldeck.nodes
import skilldeck.skills
import skilldeck.tools
from skilldeck import Settings, SkillDeck, demo
from skilldeck.checkpoints.open import strict_serde
from skilldeck.models import build_model
from skilldeck.nodes.context import TOOLS_NODE
from skilldeck.scripted import CALL_INDEX_KEY, SKILL_KEY

CHAIN = 10
DURABILITY = "sync"  # the deck's default (Settings.durability)
DEMO_SCRIPT = demo.SCRIPT
DEMO_FILES = demo.FILES
DEMO_ANSWERS = demo.ANSWERS
TARGET_OVERHEAD = 2.0  # engine / bare, per skill step
TARGET_GROWTH = 2.0  # bytes/step at the last step / bytes/step at step 10
TARGET_TURN_GROWTH = 2.0  # bytes/round at the last tool round / bytes/round at round 10
TARGET_RESUME_MS = 100.0
TARGET_FORKS = 1.0  # share of the forks whose requests are byte-identical to the original's


def quartiles(values: list[float]) -> list[float]:
    """[p25, p75], to show the spread (the machine is shared)."""
    if len(values) < 2:
        return [round(v, 3) for v in values * 2]
    q = statistics.quantiles(values, n=4)
    return [round(q[0], 3), round(q[2], 3)]


# -- fixtures ---------------------------------------------------------------------------------
def write_bundle(root: Path, name: str, meta: Mapping[str, Any], data: Mapping[str, Any]) -> None:
    """A minimal skill bundle: meta, data schema and SKILL.md (as tests/conftest.py writes)."""
    folder = root / name
    (folder / "assets").mkdir(parents=True, exist_ok=True)
    full = {"name": name, "description": f"bench skill {name}", **meta}
    (folder / "skill.meta.json").write_text(json.dumps(full), "utf-8")
    schema = {"properties": {"data": {"properties": dict(data)}}}
    (folder / "assets" / "output_schema.json").write_text(json.dumps(schema), "utf-8")
    body = f"---\nname: {name}\ndescription: bench\n---\nDo {name}.\n"
    (folder / "SKILL.md").write_text(body, "utf-8")


def turn(data: Mapping[str, Any], response: str = "ok") -> dict[str, Any]:
    """A valid four-part output that continues the run."""
    return {
        "output": {
            "response": response,
            "profile": {},
            "data": dict(data),
            "control": {"action": "continue"},
        }
    }


def write_script(path: Path, turns: Mapping[str, list[dict[str, Any]]]) -> str:
    """A scripted-model file (JSON is valid YAML); returns the ``model`` setting for it."""
    path.write_text(json.dumps({"skills": dict(turns)}), "utf-8")
    return f"scripted:{path}"


def connect(path: Path) -> sqlite3.Connection:
    """A connection opened the way skilldeck opens its checkpointer's."""
    # isolation_level="" (implicit plain BEGIN) is what skilldeck passes; typeshed omits it.
    conn: sqlite3.Connection = sqlite3.connect(  # type: ignore[call-overload]
        path, timeout=5.0, check_same_thread=False, isolation_level=""
    )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


# -- 1. engine overhead -----------------------------------------------------------------------
def chain_deck(tmp: Path) -> SkillDeck:
    """skill_0 .. skill_9: skill_i runs once, after skill_{i-1} set ``done_{i-1}``."""
    skills = tmp / "chain-skills"
    turns: dict[str, list[dict[str, Any]]] = {}
    for i in range(CHAIN):
        name = f"skill_{i}"
        triggers: dict[str, Any] = {
            "contexts": ["chain"],
            "state_conditions": [f"state.done_{i} != true"],
        }
        meta: dict[str, Any] = {"triggers": triggers, "priority": CHAIN - i}
        if i:
            meta["requires"] = {"all": [f"state.done_{i - 1} == true"]}
        write_bundle(skills, name, meta, {f"done_{i}": {"type": "boolean"}})
        turns[name] = [turn({f"done_{i}": True}, response=f"step {i}")]
    model = write_script(tmp / "chain-script.json", turns)
    return SkillDeck(
        skills,
        checkpointer=f"sqlite:///{tmp / 'chain-engine.sqlite'}",
        settings=Settings(model=model),
    )


class _SetDone:
    """A bare node: sets one boolean key."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, state: Any) -> dict[str, Any]:
        return {self.key: True}


class _RequiredWork:
    """A bare node plus the work every skill step must do, done the cheapest way: one model
    call through LangChain (the same scripted model) and one transcript row in the store."""

    def __init__(self, key: str, skill: str, model: Any) -> None:
        self.key = key
        self.model = model.bind(response_format={"type": "json_object"})
        self.prompt = [HumanMessage(f"Do {skill}.")]
        self.meta = {SKILL_KEY: skill, CALL_INDEX_KEY: 0}

    def __call__(self, state: Any, config: RunnableConfig, store: BaseStore) -> dict[str, Any]:
        message = self.model.invoke(self.prompt, config={"metadata": self.meta})
        where = ("bench", str(config["configurable"]["thread_id"]))
        store.put(where, self.key, {"messages": messages_to_dict([message])})
        return {self.key: True}


def node_chain(
    tmp: Path, name: str, nodes: Sequence[Callable[..., Any]], *, store: bool = False
) -> tuple[Any, sqlite3.Connection]:
    """``nodes`` in a row on ``SqliteSaver`` (and a ``SqliteStore`` sharing its connection and
    lock, as a deck's does)."""
    fields: dict[str, Any] = {f"done_{i}": bool for i in range(CHAIN)}
    fields["context"] = str
    state: Any = TypedDict("BareState", fields, total=False)  # type: ignore[misc]

    graph: StateGraph[Any] = StateGraph(state)
    previous = START
    for i, node in enumerate(nodes):
        graph.add_node(f"n{i}", node)
        graph.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    graph.add_edge(previous, END)
    conn = connect(tmp / f"chain-{name}.sqlite")
    saver = SqliteSaver(conn, serde=strict_serde())
    saver.setup()
    transcripts = None
    if store:
        transcripts = SqliteStore(conn)
        transcripts.lock = saver.lock  # type: ignore[assignment]
        transcripts.setup()
    return graph.compile(checkpointer=saver, store=transcripts), conn


def bare_chain(tmp: Path) -> tuple[Any, sqlite3.Connection]:
    """10 LangGraph nodes in a row, each setting one key, on ``SqliteSaver``."""
    return node_chain(tmp, "bare", [_SetDone(f"done_{i}") for i in range(CHAIN)])


def floor_chain(tmp: Path, deck: SkillDeck) -> tuple[Any, sqlite3.Connection]:
    """The bare chain whose nodes also call the deck's model and store a transcript row."""
    model = build_model(deck.model_spec("skill_0"), deck.settings)
    nodes = [_RequiredWork(f"done_{i}", f"skill_{i}", model) for i in range(CHAIN)]
    return node_chain(tmp, "floor", nodes, store=True)


def run_engine(deck: SkillDeck) -> float:
    start = time.perf_counter()
    result = deck.run({}, context="chain", thread_id=uuid.uuid4().hex)
    elapsed = time.perf_counter() - start
    if result.status != "finished" or result.state.get(f"done_{CHAIN - 1}") is not True:
        raise RuntimeError(f"engine chain ended {result.status}: {result.error}")
    return elapsed


def run_bare(graph: Any) -> float:
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    start = time.perf_counter()
    out = graph.invoke({"context": "chain"}, config, durability=DURABILITY)
    elapsed = time.perf_counter() - start
    if out.get(f"done_{CHAIN - 1}") is not True:
        raise RuntimeError("bare chain did not reach its last node")
    return elapsed


def skilldeck_roots() -> tuple[str, ...]:
    """Source folders of skilldeck's packages (the editable install maps root folders)."""
    modules: tuple[ModuleType, ...] = (skilldeck, skilldeck.checkpoints, skilldeck.graph)
    modules += (skilldeck.nodes, skilldeck.skills, skilldeck.tools)
    return tuple(str(Path(m.__file__).parent) + os.sep for m in modules if m.__file__)


def profile_engine(deck: SkillDeck, top: int = 10) -> list[dict[str, Any]]:
    """cProfile one engine run; the ``top`` skilldeck functions by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    run_engine(deck)
    profiler.disable()
    stats: Any = pstats.Stats(profiler)  # .stats is untyped: {(file, line, func): row}
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats
    roots = skilldeck_roots()
    rows = []
    for (filename, line, func), (_, ncalls, _tt, cumtime, _) in raw.items():
        if filename.startswith(roots):
            rows.append(
                {
                    "function": f"{Path(filename).parent.name}/{Path(filename).name}:{line}"
                    f"({func})",
                    "calls": ncalls,
                    "cumulative_ms": round(cumtime * 1000, 2),
                }
            )
    rows.sort(key=lambda r: r["cumulative_ms"], reverse=True)
    return rows[:top]


def interleave(
    first: Callable[[], float], second: Callable[[], float], reps: int, label: str
) -> tuple[list[float], list[float]]:
    """``reps`` pairs of runs, alternating which goes first; ms per skill step of each."""
    times: tuple[list[float], list[float]] = ([], [])
    with progress_bar() as bar:
        task = bar.add_task(label, total=reps)
        for rep in range(reps):
            if rep % 2:
                b, a = second(), first()
            else:
                a, b = first(), second()
            times[0].append(a * 1000 / CHAIN)
            times[1].append(b * 1000 / CHAIN)
            bar.advance(task)
    return times


def bench_overhead(tmp: Path, reps: int) -> dict[str, Any]:
    deck = chain_deck(tmp)
    graph, conn = bare_chain(tmp)
    floor, floor_conn = floor_chain(tmp, deck)
    try:
        for _ in range(2):  # warm-up: imports, model build, first SQLite pages
            run_engine(deck)
            run_bare(graph)
            run_bare(floor)
        label = f"{CHAIN}-skill chain vs bare chain"
        engine, bare = interleave(lambda: run_engine(deck), lambda: run_bare(graph), reps, label)
        pair_ratios = [e / b for e, b in zip(engine, bare, strict=True)]
        # The floor is measured after, in its own pairs, so it cannot change the headline.
        label = "bare + model call + store row vs bare"
        floor_ms, floor_bare = interleave(
            lambda: run_bare(floor), lambda: run_bare(graph), reps, label
        )
        result: dict[str, Any] = {
            "skills": CHAIN,
            "reps": reps,
            "durability": DURABILITY,
            "engine_ms_per_step": round(median(engine), 3),
            "bare_ms_per_step": round(median(bare), 3),
            "engine_iqr": quartiles(engine),
            "bare_iqr": quartiles(bare),
            "ratio": round(median(engine) / median(bare), 2),
            "ratio_median_of_pairs": round(median(pair_ratios), 2),
            "floor_ms_per_step": round(median(floor_ms), 3),
            "floor_bare_ms_per_step": round(median(floor_bare), 3),
            "floor_ratio": round(median(floor_ms) / median(floor_bare), 2),
            "target": TARGET_OVERHEAD,
        }
        result["pass"] = result["ratio"] <= TARGET_OVERHEAD
        if not result["pass"]:
            log("ratio over target: profiling one engine run")
            result["profile_top10"] = profile_engine(deck)
        return result
    finally:
        deck.close()
        conn.close()
        floor_conn.close()


# -- 6. tracing --------------------------------------------------------------------------------
def bench_tracing(tmp: Path, reps: int) -> dict[str, Any]:
    """The chain's ms per skill step with tracing off and on (see the module docstring)."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        raise SystemExit("section 6 needs the otel extra: pip install 'skilldeck[otel]'") from None
    (tmp / "off").mkdir()
    (tmp / "on").mkdir()
    off = chain_deck(tmp / "off")
    if off.traced:
        raise SystemExit(
            "unset the OTEL_* variables: the deck that should not trace found a tracer"
        )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    on = chain_deck(tmp / "on")
    try:
        assert on.traced
        for _ in range(2):  # warm-up
            run_engine(off)
            run_engine(on)
        label = f"{CHAIN}-skill chain, tracing off vs on"
        off_ms, on_ms = interleave(lambda: run_engine(off), lambda: run_engine(on), reps, label)
        provider.force_flush()
        spans = len(exporter.get_finished_spans())
    finally:
        off.close()
        on.close()
        provider.shutdown()
    return {
        "reps": reps,
        "off_ms_per_step": round(median(off_ms), 3),
        "on_ms_per_step": round(median(on_ms), 3),
        "off_iqr": quartiles(off_ms),
        "on_iqr": quartiles(on_ms),
        "ratio_on_off": round(median(on_ms) / median(off_ms), 2),
        "ratio_median_of_pairs": round(
            median([b / a for a, b in zip(off_ms, on_ms, strict=True)]), 2
        ),
        "spans_per_run": round(spans / (reps + 2), 1),
    }


def print_tracing(out: Console, tr: dict[str, Any]) -> None:
    table = Table(title=f"6. Tracing: ms per skill step (median of {tr['reps']} pairs)")
    for column in ("off", "on", "on / off", "pairs' median", "spans per run"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{tr['off_ms_per_step']:.2f}",
        f"{tr['on_ms_per_step']:.2f}",
        f"{tr['ratio_on_off']:.2f}x",
        f"{tr['ratio_median_of_pairs']:.2f}x",
        f"{tr['spans_per_run']:.0f}",
    )
    out.print(table)


# -- 2. checkpoint growth ---------------------------------------------------------------------
def counter_deck(tmp: Path, steps: int) -> tuple[SkillDeck, Path]:
    """One skill that sets ``n`` to 1, 2, ... and stops being a candidate at ``n == steps``."""
    skills = tmp / f"counter-skills-{steps}"
    meta = {
        "triggers": {
            "contexts": ["count"],
            "state_conditions": [f"state.n == null or state.n < {steps}"],
        }
    }
    write_bundle(skills, "counter", meta, {"n": {"type": "integer"}})
    turns = {"counter": [turn({"n": i + 1}, response=f"count {i + 1}") for i in range(steps)]}
    model = write_script(tmp / f"counter-script-{steps}.json", turns)
    db = tmp / f"counter-{steps}.sqlite"
    settings = Settings(model=model, max_steps=steps + 50)
    return SkillDeck(skills, checkpointer=f"sqlite:///{db}", settings=settings), db


# LangGraph numbers a thread's checkpoints -1 (the input), 0 (the input applied, the first skill
# next), then k after skill step k: a skill step's number is its LangGraph step.
_STEP = "CAST(json_extract(CAST(metadata AS TEXT), '$.step') AS INTEGER)"
_C_STEP = _STEP.replace("metadata", "c.metadata")


def checkpoint_bytes(db: sqlite3.Connection, thread_id: str, skill_step: int) -> int:
    """Checkpoint + metadata blobs up to ``skill_step``, plus the writes of those steps.

    A task's writes are stored under the checkpoint it started from, so the writes that produced
    checkpoint ``s`` sit under checkpoint ``s - 1``.
    """
    ckpt = db.execute(
        f"SELECT COALESCE(SUM(length(checkpoint) + length(metadata)), 0) FROM checkpoints "
        f"WHERE thread_id = ? AND {_STEP} <= ?",
        (thread_id, skill_step),
    ).fetchone()[0]
    writes = db.execute(
        f"SELECT COALESCE(SUM(length(w.value)), 0) FROM writes w JOIN checkpoints c "
        f"ON c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns "
        f"AND c.checkpoint_id = w.checkpoint_id WHERE w.thread_id = ? AND {_C_STEP} < ?",
        (thread_id, skill_step),
    ).fetchone()[0]
    return int(ckpt) + int(writes)


def one_checkpoint(db: sqlite3.Connection, thread_id: str, skill_step: int) -> int:
    """Bytes of the single checkpoint (+ metadata) written after ``skill_step``."""
    row = db.execute(
        f"SELECT length(checkpoint) + length(metadata) FROM checkpoints "
        f"WHERE thread_id = ? AND {_STEP} = ?",
        (thread_id, skill_step),
    ).fetchone()
    return int(row[0]) if row else 0


def step_times(db: sqlite3.Connection, thread_id: str) -> dict[int, datetime]:
    """When each checkpoint was written (its ``ts``), by skill step."""
    serde = strict_serde()
    rows = db.execute(
        f"SELECT {_STEP}, type, checkpoint FROM checkpoints WHERE thread_id = ?", (thread_id,)
    )
    return {
        int(step): datetime.fromisoformat(serde.loads_typed((kind, blob))["ts"])
        for step, kind, blob in rows
    }


def file_size_truncated(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path.stat().st_size


def run_with_progress(deck: SkillDeck, db: Path, thread_id: str, steps: int) -> Any:
    """``deck.run`` in a worker thread while the main thread polls the checkpoint table."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = deck.run({}, context="count", thread_id=thread_id)
        except BaseException as exc:  # re-raised below, in the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="counter-run")
    with progress_bar() as progress:
        task = progress.add_task(f"counter skill, {steps} steps", total=steps)
        worker.start()
        poll = sqlite3.connect(db, timeout=5.0)
        try:
            while worker.is_alive():
                worker.join(0.25)
                try:
                    (last,) = poll.execute(
                        f"SELECT COALESCE(MAX({_STEP}), 0) FROM checkpoints WHERE thread_id = ?",
                        (thread_id,),
                    ).fetchone()
                except sqlite3.OperationalError:  # a busy writer; try again next tick
                    continue
                progress.update(task, completed=min(max(int(last), 0), steps))
        finally:
            poll.close()
        progress.update(task, completed=steps)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def counter_run(tmp: Path, steps: int, *, progress: bool) -> tuple[Path, str, float]:
    """Run the counter skill for ``steps`` steps on a fresh file: (file, thread, seconds)."""
    deck, db = counter_deck(tmp, steps)
    thread_id = uuid.uuid4().hex
    try:
        start = time.perf_counter()
        if progress:
            result = run_with_progress(deck, db, thread_id, steps)
        else:
            result = deck.run({}, context="count", thread_id=thread_id)
        elapsed = time.perf_counter() - start
    finally:
        deck.close()
    if result.status != "finished" or result.state.get("n") != steps:
        raise RuntimeError(f"counter run ended {result.status} at n={result.state.get('n')}")
    return db, thread_id, elapsed


def bench_growth(tmp: Path, steps: int) -> dict[str, Any]:
    first = 10
    small_db, _, _ = counter_run(tmp, first, progress=False)
    db, thread_id, elapsed = counter_run(tmp, steps, progress=True)
    conn = sqlite3.connect(db)
    try:
        at_first = checkpoint_bytes(conn, thread_id, first) / first
        at_last = checkpoint_bytes(conn, thread_id, steps) / steps
        one_first = one_checkpoint(conn, thread_id, first)
        one_last = one_checkpoint(conn, thread_id, steps)
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        (store,) = conn.execute("SELECT COALESCE(SUM(length(value)), 0) FROM store").fetchone()
        times = step_times(conn, thread_id)
    finally:
        conn.close()
    window = min(100, steps // 10)

    def ms_per_step(a: int, b: int) -> float:
        return (times[b] - times[a]).total_seconds() * 1000 / (b - a)

    file_first = file_size_truncated(small_db) / first
    file_last = file_size_truncated(db) / steps
    row: dict[str, Any] = {
        "steps": steps,
        "checkpoints_in_thread": count,
        "bytes_per_step_at_10": round(at_first, 1),
        "bytes_per_step_at_last": round(at_last, 1),
        "ratio": round(at_last / at_first, 3),
        "checkpoint_bytes_at_10": one_first,
        "checkpoint_bytes_at_last": one_last,
        "file_bytes_per_step_at_10": round(file_first, 1),
        "file_bytes_per_step_at_last": round(file_last, 1),
        "file_ratio": round(file_last / file_first, 3),
        "store_bytes_per_step": round(store / steps, 1),
        "ms_per_step": round(elapsed * 1000 / steps, 2),
        "timing_window": window,
        "ms_per_step_first_window": round(ms_per_step(1, 1 + window), 2),
        "ms_per_step_last_window": round(ms_per_step(steps - window, steps), 2),
        "target": TARGET_GROWTH,
    }
    row["pass"] = row["ratio"] <= TARGET_GROWTH
    return row


# -- 3. one long turn -------------------------------------------------------------------------
def reader_deck(tmp: Path, rounds: int) -> tuple[SkillDeck, Path]:
    """One skill that reads its ``rounds`` reference files, one a tool round, in one turn, then
    sets ``read`` (and is no longer a candidate)."""
    skills = tmp / f"reader-skills-{rounds}"
    meta = {
        "triggers": {"contexts": ["read"], "state_conditions": ["state.read == null"]},
        "tools": ["skill__read_file"],
        "execution_config": {"max_tool_rounds": rounds},
    }
    write_bundle(skills, "reader", meta, {"read": {"type": "integer"}})
    references = skills / "reader" / "references"
    references.mkdir()
    paths = [f"references/note-{i:03d}.md" for i in range(rounds)]
    for i, path in enumerate(paths):
        (skills / "reader" / path).write_text(f"Note {i}: nothing else.\n", "utf-8")
    calls = [{"tool_calls": [{"name": "skill__read_file", "args": {"path": p}}]} for p in paths]
    answer = turn({"read": rounds}, response=f"read {rounds} notes")
    model = write_script(tmp / f"reader-script-{rounds}.json", {"reader": [*calls, answer]})
    db = tmp / f"reader-{rounds}.sqlite"
    settings = Settings(model=model, max_steps=2 * rounds + 50)
    return SkillDeck(skills, checkpointer=f"sqlite:///{db}", settings=settings), db


def bench_long_turn(tmp: Path, rounds: int) -> dict[str, Any]:
    deck, db = reader_deck(tmp, rounds)
    thread_id = uuid.uuid4().hex
    try:
        start = time.perf_counter()
        result = deck.run({}, context="read", thread_id=thread_id)
        elapsed = time.perf_counter() - start
        # The LangGraph step of each tool round's tools step, in order.
        steps = [r["step"] for r in deck.history(thread_id) if TOOLS_NODE in r["ran"]]
    finally:
        deck.close()
    if result.status != "finished" or len(steps) != rounds:
        raise RuntimeError(f"reader run ended {result.status} after {len(steps)} tool rounds")
    first = 10
    conn = sqlite3.connect(db)
    try:
        at_first = checkpoint_bytes(conn, thread_id, steps[first - 1]) / first
        at_last = checkpoint_bytes(conn, thread_id, steps[-1]) / rounds
        one_first = one_checkpoint(conn, thread_id, steps[first - 1])
        one_last = one_checkpoint(conn, thread_id, steps[-1])
        times = step_times(conn, thread_id)
    finally:
        conn.close()
    window = min(first, rounds // 10)

    def ms_per_round(a: int, b: int) -> float:
        return (times[steps[b]] - times[steps[a]]).total_seconds() * 1000 / (b - a)

    row: dict[str, Any] = {
        "rounds": rounds,
        "bytes_per_round_at_10": round(at_first, 1),
        "bytes_per_round_at_last": round(at_last, 1),
        "ratio": round(at_last / at_first, 3),
        "checkpoint_bytes_at_10": one_first,
        "checkpoint_bytes_at_last": one_last,
        "checkpoint_ratio": round(one_last / one_first, 3),
        "ms_per_round": round(elapsed * 1000 / rounds, 2),
        "timing_window": window,
        "ms_per_round_first_window": round(ms_per_round(0, window), 2),
        "ms_per_round_last_window": round(ms_per_round(rounds - 1 - window, rounds - 1), 2),
        "target": TARGET_TURN_GROWTH,
    }
    row["pass"] = row["ratio"] <= TARGET_TURN_GROWTH and row["checkpoint_ratio"] <= (
        TARGET_TURN_GROWTH
    )
    return row


# -- 4. resume latency from a new process -----------------------------------------------------
_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from skilldeck import Resume, Settings, SkillDeck, demo
t1 = time.perf_counter()
url, model, files, cold, warm, answers = sys.argv[1:7]
deck = SkillDeck(checkpointer=url, settings=Settings(model=model, files_root=files))
t2 = time.perf_counter()
answers = json.loads(answers)
t3 = time.perf_counter()
first = deck.run(Resume(cold, answers))
t4 = time.perf_counter()
second = deck.run(Resume(warm, answers))
t5 = time.perf_counter()
deck.close()
print(json.dumps({
    "import_ms": (t1 - t0) * 1000,
    "construct_ms": (t2 - t1) * 1000,
    "resume_ms": (t4 - t3) * 1000,
    "warm_resume_ms": (t5 - t4) * 1000,
    "status": [first.status, second.status],
}))
"""


def demo_deck(db: Path) -> SkillDeck:
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES))
    return SkillDeck(checkpointer=f"sqlite:///{db}", settings=settings)


def start_demo(deck: SkillDeck) -> str:
    result = deck.run(
        {"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter", user_id="demo"
    )
    if result.status != "interrupted":
        raise RuntimeError(f"demo run ended {result.status}, expected a card: {result.error}")
    return result.thread_id


def bench_resume(tmp: Path, reps: int) -> dict[str, Any]:
    db = tmp / "demo.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDECK_")}
    samples: list[dict[str, Any]] = []
    for rep in range(reps):
        with demo_deck(db) as deck:  # the parent's connections close before the child runs
            cold, warm = start_demo(deck), start_demo(deck)
        args = [f"sqlite:///{db}", f"scripted:{DEMO_SCRIPT}", str(DEMO_FILES), cold, warm]
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, *args, json.dumps(DEMO_ANSWERS)],
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
            check=False,
        )
        if proc.returncode:
            raise RuntimeError(f"resume child failed:\n{proc.stderr}")
        sample = json.loads(proc.stdout.strip().splitlines()[-1])
        if sample["status"] != ["finished", "finished"]:
            raise RuntimeError(f"resumed demo ended {sample['status']}")
        samples.append(sample)
        log(
            f"resume rep {rep + 1}/{reps}: resume {sample['resume_ms']:.1f} ms, "
            f"construct {sample['construct_ms']:.1f} ms"
        )
    result: dict[str, Any] = {
        "reps": reps,
        "resume_ms": round(median([s["resume_ms"] for s in samples]), 1),
        "resume_ms_max": round(max(s["resume_ms"] for s in samples), 1),
        "warm_resume_ms": round(median([s["warm_resume_ms"] for s in samples]), 1),
        "construct_ms": round(median([s["construct_ms"] for s in samples]), 1),
        "import_ms": round(median([s["import_ms"] for s in samples]), 1),
        "target_ms": TARGET_RESUME_MS,
    }
    result["pass"] = result["resume_ms"] <= TARGET_RESUME_MS
    return result


# -- 5. forks ---------------------------------------------------------------------------------
class _Requests(BaseCallbackHandler):
    """What the deck's model is sent, call by call: the messages and the call's parameters as
    JSON bytes."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        # A message's id is LangChain's run id, made anew by each run and sent to no endpoint.
        sent = [[m.model_copy(update={"id": None}) for m in batch] for batch in messages]
        body = {
            "messages": [messages_to_dict(batch) for batch in sent],
            "params": kwargs.get("invocation_params"),
        }
        self.sent.append(json.dumps(body, sort_keys=True, default=str).encode())


def bench_forks(tmp: Path) -> dict[str, Any]:
    requests = _Requests()
    with demo_deck(tmp / "forks.sqlite") as deck:
        paused = deck.run(
            {"documents": ["complaint.txt"]},
            context="matter",
            matter_id="demo-matter",
            user_id="demo",
            callbacks=[requests],
        )
        thread = paused.thread_id
        done = deck.run(skilldeck.Resume(thread, DEMO_ANSWERS), callbacks=[requests])
        if done.status != "finished":
            raise RuntimeError(f"demo run ended {done.status}: {done.error}")
        original = list(requests.sent)
        checkpoints = [r["checkpoint_id"] for r in deck.history(thread)]
        identical, sent, elapsed = 0, 0, []
        with progress_bar() as bar:
            task = bar.add_task(f"a fork at each of {len(checkpoints)} checkpoints", total=None)
            for checkpoint in checkpoints:
                start = len(requests.sent)
                began = time.perf_counter()
                forked = deck.fork(thread, checkpoint, callbacks=[requests])
                if forked.status == "interrupted":
                    forked = deck.run(
                        skilldeck.Resume(forked.thread_id, DEMO_ANSWERS), callbacks=[requests]
                    )
                elapsed.append((time.perf_counter() - began) * 1000)
                if forked.status != "finished":
                    raise RuntimeError(f"fork at {checkpoint} ended {forked.status}")
                theirs = requests.sent[start:]
                sent += len(theirs)
                # From that point on, the original sent exactly these.
                identical += theirs == original[len(original) - len(theirs) :]
                bar.advance(task)
    result: dict[str, Any] = {
        "checkpoints": len(checkpoints),
        "original_requests": len(original),
        "fork_requests": sent,
        "identical_forks": identical,
        "share": round(identical / len(checkpoints), 3),
        "ms_per_fork": round(median(elapsed), 1),
        "target": TARGET_FORKS,
    }
    result["pass"] = result["share"] >= TARGET_FORKS
    return result


# -- report -----------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "[green]PASS[/green]" if ok else "[red]FAIL[/red]"


def print_report(report: dict[str, Any]) -> None:
    out = Console(width=None if sys.stdout.isatty() else 132)
    ov, gr, rs = report["overhead"], report["growth"], report["resume"]
    lt, fk = report["long_turn"], report["forks"]
    n, r = gr["steps"], lt["rounds"]
    rows: list[tuple[str, ...]] = [
        (
            f"ms per skill step, {CHAIN}-skill chain (median of {ov['reps']})",
            f"{ov['bare_ms_per_step']:.2f}",
            f"{ov['engine_ms_per_step']:.2f}",
            f"{ov['ratio']:.2f}x",
            f"<= {TARGET_OVERHEAD:.0f}x",
            verdict(ov["pass"]),
        ),
        (
            "  bare + one model call + one store row per node (informative)",
            f"{ov['floor_bare_ms_per_step']:.2f}",
            f"{ov['floor_ms_per_step']:.2f}",
            f"{ov['floor_ratio']:.2f}x",
        ),
        (
            f"checkpoint bytes/step, step 10 -> step {n}",
            f"{gr['bytes_per_step_at_10']:.0f}",
            f"{gr['bytes_per_step_at_last']:.0f}",
            f"{gr['ratio']:.2f}x",
            f"<= {TARGET_GROWTH:.0f}x",
            verdict(gr["pass"]),
        ),
        (
            f"  one checkpoint's bytes, step 10 -> step {n}",
            str(gr["checkpoint_bytes_at_10"]),
            str(gr["checkpoint_bytes_at_last"]),
            f"{gr['checkpoint_bytes_at_last'] / gr['checkpoint_bytes_at_10']:.2f}x",
        ),
        (
            f"  file bytes/step after WAL truncate, 10 -> {n} steps",
            f"{gr['file_bytes_per_step_at_10']:.0f}",
            f"{gr['file_bytes_per_step_at_last']:.0f}",
            f"{gr['file_ratio']:.2f}x",
        ),
        (
            f"  ms/step, first -> last {gr['timing_window']} steps (informative)",
            f"{gr['ms_per_step_first_window']:.2f}",
            f"{gr['ms_per_step_last_window']:.2f}",
            f"{gr['ms_per_step_last_window'] / gr['ms_per_step_first_window']:.2f}x",
        ),
        (
            f"one turn: checkpoint bytes/round, round 10 -> round {r}",
            f"{lt['bytes_per_round_at_10']:.0f}",
            f"{lt['bytes_per_round_at_last']:.0f}",
            f"{lt['ratio']:.2f}x",
            f"<= {TARGET_TURN_GROWTH:.0f}x",
            verdict(lt["ratio"] <= TARGET_TURN_GROWTH),
        ),
        (
            f"  one checkpoint's bytes, after round 10 -> round {r}",
            str(lt["checkpoint_bytes_at_10"]),
            str(lt["checkpoint_bytes_at_last"]),
            f"{lt['checkpoint_ratio']:.2f}x",
            f"<= {TARGET_TURN_GROWTH:.0f}x",
            verdict(lt["checkpoint_ratio"] <= TARGET_TURN_GROWTH),
        ),
        (
            f"  ms/round, first -> last {lt['timing_window']} rounds (informative)",
            f"{lt['ms_per_round_first_window']:.2f}",
            f"{lt['ms_per_round_last_window']:.2f}",
            f"{lt['ms_per_round_last_window'] / lt['ms_per_round_first_window']:.2f}x",
        ),
        (
            f"resume ms, new process (median of {rs['reps']})",
            "",
            f"{rs['resume_ms']:.1f}",
            f"max {rs['resume_ms_max']:.1f}",
            f"<= {TARGET_RESUME_MS:.0f} ms",
            verdict(rs["pass"]),
        ),
        ("  second resume in the same process", "", f"{rs['warm_resume_ms']:.1f}"),
        (
            "  deck construction (not in target)",
            "",
            f"{rs['construct_ms']:.1f}",
            f"import {rs['import_ms']:.0f} ms",
        ),
        (
            f"forks of the demo at each of its {fk['checkpoints']} checkpoints: requests "
            "byte-identical to the original's",
            f"{fk['original_requests']} requests",
            f"{fk['identical_forks']} of {fk['checkpoints']} forks",
            f"{fk['share']:.0%}",
            f">= {TARGET_FORKS:.0%}",
            verdict(fk["pass"]),
        ),
        (
            "  requests the forks sent; ms per fork run (median)",
            "",
            str(fk["fork_requests"]),
            f"{fk['ms_per_fork']:.1f} ms",
        ),
    ]
    table = Table(title=f"skilldeck engine benchmark ({report['date']}, {report['machine']})")
    for column in ("measure", "baseline / first", "skilldeck / last", "ratio", "target", ""):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for row in rows:
        table.add_row(*row)
    out.print(table)
    ei, bi = ov["engine_iqr"], ov["bare_iqr"]
    out.print(
        f"overhead: p25-p75 engine {ei[0]:.2f}-{ei[1]:.2f}, bare {bi[0]:.2f}-{bi[1]:.2f} ms/step; "
        f"median of per-repetition ratios {ov['ratio_median_of_pairs']:.2f}x"
    )
    out.print(
        f"{n}-step run: {gr['ms_per_step']:.2f} ms/step, {gr['checkpoints_in_thread']} "
        f"checkpoints, store (transcripts) {gr['store_bytes_per_step']:.0f} bytes/step"
    )
    if "profile_top10" in ov:
        out.print("cProfile of one engine run: top skilldeck functions by cumulative time")
        prof = Table()
        for column in ("function", "calls", "cumulative ms"):
            prof.add_column(column, justify="left" if column == "function" else "right")
        for item in ov["profile_top10"]:
            prof.add_row(item["function"], str(item["calls"]), f"{item['cumulative_ms']:.2f}")
        out.print(prof)
    print_tracing(out, report["tracing"])


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument(
        "--reps", type=int, default=300, help="interleaved overhead repetitions (default 300)"
    )
    parser.add_argument("--resume-reps", type=int, default=7, help="resume processes (default 7)")
    parser.add_argument("--steps", type=int, default=1000, help="counter steps (default 1000)")
    parser.add_argument(
        "--rounds", type=int, default=200, help="tool rounds of the long turn (default 200)"
    )
    parser.add_argument(
        "--tracing-only", action="store_true", help="run section 6 (tracing off and on) alone"
    )
    args = parser.parse_args(argv)
    if args.tracing_only:
        return tracing_only(args.reps, args.json)
    if args.steps < 10 or args.rounds < 20 or args.reps < 1 or args.resume_reps < 1:
        parser.error("--steps must be >= 10, --rounds >= 20, --reps and --resume-reps >= 1")
    report = report_header()
    with tempfile.TemporaryDirectory(prefix="skilldeck-bench-") as name:
        tmp = Path(name)
        log(f"1/6 engine overhead: {args.reps} interleaved repetitions")
        report["overhead"] = ov = bench_overhead(tmp, args.reps)
        log(f"engine {ov['engine_ms_per_step']:.2f} ms/step, bare {ov['bare_ms_per_step']:.2f}")
        log(f"2/6 checkpoint growth: {args.steps} steps")
        report["growth"] = bench_growth(tmp, args.steps)
        log(f"3/6 one long turn: {args.rounds} tool rounds")
        report["long_turn"] = lt = bench_long_turn(tmp, args.rounds)
        log(f"bytes/round {lt['bytes_per_round_at_10']:.0f} -> {lt['bytes_per_round_at_last']:.0f}")
        log(f"4/6 resume latency: {args.resume_reps} new processes")
        report["resume"] = bench_resume(tmp, args.resume_reps)
        log("5/6 forks: the demo forked at every checkpoint")
        report["forks"] = fk = bench_forks(tmp)
        log(f"{fk['identical_forks']} of {fk['checkpoints']} forks sent identical requests")
        log(f"6/6 tracing: {args.reps} interleaved pairs, off and on")
        report["tracing"] = bench_tracing(tmp, args.reps)
    return show_report(report, args.json, print_report)


def tracing_only(reps: int, as_json: bool) -> int:
    """Section 6 alone."""
    report = report_header()
    with tempfile.TemporaryDirectory(prefix="skilldeck-bench-") as name:
        report["tracing"] = bench_tracing(Path(name), reps)
    return show_report(report, as_json, lambda r: print_tracing(Console(), r["tracing"]))


if __name__ == "__main__":
    sys.exit(main())
