"""Recall-skill benchmark: evidence recall of ``nomemory-recall`` on LoCoMo, with no model.

Usage::

    python bench/recall_skill.py --data ../shared/data/locomo/locomo-dev5.json [--json]
                                 [--limit N] [--variant NAME ...] [--model SPEC]

Everything runs through the product: each LoCoMo conversation is imported as its own user into
the message store and Chroma folder that :class:`Settings` point at (in a temporary directory,
removed at the end), exactly as ``skilldeck messages import`` does; then every question is one
``SkillDeck.run(context="recall", input={"question": ...}, user_id=<conversation>)`` of the
built-in bundle on the ``memory://`` checkpointer, with no model configured, so the attempt is
``rules:planner`` (or with ``--model``'s planner), and the deck opens its own memory from the
settings.

Score: the share of a question's gold evidence turns (``evidence`` dia ids ->
``conv-XX:D1:3``) among the <= 6 evidence messages the run returns in ``data.evidence``, as the
LoCoMo paper computes retrieval recall; a question without evidence counts as 1, and evidence
ids that name no turn of the conversation are skipped (the question is kept). Reported overall
and per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial), with
the median wall time per question (``deck.run``) and how many runs finished or failed.

``--variant`` runs the same questions again with another setting of the deterministic planner
(see ``VARIANTS``); the default planner is always run first.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import arguments, err, log, report_header, show_report
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from skilldeck import Settings, SkillDeck
from skilldeck.nodes.planner import ANCHORS, SESSION_GAP_S, PlannerSkillNode
from skilldeck.nodes.planner_rules import RulesConfig
from skilldeck.services import open_memory
from skilldeck.skills import builtin_skills_dir
from skilldeck.tools.importers import read_messages_file

TARGET = 60.0  # evidence recall@6, percent; the LoCoMo paper's best top-5 dialog retrieval: 56.7
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DEFAULT_DATA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo-dev5.json"
)
BUNDLE = builtin_skills_dir() / "nomemory-recall"

#: Planner settings compared by ``--variant``: class attributes of :class:`PlannerSkillNode`.
DEFAULTS: dict[str, Any] = {
    "anchors": ANCHORS,
    "session_gap_s": SESSION_GAP_S,
    "rules": RulesConfig(),
}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "anchors-4": {"anchors": 4},
    "anchors-6": {"anchors": 6},
    "after-2": {"rules": RulesConfig(after=2)},
    "no-session-gap": {"session_gap_s": float("inf")},
    "no-floor": {"rules": RulesConfig(semantic_floor=None)},
    "depth-20": {"rules": RulesConfig(depth=20)},
    "no-time-signals": {"rules": RulesConfig(time_signals=False)},
}


def configure(name: str) -> dict[str, Any]:
    """Set the planner to variant ``name``; returns its full settings."""
    settings = {**DEFAULTS, **VARIANTS[name]}
    for key, value in settings.items():
        setattr(PlannerSkillNode, key, value)
    return settings


@dataclass(frozen=True)
class Question:
    user: str
    text: str
    category: int
    evidence: tuple[str, ...]  # message ids of the evidence turns that exist
    skipped: tuple[str, ...]  # evidence ids that name no turn of the conversation


def load(path: Path, limit: int | None, settings: Settings) -> list[Question]:
    """Import the conversations the questions need; return the questions."""
    samples = json.loads(path.read_text("utf-8"))
    pairs = [(str(s["sample_id"]), q) for s in samples for q in s["qa"]]
    if limit:
        pairs = pairs[:limit]
    memory = open_memory(settings)
    turns: dict[str, set[str]] = {}
    for user in dict.fromkeys(sid for sid, _ in pairs):
        # The real importer; it reads every sample of the file, this user keeps its own thread.
        messages = [m for m in read_messages_file(path, user) if m.thread_id == user]
        started = time.perf_counter()
        memory.add(messages)
        turns[user] = {m.id for m in messages}
        log(f"{user}: {len(messages)} turns imported in {time.perf_counter() - started:.1f} s")
    memory.store.close()
    questions = []
    for user, qa in pairs:
        ids = [f"{user}:{e}" for e in qa.get("evidence", [])]
        questions.append(
            Question(
                user,
                str(qa["question"]),
                int(qa["category"]),
                tuple(i for i in ids if i in turns[user]),
                tuple(i for i in ids if i not in turns[user]),
            )
        )
    return questions


def recall(returned: Sequence[str], gold: Sequence[str]) -> float:
    """Share of ``gold`` among ``returned``; 1 when there is no gold evidence."""
    return 1.0 if not gold else sum(g in set(returned) for g in gold) / len(gold)


def run_variant(
    deck: SkillDeck, questions: Sequence[Question], name: str, settings: Settings
) -> dict[str, Any]:
    """Every question through ``deck.run`` with the planner set to variant ``name``."""
    chosen = configure(name)
    scores: list[float] = []
    by_cat: dict[int, list[float]] = defaultdict(list)
    times: list[float] = []
    statuses: Counter[str] = Counter()
    tools: Counter[str] = Counter()
    sizes: list[int] = []
    failures: list[dict[str, Any]] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=err) as bar:
        task = bar.add_task(f"variant {name}", total=len(questions))
        for q in questions:
            started = time.perf_counter()
            result = deck.run({"question": q.text}, context="recall", user_id=q.user)
            times.append((time.perf_counter() - started) * 1000)
            statuses[result.status] += 1
            state = result.state
            returned = [e["message_id"] for e in state.get("evidence") or []]
            if result.status != "finished":
                failures.append({"question": q.text, "error": result.error and result.error.dump()})
                returned = []
            if len(returned) > settings.planner_max_evidence:
                raise RuntimeError(f"{len(returned)} evidence messages returned for {q.text!r}")
            attempt = state.get("attempt") or {}
            if settings.model is None and attempt.get("model") != "rules:planner":
                raise RuntimeError(f"the run used {attempt.get('model')!r}, not rules:planner")
            tools.update(step["tool"] or "stop" for step in attempt.get("trajectory") or [])
            sizes.append(len(returned))
            r = recall(returned, q.evidence)
            scores.append(r)
            by_cat[q.category].append(r)
            bar.advance(task)
    return {
        "variant": name,
        "settings": {k: repr(v) for k, v in chosen.items()},
        "recall_at_6": round(100 * statistics.mean(scores), 2),
        "by_category": {
            f"{c} {CATEGORIES.get(c, '?')}": {
                "n": len(v),
                "recall_at_6": round(100 * statistics.mean(v), 2),
            }
            for c, v in sorted(by_cat.items())
        },
        "median_ms_per_question": round(statistics.median(times), 1),
        "p95_ms_per_question": round(statistics.quantiles(times, n=20)[-1], 1)
        if len(times) > 1
        else round(times[0], 1),
        "finished": statuses["finished"],
        "failed": statuses["failed"],
        "other_status": sum(v for k, v in statuses.items() if k not in ("finished", "failed")),
        "mean_evidence_returned": round(statistics.mean(sizes), 2),
        "rounds_by_tool": dict(sorted(tools.items())),
        "failures": failures[:10],
        "target": TARGET,
        "pass": round(100 * statistics.mean(scores), 2) >= TARGET,
    }


def print_report(report: Mapping[str, Any]) -> None:
    out = Console(width=None if sys.stdout.isatty() else 140)
    cats = list(CATEGORIES.items())
    table = Table(
        title=f"nomemory-recall evidence recall@6 on LoCoMo, no model ({report['questions']} "
        f"questions, {report['date']})"
    )
    for column in ("variant", "all", *(f"{c} {n}" for c, n in cats), "ms/q", "ok/failed", ""):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in report["variants"]:
        per = row["by_category"]
        cells = [
            f"{per[k]['recall_at_6']:.1f}" if (k := f"{c} {n}") in per else "" for c, n in cats
        ]
        table.add_row(
            row["variant"],
            f"{row['recall_at_6']:.1f}",
            *cells,
            f"{row['median_ms_per_question']:.0f}",
            f"{row['finished']}/{row['failed']}",
            "[green]PASS[/green]" if row["pass"] else "[red]FAIL[/red]",
        )
    out.print(table)
    first = report["variants"][0]
    out.print(
        f"target: recall@6 >= {TARGET:.0f} (default planner); category sizes "
        + ", ".join(f"{k}: {v['n']}" for k, v in first["by_category"].items())
        + f"; evidence ids skipped: {report['skipped_evidence_ids']} in "
        f"{report['questions_with_skipped_ids']} questions; questions without evidence: "
        f"{report['questions_without_evidence']}; import {report['import_s']} s"
    )
    out.print(f"rounds by tool (default): {first['rounds_by_tool']}")


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo JSON file")
    parser.add_argument("--limit", type=int, default=None, help="first N questions only")
    parser.add_argument(
        "--model", default=None, help="plan with this model (SPEC; default: no model, the rules)"
    )
    parser.add_argument(
        "--variant",
        action="append",
        choices=sorted(set(VARIANTS) - {"default"}),
        default=[],
        help="also run a planner variant (repeatable)",
    )
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"no such file: {args.data}")
    report = report_header(data=str(args.data), model=args.model or "rules:planner")
    with tempfile.TemporaryDirectory(prefix="skilldeck-recall-") as name:
        tmp = Path(name)
        # model=None overrides SKILLDECK_MODEL: by default this measures the no-model planner.
        settings = Settings(
            model=args.model,
            messages_path=str(tmp / "messages.sqlite"),
            chroma_path=str(tmp / "chroma"),
            chroma_url=None,
            checkpoint_url="memory://",
        )
        started = time.perf_counter()
        questions = load(args.data, args.limit, settings)
        report["import_s"] = round(time.perf_counter() - started, 1)
        report["questions"] = len(questions)
        report["categories"] = dict(sorted(Counter(q.category for q in questions).items()))
        report["questions_without_evidence"] = sum(not q.evidence for q in questions)
        report["skipped_evidence_ids"] = sum(len(q.skipped) for q in questions)
        report["questions_with_skipped_ids"] = sum(bool(q.skipped) for q in questions)
        report["variants"] = []
        with SkillDeck(BUNDLE, checkpointer="memory://", settings=settings) as deck:
            for variant in ["default", *dict.fromkeys(args.variant)]:
                log(f"variant {variant}: {len(questions)} questions")
                row = run_variant(deck, questions, variant, settings)
                log(f"variant {variant}: recall@6 {row['recall_at_6']:.2f}")
                report["variants"].append(row)
        configure("default")
    return show_report(report, args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
