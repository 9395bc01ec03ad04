"""Engine benchmark: step overhead, checkpoint growth and cold-process resume latency.

Run from the repository root::

    python bench/engine.py [--reps N] [--steps 1000] [--json]

Everything is written to a temporary directory that is removed at the end. Three measurements,
all in one run so that ratios compare numbers taken on the same (noisy, shared) machine:

1. **Engine overhead**: a 10-skill chain on the ``scripted`` model, timed per skill step,
   against a bare LangGraph chain of 10 nodes on ``SqliteSaver`` with the same connection
   settings and durability. Repetitions alternate (and alternate which goes first); each uses a
   fresh thread; medians are reported.
2. **Checkpoint growth**: one thread of a single skill that bumps a counter ``--steps`` times.
   Checkpoint bytes (``checkpoints`` + ``writes`` blobs) are summed up to skill step 10 and up to
   the last step, from the same thread; the file size after a WAL truncate is reported too.
3. **Resume latency**: the built-in litigation-intake demo runs to its card here; a fresh
   ``python`` process then builds a deck on the same SQLite file (timed separately) and times
   only ``deck.resume(...)``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import skilldeck
import skilldeck.checkpoints
import skilldeck.graph
import skilldeck.nodes
import skilldeck.skills
import skilldeck.tools
from skilldeck import Settings, SkillDeck
from skilldeck.checkpoints.open import strict_serde

CHAIN = 10
DURABILITY = "sync"  # the deck's default (Settings.durability)
DEMO = Path(skilldeck.__file__).parent / "demo"
DEMO_SCRIPT = DEMO / "litigation-intake.yaml"
DEMO_FILES = DEMO / "files"
DEMO_ANSWERS = {
    "profile.defendant.name": "Acme Logistics Ltd.",
    "profile.defendant.type": "organisation",
}
TARGET_OVERHEAD = 2.0  # engine / bare, per skill step
TARGET_GROWTH = 2.0  # bytes/step at the last step / bytes/step at step 10
TARGET_RESUME_MS = 100.0

err = Console(stderr=True)


def log(message: str) -> None:
    err.print(f"[dim]{datetime.now():%H:%M:%S}[/dim] {message}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- fixtures ---------------------------------------------------------------------------------
def write_bundle(
    root: Path, name: str, meta: Mapping[str, Any], data: Mapping[str, Any]
) -> None:
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
    conn = sqlite3.connect(path, timeout=5.0, check_same_thread=False, isolation_level="")
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


def bare_chain(tmp: Path) -> tuple[Any, sqlite3.Connection]:
    """10 LangGraph nodes in a row, each setting one key, on ``SqliteSaver``."""
    fields: dict[str, Any] = {f"done_{i}": bool for i in range(CHAIN)}
    fields["context"] = str
    state = TypedDict("BareState", fields, total=False)  # type: ignore[operator]

    def node(i: int) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
        def step(_: Mapping[str, Any]) -> dict[str, Any]:
            return {f"done_{i}": True}

        return step

    graph = StateGraph(state)
    previous = START
    for i in range(CHAIN):
        graph.add_node(f"n{i}", node(i))
        graph.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    graph.add_edge(previous, END)
    conn = connect(tmp / "chain-bare.sqlite")
    saver = SqliteSaver(conn, serde=strict_serde())
    saver.setup()
    return graph.compile(checkpointer=saver), conn


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
    modules = (skilldeck, skilldeck.checkpoints, skilldeck.graph, skilldeck.nodes)
    modules += (skilldeck.skills, skilldeck.tools)
    return tuple(str(Path(m.__file__).parent) + os.sep for m in modules if m.__file__)


def profile_engine(deck: SkillDeck, top: int = 10) -> list[dict[str, Any]]:
    """cProfile one engine run; the ``top`` skilldeck functions by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    run_engine(deck)
    profiler.disable()
    stats = pstats.Stats(profiler)
    roots = skilldeck_roots()
    rows = []
    for (filename, line, func), (_, ncalls, _tt, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
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


def bench_overhead(tmp: Path, reps: int) -> dict[str, Any]:
    deck = chain_deck(tmp)
    graph, conn = bare_chain(tmp)
    try:
        for _ in range(2):  # warm-up: imports, model build, first SQLite pages
            run_engine(deck)
            run_bare(graph)
        engine: list[float] = []
        bare: list[float] = []
        ratios: list[float] = []
        for rep in range(reps):
            if rep % 2:
                e, b = run_engine(deck), run_bare(graph)
            else:
                b, e = run_bare(graph), run_engine(deck)
            engine.append(e * 1000 / CHAIN)
            bare.append(b * 1000 / CHAIN)
            ratios.append(e / b)
            log(f"overhead rep {rep + 1}/{reps}: engine {engine[-1]:.2f} ms/step, "
                f"bare {bare[-1]:.2f} ms/step")
        result: dict[str, Any] = {
            "skills": CHAIN,
            "reps": reps,
            "durability": DURABILITY,
            "engine_ms_per_step": round(median(engine), 3),
            "bare_ms_per_step": round(median(bare), 3),
            "ratio": round(median(engine) / median(bare), 2),
            "ratio_median_of_pairs": round(median(ratios), 2),
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


_STEP = "CAST(json_extract(CAST(metadata AS TEXT), '$.step') AS INTEGER)"
_C_STEP = _STEP.replace("metadata", "c.metadata")


def checkpoint_bytes(db: sqlite3.Connection, thread_id: str, up_to_step: int) -> int:
    """Checkpoint + metadata blobs of steps <= ``up_to_step``, plus the writes those steps made.

    Writes are stored under the checkpoint their task started from, so the writes of step ``s``
    sit under the checkpoint of step ``s - 1``.
    """
    ckpt = db.execute(
        f"SELECT COALESCE(SUM(length(checkpoint) + length(metadata)), 0) FROM checkpoints "
        f"WHERE thread_id = ? AND {_STEP} <= ?",
        (thread_id, up_to_step),
    ).fetchone()[0]
    writes = db.execute(
        f"SELECT COALESCE(SUM(length(w.value)), 0) FROM writes w JOIN checkpoints c "
        f"ON c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns "
        f"AND c.checkpoint_id = w.checkpoint_id WHERE w.thread_id = ? AND {_C_STEP} < ?",
        (thread_id, up_to_step),
    ).fetchone()[0]
    return int(ckpt) + int(writes)


def one_checkpoint(db: sqlite3.Connection, thread_id: str, step: int) -> int:
    """Bytes of the single checkpoint (+ metadata) written after skill step ``step``."""
    row = db.execute(
        f"SELECT length(checkpoint) + length(metadata) FROM checkpoints "
        f"WHERE thread_id = ? AND {_STEP} = ?",
        (thread_id, step),
    ).fetchone()
    return int(row[0]) if row else 0


def file_size_truncated(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path.stat().st_size


def run_with_progress(deck: SkillDeck, db: Path, thread_id: str, steps: int) -> Any:
    """``deck.run`` in a worker thread; the main thread polls the checkpoint count."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = deck.run({}, context="count", thread_id=thread_id)
        except BaseException as exc:  # re-raised below, in the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="counter-run")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=err, transient=False) as progress:
        task = progress.add_task(f"counter skill, {steps} steps", total=steps)
        worker.start()
        poll = sqlite3.connect(db, timeout=5.0)
        try:
            while worker.is_alive():
                worker.join(0.25)
                try:
                    done = poll.execute(
                        f"SELECT COALESCE(MAX({_STEP}), 0) FROM checkpoints WHERE thread_id = ?",
                        (thread_id,),
                    ).fetchone()[0]
                except sqlite3.OperationalError:
                    continue
                progress.update(task, completed=min(max(int(done), 0), steps))
        finally:
            poll.close()
        progress.update(task, completed=steps)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def bench_growth(tmp: Path, steps: int) -> dict[str, Any]:
    first = min(10, steps)
    sizes: dict[int, int] = {}
    for n in sorted({first, steps}):
        deck, db = counter_deck(tmp, n)
        thread_id = uuid.uuid4().hex
        try:
            start = time.perf_counter()
            if n == steps:
                result = run_with_progress(deck, db, thread_id, n)
            else:
                result = deck.run({}, context="count", thread_id=thread_id)
            elapsed = time.perf_counter() - start
        finally:
            deck.close()
        if result.status != "finished" or result.state.get("n") != n:
            raise RuntimeError(f"counter run ended {result.status} at n={result.state.get('n')}")
        sizes[n] = file_size_truncated(db)
        if n == steps:
            ms_per_step = elapsed * 1000 / n
            conn = sqlite3.connect(db)
            try:
                at_first = checkpoint_bytes(conn, thread_id, first)
                at_last = checkpoint_bytes(conn, thread_id, steps)
                ckpt_first = one_checkpoint(conn, thread_id, first)
                ckpt_last = one_checkpoint(conn, thread_id, steps)
                count = conn.execute(
                    "SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?", (thread_id,)
                ).fetchone()[0]
                store = conn.execute(
                    "SELECT COALESCE(SUM(length(value)), 0) FROM store"
                ).fetchone()[0]
            finally:
                conn.close()
    per_first = at_first / first
    per_last = at_last / steps
    result_row: dict[str, Any] = {
        "steps": steps,
        "checkpoints_in_thread": count,
        "bytes_per_step_at_10": round(per_first, 1),
        f"bytes_per_step_at_{steps}": round(per_last, 1),
        "ratio": round(per_last / per_first, 3),
        "checkpoint_bytes_at_step_10": ckpt_first,
        f"checkpoint_bytes_at_step_{steps}": ckpt_last,
        "file_bytes_per_step_at_10": round(sizes[first] / first, 1),
        f"file_bytes_per_step_at_{steps}": round(sizes[steps] / steps, 1),
        "file_ratio": round((sizes[steps] / steps) / (sizes[first] / first), 3),
        "store_bytes_per_step": round(store / steps, 1),
        "ms_per_step": round(ms_per_step, 2),
        "target": TARGET_GROWTH,
    }
    result_row["pass"] = result_row["ratio"] <= TARGET_GROWTH
    return result_row


# -- 3. resume latency from a new process -----------------------------------------------------
_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from skilldeck import Settings, SkillDeck
t1 = time.perf_counter()
url, model, files, cold, warm, answers = sys.argv[1:7]
deck = SkillDeck(checkpointer=url, settings=Settings(model=model, files_root=files))
t2 = time.perf_counter()
answers = json.loads(answers)
t3 = time.perf_counter()
first = deck.resume(cold, answers)
t4 = time.perf_counter()
second = deck.resume(warm, answers)
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
        log(f"resume rep {rep + 1}/{reps}: resume {sample['resume_ms']:.1f} ms, "
            f"construct {sample['construct_ms']:.1f} ms")
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


# -- report -----------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "[green]PASS[/green]" if ok else "[red]FAIL[/red]"


def print_report(report: dict[str, Any]) -> None:
    out = Console(width=None if sys.stdout.isatty() else 132)
    ov, gr, rs = report["overhead"], report["growth"], report["resume"]
    steps = gr["steps"]
    table = Table(title=f"skilldeck engine benchmark ({report['date']}, {report['machine']})")
    for column in ("measure", "baseline", "skilldeck", "ratio / value", "target", "result"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row(
        f"ms per skill step, {CHAIN}-skill chain (median of {ov['reps']})",
        f"{ov['bare_ms_per_step']:.2f}",
        f"{ov['engine_ms_per_step']:.2f}",
        f"{ov['ratio']:.2f}x",
        f"<= {TARGET_OVERHEAD:.0f}x",
        verdict(ov["pass"]),
    )
    table.add_row(
        f"checkpoint bytes/step, step 10 -> {steps}",
        f"{gr['bytes_per_step_at_10']:.0f}",
        f"{gr[f'bytes_per_step_at_{steps}']:.0f}",
        f"{gr['ratio']:.2f}x",
        f"<= {TARGET_GROWTH:.0f}x",
        verdict(gr["pass"]),
    )
    table.add_row(
        f"file bytes/step after WAL truncate, 10 -> {steps}",
        f"{gr['file_bytes_per_step_at_10']:.0f}",
        f"{gr[f'file_bytes_per_step_at_{steps}']:.0f}",
        f"{gr['file_ratio']:.2f}x",
        "",
        "",
    )
    table.add_row(
        f"one checkpoint's bytes, step 10 -> {steps}",
        f"{gr['checkpoint_bytes_at_step_10']}",
        f"{gr[f'checkpoint_bytes_at_step_{steps}']}",
        "",
        "",
        "",
    )
    table.add_row(
        f"resume ms, new process (median of {rs['reps']})",
        "",
        f"{rs['resume_ms']:.1f}",
        f"max {rs['resume_ms_max']:.1f}",
        f"<= {TARGET_RESUME_MS:.0f} ms",
        verdict(rs["pass"]),
    )
    table.add_row("  second resume in that process (warm)", "", f"{rs['warm_resume_ms']:.1f}",
                  "", "", "")
    table.add_row("  deck construction (not in target)", "", f"{rs['construct_ms']:.1f}",
                  f"import {rs['import_ms']:.0f}", "", "")
    out.print(table)
    out.print(f"ratio as median of per-repetition pairs: {ov['ratio_median_of_pairs']:.2f}x; "
              f"{steps}-step run: {gr['ms_per_step']:.2f} ms/step, "
              f"{gr['checkpoints_in_thread']} checkpoints, "
              f"store (transcripts) {gr['store_bytes_per_step']:.0f} bytes/step")
    if "profile_top10" in ov:
        prof = Table(title="cProfile, one engine run: top skilldeck functions (cumulative)")
        for column in ("function", "calls", "cumulative ms"):
            prof.add_column(column, justify="left" if column == "function" else "right")
        for row in ov["profile_top10"]:
            prof.add_row(row["function"], str(row["calls"]), f"{row['cumulative_ms']:.2f}")
        out.print(prof)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=15, help="overhead repetitions (default 15)")
    parser.add_argument("--resume-reps", type=int, default=7, help="resume processes (default 7)")
    parser.add_argument("--steps", type=int, default=1000, help="counter steps (default 1000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.steps < 10 or args.reps < 1 or args.resume_reps < 1:
        parser.error("--steps must be >= 10, --reps and --resume-reps >= 1")
    report: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cpu, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}",
    }
    with tempfile.TemporaryDirectory(prefix="skilldeck-bench-") as name:
        tmp = Path(name)
        log(f"1/3 engine overhead: {args.reps} interleaved repetitions")
        report["overhead"] = bench_overhead(tmp, args.reps)
        log(f"2/3 checkpoint growth: {args.steps} steps")
        report["growth"] = bench_growth(tmp, args.steps)
        log(f"3/3 resume latency: {args.resume_reps} new processes")
        report["resume"] = bench_resume(tmp, args.resume_reps)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
