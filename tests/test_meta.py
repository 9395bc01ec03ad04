"""``skill.meta.json`` has one model: it parses the file, and the shipped JSON Schema and the
docs' field reference are generated from it (and fail here when they drift)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import write_bundle
from jsonschema import Draft202012Validator

from skilldeck.check import check_skills
from skilldeck.errors import BundleError
from skilldeck.skills import builtin_skills_dir, load_bundle
from skilldeck.skills import meta_schema as generated
from skilldeck.skills.meta import SkillMeta
from skilldeck.skills.problems import Problems
from skilldeck.skills.template import TEMPLATE_DIR

pytestmark = pytest.mark.L2


def _problems(value: Any) -> list[tuple[str, str]]:
    problems = Problems()
    assert SkillMeta.parse(value, "skill.meta.json", problems) is None
    return [(p.json_path, p.message) for p in problems.items]


# -- generated files ------------------------------------------------------------------------


def test_the_shipped_schema_is_generated_from_the_model() -> None:
    shipped = generated.SCHEMA_FILE.read_text("utf-8")
    assert shipped == generated.schema_text(), "run: python -m skilldeck.skills.meta_schema --write"
    schema = json.loads(shipped)
    Draft202012Validator.check_schema(schema)
    assert schema["$id"] == generated.SCHEMA_ID
    assert schema["required"] == ["name", "description"]


def test_check_finds_a_drifted_schema_or_table_and_write_mends_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, docs = tmp_path / "skill.meta.schema.json", tmp_path / "skills.md"
    shutil.copy(generated.SCHEMA_FILE, schema)
    shutil.copy(generated.DOCS_FILE, docs)
    monkeypatch.setattr(generated, "SCHEMA_FILE", schema)
    monkeypatch.setattr(generated, "DOCS_FILE", docs)
    assert generated.main(["--check"]) == 0

    schema.write_text(schema.read_text("utf-8").replace('"minimum": 1', '"minimum": 0', 1))
    row = "| `priority` | integer | `0` |"
    docs.write_text(docs.read_text("utf-8").replace(row, "| `priority` | integer | `1` |"))
    assert generated.main(["--check"]) == 1
    said = capsys.readouterr().out
    assert f"{schema}: out of date" in said and f"{docs}: out of date" in said

    assert generated.main(["--write"]) == 0
    assert generated.main(["--check"]) == 0
    assert row in docs.read_text("utf-8")

    docs.write_text("no markers here\n")
    with pytest.raises(SystemExit):
        generated.main(["--check"])
    assert "markers" in capsys.readouterr().err


def test_print_writes_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert generated.main([]) == 0
    assert json.loads(capsys.readouterr().out) == generated.meta_json_schema()


# -- the model and its schema agree ---------------------------------------------------------

GOOD: list[dict[str, Any]] = [
    {"name": "a", "description": "d"},
    {
        "$schema": "../skill.meta.schema.json",
        "name": "a-b_1",
        "description": "d",
        "x-owner": "finance",
        "execution_config": {"mode": "my-plugin-mode", "x-my-plugin": {"depth": 2}},
        "examples": {"shown": 8, "match": "input.text"},
    },
]
BAD: list[dict[str, Any]] = [
    {"name": "a"},
    {"name": "a", "description": "d", "colour": "red"},
    {"name": "a", "description": "d", "execution_config": {"colour": "red"}},
    {"name": "a", "description": "d", "triggers": {"x-own": 1}},  # only two objects are open
    {"name": "A", "description": "d"},
    {"name": "a", "description": ""},
    {"name": "a", "description": "d", "priority": "1"},
    {"name": "a", "description": "d", "priority": True},
    {"name": "a", "description": "d", "tools": ["t", "t"]},
    {"name": "a", "description": "d", "tools": ["has space"]},
    {"name": "a", "description": "d", "references": "always"},
    {"name": "a", "description": "d", "examples": {"shown": 9}},
    {"name": "a", "description": "d", "outputs": {"provides": ["summary"]}},
    {"name": "a", "description": "d", "execution_config": {"temperature": "0.2"}},
    {"name": "a", "description": "d", "execution_config": {"tool_groups": {"g": ["t"]}}},
    {"name": "a", "description": "d", "execution_config": {"tool_after": {"t": []}}},
]


def _builtin_metas() -> list[Any]:
    """The built-in bundles' files and the template's (as ``skilldeck new t`` writes it)."""
    folders = [f for f in sorted(builtin_skills_dir().iterdir()) if f != TEMPLATE_DIR]
    files = [f / "skill.meta.json" for f in (*folders, TEMPLATE_DIR)]
    return [
        pytest.param(json.loads(f.read_text("utf-8").replace("{{name}}", "t")), id=f.parent.name)
        for f in files
        if f.is_file()
    ]


@pytest.mark.parametrize("value", [*GOOD, *_builtin_metas()])
def test_what_the_model_takes_the_schema_takes(value: dict[str, Any]) -> None:
    assert SkillMeta.parse(value, "skill.meta.json", Problems()) is not None
    schema = Draft202012Validator(generated.meta_json_schema())
    assert [e.message for e in schema.iter_errors(value)] == []


@pytest.mark.parametrize("value", BAD)
def test_what_the_model_refuses_the_schema_refuses(value: dict[str, Any]) -> None:
    assert _problems(value)
    assert not Draft202012Validator(generated.meta_json_schema()).is_valid(value)


# -- parsing ----------------------------------------------------------------------------------


def test_every_problem_of_the_file_at_once_at_its_path() -> None:
    value = {
        "name": "Alpha",
        "colour": "red",
        "trigers": {},
        "priority": "high",
        "tools": "file__parse",
        "references": "always",
        "triggers": {"state_conditions": ["__import__('os')", 4]},
        "requires": {"any": ["state.x == 1", "state.x == (1"]},
        "outputs": {"provides": ["summary"], "matter": ["matter.a", "matter.a"]},
        "examples": {"shown": 0},
        "execution_config": {"temperature": 5, "tool_groups": {"g": ["a"]}, "zz": 1},
    }
    found = _problems(value)
    assert found == [
        (
            "$.name",
            "\"Alpha\": a skill name is lowercase letters, digits, '-' and '_', and starts with "
            "a letter or digit (it is also the folder's name)",
        ),
        ("$", "missing required key 'description'"),
        ("$.priority", 'must be an integer, not a string ("high")'),
        (
            "$.triggers.state_conditions[0]",
            "dunder name '__import__' is not allowed at column 1 in \"__import__('os')\"",
        ),
        ("$.triggers.state_conditions[1]", "must be a string, not a number (4)"),
        (
            "$.requires.any[1]",
            "expected ')', got end of expression at column 14 in 'state.x == (1'",
        ),
        ("$.examples.shown", "must be at least 1, not 0"),
        ("$.references", 'must be one of "on_demand", "inline", not "always"'),
        ("$.tools", 'must be a list, not a string ("file__parse")'),
        (
            "$.outputs.provides[0]",
            '"summary": a provided field is a dot path under profile, e.g. profile.summary',
        ),
        ("$.outputs.matter", 'lists "matter.a" more than once'),
        ("$.execution_config.temperature", "must be at most 2, not 5"),
        ("$.execution_config.tool_groups.g", "must have at least 2 items"),
        (
            "$.execution_config",
            "unknown key 'zz'; the keys are: provider, model, temperature, max_tokens, base_url, "
            "mode, max_tool_rounds, output_mode, tool_choice, tool_limits, tool_groups, "
            "tool_after; keys of your own must start with 'x-'",
        ),
        (
            "$",
            "unknown keys 'colour', 'trigers' (did you mean 'triggers'?); the keys are: name, "
            "description, version, priority, triggers, requires, examples, references, on_change, "
            "tools, outputs, execution_config, $schema; keys of your own must start with 'x-'",
        ),
    ]


def test_a_file_that_is_not_an_object() -> None:
    assert _problems([1]) == [("$", "must be an object, not a list ([1])")]


def test_keys_of_ones_own_are_kept_for_plugins() -> None:
    meta = SkillMeta.parse(GOOD[1], "skill.meta.json", Problems())
    assert meta is not None
    assert meta.extensions == {"x-owner": "finance"}
    assert meta.execution_config.extensions == {"x-my-plugin": {"depth": 2}}
    assert meta.schema_uri == "../skill.meta.schema.json"
    # What the file said, and only that, comes back out (conditions as their text).
    written = meta.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert written == {k: v for k, v in GOOD[1].items() if not k.startswith("x-")} | {
        "execution_config": {"mode": "my-plugin-mode"}
    }


def test_conditions_are_parsed_once_into_the_model() -> None:
    value = {"name": "a", "description": "d", "requires": {"all": ["state.n >= 3"]}}
    meta = SkillMeta.parse(value, "skill.meta.json", Problems())
    assert meta is not None
    (condition,) = meta.requires.all
    assert condition.evaluate({"n": 3}) and not condition.evaluate({"n": 2})
    assert meta.model_dump(mode="json")["requires"]["all"] == ["state.n >= 3"]


# -- modes are the deck's: an open set at load, checked at build ----------------------------


@pytest.mark.parametrize(
    ("setting", "value"), [("mode", "from-a-plugin"), ("output_mode", "grammar")]
)
def test_a_mode_the_deck_lacks_loads_and_is_refused_by_the_deck(
    skills_dir: Path, make_deck: Callable[..., Any], setting: str, value: str
) -> None:
    folder = write_bundle(skills_dir, "alpha", meta={"execution_config": {setting: value}})
    assert getattr(load_bundle(folder).execution, setting) == value
    where = f"$.execution_config.{setting}"
    checked = [p for p in check_skills(skills_dir).problems if p.json_path == where]
    assert [p.file for p in checked] == [str(folder / "skill.meta.json")]
    assert f"{value!r} is not available; available: " in checked[0].message
    with pytest.raises(BundleError) as info:
        make_deck(skills_dir, checkpointer="memory://")
    assert where in [p.json_path for p in info.value.problems]
