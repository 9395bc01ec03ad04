"""Real-model benchmark: the built-in skills on an OpenAI-compatible endpoint, per output mode.

Usage::

    ../shared/real-model/start.sh          # Qwen2.5-Coder-0.5B behind llama.cpp on :8765
    export SKILLDECK_BASE_URL=http://127.0.0.1:8765/v1 SKILLDECK_API_KEY=local
    python bench/real_model.py --model compatible:qwen2.5-coder-0.5b-instruct \\
        --out ~/.cache/skilldeck-bench/real-model [--record tests/cassettes/real] [--only UNIT]
    python bench/real_model.py --out ~/.cache/skilldeck-bench/real-model --report [--json]

The model is slow on two cores, so the work is split in units run in a fixed order; each writes
``<out>/<unit>.json`` when it ends, and a unit already written is skipped: stop and start again
at will (``--only`` runs one unit; ``--report`` only prints what is written). Units:

- ``demo-<mode>``: the README demo (litigation-intake on the complaint, the card answered),
  ``--demo-runs`` times in each of ``schema``, ``tool`` and ``json`` mode. Reported: finished
  and failed runs, runs that read the complaint (``file__parse`` of it), the first attempt's
  contract validity, well-formed replies, tokens and latency per call, model calls per run.
- ``suite-<skill>``: a built-in eval suite (all cases, or the first ``--per-bucket`` of each
  bucket; one epoch) in ``schema`` mode next to
  the same suite on its scripted cassette; pass rate per bucket. With ``--record DIR`` the
  model's turns are recorded to ``DIR/<skill>.yaml`` (replayed in CI by
  ``tests/test_recorded.py``).
- ``recall``: nomemory-recall on the first ``--questions`` LoCoMo dev questions with the model
  planner, next to ``rules:planner`` (``bench/recall_skill.py``).
- ``rag``: rag-retrieve on the first ``--questions`` TAT-QA dev questions with the model, next
  to the rules (``bench/rag_skill.py``).
- ``prompts``: the prompt tokens of each built-in skill's first call, in ``tool`` and
  ``schema`` mode.
- ``cache``: the demo's first call in two threads of two users, one after the other: the share
  of the second prompt the endpoint had to read fresh (its prefix cache held the rest).

Per model call (a LangChain callback): wall time, prompt, cached and completion tokens (the
endpoint's ``usage``). Per attempt (the checkpoint history): accepted or rejected on its first
try, and the rejection reasons. Reports give medians and p95.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from common import arguments, err, log, report_header, show_report
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import ChatGeneration, LLMResult
from rich.table import Table

from skilldeck import Resume, Settings, SkillDeck, demo
from skilldeck.checkpoints.inspect import transcript
from skilldeck.errors import InvalidAnswersError, ThreadNotFoundError
from skilldeck.evals import run_suite
from skilldeck.evals.suites import Suite, suite_for_skill
from skilldeck.scripted import SKILL_KEY
from skilldeck.skills import builtin_skills_dir
from skilldeck.tools.messages import Message

HERE = Path(__file__).resolve().parent
MODES = ("schema", "tool", "json")
SUITES = ("litigation-intake", "card-agent", "pkm-agent")
#: What a person reading the complaint answers; any other question gets its first option.
FACTS = {
    "profile.defendant.name": "Acme Logistics Ltd.",
    "profile.defendant.type": "organisation",
    "profile.plaintiff.name": "Jane Doe",
    "profile.plaintiff.type": "person",
}


def answer(card: Mapping[str, Any]) -> dict[str, Any]:
    """Answers to ``card`` as a person who read the complaint would give them."""
    answers: dict[str, Any] = {}
    for q in card["questions"]:
        options = [o["value"] for o in q.get("options") or []]
        known = FACTS.get(q["field_key"])
        if known is not None and (not options or known in options):
            answers[q["field_key"]] = known
        elif q["input_type"] == "boolean":
            answers[q["field_key"]] = True
        elif q["input_type"] == "multi_select":
            answers[q["field_key"]] = options[:1]
        elif q["input_type"] == "file_ids":
            answers[q["field_key"]] = ["complaint.txt"]
        else:
            answers[q["field_key"]] = options[0] if options else "not stated in the complaint"
    return answers


class CallStats(BaseCallbackHandler):
    """Wall time and token usage of every chat-model call, with the skill that made it."""

    def __init__(self) -> None:
        super().__init__()
        self.started: dict[UUID, tuple[float, str]] = {}
        self.calls: list[dict[str, Any]] = []

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, metadata: Any = None, **kw: Any
    ) -> None:
        self.started[run_id] = (time.perf_counter(), str((metadata or {}).get(SKILL_KEY)))

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kw: Any) -> None:
        t0, skill = self.started.pop(run_id, (time.perf_counter(), "?"))
        usage: Mapping[str, Any] = {}
        generation = response.generations[0][0] if response.generations else None
        if isinstance(generation, ChatGeneration):
            usage = generation.message.usage_metadata or {}  # type: ignore[attr-defined]
        details = usage.get("input_token_details") or {}
        self.calls.append(
            {
                "skill": skill,
                "s": round(time.perf_counter() - t0, 2),
                "prompt": usage.get("input_tokens"),
                "cached": details.get("cache_read"),
                "completion": usage.get("output_tokens"),
            }
        )

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        t0, skill = self.started.pop(run_id, (time.perf_counter(), "?"))
        self.calls.append(
            {"skill": skill, "s": round(time.perf_counter() - t0, 2), "error": repr(error)[:200]}
        )


def p95(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def call_summary(calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Latency and tokens per call: medians and p95, and the share of prompts read from cache."""
    ok = [c for c in calls if "error" not in c]
    seconds = [c["s"] for c in ok]
    prompts = [c["prompt"] for c in ok if c.get("prompt") is not None]
    cached = [c.get("cached") or 0 for c in ok if c.get("prompt") is not None]
    return {
        "calls": len(calls),
        "errors": len(calls) - len(ok),
        "s_p50": round(statistics.median(seconds), 2) if seconds else None,
        "s_p95": p95(seconds),
        "s_max": max(seconds) if seconds else None,
        "prompt_tokens_p50": statistics.median(prompts) if prompts else None,
        "completion_tokens_p50": statistics.median(
            [c["completion"] for c in ok if c.get("completion") is not None] or [0]
        ),
        "fresh_prompt_share": round(1 - sum(cached) / sum(prompts), 3) if prompts else None,
        "calls_by_skill": dict(Counter(c["skill"] for c in calls)),
    }


def attempts(deck: SkillDeck, thread_id: str) -> list[dict[str, Any]]:
    """Every attempt the thread recorded: its turn, try number, action and error messages."""
    return [
        {
            "skill": row["skill"],
            "turn": row["turn"],
            "attempt": row["attempt"],
            "action": row["action"],
            "errors": [e.get("message", "") for e in row["validation_errors"]],
        }
        for row in deck.history(thread_id)
        if row["turn"] is not None
    ]


def attempt_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """First-try validity of each turn's reply and the reasons replies were rejected."""
    turns: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rows:
        turns.setdefault(row["turn"], []).append(row)
    first = [sorted(t, key=lambda r: r["attempt"] or 0)[0] for t in turns.values()]
    rejected = [r for r in rows if r["action"] == "rejected"]
    reasons = Counter(e.split(":")[0][:80] for r in rejected for e in r["errors"])
    return {
        "turns": len(turns),
        "attempts": len(rows),
        "first_attempt_valid": sum(r["action"] != "rejected" for r in first),
        "rejected": len(rejected),
        "rejection_reasons": dict(reasons.most_common(8)),
    }


def run_demo(model: str, mode: str, runs: int, tmp: Path) -> dict[str, Any]:
    """The README demo ``runs`` times in ``mode``."""
    stats = CallStats()
    settings = Settings(model=model, output_mode=mode, files_root=str(demo.FILES))
    outcomes: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    with SkillDeck(
        checkpointer=f"sqlite:///{tmp / f'demo-{mode}.sqlite'}", settings=settings
    ) as deck:
        for i in range(runs):
            started = time.perf_counter()
            result = deck.run(
                {"documents": ["complaint.txt"]},
                context="matter",
                matter_id="demo-matter",
                callbacks=[stats],
            )
            refused = None
            for _ in range(3):  # a model may ask more than once
                if result.status != "interrupted" or result.card is None:
                    break
                try:
                    result = deck.run(
                        Resume(result.thread_id, answer(result.card)), callbacks=[stats]
                    )
                except InvalidAnswersError as exc:  # the card's own fields refuse its answers
                    refused = str(exc)[:300]
                    break
            done = attempts(deck, result.thread_id)
            rows += done
            history = deck.history(result.thread_id)
            calls = [c for r in history for c in r["tool_calls"] if c["status"] != "requested"]
            read = any(
                c.get("name") == "file__parse" and "complaint" in json.dumps(c.get("args"))
                for c in calls
            )
            profile = result.state.get("profile") or {}
            outcomes.append(
                {
                    "status": result.status,
                    "error": result.error.code if result.error else None,
                    "card_refused_answers": refused,
                    "read_complaint": read,
                    "tool_calls": [f"{c['name']} {c['status']}" for c in calls],
                    "plaintiff": (profile.get("plaintiff") or {}).get("name"),
                    "defendant": (profile.get("defendant") or {}).get("name"),
                    "s": round(time.perf_counter() - started, 1),
                }
            )
            log(f"demo {mode} {i + 1}/{runs}: {outcomes[-1]}")
            if any(r["action"] == "rejected" for r in done):  # what the model wrote, to read
                outcomes[-1]["transcript"] = transcript(deck, result.thread_id)
    return {
        "mode": mode,
        "runs": runs,
        "finished": sum(o["status"] == "finished" for o in outcomes),
        "failed": sum(o["status"] == "failed" for o in outcomes),
        "read_complaint": sum(o["read_complaint"] for o in outcomes),
        "run_s_p50": statistics.median(o["s"] for o in outcomes),
        **attempt_summary(rows),
        **call_summary(stats.calls),
        "outcomes": outcomes,
    }


def run_cache(model: str, tmp: Path) -> dict[str, Any]:
    """The first call of two demo threads in a row: how much of the second one's prompt the
    endpoint's prefix cache already held (``usage.prompt_tokens_details.cached_tokens``)."""
    settings = Settings(model=model, output_mode="schema", files_root=str(demo.FILES))
    firsts = []
    with SkillDeck(checkpointer=f"sqlite:///{tmp / 'cache.sqlite'}", settings=settings) as deck:
        for user in ("cache-a", "cache-b"):
            stats = CallStats()
            deck.run(
                {"documents": ["complaint.txt"]},
                context="matter",
                matter_id="demo-matter",
                user_id=user,
                callbacks=[stats],
            )
            firsts.append(stats.calls[0])
    second = firsts[1]
    fresh = 1 - (second.get("cached") or 0) / second["prompt"] if second.get("prompt") else None
    return {"first_calls": firsts, "second_thread_fresh_share": fresh}


class _Stop(Exception):
    """Raised by :class:`FirstCall` once the first call has ended: its usage is all we want."""


class FirstCall(BaseCallbackHandler):
    """The prompt tokens of a run's first model call (then stops the run)."""

    raise_error = True

    def __init__(self) -> None:
        super().__init__()
        self.prompt: int | None = None

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kw: Any) -> None:
        generation = response.generations[0][0]
        if isinstance(generation, ChatGeneration):
            usage = generation.message.usage_metadata or {}  # type: ignore[attr-defined]
            self.prompt = usage.get("input_tokens")
        raise _Stop


#: A run of each built-in skill: input, context and the matter folder it needs.
FIRST_RUNS: dict[str, tuple[dict[str, Any], str, str | None]] = {
    "litigation-intake": ({"documents": ["complaint.txt"]}, "matter", "m"),
    "card-agent": (
        {"fact_id": "2026/05/25.md#ts_1", "content": "Standup Thursday 10:30am, Zoom."},
        "card",
        "m",
    ),
    "pkm-agent": (
        {"content": "Slept 5.5h, crashed at 2pm.", "fact_id": "2026/05/25.md#ts_1"},
        "pkm",
        "p",
    ),
    "nomemory-recall": ({"question": "What food do I avoid?"}, "recall", None),
    "rag-retrieve": ({"question": "How much does Widget Pro cost?"}, "knowledge", "m"),
}


def run_prompts(model: str, tmp: Path) -> dict[str, Any]:
    """Prompt tokens of each built-in skill's first call, in ``tool`` and ``schema`` mode."""
    files = tmp / "files"
    shutil.copytree(demo.FILES / "demo-matter", files / "m")
    shutil.copytree(builtin_skills_dir() / "pkm-agent" / "fixtures" / "_starter_pkm", files / "p")
    tokens: dict[str, dict[str, int | None]] = {}
    for mode in ("tool", "schema"):
        for skill, (given, context, matter) in FIRST_RUNS.items():
            settings = Settings(
                model=model,
                output_mode=mode,
                files_root=str(files),
                messages_path=str(tmp / "messages.sqlite"),
                chroma_path=str(tmp / "chroma"),
                knowledge_path=str(tmp / "knowledge"),
            )
            first = FirstCall()
            with SkillDeck(
                builtin_skills_dir() / skill, checkpointer="memory://", settings=settings
            ) as deck:
                if skill == "nomemory-recall":
                    said = "I don't eat spicy food."
                    deck.memory.add([Message("m1", "u", "t", "user", "2026-01-03T09:00:00Z", said)])
                with contextlib.suppress(_Stop):
                    deck.run(
                        given, context=context, user_id="u", matter_id=matter, callbacks=[first]
                    )
            tokens.setdefault(skill, {})[mode] = first.prompt
            log(f"{skill} {mode}: {first.prompt} prompt tokens")
    return {"first_prompt_tokens": tokens}


def buckets(report: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: {"n": v["trials"], "pass_rate": v["pass_rate"]} for k, v in report["buckets"].items()
    }


def sample(suite: Suite, per_bucket: int | None) -> Suite:
    """The first ``per_bucket`` tasks of each bucket, in suite order (all with ``None``)."""
    if per_bucket is None:
        return suite
    taken: Counter[str] = Counter()
    tasks = []
    for task in suite.tasks:
        if taken[task.bucket] < per_bucket:
            taken[task.bucket] += 1
            tasks.append(task)
    return dataclasses.replace(suite, tasks=tuple(tasks))


def run_suite_unit(
    model: str, skill: str, tmp: Path, record: Path | None, per_bucket: int | None, out: Path
) -> dict[str, Any]:
    """A built-in suite on the model (``schema`` mode) and on its scripted cassette; the real
    run's report is kept as ``<out>/suite-<skill>.report.json`` (for ``eval export-failures``).
    """
    suite = sample(suite_for_skill(skill), per_bucket)
    cassette = builtin_skills_dir() / skill / "evals" / "scripted.yaml"
    baseline = cassette if cassette.is_file() else demo.SCRIPT
    scripted = run_suite(suite, out=tmp / f"{skill}-scripted", model=f"scripted:{baseline}")
    stats = CallStats()
    done = 0

    def progress(result: Any) -> None:
        nonlocal done
        done += 1
        log(f"{skill} {done}/{len(suite.tasks)}: {result.task.id} passed={result.passed}")

    settings = Settings(output_mode="schema")
    real = run_suite(
        suite,
        out=tmp / f"{skill}-real",
        model=model,
        settings=settings,
        record=record / f"{skill}.yaml" if record else None,
        callbacks=[stats],
        on_trial=progress,
    )
    (out / f"suite-{skill}.report.json").write_text(json.dumps(real, ensure_ascii=False), "utf-8")
    rows: list[dict[str, Any]] = []
    with SkillDeck(
        list(suite.bundles),
        checkpointer=f"sqlite:///{tmp / f'{skill}-real' / 'checkpoints.sqlite'}",
    ) as deck:
        for task in real["tasks"]:
            for trial in task["trials"]:
                with contextlib.suppress(ThreadNotFoundError):  # a trial refused at start
                    rows += attempts(deck, trial["thread_id"])
    statuses = Counter(t["status"] for task in real["tasks"] for t in task["trials"])
    return {
        "skill": skill,
        "cases": len(suite.tasks),
        "passed": sum(bool(t["passed"]) for task in real["tasks"] for t in task["trials"]),
        "scripted_passed": sum(
            bool(t["passed"]) for task in scripted["tasks"] for t in task["trials"]
        ),
        "statuses": dict(statuses),
        "buckets": buckets(real),
        "scripted_buckets": buckets(scripted),
        "elapsed_s": real["elapsed_s"],
        **attempt_summary(rows),
        **call_summary(stats.calls),
        "failing": [
            {"task": task["id"], "status": t["status"], "error": (t["error"] or {}).get("code")}
            for task in real["tasks"]
            for t in task["trials"]
            if not t["passed"]
        ],
    }


def run_script(script: str, model: str | None, questions: int) -> dict[str, Any]:
    """One of the skill benchmarks as a subprocess, its ``--json`` report back."""
    args = [sys.executable, str(HERE / script), "--json", "--limit", str(questions)]
    if model:
        args += ["--model", model]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def run_recall(model: str, questions: int) -> dict[str, Any]:
    real = run_script("recall_skill.py", model, questions)["variants"][0]
    rules = run_script("recall_skill.py", None, questions)["variants"][0]
    keep = ("recall_at_6", "finished", "failed", "median_ms_per_question", "p95_ms_per_question",
            "mean_evidence_returned", "rounds_by_tool", "failures")  # fmt: skip
    return {"questions": questions, "model": {k: real[k] for k in keep},
            "rules": {k: rules[k] for k in keep}}  # fmt: skip


def run_rag(model: str, questions: int) -> dict[str, Any]:
    keep = ("failed_runs", "found", "complete", "answered_by", "citations_per_answer",
            "steps_per_question", "ms_median", "ms_p95")  # fmt: skip
    real, rules = (
        run_script("rag_skill.py", model, questions),
        run_script("rag_skill.py", None, questions),
    )
    gold = {"model": real["by_answer_from"]["overall"], "rules": rules["by_answer_from"]["overall"]}
    return {
        "questions": questions,
        "model": {
            **{k: real[k] for k in keep},
            "gold": gold["model"]["gold"],
            "any_gold": gold["model"]["any_gold"],
        },
        "rules": {
            **{k: rules[k] for k in keep},
            "gold": gold["rules"]["gold"],
            "any_gold": gold["rules"]["any_gold"],
        },
    }


def units(args: Any) -> dict[str, Any]:
    """The units in run order: name -> a function of the temporary folder."""
    model, record = args.model, args.record
    plan: dict[str, Any] = {
        "demo-schema": lambda tmp: run_demo(model, "schema", args.demo_runs, tmp)
    }
    for skill in SUITES:
        plan[f"suite-{skill}"] = lambda tmp, s=skill: run_suite_unit(
            model, s, tmp, record, args.per_bucket, args.out
        )
    plan["recall"] = lambda tmp: run_recall(model, args.questions)
    plan["rag"] = lambda tmp: run_rag(model, args.questions)
    plan["cache"] = lambda tmp: run_cache(model, tmp)
    plan["prompts"] = lambda tmp: run_prompts(model, tmp)
    for mode in MODES[1:]:
        plan[f"demo-{mode}"] = lambda tmp, m=mode: run_demo(model, m, args.demo_runs, tmp)
    return plan


def print_report(report: Mapping[str, Any]) -> None:
    table = Table(title=f"real model {report.get('model')}")
    for column in ("unit", "result"):
        table.add_column(column)
    for name, unit in report["units"].items():
        shown = {k: v for k, v in unit.items() if k not in ("outcomes", "failing")}
        table.add_row(name, json.dumps(shown, ensure_ascii=False)[:900])
    err.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--model", help="the model SPEC (its endpoint from SKILLDECK_BASE_URL)")
    parser.add_argument("--out", type=Path, required=True, help="where units write results")
    parser.add_argument("--record", type=Path, default=None, help="record suites to this folder")
    parser.add_argument("--only", action="append", default=[], help="run only this unit")
    parser.add_argument("--demo-runs", type=int, default=10)
    parser.add_argument("--questions", type=int, default=25)
    parser.add_argument(
        "--per-bucket", type=int, default=None, help="run only the first N cases of each bucket"
    )
    parser.add_argument("--report", action="store_true", help="print the written units only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        if not args.model:
            parser.error("--model is required to run units")
        plan = units(args)
        unknown = set(args.only) - set(plan)
        if unknown:
            parser.error(f"unknown unit(s) {sorted(unknown)}; units: {', '.join(plan)}")
        for name, run in plan.items():
            target = args.out / f"{name}.json"
            if target.exists() or (args.only and name not in args.only):
                continue
            log(f"unit {name}")
            with tempfile.TemporaryDirectory(prefix=f"skilldeck-real-{name}-") as tmp:
                started = time.perf_counter()
                result = run(Path(tmp))
            result["unit_s"] = round(time.perf_counter() - started, 1)
            target.write_text(json.dumps(result, indent=1, ensure_ascii=False), "utf-8")
            log(f"unit {name} done in {result['unit_s']:.0f} s: {target}")
    report = report_header(model=args.model, builtin=str(builtin_skills_dir()))
    report["units"] = {
        p.stem: json.loads(p.read_text("utf-8")) for p in sorted(args.out.glob("*.json"))
    }
    return show_report(report, args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
