"""rag-retrieve on TAT-QA dev: are the gold sources cited, which source answers, how fast.

Usage::

    python bench/rag_skill.py [--data PATH] [--json] [--limit N] [--raw-tables] [--model SPEC]

Method. Every TAT-QA dev item (a financial table and the paragraphs around it) becomes two files
in a temporary knowledge folder: ``<table uid>.csv`` and ``<table uid>.md`` (one paragraph per
block, blank lines between, so paragraph ``k`` is on line ``2k - 1``). TAT-QA tables often
spread their column labels over two or three leading rows (a period label, then the years) with
an empty first cell; a CSV has one header row, so those leading rows are joined column by column
into one (``Years Ended September 30, 2018``), and every row then reads "2018: 1,146.2".
``--raw-tables`` writes the rows exactly as given (the first row is then the header). The
folder is indexed with :class:`KnowledgeBase` (embedded Chroma and SQLite in the temporary
directory, offline USE embeddings) and is also the files root of ``local_file_search``. Then
every question (all of them, or the first ``--limit``) runs end to end through
``SkillDeck.run`` with the built-in ``rag-retrieve`` bundle and no model (the rules path: rule
rewrite, rule answer) or ``--model``'s, on a SQLite checkpointer, one thread per question.

Scoring reads the ``<CITATION .../>`` tags of the answer (``data.citations``): the gold table is
cited when a citation names ``<uid>.csv``; a gold paragraph (``rel_paragraphs``) is cited when a
citation of ``<uid>.md`` has a line range that covers its line. ``gold cited`` needs every gold
source of the question's ``answer_from`` (table: the table; text: all its paragraphs;
table-text: the table and all its paragraphs), ``any gold`` at least one of them, ``same item``
any file of the question's own item. The source that answered is the tool of the step judged
sufficient; "none" when no step was (the answer is then partial or "no relevant information").
Time is the wall time of ``deck.run`` per question (median, p95); indexing is timed apart.
No target is set: the numbers are recorded as measured.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import arguments, err, log, report_header, show_report
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from skilldeck import Settings, SkillDeck
from skilldeck.skills import builtin_skills_dir
from skilldeck.tools import default_registry
from skilldeck.tools.knowledge import KnowledgeBase
from skilldeck.tools.vectors import open_chroma

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "tatqa" / "tatqa_dataset_dev.json"
KINDS = ("table", "text", "table-text")
SOURCES = {
    "knowledge__table_rag_retrieve": "table_rag_retrieve",
    "knowledge__rag_retrieve": "rag_retrieve",
    "file__local_search": "local files",
    None: "none",
}
MATTER = "tatqa"
_AMOUNT = re.compile(r"[$€£(\-–]*\s*[\d,]*\d(?:\.\d+)?\s*%?\)?")
_YEAR = re.compile(r"(?:19|20)\d\d$")
_CITE = re.compile(r'<CITATION file="([^"]*)" (lines|rows)="([^"]*)" />')


@dataclass(frozen=True)
class Question:
    """One TAT-QA question and where its gold evidence lives."""

    uid: str
    item: str  # the table uid: files <item>.csv and <item>.md
    text: str
    answer_from: str
    paragraph_lines: tuple[int, ...]  # lines of the gold paragraphs in <item>.md


def one_header(rows: Sequence[Sequence[str]]) -> list[list[str]]:
    """The table with its leading label rows (empty first cell, no amounts) joined into one."""
    head: list[Sequence[str]] = []
    for row in rows[:3]:
        amounts = [c for c in row[1:] if _AMOUNT.fullmatch(c.strip()) and not _YEAR.match(c)]
        if row[0].strip() or amounts:
            break
        head.append(row)
    if not head:
        return [list(r) for r in rows]
    width = max(len(r) for r in rows)
    header = [
        " ".join(h[c].strip() for h in head if c < len(h) and h[c].strip()) for c in range(width)
    ]
    return [header, *(list(r) for r in rows[len(head) :])]


def write_corpus(
    items: Sequence[Mapping[str, Any]], folder: Path, *, raw_tables: bool = False
) -> list[Question]:
    """Write each item's table and paragraphs; returns every question with its gold lines."""
    folder.mkdir(parents=True, exist_ok=True)
    questions = []
    for item in items:
        uid = item["table"]["uid"]
        table = item["table"]["table"]
        with (folder / f"{uid}.csv").open("w", encoding="utf-8", newline="") as handle:
            csv.writer(handle).writerows(table if raw_tables else one_header(table))
        paragraphs = sorted(item["paragraphs"], key=lambda p: int(p["order"]))
        line = {int(p["order"]): 2 * i + 1 for i, p in enumerate(paragraphs)}
        blocks = [" ".join(p["text"].split()) or "-" for p in paragraphs]
        (folder / f"{uid}.md").write_text("\n\n".join(blocks) + "\n", "utf-8")
        for q in item["questions"]:
            gold = tuple(line[int(o)] for o in q.get("rel_paragraphs") or [] if int(o) in line)
            questions.append(Question(q["uid"], uid, q["question"], q["answer_from"], gold))
    return questions


def cited(citations: Iterable[str]) -> tuple[set[str], dict[str, list[tuple[int, int]]]]:
    """Files cited, and the line ranges cited per file."""
    files: set[str] = set()
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for tag in citations:
        match = _CITE.fullmatch(tag)
        if match is None:
            continue
        file, kind, span = match.groups()
        files.add(file)
        if kind == "lines":
            start, _, end = span.partition("-")
            ranges[file].append((int(start), int(end or start)))
    return files, ranges


def score(q: Question, citations: Sequence[str]) -> dict[str, bool | None]:
    """Which gold sources the answer cites (None: the question has no such gold source)."""
    files, ranges = cited(citations)
    md = f"{q.item}.md"
    covered = [any(a <= line <= b for a, b in ranges.get(md, [])) for line in q.paragraph_lines]
    table = f"{q.item}.csv" in files if q.answer_from != "text" else None
    text_all = all(covered) if covered and q.answer_from != "table" else None
    text_any = any(covered) if covered and q.answer_from != "table" else None
    wanted = [v for v in (table, text_all) if v is not None]
    some = [v for v in (table, text_any) if v is not None]
    return {
        "table": table,
        "text_all": text_all,
        "text_any": text_any,
        "gold": all(wanted) if wanted else None,
        "any_gold": any(some) if some else None,
        "same_item": bool({f"{q.item}.csv", md} & files),
    }


def rate(values: Iterable[bool | None]) -> dict[str, float | int | None]:
    """The share of True among the known values (None when there are none: JSON has no NaN)."""
    known = [v for v in values if v is not None]
    return {"rate": round(sum(known) / len(known), 4) if known else None, "n": len(known)}


def run_questions(deck: SkillDeck, questions: Sequence[Question]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=err) as bar:
        task = bar.add_task("questions", total=len(questions))
        for q in questions:
            started = time.perf_counter()
            result = deck.run({"question": q.text}, context="knowledge", matter_id=MATTER)
            ms = (time.perf_counter() - started) * 1000
            state = result.state
            trajectory = (state.get("attempt") or {}).get("trajectory") or {}
            citations = list(state.get("citations") or [])
            rows.append(
                {
                    "question": q,
                    "status": result.status,
                    "ms": ms,
                    "citations": citations,
                    "found": bool(state.get("found")),
                    "complete": bool(trajectory.get("complete")),
                    "answered_by": SOURCES.get(trajectory.get("answered_by"), "other"),
                    "first": SOURCES.get((trajectory.get("plan") or {}).get("first")),
                    "steps": len(trajectory.get("steps") or []),
                    "rag_top_k": [
                        s["args"].get("top_k")
                        for s in trajectory.get("steps") or []
                        if s.get("tool") == "knowledge__rag_retrieve"
                    ],
                    "score": score(q, citations),
                }
            )
            bar.advance(task)
    return rows


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    by_kind: dict[str, Any] = {}
    for kind in (*KINDS, "overall"):
        part = [r for r in rows if kind == "overall" or r["question"].answer_from == kind]
        by_kind[kind] = {
            "questions": len(part),
            **{
                key: rate(r["score"][key] for r in part)
                for key in ("gold", "any_gold", "table", "text_all", "text_any", "same_item")
            },
            "answered_by": dict(Counter(r["answered_by"] for r in part)),
        }
    times = sorted(r["ms"] for r in rows)
    top_k = Counter(k for r in rows for k in r["rag_top_k"])
    return {
        "questions": len(rows),
        "failed_runs": sum(r["status"] != "finished" for r in rows),
        "by_answer_from": by_kind,
        "answered_by": dict(Counter(r["answered_by"] for r in rows)),
        "first_source": dict(Counter(r["first"] for r in rows)),
        "found": rate(r["found"] for r in rows),
        "complete": rate(r["complete"] for r in rows),
        "citations_per_answer": round(statistics.mean(len(r["citations"]) for r in rows), 2),
        "steps_per_question": round(statistics.mean(r["steps"] for r in rows), 2),
        "rag_calls_by_top_k": {str(k): top_k[k] for k in sorted(top_k)},
        "ms_median": round(statistics.median(times), 1),
        "ms_p95": round(times[min(len(times) - 1, int(len(times) * 0.95))], 1),
    }


def bench(
    data: Path, limit: int | None, tmp: Path, *, raw_tables: bool, model: str | None = None
) -> dict[str, Any]:
    items = json.loads(data.read_text("utf-8"))
    # The corpus is one matter's folder: rag-retrieve's local file search works in a matter.
    root = tmp / "files"
    folder = root / MATTER
    questions = write_corpus(items, folder, raw_tables=raw_tables)
    if limit is not None:
        questions = questions[:limit]
    log(f"{len(items)} items written; indexing")
    kb = KnowledgeBase(tmp / "kb", open_chroma(tmp / "chroma"))
    started = time.perf_counter()
    counts = kb.index(folder)
    index_s = time.perf_counter() - started
    log(f"indexed in {index_s:.1f} s: {counts}")
    registry = default_registry(root, knowledge=lambda: kb)
    settings = Settings(model=model, base_url=None, files_root=str(root))
    if model is not None:  # the endpoint comes from the environment (SKILLDECK_BASE_URL)
        settings = Settings(model=model, files_root=str(root))
    with SkillDeck(
        [builtin_skills_dir() / "rag-retrieve"],
        checkpointer=f"sqlite:///{tmp / 'runs.sqlite'}",
        settings=settings,
        tools=registry,
    ) as deck:
        deck.run({"question": "warm-up"}, context="knowledge", matter_id=MATTER)  # loads USE
        rows = run_questions(deck, questions)
    kb.close()
    return {"index": {**counts, "seconds": round(index_s, 1)}, **summarise(rows)}


def print_report(report: Mapping[str, Any]) -> None:
    out = Console()
    out.print(f"[bold]rag-retrieve on TAT-QA dev[/bold] ({report['date']}, {report['machine']})")
    table = Table("answer_from", "questions", "gold cited", "any gold", "table", "all paras",
                  "any para", "same item", "answered by")  # fmt: skip
    for kind, part in report["by_answer_from"].items():

        def cell(key: str, part: Mapping[str, Any] = part) -> str:
            value = part[key]
            return "" if not value["n"] else f"{value['rate']:.1%} ({value['n']})"

        sources = ", ".join(f"{k} {v}" for k, v in sorted(part["answered_by"].items()))
        table.add_row(kind, str(part["questions"]), cell("gold"), cell("any_gold"),
                      cell("table"), cell("text_all"), cell("text_any"), cell("same_item"),
                      sources)  # fmt: skip
    out.print(table)
    keys = ("answered_by", "first_source", "found", "complete", "citations_per_answer",
            "steps_per_question", "rag_calls_by_top_k", "ms_median", "ms_p95", "index",
            "failed_runs")  # fmt: skip
    for key in keys:
        out.print(f"{key}: {report[key]}")


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="tatqa_dataset_dev.json")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument(
        "--raw-tables", action="store_true", help="write tables as given (no header joining)"
    )
    parser.add_argument(
        "--model", default=None, help="answer with this model (SPEC; default: no model, rules)"
    )
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"no TAT-QA file at {args.data}; pass --data")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be >= 1")
    report = report_header(
        data=str(args.data),
        tables="raw" if args.raw_tables else "one header row",
        limit=args.limit,
        model=args.model or "rules",
    )
    with tempfile.TemporaryDirectory(prefix="skilldeck-rag-") as name:
        tmp = Path(name)
        tables = args.raw_tables
        report.update(bench(args.data, args.limit, tmp, raw_tables=tables, model=args.model))
    return show_report(report, args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
