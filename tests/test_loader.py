"""Loading and validating skill bundles (seed 004 layout and plain Agent Skills)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import output, write_bundle

from skilldeck.errors import BundleError
from skilldeck.skills import builtin_skills_dir, load_bundle, load_skills
from skilldeck.skills.tokens import estimate_tokens, truncate_to_tokens

pytestmark = pytest.mark.L2

# Seed 004, section 2, verbatim.
SEED_META: dict[str, Any] = {
    "name": "litigation-intake",
    "description": "诉讼案件受理:抽取当事人/事实/诉请/证据线索;信息不足则发起补问卡片。",
    "triggers": {
        "contexts": ["matter"],
        "state_conditions": ["state.profile.intake_status != 'completed'"],
    },
    "requires": {"all": ["state.matter_id != null"]},
    "tools": ["file__get_info", "file__parse", "element__extract"],
    "outputs": {
        "provides": [
            "profile.summary",
            "profile.plaintiff",
            "profile.defendant",
            "profile.facts",
            "profile.claims",
            "profile.intake_status",
        ]
    },
    "execution_config": {"provider": "openrouter", "model": "qwen/qwen3-32b", "temperature": 0.2},
}


def _write_schema(folder: Path, schema: Any) -> None:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    (folder / "assets" / "output_schema.json").write_text(text, "utf-8")


def _four_part(profile: dict[str, Any]) -> dict[str, Any]:
    return {"response": "r", "profile": profile, "data": {}, "control": {"action": "finish"}}


# -- the built-in bundle and plain Agent Skills ---------------------------------------------


def test_builtin_litigation_intake_meta_is_the_seed_meta() -> None:
    folder = builtin_skills_dir() / "litigation-intake"
    meta = json.loads((folder / "skill.meta.json").read_text("utf-8"))
    # The seed's meta, and skilldeck's two additions: its short checklist stays in the prompt,
    # and a turn starts by reading the documents (tool_choice).
    assert meta.pop("references") == "inline"
    assert meta["execution_config"].pop("tool_choice") == "file__parse"
    assert meta == SEED_META
    bundles = {b.name: b for b in load_skills(builtin_skills_dir())}
    bundle = bundles["litigation-intake"]
    added = {"references": "inline"}
    execution = {**SEED_META["execution_config"], "tool_choice": "file__parse"}
    # The model holds what the file says, and nothing else (its defaults are not "set").
    written = bundle.meta.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert written == {**SEED_META, **added, "execution_config": execution}
    assert bundle.execution.tool_choice == "file__parse"
    assert bundle.tools == tuple(SEED_META["tools"])
    assert bundle.provides == tuple(SEED_META["outputs"]["provides"])
    assert bundle.contexts == ("matter",)
    assert bundle.execution.provider == "openrouter"
    assert bundle.execution.model == "qwen/qwen3-32b"
    assert bundle.execution.temperature == 0.2
    assert "evidence_list" in bundle.data_keys
    # Provided fields keep their hints, including $refs into the schema's $defs.
    party = {"name": "张三", "type": "person"}
    assert bundle.validator.is_valid(_four_part({"plaintiff": party, "intake_status": "completed"}))
    assert not bundle.validator.is_valid(_four_part({"plaintiff": {**party, "type": "alien"}}))
    assert not bundle.validator.is_valid(_four_part({"intake_status": "done"}))
    assert not bundle.validator.is_valid(_four_part({"court": "x"}))


def test_plain_agent_skill_loads(skills_dir: Path) -> None:
    folder = skills_dir / "summarise"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: summarise\ndescription: Summarise a text.\n---\n# Summarise\nBe brief.\n",
        "utf-8",
    )
    (bundle,) = load_skills(skills_dir)
    assert bundle.name == "summarise"
    assert bundle.description == "Summarise a text."
    assert bundle.instructions == "# Summarise\nBe brief."
    assert bundle.contexts == ("summarise",)
    assert bundle.tools == ()
    assert bundle.provides == ()
    assert bundle.data_keys == ()
    assert bundle.references == ()
    assert bundle.preprocess is None and bundle.validate is None
    assert bundle.validator.is_valid(_four_part({}))
    bad = _four_part({})
    bad["data"] = {"anything": 1}
    assert not bundle.validator.is_valid(bad)


# -- profile rewritten from outputs.provides ------------------------------------------------


def test_profile_schema_is_rewritten_to_provides(skills_dir: Path) -> None:
    folder = write_bundle(
        skills_dir, "alpha", meta={"outputs": {"provides": ["profile.a", "profile.b.c"]}}
    )
    _write_schema(
        folder,
        {
            "properties": {
                "profile": {
                    "properties": {"a": {"type": "string"}, "dropped": {"type": "number"}},
                    "additionalProperties": True,
                },
                "data": {"properties": {"note": {"type": "string"}}},
            }
        },
    )
    bundle = load_bundle(folder)
    profile = bundle.output_schema["properties"]["profile"]
    assert set(profile["properties"]) == {"a", "b"}
    assert set(profile["properties"]["b"]["properties"]) == {"c"}
    assert profile["properties"]["a"] == {"type": "string"}

    valid = bundle.validator.is_valid
    assert valid(_four_part({}))
    assert valid(_four_part({"a": "x", "b": {"c": [1, {"any": "value"}]}}))
    assert not valid(_four_part({"a": 1}))  # the schema's type hint is kept
    assert not valid(_four_part({"dropped": 1}))  # not in provides
    assert not valid(_four_part({"extra": "x"}))
    assert not valid(_four_part({"b": {"c": 1, "d": 2}}))
    assert not valid(_four_part({"b": "not an object"}))


# -- malformed bundles ----------------------------------------------------------------------

Case = Callable[[Path], Any]


def _front_name(root: Path) -> Any:
    write_bundle(root, "alpha", skill_md="---\nname: beta\ndescription: d\n---\nbody\n")
    return root


def _meta_name(root: Path) -> Any:
    write_bundle(root, "alpha", meta={"name": "beta"})
    return root


def _meta_text(text: str) -> Case:
    def case(root: Path) -> Any:
        (write_bundle(root, "alpha") / "skill.meta.json").write_text(text, "utf-8")
        return root

    return case


def _meta(**meta: Any) -> Case:
    def case(root: Path) -> Any:
        write_bundle(root, "alpha", meta=meta)
        return root

    return case


def _schema(schema: Any) -> Case:
    def case(root: Path) -> Any:
        _write_schema(write_bundle(root, "alpha"), schema)
        return root

    return case


def _script(name: str, source: str) -> Case:
    def case(root: Path) -> Any:
        write_bundle(root, "alpha", scripts={name: source})
        return root

    return case


INPUT = "assets/input_schema.json"


def _input(text: str) -> Case:
    def case(root: Path) -> Any:
        (write_bundle(root, "alpha") / INPUT).write_text(text, "utf-8")
        return root

    return case


def _example_outside_input(root: Path) -> Any:
    folder = write_bundle(root, "alpha")
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    (folder / INPUT).write_text(json.dumps(schema), "utf-8")
    example = {"input": {"text": 42}, "reply": {"final": output()["output"]}}
    (folder / "assets" / "examples.jsonl").write_text(json.dumps(example) + "\n", "utf-8")
    return root


def _no_skill_md(root: Path) -> Any:
    (write_bundle(root, "alpha") / "SKILL.md").unlink()
    return root


def _no_meta_no_front(root: Path) -> Any:
    (root / "alpha").mkdir()
    (root / "alpha" / "SKILL.md").write_text("# Alpha\nNo front matter here.\n", "utf-8")
    return root


def _skill_md(body: bytes) -> Case:
    def case(root: Path) -> Any:
        (write_bundle(root, "alpha") / "SKILL.md").write_bytes(body)
        return root

    return case


def _bad_reference(root: Path) -> Any:
    # Inlined references are read at load time (on demand, they are read when asked for).
    folder = write_bundle(
        root, "alpha", meta={"references": "inline"}, references={"a.md": "fine\n"}
    )
    (folder / "references" / "b.md").write_bytes(b"\xff\xfe\x00 not utf-8 \xc3")
    return root


def _duplicate(root: Path) -> Any:
    write_bundle(root / "one", "alpha")
    write_bundle(root / "two", "alpha")
    return [root / "one", root / "two"]


MALFORMED: dict[str, tuple[Case, str, str, str]] = {
    # id: (make, file suffix, json path, reason pattern)
    "meta-name": (_meta_name, "skill.meta.json", "$.name", "folder name 'alpha'"),
    "meta-invalid-json": (
        _meta_text('{\n "name": "alpha",\n}'),
        "skill.meta.json",
        "$",
        r"invalid JSON.*line 3, column 1",
    ),
    # Was skipped without a word: the reader's "no value" and JSON's null were one.
    "meta-null": (_meta_text("null"), "skill.meta.json", "$", "^must be an object, not null"),
    "meta-no-description": (
        _meta_text('{"name": "alpha"}'),
        "skill.meta.json",
        "$",
        "^missing required key 'description'$",
    ),
    "meta-unknown-key": (
        _meta(colour="red"),
        "skill.meta.json",
        "$",
        "^unknown key 'colour'; the keys are: name, description, .*; keys of your own must start "
        "with 'x-'$",
    ),
    "meta-misspelt-key": (
        _meta(trigers={"contexts": ["ctx"]}),
        "skill.meta.json",
        "$",
        "unknown key 'trigers' \\(did you mean 'triggers'\\?\\)",
    ),
    "meta-name-pattern": (
        _meta_text('{"name": "Alpha", "description": "d"}'),
        "skill.meta.json",
        "$.name",
        '^"Alpha": a skill name is lowercase letters',
    ),
    "meta-tools-not-list": (
        _meta(tools="file__parse"),
        "skill.meta.json",
        "$.tools",
        '^must be a list, not a string \\("file__parse"\\)$',
    ),
    "meta-temperature": (
        _meta(execution_config={"temperature": 5}),
        "skill.meta.json",
        "$.execution_config.temperature",
        "^must be at most 2, not 5$",
    ),
    "meta-priority-type": (
        _meta(priority="high"),
        "skill.meta.json",
        "$.priority",
        '^must be an integer, not a string \\("high"\\)$',
    ),
    "schema-invalid": (_schema({"type": 12}), "output_schema.json", "$.type", "12"),
    "schema-nested-invalid": (
        _schema({"properties": {"data": {"properties": {"x": {"minLength": -1}}}}}),
        "output_schema.json",
        "$.properties.data.properties.x.minLength",
        "-1",
    ),
    "schema-not-json": (_schema("{nope"), "output_schema.json", "$", "invalid JSON"),
    # check_schema accepts these; compiling resolves every $ref, so they fail at load, not
    # at the first validation mid-run.
    "schema-dangling-ref": (
        _schema({"properties": {"data": {"properties": {"x": {"$ref": "#/$defs/gone"}}}}}),
        "output_schema.json",
        "$",
        "does not compile: .*/\\$defs/gone",
    ),
    "schema-remote-ref": (
        _schema({"properties": {"data": {"properties": {"x": {"$ref": "https://example.com/x"}}}}}),
        "output_schema.json",
        "$",
        "does not compile: .*https://example.com/x.*[Rr]etriev",
    ),
    "data-additional-properties": (
        _schema({"properties": {"data": {"properties": {}, "additionalProperties": True}}}),
        "output_schema.json",
        "$.properties.data.additionalProperties",
        "false",
    ),
    "control-extra-key": (
        _schema(
            {
                "properties": {
                    "control": {
                        "properties": {"action": {"enum": ["finish"]}, "why": {"type": "string"}}
                    }
                }
            }
        ),
        "output_schema.json",
        "$.properties.control",
        "may only narrow control.action: write",
    ),
    "control-unknown-action": (
        _schema({"properties": {"control": {"properties": {"action": {"enum": ["stop"]}}}}}),
        "output_schema.json",
        "$.properties.control",
        "distinct actions of continue, retry, ask_user, finish; got \\['stop'\\]",
    ),
    "response-boolean-schema": (
        _schema({"properties": {"response": True}}),
        "output_schema.json",
        "$.properties.response",
        "may only cap response's length",
    ),
    "control-boolean-schema": (
        _schema({"properties": {"control": True}}),
        "output_schema.json",
        "$.properties.control",
        "may only narrow control.action",
    ),
    "response-widened": (
        _schema({"properties": {"response": {"type": "object"}}}),
        "output_schema.json",
        "$.properties.response",
        "may only cap response's length",
    ),
    "control-empty-enum": (
        _schema({"properties": {"control": {"properties": {"action": {"enum": []}}}}}),
        "output_schema.json",
        "$.properties.control",
        "got \\[\\]",
    ),
    "tool-choice-without-tools": (
        _meta(tools=[], execution_config={"tool_choice": "required"}),
        "skill.meta.json",
        "$.execution_config.tool_choice",
        "lists no tools to call; drop it",
    ),
    "tool-choice-in-planner-mode": (
        _meta(
            tools=["messages_list"], execution_config={"mode": "planner", "tool_choice": "required"}
        ),
        "skill.meta.json",
        "$.execution_config.tool_choice",
        "the runtime calls the tools",
    ),
    "tool-choice-unknown": (
        _meta(tools=["file__parse"], execution_config={"tool_choice": "any"}),
        "skill.meta.json",
        "$.execution_config.tool_choice",
        "'any' is not one of the skill's tools",
    ),
    "tool-limits-unlisted-tool": (
        _meta(execution_config={"tool_limits": {"file__parse": 1}}),
        "skill.meta.json",
        "$.execution_config.tool_limits.file__parse",
        "list it in tools",
    ),
    "tool-limits-zero": (
        _meta(tools=["file__parse"], execution_config={"tool_limits": {"file__parse": 0}}),
        "skill.meta.json",
        "$.execution_config.tool_limits.file__parse",
        "must be at least 1",
    ),
    "tool-groups-unlisted-member": (
        _meta(
            tools=["file__parse"],
            execution_config={"tool_groups": {"reads": ["file__parse", "file__get_info"]}},
        ),
        "skill.meta.json",
        "$.execution_config.tool_groups.reads",
        "puts 'file__get_info' in 'reads', which the model cannot call here",
    ),
    "tool-groups-named-as-a-tool": (
        _meta(
            tools=["file__parse", "file__get_info"],
            execution_config={"tool_groups": {"file__parse": ["file__parse", "file__get_info"]}},
        ),
        "skill.meta.json",
        "$.execution_config.tool_groups.file__parse",
        "is a tool's name: name the group otherwise",
    ),
    "tool-groups-of-one": (
        _meta(tools=["file__parse"], execution_config={"tool_groups": {"g": ["file__parse"]}}),
        "skill.meta.json",
        "$.execution_config.tool_groups.g",
        "must have at least 2 items",
    ),
    "tool-limits-unknown-group": (
        _meta(tools=["file__parse"], execution_config={"tool_limits": {"reads": 1}}),
        "skill.meta.json",
        "$.execution_config.tool_limits.reads",
        "or name a group of tool_groups",
    ),
    "tool-after-unknown-tool": (
        _meta(tools=["file__parse"], execution_config={"tool_after": {"file__get_info": ["x"]}}),
        "skill.meta.json",
        "$.execution_config.tool_after.file__get_info",
        "tool_after names 'file__get_info', which the model cannot call here",
    ),
    "tool-after-unknown-before": (
        _meta(tools=["file__parse"], execution_config={"tool_after": {"file__parse": ["x"]}}),
        "skill.meta.json",
        "$.execution_config.tool_after.file__parse",
        "offers 'file__parse' after 'x', which is not one of the skill's tools",
    ),
    "condition-dunder": (
        _meta(triggers={"contexts": ["ctx"], "state_conditions": ["__import__('os')"]}),
        "skill.meta.json",
        "$.triggers.state_conditions[0]",
        "dunder name '__import__'",
    ),
    "requires-any-syntax": (
        _meta(requires={"any": ["state.x == 1", "state.x == (1"]}),
        "skill.meta.json",
        "$.requires.any[1]",
        "expected '\\)'",
    ),
    "requires-all-call": (
        _meta(requires={"all": ["len(state.x) > 1"]}),
        "skill.meta.json",
        "$.requires.all[0]",
        "function calls are not allowed",
    ),
    "validate-without-function": (
        _script("validate", "def check(output, state):\n    return None\n"),
        "validate.py",
        "$",
        r"validate\(output, state\)",
    ),
    "preprocess-raises-at-import": (
        _script("preprocess", "raise RuntimeError('boom at import')\n"),
        "preprocess.py",
        "$",
        "import failed: RuntimeError: boom at import",
    ),
    "preprocess-syntax-error": (
        _script("preprocess", "def preprocess(state)\n    return {}\n"),
        "preprocess.py",
        "$",
        "import failed: SyntaxError",
    ),
    "front-matter-invalid-yaml": (
        _skill_md(b"---\nname: alpha\ndescription: [unclosed\n---\nbody\n"),
        "SKILL.md",
        "$.front_matter",
        "invalid YAML: .*line 2",
    ),
    "front-matter-not-mapping": (
        _skill_md(b"---\n- a list\n---\nbody\n"),
        "SKILL.md",
        "$.front_matter",
        "must be a YAML mapping",
    ),
    "missing-skill-md": (_no_skill_md, "SKILL.md", "$", "missing SKILL.md"),
    "no-meta-no-front-matter": (
        _no_meta_no_front,
        "SKILL.md",
        "$.front_matter",
        "front matter with name and description",
    ),
    "reference-not-utf8": (_bad_reference, "b.md", "$", "UTF-8"),
    "duplicate-name": (_duplicate, "two/alpha", "$.name", "also loaded from .*one/alpha"),
    "skills-dir-missing": (lambda root: root / "nope", "nope", "$", "does not exist"),
    "input-schema-not-json": (_input('{"type": "object",}'), INPUT, "$", "JSON"),
    "input-schema-not-an-object": (_input("[1]"), INPUT, "$", "must be a JSON object"),
    "input-schema-not-a-schema": (
        _input('{"properties": {"documents": {"type": "list"}}}'),
        INPUT,
        "$.properties.documents.type",
        "list",
    ),
    "input-schema-not-for-an-object": (
        _input('{"type": "array"}'),
        INPUT,
        "$.type",
        "a run input is a JSON object, never 'array'",
    ),
    "input-schema-broken-ref": (
        _input('{"properties": {"a": {"$ref": "#/$defs/missing"}}}'),
        INPUT,
        "$",
        "does not compile",
    ),
    "example-input-outside-the-input-schema": (
        _example_outside_input,
        "assets/examples.jsonl",
        "$[line 1].input.text",
        "must be text .*input_schema.json",
    ),
}


SKILL_MD_NOT_UTF8 = pytest.param(
    _skill_md(b"---\nname: alpha\ndescription: d\n---\nbody \xff\xfe\n"),
    "SKILL.md",
    "$",
    "UTF-8",
    id="skill-md-not-utf8",
)


@pytest.mark.parametrize(
    ("make", "file", "json_path", "reason"),
    [*(pytest.param(*case, id=name) for name, case in MALFORMED.items()), SKILL_MD_NOT_UTF8],
)
def test_malformed_bundle(
    skills_dir: Path, make: Case, file: str, json_path: str, reason: str
) -> None:
    target = make(skills_dir)
    with pytest.raises(BundleError) as info:
        load_skills(target, trust=True)  # the test's own scripts: imported when trusted
    err = info.value
    assert Path(err.file).as_posix().endswith(file), err.file
    assert err.json_path == json_path
    message = str(err)
    assert "\n" not in message
    assert message.startswith(f"{err.file}: {json_path}: ")
    assert re.search(reason, err.reason), err.reason
    assert err.to_dict()["json_path"] == json_path
    assert err.code.value == "INVALID_BUNDLE"


# -- load order -----------------------------------------------------------------------------


def test_load_order_and_ignored_folders(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for name in ("charlie", "alpha", "bravo"):
        write_bundle(first, name)
    write_bundle(second, "delta")
    # Folders starting with "_" or "." are ignored, even when they hold broken bundles.
    for hidden in ("_drafts", ".cache"):
        (write_bundle(first, hidden) / "skill.meta.json").write_text("{broken", "utf-8")
    (first / "not-a-bundle").mkdir()
    (first / "README.md").write_text("not a folder", "utf-8")

    bundles = load_skills([first, second])
    assert [b.name for b in bundles] == ["alpha", "bravo", "charlie", "delta"]
    assert [b.order for b in bundles] == [0, 1, 2, 3]
    # A bundle folder itself is also accepted.
    assert [b.name for b in load_skills(first / "bravo")] == ["bravo"]


# -- references and token estimates ---------------------------------------------------------


def test_references_load_in_name_order_under_the_budget(skills_dir: Path) -> None:
    folder = write_bundle(
        skills_dir,
        "alpha",
        meta={"references": "inline"},
        references={
            "c.md": "never loaded\n",
            "b.md": "bbbbbbbb\n" * 10,  # 2 tokens a line, 20 in all
            "a.md": "aaaa\n" * 4,  # 1 token a line, 4 in all
        },
    )
    bundle = load_bundle(folder, reference_token_budget=10)
    assert [r.name for r in bundle.references] == ["a.md", "b.md"]
    a, b = bundle.references
    assert (a.text, a.tokens, a.truncated) == ("aaaa\n" * 4, 4, False)
    assert (b.text, b.tokens, b.truncated) == ("bbbbbbbb\n" * 3, 6, True)
    assert sum(r.tokens for r in bundle.references) <= 10

    everything = load_bundle(folder, reference_token_budget=1000).references
    assert [r.name for r in everything] == ["a.md", "b.md", "c.md"]
    assert not any(r.truncated for r in everything)
    assert load_bundle(folder, reference_token_budget=0).references == ()


def test_truncation_keeps_whole_lines() -> None:
    text = "第一行内容\n第二行内容\n第三行\n"
    assert truncate_to_tokens(text, 12) == "第一行内容\n第二行内容\n"
    assert truncate_to_tokens(text, 9) == "第一行内容\n"
    assert truncate_to_tokens(text, 4) == ""
    assert truncate_to_tokens(text, 100) == text


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("诉讼案件受理", 6),
        ("原告：张三", 5),
        ("abcd", 1),
        ("abcde", 2),
        ("abcd efgh\n\tijkl", 3),
        ("The quick brown fox jumps over the lazy dog", 9),
        ("诉讼 case", 3),
        ("かなカナ한국", 6),
    ],
)
def test_estimate_tokens(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


@pytest.mark.subprocess
def test_token_estimate_does_not_import_tiktoken() -> None:
    code = "import skilldeck.skills.tokens, sys; print('tiktoken' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


# -- build-time checks through SkillDeck ----------------------------------------------------


def _reserved_data_key(root: Path) -> None:
    write_bundle(root, "alpha", data={"status": {"type": "string"}})


def _unknown_tool(root: Path) -> None:
    write_bundle(root, "alpha", meta={"tools": ["memory__nope", "file__parse"]})


def _named_router(root: Path) -> None:
    write_bundle(root, "router")


BUILD: dict[str, tuple[Callable[[Path], None], str, str, str]] = {
    "reserved-data-key": (
        _reserved_data_key,
        "alpha/assets/output_schema.json",
        "$.properties.data.properties.status",
        "reserved state key",
    ),
    "unknown-tool": (
        _unknown_tool,
        "alpha/skill.meta.json",
        "$.tools[0]",
        "'memory__nope' is not registered.*file__parse",
    ),
    "reserved-node-name": (_named_router, "router", "$.name", "reserved node name"),
}


@pytest.mark.parametrize(("make", "file", "json_path", "reason"), BUILD.values(), ids=list(BUILD))
def test_build_time_checks(
    make_deck: Callable[..., Any],
    skills_dir: Path,
    make: Callable[[Path], None],
    file: str,
    json_path: str,
    reason: str,
) -> None:
    make(skills_dir)
    load_skills(skills_dir)  # the loader alone accepts it: the deck's build refuses it
    with pytest.raises(BundleError) as info:
        make_deck(skills_dir, checkpointer="memory://")
    err = info.value
    assert Path(err.file).as_posix().endswith(file), err.file
    assert err.json_path == json_path
    assert "\n" not in str(err)
    assert re.search(reason, err.reason), err.reason


@pytest.mark.parametrize(
    "make",
    [
        _reserved_data_key,
        _unknown_tool,
        _named_router,
        _meta(triggers={"state_conditions": ["state.x = 1"]}),
        _meta_text("{"),
    ],
    ids=["reserved-data-key", "unknown-tool", "router", "bad-condition", "bad-json"],
)
def test_bad_bundles_fail_before_any_checkpoint(
    make_deck: Callable[..., Any], tmp_path: Path, make: Callable[[Path], Any]
) -> None:
    db = tmp_path / "checkpoints.sqlite"
    bad_root, good_root = tmp_path / "bad", tmp_path / "good"
    bad_root.mkdir()
    make(bad_root)
    with pytest.raises(BundleError):
        make_deck(bad_root)
    assert not db.exists()

    # Control: a good bundle on the same factory does create the database and checkpoints.
    write_bundle(good_root, "alpha")
    deck = make_deck(good_root, {"alpha": [output()]})
    assert db.exists()
    assert deck.run(context="ctx").status == "finished"
    assert len(deck.threads()) == 1
