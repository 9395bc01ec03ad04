"""Real-model runs, replayed: every cassette under ``tests/cassettes/real/`` was recorded from a
real model by ``bench/real_model.py --record`` (its header names the model, output mode and
date). Each is replayed on the real graph with the scripted provider: every request must match
the recorded one (else the run fails as stale, naming case and skill: record it again) and
every task must get the verdict it got live."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from skilldeck import Settings
from skilldeck.evals import run_suite
from skilldeck.evals.suites import suite_for_skill

pytestmark = [pytest.mark.L2, pytest.mark.slow]

RECORDED = sorted((Path(__file__).parent / "cassettes" / "real").rglob("*.yaml"))


def test_real_recordings_are_committed() -> None:
    assert RECORDED, "no recorded real-model cassettes under tests/cassettes/real/"


@pytest.mark.parametrize("cassette", RECORDED, ids=lambda p: p.parent.name + "/" + p.stem)
def test_a_recorded_real_run_replays_with_the_same_verdicts(cassette: Path, tmp_path: Path) -> None:
    header: dict[str, Any] = yaml.safe_load(cassette.read_text("utf-8"))["recorded"]
    (skill,) = header["models"]
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, output_mode=header["output_modes"][skill]
    )
    suite = suite_for_skill(skill)  # the recorded tasks only (a bench may sample a suite)
    suite = dataclasses.replace(
        suite, tasks=tuple(t for t in suite.tasks if t.id in header["passed"])
    )
    assert len(suite.tasks) == len(header["passed"]), "a recorded task left the suite"
    report = run_suite(suite, out=tmp_path, model=f"scripted:{cassette}", settings=settings)
    stale = [
        f"{task['id']}: {trial['error']['message']}"
        for task in report["tasks"]
        for trial in task["trials"]
        if trial["error"] and "StaleCassetteError" in trial["error"].get("message", "")
    ]
    assert not stale, "\n".join(stale)
    verdicts = {t["id"]: t["trials"][0]["passed"] for t in report["tasks"]}
    assert verdicts == header["passed"]
