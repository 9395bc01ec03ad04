"""docs/skills.md works as written: its files make a skill that loads, runs and is evaluated,
its output examples pass that skill's contract, and its commands run; docs/plugins.md's plugin
adds its tool, execution mode, output mode and grader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest
from markdown_blocks import Block, blocks
from pydantic import BaseModel
from shell import run_block

from skilldeck.check import check_skills
from skilldeck.skills import load_bundle
from skilldeck.skills.contract import check_field_keys, format_errors
from skilldeck.skills.meta import SkillMeta
from skilldeck.skills.meta_schema import with_reference

pytestmark = pytest.mark.L2

DOC = Path(__file__).resolve().parents[1] / "docs" / "skills.md"
BLOCKS = blocks(DOC)
FILES = [b for b in BLOCKS if b.title]
OUTPUTS = [b for b in BLOCKS if b.lang == "json" and not b.title]
SHELL = [b for b in BLOCKS if b.lang == "bash"]


def write_files(root: Path) -> None:
    for block in FILES:
        target = root / block.title  # type: ignore[operator]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.code, "utf-8")


def test_every_block_is_a_file_an_output_or_a_command() -> None:
    others = [b for b in BLOCKS if b not in FILES + OUTPUTS + SHELL]
    # The only other block is the folder picture, which has no language.
    assert [b.lang for b in others] == [""]
    assert {b.title for b in FILES} >= {
        "expense-check/skill.meta.json",
        "expense-check/SKILL.md",
        "expense-check/assets/output_schema.json",
        "expense-check/scripts/validate.py",
        "expense-check/scripts/preprocess.py",
        "expense-check/scripts/eval_setup.py",
        "expense-check/evals/scripted.yaml",
        "expense-check/cases.yaml",
        "chats.jsonl",
    }


def test_the_example_skill_checks_clean(tmp_path: Path) -> None:
    write_files(tmp_path)
    folder = tmp_path / "expense-check"
    report = check_skills(folder, trust=[folder])
    assert report.problems == (), [str(p) for p in report.problems]
    assert [b.name for b in report.bundles] == ["expense-check"]
    # Not trusted yet (as the page says, until `skilldeck trust`): one warning, naming them.
    (warning,) = check_skills(folder).problems
    assert (warning.severity, warning.rule) == ("warning", "trust")
    for script in ("preprocess", "validate", "eval_setup", "rules"):
        assert f"scripts/{script}.py" in warning.message


def _fields(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every field of ``model`` as the file spells it, an object's fields as dot paths."""
    for name, info in model.model_fields.items():
        key = info.alias or name
        held = [t for t in get_args(info.annotation) or (info.annotation,) if isinstance(t, type)]
        nested = [t for t in held if issubclass(t, BaseModel)]
        yield from _fields(nested[0], f"{prefix}{key}.") if nested else [f"{prefix}{key}"]


def test_the_meta_table_is_generated_from_the_model() -> None:
    text = DOC.read_text("utf-8")
    # What `python -m skilldeck.skills.meta_schema --write` would write: the model's table.
    assert with_reference(text) == text, "run: python -m skilldeck.skills.meta_schema --write"
    fields = list(_fields(SkillMeta))
    assert {"name", "triggers.contexts", "examples.match", "execution_config.mode"} <= set(fields)
    missing = [f for f in fields if f"| `{f}` |" not in text]
    assert not missing, f"docs/skills.md does not describe: {missing}"


@pytest.mark.parametrize("block", OUTPUTS, ids=str)
def test_output_examples_follow_the_contract(block: Block, tmp_path: Path) -> None:
    write_files(tmp_path)
    bundle = load_bundle(tmp_path / "expense-check")
    output = json.loads(block.code)
    assert format_errors(bundle.validator, output) == []
    questions = output["control"].get("questions", [])
    assert check_field_keys(questions, bundle.provides, bundle.data_keys) == []


@pytest.mark.subprocess
def test_the_commands_run_in_order(tmp_path: Path) -> None:
    """The shell blocks, in order, in one folder holding the doc's files (as a reader who
    follows the page has them)."""
    write_files(tmp_path)
    for block in SHELL:
        done = run_block(block.code, tmp_path)
        assert done.returncode == 0, f"{block}\n{done.stdout}\n{done.stderr}"
    assert json.loads((tmp_path / "done.json").read_text())["status"] == "finished"
    report = json.loads((tmp_path / "expense-report" / "report.json").read_text())
    assert report["summary"]["pass_rate"] == 1.0, report["summary"]
    assert (tmp_path / "my-skill" / "SKILL.md").is_file()


# -- docs/plugins.md -------------------------------------------------------------------------
# Its commands install the plugin with pip: tests/test_plugin_install.py runs them in a
# virtualenv of their own. Here its files run as they are, imported without installing.
PLUGINS = DOC.parent / "plugins.md"
PLUGIN_BLOCKS = blocks(PLUGINS)

_WITHOUT_INSTALLING = """
import json, shutil, sys
from pathlib import Path

import weather_plugin  # what the entry point does: its decorators register
from endpoint import serve, settings_for, text

from skilldeck import Settings, SkillDeck
from skilldeck.evals import run_suite
from skilldeck.evals.suites import suite_for_skill

settings = Settings(_env_file=None)
with SkillDeck("weather-skills", checkpointer="memory://", settings=settings) as deck:
    oslo = deck.run({"city": "Oslo"}, context="weather")
    bergen = deck.run({"city": "Bergen"}, context="weather")
suite = suite_for_skill("forecast", [Path("weather-skills")])
report = run_suite(suite, out=Path("report"), settings=settings)

# The output mode, on a copy of the skill that asks a model in single mode.
shutil.copytree("weather-skills/forecast", "asking/forecast")
meta_file = Path("asking/forecast/skill.meta.json")
meta = json.loads(meta_file.read_text())
meta["execution_config"] = {"mode": "single", "output_mode": "guided"}
meta_file.write_text(json.dumps(meta))
final = {"response": "Lisbon: sun", "profile": {}, "data": {"forecast": None},
         "control": {"action": "finish"}}
with serve([text(json.dumps({"final": final}))]) as endpoint:
    with SkillDeck("asking", checkpointer="memory://", settings=settings_for(endpoint)) as deck:
        asked = deck.run({"city": "Lisbon"}, context="weather")
print(json.dumps({
    "oslo": [oslo.status, oslo.state.get("response"), oslo.state.get("forecast")],
    "bergen": [bergen.status, bergen.state.get("response")],
    "pass_rate": report["summary"]["pass_rate"],
    "graders": sorted(
        {g["name"] for t in report["tasks"] for r in t["trials"] for g in r["grades"]}
    ),
    "asked": [asked.status, asked.state.get("attempt", {}).get("output_mode")],
    "request": endpoint.requests[0],
}))
"""


def test_the_plugin_page_is_files_and_its_commands() -> None:
    titled = [b for b in PLUGIN_BLOCKS if b.title]
    assert [b.lang for b in PLUGIN_BLOCKS if not b.title] == ["bash"]
    assert {b.title for b in titled} == {
        "weather-plugin/pyproject.toml",
        "weather-plugin/weather_plugin.py",
        "weather-skills/forecast/SKILL.md",
        "weather-skills/forecast/skill.meta.json",
        "weather-skills/forecast/assets/output_schema.json",
        "weather-skills/forecast/cases.yaml",
    }


@pytest.mark.wheel
def test_the_plugin_page_works_as_written(tmp_path: Path) -> None:
    """The plugin's tool, execution mode and grader run a skill and its eval; its output mode
    binds the reply's grammar as vLLM's ``guided_json`` (in a process of its own, as the
    plugin's names stay registered)."""
    for block in PLUGIN_BLOCKS:
        if block.title:
            (tmp_path / block.title).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / block.title).write_text(block.code, "utf-8")
    tests = Path(__file__).parent
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SKILLDECK_")},
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "weather-plugin"), str(tests)]),
        "SKILLDECK_HOME": str(tmp_path / "home"),
    }
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_INSTALLING],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    forecast = {"city": "Oslo", "sky": "snow", "high_c": -2}
    assert seen["oslo"] == ["finished", "Oslo: snow, up to -2 °C", forecast]
    assert seen["bergen"] == ["finished", "Error: no forecast for 'Bergen'; cities: lisbon, oslo"]
    assert seen["pass_rate"] == 1.0
    assert seen["graders"] == ["forecast_mentions", "json_path_equals"]
    assert seen["asked"] == ["finished", "guided"]
    request = seen["request"]
    assert "response_format" not in request
    grammar = request["guided_json"]  # the envelope schema mode would send as response_format
    calls = [
        b["properties"]["tool"]["const"] for b in grammar["anyOf"] if "tool" in b["properties"]
    ]
    assert calls == ["weather__forecast"] and grammar["anyOf"][-1]["required"] == ["final"]
