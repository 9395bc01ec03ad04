"""``eval export-failures``: what a prompt iteration needs, in one folder (seed 003's loop).

Layout of ``out``::

    README.md                      failing trials by bucket, each grader's rationale, links
    report.json                    the report as run
    skills/<skill>/SKILL.md        each failing skill's instructions as they are now
    trials/<task>-e<epoch>/
        grades.md                  every grader's score and rationale, the run's error
        transcript.md              what the model was shown and answered, in order
        workspace.diff             the trial's file changes (unified diff)

Read it, make the smallest change to a ``SKILL.md`` that explains one failure bucket, run the
suite again and ``eval compare`` the two reports.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skilldeck.errors import EvalConfigError
from skilldeck.skills.bundle import SkillBundle

__all__ = ["export_failures"]


def export_failures(
    report: Mapping[str, Any], out: Path, bundles: Sequence[SkillBundle]
) -> list[Path]:
    """Write the failing trials of ``report`` under ``out`` (see the module docstring) and
    return the trial folders; ``bundles`` give each skill's current ``SKILL.md``.

    Raises:
        EvalConfigError: ``out`` exists and is not empty, or a failing skill is not among
            ``bundles``.
    """
    if out.exists() and any(out.iterdir()):
        raise EvalConfigError(f"{out} is not empty: export into a new folder")
    by_name = {b.name: b for b in bundles}
    failing = [
        (task, trial)
        for task in report["tasks"]
        for trial in task["trials"]
        if trial.get("passed") is False
    ]
    skills = sorted({str(task["skill"]) for task, _ in failing})
    missing = [s for s in skills if s not in by_name]
    if missing:
        raise EvalConfigError(
            f"no bundle for skill(s) {', '.join(missing)}: pass the folder that holds them "
            "with --skills"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False), "utf-8")
    for skill in skills:
        (out / "skills" / skill).mkdir(parents=True)
        shutil.copyfile(by_name[skill].path / "SKILL.md", out / "skills" / skill / "SKILL.md")
    folders = [_trial(out / "trials", task, trial) for task, trial in failing]
    (out / "README.md").write_text(_index(report, failing, folders, out), "utf-8")
    return folders


def _trial(root: Path, task: Mapping[str, Any], trial: Mapping[str, Any]) -> Path:
    folder = root / f"{_safe(task['id'])}-e{trial['epoch']}"
    folder.mkdir(parents=True)
    lines = [f"# {task['id']} (epoch {trial['epoch']}, {task['bucket_key']})", ""]
    lines += [f"status: {trial['status']}, score {trial['score']}", ""]
    if trial.get("error"):
        lines += ["error:", "", "```json", json.dumps(trial["error"], indent=1), "```", ""]
    for grade in trial["grades"]:
        verdict = {True: "pass", False: "FAIL", None: "not scored"}[grade["passed"]]
        lines.append(f"- **{grade['name']}** {verdict} ({grade['score']}): {grade['rationale']}")
    (folder / "grades.md").write_text("\n".join(lines) + "\n", "utf-8")
    said = [f"# transcript of {task['id']}", ""]
    for entry in trial["transcript"]:
        who = entry["role"] + (f" {entry['name']}" if entry.get("name") else "")
        said += [f"## {who} ({entry['skill']}, turn {entry['turn']})", "", entry["content"], ""]
        for call in entry.get("tool_calls") or []:
            said.append(f"calls `{call['name']}` with `{json.dumps(call['args'])}`")
    (folder / "transcript.md").write_text("\n".join(said) + "\n", "utf-8")
    diff = "".join(change["diff"] for change in trial["diff"])
    (folder / "workspace.diff").write_text(diff, "utf-8")
    return folder


def _index(
    report: Mapping[str, Any],
    failing: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    folders: Sequence[Path],
    out: Path,
) -> str:
    lines = [f"# Failing trials of {report.get('suite')} ({len(failing)})", ""]
    by_bucket: dict[str, list[str]] = {}
    for (task, trial), folder in zip(failing, folders, strict=True):
        reasons = "; ".join(
            f"{g['name']}: {g['rationale']}" for g in trial["grades"] if g["passed"] is False
        )
        link = folder.relative_to(out).as_posix()
        by_bucket.setdefault(task["bucket_key"], []).append(
            f"- [{task['id']}]({link}/grades.md) {reasons or trial['status']}"
        )
    for bucket in sorted(by_bucket):
        lines += [f"## {bucket}", "", *by_bucket[bucket], ""]
    return "\n".join(lines)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)
