"""The model never learns what it is graded on: no task id, bucket, description or grader
config of a built-in suite reaches any request an eval trial sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from endpoint import serve, text

from skilldeck import Settings
from skilldeck.evals import run_suite
from skilldeck.evals.suites import suite_for_skill

pytestmark = [pytest.mark.L2, pytest.mark.slow]


@pytest.mark.parametrize("skill", ["card-agent", "pkm-agent", "litigation-intake"])
def test_no_prompt_of_an_eval_trial_names_its_case(skill: str, tmp_path: Path) -> None:
    suite = suite_for_skill(skill)
    # Every reply breaks the contract: each trial sends its first prompt and its re-asks.
    with serve([lambda body: text("{}")] * 10_000) as endpoint:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, api_key="local", base_url=endpoint.url, output_mode="schema"
        )
        report = run_suite(suite, out=tmp_path / "o", model="compatible:local", settings=settings)
    assert len(report["tasks"]) == len(suite.tasks) > 0
    assert len(endpoint.requests) >= len(suite.tasks)
    prompts = "\n".join(json.dumps(body, ensure_ascii=False) for body in endpoint.requests)
    secrets: dict[str, Any] = {}
    for task in suite.tasks:
        secrets[f"task id {task.id}"] = task.id
        if task.description:
            secrets[f"description of {task.id}"] = task.description
        for spec in task.graders:
            if spec.config:
                secrets[f"{spec.name} config of {task.id}"] = json.dumps(spec.config)
    for task in suite.tasks:
        if "/" in task.bucket or "_" in task.bucket:  # a one-word bucket is an ordinary word
            secrets[f"bucket {task.bucket}"] = task.bucket
    leaked = [label for label, value in secrets.items() if value in prompts]
    assert not leaked, leaked
