"""The run report: per task, trial and grader the score and rationale, the workspace diff and
the transcript, plus aggregates per bucket and per grader; written as JSON and Markdown.

Aggregates: ``mean_score`` (over scored trials), ``pass_rate`` (trials where every scored
grader passed), ``pass_at_k`` (the chance that at least one of k trials of a task passes,
the unbiased estimate from n trials) and ``pass_pow_k`` (all k pass), for k = 1 and the epoch
count. Graders that were not scored count in neither direction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from math import comb
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skilldeck.errors import EvalConfigError

if TYPE_CHECKING:
    from skilldeck.evals.runner import TrialResult
    from skilldeck.evals.suites import Suite

__all__ = [
    "REPORT_VERSION",
    "build_report",
    "load_report",
    "markdown",
    "pass_at_k",
    "pass_pow_k",
    "write_reports",
]

REPORT_VERSION = 1


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k trials passes) given c passes in n trials (unbiased estimator)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_pow_k(n: int, c: int, k: int) -> float:
    """P(all k trials pass) given c passes in n trials."""
    return comb(c, k) / comb(n, k) if k <= n else 0.0


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return round(sum(items) / len(items), 6) if items else None


def _stats(trials: Sequence[TrialResult], ks: Sequence[int]) -> dict[str, Any]:
    scores = [t.score for t in trials if t.score is not None]
    verdicts = [t.passed for t in trials if t.passed is not None]
    by_task: dict[str, list[bool]] = {}
    for t in trials:
        if t.passed is not None:
            by_task.setdefault(t.task.id, []).append(t.passed)
    at_k, pow_k = {}, {}
    for k in ks:
        ready = [(len(v), sum(v)) for v in by_task.values() if len(v) >= k]
        at_k[str(k)] = _mean(pass_at_k(n, c, k) for n, c in ready)
        pow_k[str(k)] = _mean(pass_pow_k(n, c, k) for n, c in ready)
    return {
        "tasks": len({t.task.id for t in trials}),
        "trials": len(trials),
        "scored": len(scores),
        "mean_score": _mean(scores),
        "pass_rate": _mean(float(v) for v in verdicts),
        "pass_at_k": at_k,
        "pass_pow_k": pow_k,
    }


def _trial(result: TrialResult) -> dict[str, Any]:
    return {
        "trial_id": result.outcome.trial_id,
        "epoch": result.outcome.epoch,
        "score": result.score,
        "passed": result.passed,
        "grades": [
            {"name": spec.name, "config": spec.config, **grade.to_dict()}
            for spec, grade in result.grades
        ],
        **result.outcome.to_dict(),
    }


def _grader_stats(results: Sequence[TrialResult]) -> dict[str, Any]:
    grades: dict[str, list[Any]] = {}
    for result in results:
        for spec, grade in result.grades:
            grades.setdefault(spec.name, []).append(grade)
    return {
        name: {
            "count": len(items),
            "scored": sum(g.score is not None for g in items),
            "not_scored": sum(g.score is None for g in items),
            "mean_score": _mean(g.score for g in items if g.score is not None),
            "pass_rate": _mean(float(g.passed) for g in items if g.passed is not None),
        }
        for name, items in sorted(grades.items())
    }


def build_report(
    suite: Suite, results: Sequence[TrialResult], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON-native report of a suite run."""
    ks = sorted({1, int(meta.get("epochs", 1))})
    order = {task.id: i for i, task in enumerate(suite.tasks)}
    results = sorted(results, key=lambda r: (order[r.task.id], r.outcome.epoch))
    by_bucket: dict[str, list[TrialResult]] = {}
    by_task: dict[str, list[TrialResult]] = {}
    for result in results:
        by_bucket.setdefault(suite.bucket_key(result.task), []).append(result)
        by_task.setdefault(result.task.id, []).append(result)
    buckets = {
        key: {
            "kind": suite.kind(key),
            "skill": key.split("/", 1)[0],
            "bucket": key.split("/", 1)[1],
            **_stats(by_bucket[key], ks),
        }
        for key in sorted(by_bucket)
    }
    tasks = [
        {
            "id": task.id,
            "skill": task.skill,
            "bucket": task.bucket,
            "bucket_key": suite.bucket_key(task),
            "kind": suite.kind(suite.bucket_key(task)),
            "base_fixture": task.base_fixture,
            "input": task.input,
            **_stats(by_task[task.id], ks),
            "trials": [_trial(r) for r in by_task[task.id]],
        }
        for task in suite.tasks
        if task.id in by_task
    ]
    return {
        "version": REPORT_VERSION,
        **meta,
        "kinds": {key: suite.kind(key) for key in buckets},
        "summary": _stats(results, ks),
        "buckets": buckets,
        "graders": _grader_stats(results),
        "tasks": tasks,
    }


def load_report(path: str | Path) -> dict[str, Any]:
    """Read a report JSON; raise :class:`EvalConfigError` if it is not one."""
    path = Path(path)
    try:
        report = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise EvalConfigError(f"report {str(path)!r} does not exist") from None
    except json.JSONDecodeError as exc:
        raise EvalConfigError(f"{path}: not JSON: {exc.msg} (char {exc.pos})") from None
    if not isinstance(report, dict) or not isinstance(report.get("buckets"), dict):
        raise EvalConfigError(f"{path}: not an eval report (no buckets); make one with eval run")
    return report


def _pct(value: float | None) -> str:
    return "not scored" if value is None else f"{value:.2f}"


def markdown(report: Mapping[str, Any]) -> str:
    """A short Markdown summary: buckets, graders, and the trials that did not pass."""
    ks = list(report["summary"]["pass_at_k"])
    head = " | ".join(f"pass@{k}" for k in ks)
    lines = [
        f"# Eval report: {report.get('suite')}",
        "",
        f"- run {report.get('run_id')} at {report.get('started_at')}, "
        f"{report.get('epochs')} epoch(s), {report.get('elapsed_s')} s",
        f"- models: {', '.join(f'{k}={v}' for k, v in (report.get('models') or {}).items())}",
        f"- judge: {report.get('judge_model') or 'none (judge graders not scored)'}",
        f"- overall: mean score {_pct(report['summary']['mean_score'])}, pass rate "
        f"{_pct(report['summary']['pass_rate'])}",
        "",
        "## Buckets",
        "",
        f"| bucket | kind | tasks | trials | mean score | pass rate | {head} |",
        "|" + "---|" * (6 + len(ks)),
    ]
    for key, b in report["buckets"].items():
        at_k = " | ".join(_pct(b["pass_at_k"][k]) for k in ks)
        lines.append(
            f"| {key} | {b['kind']} | {b['tasks']} | {b['trials']} | {_pct(b['mean_score'])} "
            f"| {_pct(b['pass_rate'])} | {at_k} |"
        )
    lines += ["", "## Graders", "", "| grader | scored | not scored | mean score | pass rate |"]
    lines.append("|---|---|---|---|---|")
    for name, g in report["graders"].items():
        lines.append(
            f"| {name} | {g['scored']} | {g['not_scored']} | {_pct(g['mean_score'])} "
            f"| {_pct(g['pass_rate'])} |"
        )
    failing = [
        (task, trial)
        for task in report["tasks"]
        for trial in task["trials"]
        if trial["passed"] is False
    ]
    lines += ["", f"## Trials that did not pass ({len(failing)})", ""]
    for task, trial in failing:
        lines.append(
            f"- **{task['id']}** epoch {trial['epoch']} ({task['bucket_key']}), "
            f"score {_pct(trial['score'])}"
        )
        for g in trial["grades"]:
            if g["passed"] is False:
                lines.append(f"  - {g['name']} {_pct(g['score'])}: {g['rationale']}")
    return "\n".join(lines) + "\n"


def write_reports(report: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``report.html`` into ``out``."""
    from skilldeck.evals.html_report import render_html

    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "report.json",
        "markdown": out / "report.md",
        "html": out / "report.html",
    }
    paths["json"].write_text(json.dumps(report, ensure_ascii=False, indent=1, default=str), "utf-8")
    paths["markdown"].write_text(markdown(report), "utf-8")
    paths["html"].write_text(render_html(report), "utf-8")
    return paths
