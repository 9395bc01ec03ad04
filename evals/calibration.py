"""Judge calibration: agreement between a report's judge verdicts and human labels.

A labels file (YAML, JSON or JSONL) lists ``{task, grader, label, trial?}``: ``label`` is
``true``/``false`` (or ``pass``/``fail``); ``trial`` (a trial id or an epoch number) narrows
it to one trial, otherwise it applies to every trial of the task. Agreement is reported as
accuracy and Cohen's kappa over the pairs whose judge verdict was scored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from skilldeck.errors import EvalConfigError

__all__ = ["Calibration", "agreement", "calibrate", "load_labels"]


@dataclass(frozen=True, slots=True)
class Calibration:
    """``accuracy`` and ``kappa`` (``None`` when undefined: both raters constant and equal)."""

    pairs: int
    accuracy: float | None
    kappa: float | None
    confusion: dict[str, int]
    not_scored: int = 0
    unmatched: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "accuracy": self.accuracy,
            "kappa": self.kappa,
            "confusion": self.confusion,
            "not_scored": self.not_scored,
            "unmatched": self.unmatched,
        }


def agreement(pairs: Sequence[tuple[bool, bool]]) -> Calibration:
    """Accuracy and Cohen's kappa of ``(judge, human)`` verdict pairs."""
    n = len(pairs)
    confusion = {
        "judge_pass_human_pass": sum(j and h for j, h in pairs),
        "judge_pass_human_fail": sum(j and not h for j, h in pairs),
        "judge_fail_human_pass": sum(h and not j for j, h in pairs),
        "judge_fail_human_fail": sum(not j and not h for j, h in pairs),
    }
    if n == 0:
        return Calibration(0, None, None, confusion)
    observed = sum(j == h for j, h in pairs) / n
    judge_yes = sum(j for j, _ in pairs) / n
    human_yes = sum(h for _, h in pairs) / n
    expected = judge_yes * human_yes + (1 - judge_yes) * (1 - human_yes)
    kappa = None if expected >= 1 else (observed - expected) / (1 - expected)
    return Calibration(n, round(observed, 6), None if kappa is None else round(kappa, 6), confusion)


def _label(raw: Any, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    if raw in ("pass", "fail"):
        return bool(raw == "pass")
    raise EvalConfigError(f"{where}: label must be true/false or pass/fail, got {raw!r}")


def load_labels(path: str | Path) -> list[dict[str, Any]]:
    """Read and check a labels file."""
    path = Path(path)
    if not path.is_file():
        raise EvalConfigError(f"labels file {str(path)!r} does not exist")
    text = path.read_text("utf-8")
    try:
        if path.suffix == ".jsonl":
            items: Any = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            items = yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise EvalConfigError(f"{path}: unreadable labels: {exc}") from None
    if not isinstance(items, list) or not items:
        raise EvalConfigError(f"{path}: expected a non-empty list of {{task, grader, label}}")
    labels = []
    for i, item in enumerate(items):
        where = f"{path}: [{i}]"
        if not isinstance(item, Mapping) or not all(
            isinstance(item.get(k), str) for k in ("task", "grader")
        ):
            raise EvalConfigError(f"{where}: needs string task and grader")
        labels.append({**item, "label": _label(item.get("label"), where)})
    return labels


def calibrate(report: Mapping[str, Any], labels: Sequence[Mapping[str, Any]]) -> Calibration:
    """Pair each human label with the report's verdicts for that task, grader and trial."""
    tasks = {t["id"]: t for t in report["tasks"]}
    pairs: list[tuple[bool, bool]] = []
    not_scored = 0
    unmatched: list[str] = []
    for item in labels:
        trials = tasks.get(item["task"], {}).get("trials", [])
        wanted = item.get("trial")
        if wanted is not None:
            trials = [t for t in trials if wanted in (t["trial_id"], t["epoch"])]
        verdicts = [g["passed"] for t in trials for g in t["grades"] if g["name"] == item["grader"]]
        if not verdicts:
            unmatched.append(f"{item['task']}/{item['grader']}")
        for verdict in verdicts:
            if verdict is None:
                not_scored += 1
            else:
                pairs.append((bool(verdict), bool(item["label"])))
    result = agreement(pairs)
    return Calibration(
        result.pairs, result.accuracy, result.kappa, result.confusion, not_scored, unmatched
    )
