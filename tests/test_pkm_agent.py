"""The pkm-agent skill: its ``pkm__*`` tools, bundle, fixtures, cases and cassettes.

The tools are checked directly and through the registry (refused calls write nothing). The end
to end tests run the real SkillDeck on the scripted cassettes, a fixture copied into a trial
workspace as the eval harness does, and read the workspace afterwards.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from conftest import SEED_PKM
from endpoint import serve, settings_for, text
from jsonschema import Draft202012Validator
from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool

from skilldeck import Settings, SkillDeck
from skilldeck.errors import ToolError
from skilldeck.graph.records import ToolCall
from skilldeck.nodes import transcript
from skilldeck.scripted import load_script
from skilldeck.skills import builtin_skills_dir, load_bundle
from skilldeck.skills.contract import turn_schema
from skilldeck.skills.pins import pin_errors, pin_values, pinned
from skilldeck.tools import default_registry
from skilldeck.tools.pkm import MAX_ENTRY_CHARS, PARA_FOLDERS, pkm_tools
from skilldeck.tools.registry import CHOICES, ToolRegistry

pytestmark = pytest.mark.L2

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = builtin_skills_dir() / "pkm-agent"
FIXTURES = BUNDLE / "fixtures"
FIXTURE_NAMES = ("_fresh", "_starter_pkm", "_novelist_pkm", "_researcher_pkm", "_bilingual_pkm")
CASES: list[dict[str, Any]] = yaml.safe_load((BUNDLE / "cases.yaml").read_text("utf-8"))
GOOD = BUNDLE / "evals" / "scripted.yaml"
WORSE = builtin_skills_dir() / "pkm-agent" / "evals" / "worse.yaml"
MARKER = re.compile(r"^<!-- seed:([A-Za-z0-9_.-]+) -->$", re.MULTILINE)
SLEEP = "Areas/Health/Sleep.md"
SEED_CASE = "pkm_starter_route_into_health_sleep"


def markers(folder: Path) -> dict[str, str]:
    """Seed marker id -> the PKM-relative file that holds it."""
    found: dict[str, str] = {}
    for file in sorted((folder / "PKM").rglob("*.md")):
        for marker in MARKER.findall(file.read_text("utf-8")):
            found[marker] = file.relative_to(folder / "PKM").as_posix()
    return found


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def task_input(task: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The run input and the fixture name (top level or inside input, as the harness allows)."""
    data = dict(task["input"])
    return data, str(data.pop("base_fixture", None) or task.get("base_fixture") or "_fresh")


# -- the tools --------------------------------------------------------------------------------
@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """``tmp/trials/m1``: the starter fixture as a trial's workspace."""
    folder = tmp_path / "trials" / "m1"
    shutil.copytree(FIXTURES / "_starter_pkm", folder)
    return folder


@pytest.fixture
def tool(workspace: Path) -> Callable[..., Any]:
    """``tool(name, **args)``: call a pkm tool directly, bound to matter ``m1``."""
    tools: dict[str, BaseTool] = {t.name: t for t in pkm_tools(workspace.parent)}

    def call(name: str, **args: Any) -> Any:
        return tools[name].invoke({**args, "matter_id": "m1"})

    return call


def test_list_shows_markdown_files_with_their_first_heading(
    tool: Callable[..., Any], workspace: Path
) -> None:
    (workspace / "PKM" / "Areas" / "notes.txt").write_text("not markdown", "utf-8")
    (workspace / "PKM" / ".obsidian").mkdir()
    (workspace / "PKM" / ".obsidian" / "cache.md").write_text("# hidden", "utf-8")
    listing = tool("pkm__list")
    paths = [f["path"] for f in listing["files"]]
    assert SLEEP in paths and "Areas/Health/Fitness.md" in paths
    assert not [p for p in paths if not p.endswith(".md") or p.startswith(".")]
    assert {"path": SLEEP, "title": "Sleep"} in listing["files"]
    assert "Areas/Health" in listing["folders"]
    only_health = tool("pkm__list", folder="Areas/Health")
    assert sorted(f["path"] for f in only_health["files"]) == ["Areas/Health/Fitness.md", SLEEP]


def test_search_ranks_the_notes_that_share_the_most_with_the_record(
    tool: Callable[..., Any], workspace: Path
) -> None:
    found = tool("pkm__search", query="Slept 5.5h, energy crashed at 2pm; sleep log")
    assert found["files"][0] == {"path": SLEEP, "title": "Sleep"}
    assert len(found["files"]) <= 5
    # A note's path counts as its words: "Kitchen-Renovation" matches "renovation".
    kitchen = tool("pkm__search", query="second quote for the renovation counters")
    assert kitchen["files"][0]["path"] == "Projects/Kitchen-Renovation.md"
    (workspace / "PKM" / ".obsidian").mkdir()
    (workspace / "PKM" / ".obsidian" / "sleep.md").write_text("# sleep sleep sleep", "utf-8")
    assert ".obsidian/sleep.md" not in [
        f["path"] for f in tool("pkm__search", query="sleep")["files"]
    ]


@pytest.mark.parametrize("query", ["👍", "zzzqqq"])
def test_search_that_finds_nothing_says_so_and_is_no_error(
    tool: Callable[..., Any], query: str
) -> None:
    found = tool("pkm__search", query=query)
    assert found["files"] == [] and "pkm__create" in found["note"]


def test_list_says_when_it_is_truncated(
    tool: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("skilldeck.tools.pkm.MAX_LIST_FILES", 2)
    listing = tool("pkm__list")
    assert len(listing["files"]) == 2 and listing["truncated"] is True
    assert tool("pkm__list", folder="Areas/Health")["truncated"] is False


def test_list_of_a_fresh_workspace_is_empty_with_a_hint(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "_fresh", tmp_path / "m1")
    listing = pkm_tools(tmp_path)[0].invoke({"matter_id": "m1"})
    assert listing["files"] == [] and "Projects" in listing["note"]


def test_read_returns_the_whole_text(tool: Callable[..., Any], workspace: Path) -> None:
    result = tool("pkm__read", path=SLEEP)
    assert result["text"] == (workspace / "PKM" / SLEEP).read_text("utf-8")
    assert result["truncated"] is False


def test_append_adds_at_the_end_and_keeps_everything(
    tool: Callable[..., Any], workspace: Path
) -> None:
    file = workspace / "PKM" / SLEEP
    before = file.read_text("utf-8")
    result = tool("pkm__append", path=SLEEP, text="- 2026-05-24 — 5h. (fact: f1)")
    assert result == {"ok": True, "path": SLEEP, "action": "appended", "chars": 30}
    assert file.read_text("utf-8") == before + "- 2026-05-24 — 5h. (fact: f1)\n"
    # A file without a final newline gets one before the new text.
    file.write_text("# Sleep\n- a", "utf-8")
    tool("pkm__append", path=SLEEP, text="- b\n")
    assert file.read_text("utf-8") == "# Sleep\n- a\n- b\n"


def test_create_makes_folders_and_refuses_an_existing_file(
    tool: Callable[..., Any], workspace: Path
) -> None:
    created = tool("pkm__create", path="Resources/Recipes/Shakshuka.md", text="# Shakshuka")
    assert created["action"] == "created"
    assert (workspace / "PKM/Resources/Recipes/Shakshuka.md").read_text("utf-8") == "# Shakshuka\n"
    before = snapshot(workspace)
    with pytest.raises(ToolError, match="already exists; read it with pkm__read"):
        tool("pkm__create", path=SLEEP, text="# Sleep\nnew")
    assert snapshot(workspace) == before


def test_writes_keep_the_file_mode_and_new_files_are_readable(
    tool: Callable[..., Any], workspace: Path
) -> None:
    file = workspace / "PKM" / SLEEP
    file.chmod(0o640)
    tool("pkm__append", path=SLEEP, text="- more")
    assert file.stat().st_mode & 0o777 == 0o640
    tool("pkm__create", path="Areas/New.md", text="# New")
    assert (workspace / "PKM/Areas/New.md").stat().st_mode & 0o777 == 0o644


def test_a_para_folder_without_notes_lists_empty(tool: Callable[..., Any], workspace: Path) -> None:
    shutil.rmtree(workspace / "PKM" / "Archives")
    listed = tool("pkm__list", folder="Archives/")
    assert listed["files"] == [] and "create one under" in listed["note"]


def test_write_replaces_the_whole_file(tool: Callable[..., Any], workspace: Path) -> None:
    # The destructive tool exists on purpose: the graders, not the tool, catch its misuse.
    tool("pkm__write", path=SLEEP, text="# Sleep\n\nall gone")
    assert (workspace / "PKM" / SLEEP).read_text("utf-8") == "# Sleep\n\nall gone\n"
    assert not markers(workspace).get("starter-sleep-intro")


BAD_CALLS = [
    ("pkm__read", {"path": "../secrets.md"}, "must not contain '..'"),
    ("pkm__read", {"path": "Areas/../../../outside.md"}, "must not contain '..'"),
    ("pkm__read", {"path": "/etc/passwd.md"}, "is absolute"),
    ("pkm__read", {"path": "PKM/Areas/Health/Sleep.md"}, "use 'Areas/Health/Sleep.md'"),
    ("pkm__read", {"path": "Areas/Health"}, "not a markdown file"),
    ("pkm__read", {"path": "Areas/Health/Sleep.txt"}, "not a markdown file"),
    ("pkm__read", {"path": "Areas/Health/Nope.md"}, "no file 'Areas/Health/Nope.md'"),
    ("pkm__read", {"path": ""}, "path is empty"),
    ("pkm__list", {"folder": "Nope"}, "no folder 'Nope'"),
    ("pkm__list", {"folder": "../.."}, "must not contain '..'"),
    ("pkm__append", {"path": "Areas/Health/Nope.md", "text": "x"}, "pkm__create to start"),
    ("pkm__append", {"path": SLEEP, "text": "  \n"}, "text is empty"),
    ("pkm__append", {"path": "Areas\\Health\\Sleep.md", "text": "x"}, "backslashes"),
    ("pkm__append", {"path": "../../m2/PKM/Areas/x.md", "text": "x"}, "must not contain '..'"),
    ("pkm__create", {"path": "Inbox/New.md", "text": "# New"}, "inside one of the PARA folders"),
    ("pkm__create", {"path": "Top.md", "text": "# Top"}, "inside one of the PARA folders"),
    ("pkm__create", {"path": "Areas/New.txt", "text": "x"}, "not a markdown file"),
    ("pkm__create", {"path": "Areas/Health", "text": "x"}, "not a markdown file"),
    ("pkm__create", {"path": "Areas/New.md", "text": ""}, "text is empty"),
    ("pkm__write", {"path": "Areas/Health/Nope.md", "text": "x"}, "no file"),
    ("pkm__write", {"path": SLEEP, "text": ""}, "text is empty"),
]


@pytest.mark.parametrize(("name", "args", "message"), BAD_CALLS)
def test_bad_arguments_are_refused_and_nothing_is_written(
    tool: Callable[..., Any], workspace: Path, name: str, args: dict[str, Any], message: str
) -> None:
    before = snapshot(workspace.parent)
    with pytest.raises(ToolError, match=re.escape(message)):
        tool(name, **args)
    assert snapshot(workspace.parent) == before


def test_a_symlink_that_leads_out_of_pkm_is_refused(
    tool: Callable[..., Any], workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\n", "utf-8")
    (workspace / "PKM" / "Areas" / "Link.md").symlink_to(outside)
    with pytest.raises(ToolError, match="leads outside PKM/"):
        tool("pkm__append", path="Areas/Link.md", text="x")
    assert outside.read_text("utf-8") == "# Secret\n"
    assert "Areas/Link.md" not in [f["path"] for f in tool("pkm__list")["files"]]


def test_a_failed_write_leaves_the_file_whole_and_no_temp_file(
    tool: Callable[..., Any], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(workspace)

    def broken(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("skilldeck.tools.workspace.os.replace", broken)
    with pytest.raises(OSError, match="disk full"):
        tool("pkm__append", path=SLEEP, text="- more")
    assert snapshot(workspace) == before


def test_registry_binds_the_matter_and_jails_it(workspace: Path) -> None:
    registry = default_registry(workspace.parent)
    for name in ("pkm__list", "pkm__read", "pkm__append", "pkm__create", "pkm__write"):
        assert registry.identity_params(name) == {"matter_id"}
    ok = registry.invoke("pkm__read", {"path": SLEEP}, {"matter_id": "m1"})
    assert ok.ok and "Sleep" in json.loads(ok.content)["text"]
    forged = registry.invoke("pkm__read", {"path": SLEEP, "matter_id": "m2"}, {"matter_id": "m1"})
    assert not forged.ok and "bound by the runtime" in forged.content
    for name, args in (("pkm__list", {}), ("pkm__read", {"path": SLEEP})):
        escaped = registry.invoke(name, args, {"matter_id": "../elsewhere"})
        assert not escaped.ok and "not one folder name" in escaped.content, name
    unknown_arg = registry.invoke("pkm__read", {"path": SLEEP, "mode": "x"}, {"matter_id": "m1"})
    assert not unknown_arg.ok and "unknown argument(s) 'mode'" in unknown_arg.content


def test_an_append_is_one_entry_held_to_its_cap_by_the_schema(workspace: Path) -> None:
    registry = default_registry(workspace.parent)
    schema = registry.get("pkm__append").tool_call_schema.model_json_schema()
    assert schema["properties"]["text"]["maxLength"] == MAX_ENTRY_CHARS  # the grammar holds it
    before = snapshot(workspace)
    long = registry.invoke("pkm__append", {"path": SLEEP, "text": "z" * 1001}, {"matter_id": "m1"})
    assert not long.ok and "invalid arguments for pkm__append" in long.content
    assert f"at most {MAX_ENTRY_CHARS} characters" in long.content
    assert snapshot(workspace) == before
    fits = registry.invoke("pkm__append", {"path": SLEEP, "text": "z" * 1000}, {"matter_id": "m1"})
    assert fits.ok
    # A replacement is the whole note: no cap. A new note and a query are short.
    text_arg = registry.get("pkm__write").tool_call_schema.model_json_schema()
    assert "maxLength" not in text_arg["properties"]["text"]
    before = snapshot(workspace)
    for name, args, cap in [
        ("pkm__create", {"path": "Areas/New.md", "text": "x" * 1501}, 1500),
        ("pkm__search", {"query": "sleep " * 51}, 300),
    ]:
        refused = registry.invoke(name, args, {"matter_id": "m1"})
        assert not refused.ok and f"at most {cap} characters" in refused.content, name
    assert snapshot(workspace) == before


# -- the bundle, fixtures, cases and cassettes ------------------------------------------------
def test_the_output_reports_only_what_the_attempt_wrote() -> None:
    bundle = load_bundle(BUNDLE)
    assert bundle.validate is None  # the schema's x-calls holds what validate.py used to
    wrote = [ToolCall(id="w", name="pkm__append", args={"path": SLEEP, "text": "- x"}, status="ok")]
    read = [ToolCall(id="r", name="pkm__read", args={"path": SLEEP}, status="ok")]

    def errors(pkm: dict[str, Any], calls: list[ToolCall]) -> list[str]:
        output = {"data": {"pkm": pkm}, "control": {"action": "finish"}}
        return [e["message"] for e in pin_errors(bundle.pins, output, {}, calls)]

    saved = {"action": "saved", "files": [SLEEP], "insight": "i", "reason": "r"}
    skipped = {"action": "skipped", "files": [], "insight": None, "reason": "r"}
    assert errors(saved, wrote) == [] and errors(skipped, read) == []
    # A claim without its write is sent back, and so is a skip after a write.
    (claim,) = errors(saved, read)
    assert "is not the pkm__append.path or pkm__create.path" in claim
    (skip,) = errors(skipped, wrote)
    assert f"gave pkm__append.path or pkm__create.path or pkm__write.path {SLEEP!r}" in skip

    # In schema mode the grammar leaves one branch: a skip before any write, a save of the
    # files written after one.
    for calls, action in ((read, "skipped"), (wrote, "saved")):
        schema = pinned(bundle.output_schema, pin_values(bundle.pins, {}, calls))
        data = turn_schema(schema, {}, final=True)["properties"]["final"]["properties"]["data"]
        node = data["properties"]["pkm"]
        assert node["properties"]["action"] == {"enum": [action]}, node
        files = node["properties"]["files"]
        assert files.get("maxItems") == 0 if calls is read else files["items"]["enum"] == [SLEEP]
    # One record is filed in one turn: the schema holds the action.
    assert bundle.output_schema["properties"]["control"]["properties"]["action"] == {
        "enum": ["finish"]
    }


def test_bundle_loads_with_registered_tools_and_a_strict_schema() -> None:
    bundle = load_bundle(BUNDLE)
    assert bundle.contexts == ("pkm",)
    assert bundle.data_keys == ("pkm",)
    assert "card__update_insight" in bundle.tools
    para = BUNDLE / "references" / "para.md"
    assert bundle.files == (("references/para.md", para.stat().st_size),)  # read on demand
    registry = default_registry(".")
    assert all(registry.resolve(t) for t in bundle.tools if t != "skill__read_file")
    validator = Draft202012Validator(bundle.output_schema)

    def errors(pkm: dict[str, Any]) -> list[str]:
        out = {
            "response": "r",
            "profile": {},
            "data": {"pkm": pkm},
            "control": {"action": "finish"},
        }
        return [e.message for e in validator.iter_errors(out)]

    saved = {"action": "saved", "files": [SLEEP], "insight": "i", "reason": "r"}
    skipped: dict[str, Any] = {
        "action": "skipped",
        "files": [],
        "insight": None,
        "reason": "too light",
    }
    assert errors(saved) == [] and errors(skipped) == []
    assert errors({**saved, "files": []})  # saved needs a file
    assert errors({**saved, "insight": None})  # saved needs an insight
    assert errors({**saved, "files": ["PKM/" + SLEEP]})  # paths are relative to PKM/
    assert errors({**saved, "files": ["Inbox/x.md"]})  # PARA folders only
    assert errors({**skipped, "files": [SLEEP]})  # a skip writes nothing
    assert errors({**skipped, "reason": None})  # a skip says why
    assert errors({"action": "saved", "files": [SLEEP]})  # every key is required


def test_fixtures_exist_and_every_markdown_file_has_seed_markers() -> None:
    assert sorted(p.name for p in FIXTURES.iterdir()) == sorted(FIXTURE_NAMES)
    assert [p.name for p in (FIXTURES / "_fresh").iterdir()] == [".gitkeep"]
    seen: dict[str, str] = {}
    for name in FIXTURE_NAMES[1:]:
        files = sorted((FIXTURES / name / "PKM").rglob("*.md"))
        assert len(files) >= 5, name
        assert {f.relative_to(FIXTURES / name / "PKM").parts[0] for f in files} == set(
            PARA_FOLDERS
        ), name
        for file in files:
            ids = MARKER.findall(file.read_text("utf-8"))
            assert ids, f"{file} has no <!-- seed:<id> --> line"
            for marker in ids:
                assert marker not in seen, f"seed:{marker} is in {seen.get(marker)} and {file}"
                seen[marker] = str(file)
    assert "starter-sleep-intro" in markers(FIXTURES / "_starter_pkm")


def test_cases_follow_the_seed_shape() -> None:
    assert len(CASES) >= 32
    ids = [c["id"] for c in CASES]
    assert len(set(ids)) == len(ids)
    buckets = {c["bucket"] for c in CASES}
    assert buckets == {"positive", "negative", "ambiguous"}
    for case in CASES:
        data, fixture = task_input(case)
        assert fixture in FIXTURE_NAMES and isinstance(data["content"], str), case["id"]
        assert set(data) <= {"content", "fact_id", "instructions"}, case["id"]
        for grader in case["graders"]:
            config = grader.get("config") or {}
            for expected in config.get("expected_files", []):
                assert expected.split("/")[0] in PARA_FOLDERS, case["id"]
        routed = [g for g in case["graders"] if g["name"] == "pkm_routed_correctly"]
        if case["bucket"] == "ambiguous":
            assert len(routed[0]["config"]["expected_files"]) == 2, case["id"]
    seed = next(c for c in CASES if c["id"] == SEED_CASE)
    assert {k: seed[k] for k in ("id", "input", "graders")} == json.loads(SEED_PKM)


@pytest.mark.parametrize("cassette", [GOOD, WORSE], ids=["good", "worse"])
def test_cassettes_cover_every_case_with_the_skills_tools(cassette: Path) -> None:
    script = load_script(cassette)
    assert set(script.cases) == {c["id"] for c in CASES}
    allowed = set(load_bundle(BUNDLE).tools)
    for case_id, turns in script.cases.items():
        assert list(turns) == ["pkm-agent"], case_id
        calls = [c["name"] for t in turns["pkm-agent"] for c in t.get("tool_calls", [])]
        assert set(calls) <= allowed, case_id
        assert "output" in turns["pkm-agent"][-1], case_id
    assert cassette.read_text("utf-8").startswith("# ")  # the comment naming imperfect cases


# -- end to end on the real deck --------------------------------------------------------------
@pytest.fixture
def trials(tmp_path: Path) -> Iterator[Callable[[Path], tuple[SkillDeck, Path]]]:
    """``trials(cassette)``: a deck on the bundle and the cassette, and its trials folder."""
    decks: list[SkillDeck] = []

    def make(cassette: Path) -> tuple[SkillDeck, Path]:
        root = tmp_path / f"trials{len(decks)}"
        root.mkdir()
        deck = SkillDeck(
            BUNDLE,
            checkpointer=f"sqlite:///{tmp_path / f'c{len(decks)}.sqlite'}",
            settings=Settings(model=f"scripted:{cassette}", files_root=str(root)),
        )
        decks.append(deck)
        return deck, root

    yield make
    for deck in decks:
        deck.close()


def run_case(deck: SkillDeck, root: Path, task: dict[str, Any]) -> tuple[Any, Path]:
    """Copy the task's fixture into ``root/<id>`` and run the task there, as the harness does."""
    data, fixture = task_input(task)
    shutil.copytree(FIXTURES / fixture, root / task["id"])
    result = deck.run(
        data, context="pkm", matter_id=task["id"], metadata={"skilldeck_case": task["id"]}
    )
    return result, root / task["id"]


def test_seed_case_appends_to_the_sleep_log_after_reading_it(
    trials: Callable[[Path], tuple[SkillDeck, Path]],
) -> None:
    deck, root = trials(GOOD)
    task = next(c for c in CASES if c["id"] == SEED_CASE)
    result, workspace = run_case(deck, root, task)
    assert result.status == "finished", result.error
    assert result.state["pkm"]["action"] == "saved"
    assert result.state["pkm"]["files"] == [SLEEP]
    original = (FIXTURES / "_starter_pkm" / "PKM" / SLEEP).read_text("utf-8")
    text = (workspace / "PKM" / SLEEP).read_text("utf-8")
    assert text.startswith(original) and text.endswith("- Today — 5.5h. Energy crashed at 2pm.\n")
    assert markers(workspace) == markers(FIXTURES / "_starter_pkm")
    # The transcript shows the read before the append.
    attempt = result.state["attempt"]
    calls = [
        (c["name"], c["args"].get("path"))
        for m in transcript.read(deck.store, attempt["turn"], attempt["head"])
        for c in getattr(m, "tool_calls", [])
    ]
    assert calls == [("pkm__search", None), ("pkm__read", SLEEP), ("pkm__append", SLEEP)]


def test_fact_case_keeps_the_fact_id_and_updates_the_card_insight(
    trials: Callable[[Path], tuple[SkillDeck, Path]],
) -> None:
    deck, root = trials(GOOD)
    task = next(c for c in CASES if c["id"] == "pkm_starter_fitness_run_table_row")
    result, workspace = run_case(deck, root, task)
    assert result.status == "finished", result.error
    fitness = (workspace / "PKM" / "Areas/Health/Fitness.md").read_text("utf-8")
    assert fitness.splitlines()[-1].startswith("| 2026-05-25 | Run | 44 min |")
    assert "(fact: 2026/05/25.md#ts_2)" in fitness
    card = yaml.safe_load((workspace / "Cards" / "2026_05_25_md_ts_2.yaml").read_text("utf-8"))
    assert card["insight"] == result.state["pkm"]["insight"]
    assert markers(workspace) == markers(FIXTURES / "_starter_pkm")


def test_every_case_of_the_good_cassette_finishes_and_keeps_the_seed_markers(
    trials: Callable[[Path], tuple[SkillDeck, Path]],
) -> None:
    deck, root = trials(GOOD)
    for task in CASES:
        result, workspace = run_case(deck, root, task)
        assert result.status == "finished", (task["id"], result.error)
        pkm = result.state["pkm"]
        _, fixture = task_input(task)
        assert markers(workspace) == markers(FIXTURES / fixture), task["id"]
        if task["bucket"] == "negative":
            assert pkm["action"] == "skipped", task["id"]
            assert snapshot(workspace) == snapshot(FIXTURES / fixture), task["id"]
        else:
            assert pkm["action"] == "saved", task["id"]
            assert all((workspace / "PKM" / f).is_file() for f in pkm["files"]), task["id"]


def test_the_worse_cassette_destroys_markers_and_saves_what_it_should_skip(
    trials: Callable[[Path], tuple[SkillDeck, Path]],
) -> None:
    deck, root = trials(WORSE)
    by_id = {c["id"]: c for c in CASES}
    result, workspace = run_case(deck, root, by_id[SEED_CASE])
    assert result.status == "finished", result.error
    lost = set(markers(FIXTURES / "_starter_pkm")) - set(markers(workspace))
    assert lost == {"starter-sleep-intro", "starter-sleep-log"}
    result, workspace = run_case(deck, root, by_id["pkm_negative_dont_save_pin"])
    assert result.state["pkm"]["action"] == "saved"
    assert "PIN hint" in (workspace / "PKM" / "Areas/Finance/Spending.md").read_text("utf-8")


# -- the files a call can name, held by the grammar -------------------------------------------
def test_the_tools_that_need_a_file_say_which_files_exist(workspace: Path) -> None:
    registry = default_registry(workspace.parent)
    listed = [f["path"] for f in registry_list(registry)]
    named = ("pkm__read", "pkm__append", "pkm__write")
    for name in named:
        assert registry.has_choices(name)
    assert registry.choices(named, {"matter_id": "m1"}) == {n: {"path": listed} for n in named}
    # One walk serves every tool; each takes its own argument from it.
    [listing] = registry.choices(["pkm__list"], {"matter_id": "m1"}).values()
    assert set(listing) == {"folder"} and listing["folder"][:2] == ["", "Projects"]
    assert not registry.has_choices("pkm__create")  # a new file: no list to hold it to
    assert registry.choices(["pkm__create"], {"matter_id": "m1"}) == {}
    assert registry.choices(["pkm__read"], {"matter_id": "../elsewhere"}) == {}  # cannot tell
    assert registry.choices(["pkm__read"], {"matter_id": "empty"}) == {"pkm__read": {"path": []}}


def test_a_choices_function_that_tools_share_runs_once_a_call() -> None:
    runs: list[dict[str, Any]] = []

    def files(identity: dict[str, Any]) -> dict[str, list[str]]:
        runs.append(identity)
        return {"path": ["a.md"]}

    def tool(name: str) -> BaseTool:
        def run(path: str, matter_id: Annotated[str | None, InjectedToolArg] = None) -> str:
            return path

        return StructuredTool.from_function(
            run, name=name, description=name, metadata={CHOICES: files}
        )

    registry = ToolRegistry([tool("x__read"), tool("x__append")])
    found = registry.choices(["x__read", "x__append"], {"matter_id": "m1", "user_id": "u"})
    assert found == {"x__read": {"path": ["a.md"]}, "x__append": {"path": ["a.md"]}}
    assert runs == [{"matter_id": "m1"}]  # once, with the arguments the tools bind


def registry_list(registry: Any) -> list[dict[str, Any]]:
    result = registry.invoke("pkm__list", {}, {"matter_id": "m1"})
    assert result.ok, result.content
    return list(json.loads(result.content)["files"])


@pytest.fixture
def unlimited(tmp_path: Path) -> Path:
    """pkm-agent without its tool limits and order: what the grammar offers by the files and
    the calls alone."""
    bundle = tmp_path / "bundle" / BUNDLE.name
    shutil.copytree(BUNDLE, bundle)
    meta = json.loads((bundle / "skill.meta.json").read_text("utf-8"))
    for key in ("tool_groups", "tool_limits", "tool_after"):
        del meta["execution_config"][key]
    (bundle / "skill.meta.json").write_text(json.dumps(meta), "utf-8")
    return bundle


def test_in_schema_mode_a_call_may_name_only_a_file_that_exists_now(
    workspace: Path, unlimited: Path
) -> None:
    new = "Resources/Pottery.md"
    steps = [
        text(json.dumps({"tool": "pkm__create", "arguments": {"path": new, "text": "# Pottery"}})),
        text(json.dumps({"tool": "pkm__list", "arguments": {"folder": ""}})),
    ]
    files = sorted(p.relative_to(workspace / "PKM").as_posix() for p in workspace.rglob("*.md"))
    with serve(steps) as endpoint:
        settings = settings_for(endpoint, output_mode="schema", files_root=str(workspace.parent))
        with SkillDeck([unlimited], checkpointer="memory://", settings=settings) as deck:
            deck.run({"content": "Glazes: celadon."}, context="pkm", matter_id="m1")
    first, second = (_tool_args(r["response_format"]) for r in endpoint.requests[:2])
    assert first["pkm__read"]["properties"]["path"]["enum"] == files
    # The create wrote its file before the second call (the failed run then undid it).
    assert second["pkm__append"]["properties"]["path"]["enum"] == sorted([*files, new])
    assert "enum" not in first["pkm__create"]["properties"]["path"]
    # The prompt is not where the files are: it stays the same for every run.
    assert endpoint.requests[0]["messages"][0] == endpoint.requests[1]["messages"][0]


def _tool_args(response_format: dict[str, Any]) -> dict[str, Any]:
    """Each tool's arguments schema in a reply grammar, by tool name."""
    branches = response_format["json_schema"]["schema"]["anyOf"]
    return {
        b["properties"]["tool"]["const"]: b["properties"]["arguments"]
        for b in branches
        if "tool" in b["properties"]
    }


def test_in_schema_mode_a_call_of_one_argument_that_worked_is_not_offered_again(
    workspace: Path, unlimited: Path
) -> None:
    """A small model repeats its last call; the grammar steers it on instead (calls of more
    arguments, such as an append, keep every file)."""
    sleep = "Areas/Health/Sleep.md"
    steps = [
        text(json.dumps({"tool": "pkm__list", "arguments": {"folder": ""}})),
        text(json.dumps({"tool": "pkm__read", "arguments": {"path": sleep}})),
        text(json.dumps({"tool": "pkm__read", "arguments": {"path": "Areas/Health/Fitness.md"}})),
    ]
    with serve(steps) as endpoint:
        settings = settings_for(endpoint, output_mode="schema", files_root=str(workspace.parent))
        with SkillDeck([unlimited], checkpointer="memory://", settings=settings) as deck:
            deck.run({"content": "Slept 5.5h."}, context="pkm", matter_id="m1")
    second, third = (_tool_args(r["response_format"]) for r in endpoint.requests[1:3])
    assert sleep in second["pkm__read"]["properties"]["path"]["enum"]
    assert sleep not in third["pkm__read"]["properties"]["path"]["enum"]
    assert sleep in third["pkm__append"]["properties"]["path"]["enum"]
    assert sleep in third["pkm__write"]["properties"]["path"]["enum"]


def test_a_call_that_has_named_every_file_is_not_offered(tmp_path: Path, unlimited: Path) -> None:
    (tmp_path / "one" / "PKM" / "Areas").mkdir(parents=True)
    (tmp_path / "one" / "PKM" / "Areas" / "Pottery.md").write_text("# Pottery\n", "utf-8")
    steps = [text(json.dumps({"tool": "pkm__read", "arguments": {"path": "Areas/Pottery.md"}}))]
    with serve(steps) as endpoint:
        settings = settings_for(endpoint, output_mode="schema", files_root=str(tmp_path))
        with SkillDeck([unlimited], checkpointer="memory://", settings=settings) as deck:
            deck.run({"content": "Glazes: celadon."}, context="pkm", matter_id="one")
    first, second = (_tool_args(r["response_format"]) for r in endpoint.requests[:2])
    assert "pkm__read" in first
    assert "pkm__read" not in second
    assert second["pkm__append"]["properties"]["path"]["enum"] == ["Areas/Pottery.md"]


def test_a_call_that_could_name_no_file_is_not_offered(tmp_path: Path, unlimited: Path) -> None:
    (tmp_path / "fresh" / "PKM").mkdir(parents=True)
    with serve([text(json.dumps({"tool": "pkm__list", "arguments": {"folder": ""}}))]) as endpoint:
        settings = settings_for(endpoint, output_mode="schema", files_root=str(tmp_path))
        with SkillDeck([unlimited], checkpointer="memory://", settings=settings) as deck:
            deck.run({"content": "Glazes: celadon."}, context="pkm", matter_id="fresh")
    offered = _tool_args(endpoint.requests[0]["response_format"])
    assert {"pkm__list", "pkm__create"} <= set(offered)
    assert not {"pkm__read", "pkm__append", "pkm__write"} & set(offered)
