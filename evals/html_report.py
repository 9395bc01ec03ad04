"""The report as one self-contained HTML page: a per-bucket bar chart (inline SVG), tables, and
each trial's grader rationales, workspace diff and transcript in expandable ``<details>``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from typing import Any

__all__ = ["render_html"]

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}h3{font-size:1rem;margin:1.2rem 0 .3rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem}
th{background:#f4f4f4;text-align:left}.pass{color:#17803d}.fail{color:#b42318}.na{color:#777}
.kind-regression{font-weight:600;color:#7a2e0e}details{margin:.3rem 0}summary{cursor:pointer}
pre{background:#f7f7f7;padding:.5rem;overflow:auto;white-space:pre-wrap;max-height:30rem}
.entry{border-left:3px solid #ccc;padding-left:.5rem;margin:.4rem 0}
.role-model{border-color:#3b82f6}.role-tool{border-color:#f59e0b}.role-user{border-color:#10b981}
svg text{font-size:12px}.legend span{display:inline-block;margin-right:1rem}
.swatch{display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;vertical-align:middle}
"""
_SCORE, _PASS = "#3b82f6", "#10b981"


def _fmt(value: Any) -> str:
    return "not scored" if value is None else f"{value:.2f}"


def _verdict(passed: bool | None) -> str:
    if passed is None:
        return '<span class="na">not scored</span>'
    return '<span class="pass">pass</span>' if passed else '<span class="fail">fail</span>'


def bar_chart(buckets: Mapping[str, Mapping[str, Any]]) -> str:
    """Horizontal bars per bucket: mean score and pass rate, on a 0..1 scale."""
    label_w, bar_w, row_h = 230, 420, 34
    height = 30 + row_h * len(buckets)
    parts = [
        f'<svg id="bucket-chart" xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 60}"'
        f' height="{height}" role="img" aria-label="mean score and pass rate per bucket">'
    ]
    for tick in (0, 0.5, 1):
        x = label_w + tick * bar_w
        parts.append(f'<line x1="{x}" y1="10" x2="{x}" y2="{height - 15}" stroke="#ddd"/>')
        parts.append(f'<text x="{x}" y="{height - 2}" text-anchor="middle">{tick}</text>')
    for i, (key, b) in enumerate(buckets.items()):
        y = 12 + i * row_h
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">{escape(key)}'
            f"{' (regression)' if b.get('kind') == 'regression' else ''}</text>"
        )
        for j, (metric, colour) in enumerate((("mean_score", _SCORE), ("pass_rate", _PASS))):
            value = b.get(metric)
            width = round((value or 0) * bar_w, 1)
            parts.append(
                f'<rect class="bar {metric}" data-bucket="{escape(key)}" x="{label_w}" '
                f'y="{y + j * 13}" width="{width}" height="12" fill="{colour}">'
                f"<title>{escape(key)} {metric}: {_fmt(value)}</title></rect>"
            )
            parts.append(
                f'<text x="{label_w + width + 4}" y="{y + j * 13 + 10}">{_fmt(value)}</text>'
            )
    parts.append("</svg>")
    legend = (
        f'<p class="legend"><span><i class="swatch" style="background:{_SCORE}"></i>mean score'
        f'</span><span><i class="swatch" style="background:{_PASS}"></i>pass rate</span></p>'
    )
    return "".join(parts) + legend


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _entry(entry: Mapping[str, Any]) -> str:
    role = str(entry.get("role", ""))
    title = f"{role} · {entry.get('skill', '')}"
    if entry.get("name"):
        title += f" · {entry['name']}"
    if entry.get("status") == "error":
        title += " · error"
    body = escape(str(entry.get("content") or ""))
    if entry.get("tool_calls"):
        body += escape("\n" + json.dumps(entry["tool_calls"], ensure_ascii=False, indent=1))
    return f'<div class="entry role-{escape(role)}"><b>{escape(title)}</b><pre>{body}</pre></div>'


def _trial(task_id: str, trial: Mapping[str, Any]) -> str:
    grades = _table(
        ["grader", "score", "verdict", "rationale"],
        [
            [escape(g["name"]), _fmt(g["score"]), _verdict(g["passed"]), escape(g["rationale"])]
            for g in trial["grades"]
        ],
        "grades",
    )
    diff = "".join(
        f"<h4>{escape(c['change'])}: {escape(c['path'])}</h4><pre>{escape(c['diff'])}</pre>"
        for c in trial["diff"]
    )
    transcript = "".join(_entry(e) for e in trial["transcript"])
    env = escape(json.dumps(trial["environment"], ensure_ascii=False, indent=1, default=str))
    return (
        f'<div class="trial" id="trial-{escape(trial["trial_id"])}">'
        f"<h3>{escape(task_id)} (epoch {trial['epoch']}): score {_fmt(trial['score'])}, "
        f"{_verdict(trial['passed'])}, status {escape(str(trial['status']))}</h3>{grades}"
        f'<details class="environment"><summary>environment state</summary><pre>{env}</pre>'
        "</details>"
        f'<details class="diff"><summary>workspace diff ({len(trial["diff"])} file(s))</summary>'
        f"{diff or '<p>no change</p>'}</details>"
        f'<details class="transcript"><summary>transcript ({len(trial["transcript"])} '
        f"entries)</summary>{transcript or '<p>empty</p>'}</details></div>"
    )


def render_html(report: Mapping[str, Any]) -> str:
    """The whole page; no external resources, so it opens offline and can be mailed."""
    ks = list(report["summary"]["pass_at_k"])
    bucket_rows = [
        [
            escape(key),
            f'<span class="kind-{escape(b["kind"])}">{escape(b["kind"])}</span>',
            str(b["tasks"]),
            str(b["trials"]),
            _fmt(b["mean_score"]),
            _fmt(b["pass_rate"]),
            *(_fmt(b["pass_at_k"][k]) for k in ks),
        ]
        for key, b in report["buckets"].items()
    ]
    grader_rows = [
        [
            escape(n),
            str(g["scored"]),
            str(g["not_scored"]),
            _fmt(g["mean_score"]),
            _fmt(g["pass_rate"]),
        ]
        for n, g in report["graders"].items()
    ]
    tasks = "".join(
        f'<section class="task" id="task-{escape(t["id"])}"><h2>{escape(t["id"])} '
        f"<small>({escape(t['bucket_key'])}, mean {_fmt(t['mean_score'])})</small></h2>"
        + "".join(_trial(t["id"], trial) for trial in t["trials"])
        + "</section>"
        for t in report["tasks"]
    )
    models = ", ".join(f"{k}={v}" for k, v in (report.get("models") or {}).items())
    title = escape(f"Eval report: {report.get('suite')}")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{_CSS}</style></head><body><h1>{title}</h1>"
        f"<p>run {escape(str(report.get('run_id')))} · {escape(str(report.get('started_at')))} · "
        f"{escape(str(report.get('epochs')))} epoch(s) · models: {escape(models)} · judge: "
        f"{escape(str(report.get('judge_model') or 'none'))}</p>"
        f"<h2>Buckets</h2>{bar_chart(report['buckets'])}"
        + _table(
            [
                "bucket",
                "kind",
                "tasks",
                "trials",
                "mean score",
                "pass rate",
                *(f"pass@{k}" for k in ks),
            ],
            bucket_rows,
            "buckets",
        )
        + "<h2>Graders</h2>"
        + _table(
            ["grader", "scored", "not scored", "mean score", "pass rate"], grader_rows, "graders"
        )
        + f"<h2>Tasks</h2>{tasks}</body></html>"
    )
