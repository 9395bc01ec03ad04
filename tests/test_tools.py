"""The tool registry, the file jail, element extraction and tool calls inside a run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from conftest import output, write_bundle
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel

from skilldeck import Settings, SkillDeck
from skilldeck.errors import ErrorCode, SkillDeckError, ToolError
from skilldeck.nodes import transcript
from skilldeck.tools import ToolRegistry, default_registry, extract_elements, jailed_path
from skilldeck.tools.elements import MAX_WRITTEN_TEXT

pytestmark = pytest.mark.L2


class _ProbeArgs(BaseModel):
    q: str
    user_id: Annotated[str | None, InjectedToolArg] = None
    matter_id: Annotated[str | None, InjectedToolArg] = None


def probe(name: str, calls: list[dict[str, Any]]) -> BaseTool:
    """A tool that records every call it receives."""

    def run(q: str, user_id: str | None = None, matter_id: str | None = None) -> dict[str, Any]:
        calls.append({"q": q, "user_id": user_id, "matter_id": matter_id})
        return {"echo": q}

    return StructuredTool.from_function(
        run, name=name, description=f"probe {name}", args_schema=_ProbeArgs
    )


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    (root / "m1").mkdir(parents=True)
    (root / "m2").mkdir()
    (root / "m1" / "complaint.txt").write_text("原告：张三\nPlaintiff: Ada", "utf-8")
    (root / "m2" / "other.txt").write_text("matter two", "utf-8")
    (root / "top.txt").write_text("top level", "utf-8")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("TOP-SECRET-CONTENT", "utf-8")
    return root


# -- the registry ---------------------------------------------------------------------------


def test_register_alias_and_resolve() -> None:
    calls: list[dict[str, Any]] = []
    registry = ToolRegistry([probe("file__parse", calls)])
    search = probe("memory__lexical_search", calls)
    registry.register(search, aliases=["lexical_search"])
    assert registry.names() == ["file__parse", "memory__lexical_search"]
    assert registry.resolve("lexical_search") == "memory__lexical_search"
    assert registry.resolve("memory__lexical_search") == "memory__lexical_search"
    assert registry.resolve("nope") is None
    assert registry.get("lexical_search") is search
    result = registry.invoke("lexical_search", {"q": "x"}, {})
    assert result.ok and json.loads(result.content) == {"echo": "x"}


@pytest.mark.parametrize(
    ("name", "aliases", "taken"),
    [
        ("file__parse", (), "file__parse"),  # same name
        ("lexical_search", (), "lexical_search"),  # name equals an alias
        ("memory__other", ("file__parse",), "file__parse"),  # alias equals a name
        ("memory__other", ("lexical_search",), "lexical_search"),  # alias equals an alias
    ],
)
def test_duplicate_names_are_refused(name: str, aliases: tuple[str, ...], taken: str) -> None:
    registry = ToolRegistry([probe("file__parse", [])])
    registry.register(probe("memory__lexical_search", []), aliases=["lexical_search"])
    with pytest.raises(SkillDeckError, match=f"{taken!r} is already registered"):
        registry.register(probe(name, []), aliases=aliases)
    assert registry.names() == ["file__parse", "memory__lexical_search"]
    assert registry.resolve("memory__other") is None


def test_unknown_tool_lists_registered_names(tmp_path: Path) -> None:
    registry = default_registry(tmp_path)
    with pytest.raises(SkillDeckError) as info:
        registry.get("file__delete")
    assert info.value.code == ErrorCode.UNKNOWN_TOOL
    assert "'file__delete'" in str(info.value)
    for name in ("element__extract", "file__get_info", "file__parse"):
        assert name in str(info.value)
    with pytest.raises(SkillDeckError, match="file__get_info"):
        registry.invoke("file__delete", {"file_id": "x"}, {})


def test_identity_params(tmp_path: Path) -> None:
    registry = default_registry(tmp_path)
    assert registry.identity_params("file__parse") == {"matter_id"}
    assert registry.identity_params("file__get_info") == {"matter_id"}
    assert registry.identity_params("element__extract") == set()
    registry.register(probe("probe__run", []))
    assert registry.identity_params("probe__run") == {"user_id", "matter_id"}
    # The model never sees identity arguments.
    visible = registry.get("file__parse").tool_call_schema.model_json_schema()["properties"]
    assert set(visible) == {"file_id"}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"q": "x", "user_id": "evil"}, "user_id"),
        ({"q": "x", "matter_id": "m2"}, "matter_id"),
        ({"q": "x", "thread_id": "t"}, "thread_id"),
        ({"q": "x", "user_id": None, "matter_id": "m2"}, "matter_id, user_id"),
    ],
)
def test_invoke_refuses_identity_in_args(args: dict[str, Any], named: str) -> None:
    calls: list[dict[str, Any]] = []
    registry = ToolRegistry([probe("probe__run", calls)])
    result = registry.invoke("probe__run", args, {"user_id": "u1", "matter_id": "m1"})
    assert not result.ok
    assert result.content.startswith("Error:")
    assert f"argument(s) {named} are bound by the runtime" in result.content
    assert calls == []


def test_invoke_binds_identity(files: Path) -> None:
    registry = default_registry(files)
    parse = registry.invoke("file__parse", {"file_id": "complaint.txt"}, {"matter_id": "m1"})
    assert parse.ok
    assert json.loads(parse.content) == {
        "file_id": "complaint.txt",
        "text": "原告：张三\nPlaintiff: Ada",
        "truncated": False,
    }
    assert "张三" in parse.content  # not ASCII-escaped
    info = registry.invoke("file__get_info", {"file_id": "complaint.txt"}, {"matter_id": "m1"})
    assert json.loads(info.content)["bytes"] == (files / "m1" / "complaint.txt").stat().st_size
    # Another matter's folder is another jail.
    other = registry.invoke("file__parse", {"file_id": "complaint.txt"}, {"matter_id": "m2"})
    assert not other.ok and "no file 'complaint.txt'" in other.content
    assert "its file ids are: other.txt" in other.content  # its own files only
    assert "complaint" not in other.content.split(";")[1]
    # A model that prefixes the matter id is shown the ids to copy.
    prefixed = registry.invoke("file__parse", {"file_id": "m1/complaint.txt"}, {"matter_id": "m1"})
    assert not prefixed.ok and prefixed.content.endswith("its file ids are: complaint.txt")
    # Without a matter, nothing: never the files root itself (another matter's files).
    top = registry.invoke("file__parse", {"file_id": "top.txt"}, {"user_id": "u1"})
    assert not top.ok and "the run has no matter_id" in top.content
    assert "top level" not in top.content
    none = default_registry(None).invoke("file__parse", {"file_id": "x"}, {"matter_id": "m1"})
    assert not none.ok and "no files root is configured" in none.content

    calls: list[dict[str, Any]] = []
    registry.register(probe("probe__run", calls))
    identity = {"user_id": "u1", "matter_id": "m1", "thread_id": "t1"}
    assert registry.invoke("probe__run", {"q": "x"}, identity).ok
    assert calls == [{"q": "x", "user_id": "u1", "matter_id": "m1"}]


@pytest.mark.parametrize(
    ("name", "args", "detail"),
    [
        ("file__parse", {}, "file_id"),
        ("file__parse", {"file_id": 12}, "file_id"),
        ("element__extract", {"text": ["not", "a", "string"]}, "text"),
        ("probe__run", {"q": {"a": 1}}, "q"),
    ],
)
def test_invalid_arguments_come_back_as_errors(
    files: Path, name: str, args: dict[str, Any], detail: str
) -> None:
    calls: list[dict[str, Any]] = []
    registry = default_registry(files)
    registry.register(probe("probe__run", calls))
    result = registry.invoke(name, args, {"matter_id": "m1"})
    assert not result.ok
    assert f"Error: invalid arguments for {name}" in result.content
    assert detail in result.content
    assert calls == []


# -- the file jail --------------------------------------------------------------------------


def test_file_tools_name_only_the_matters_own_files(
    files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = default_registry(files)
    tools = ["file__parse", "file__get_info"]
    mine = registry.choices(tools, {"matter_id": "m1"})
    assert mine == {t: {"file_id": ["complaint.txt"]} for t in tools}
    assert registry.choices(tools, {"matter_id": "m2"})["file__parse"] == {"file_id": ["other.txt"]}
    (files / "m3").mkdir()
    # No files, no matter folder, no matter: nothing to narrow by (the tool's error says why).
    for matter in ("m3", "m4", None):
        assert registry.choices(tools, {"matter_id": matter}) == {}
    # Nor does a matter with more files than a grammar lists.
    monkeypatch.setattr("skilldeck.tools.files.MAX_CHOICES", 0)
    assert registry.choices(tools, {"matter_id": "m1"}) == {}


@pytest.mark.parametrize(
    "file_id",
    ["../outside/secret.txt", "m1/../../outside/secret.txt", "..", "", "link/secret.txt"],
)
def test_jail_refuses_escapes(files: Path, file_id: str) -> None:
    (files / "link").symlink_to(files.parent / "outside", target_is_directory=True)
    with pytest.raises(ToolError, match="files root"):
        jailed_path(files, file_id)


def test_jail_refuses_absolute_paths(files: Path) -> None:
    for file_id in (str(files / "top.txt"), str(files.parent / "outside" / "secret.txt"), "/"):
        with pytest.raises(ToolError, match="must be a relative path"):
            jailed_path(files, file_id)


def test_jail_allows_paths_inside(files: Path) -> None:
    (files / "m1" / "alias.txt").symlink_to(files / "m1" / "complaint.txt")
    assert jailed_path(files, "m1/complaint.txt") == (files / "m1" / "complaint.txt").resolve()
    assert jailed_path(files, "m2/../top.txt") == (files / "top.txt").resolve()
    assert jailed_path(files, "m1/alias.txt") == (files / "m1" / "complaint.txt").resolve()


@pytest.mark.parametrize(
    ("matter_id", "file_id"),
    [
        ("m1", "../m2/other.txt"),  # into another matter
        ("m1", "../../outside/secret.txt"),
        ("../outside", "secret.txt"),  # escape through the matter id itself
        ("..", "outside/secret.txt"),
        ("m1", "linked/secret.txt"),  # a symlink inside the matter that leads out
    ],
)
def test_file_tools_stay_in_the_matter(files: Path, matter_id: str, file_id: str) -> None:
    (files / "m1" / "linked").symlink_to(files.parent / "outside", target_is_directory=True)
    registry = default_registry(files)
    for tool in ("file__parse", "file__get_info"):
        result = registry.invoke(tool, {"file_id": file_id}, {"matter_id": matter_id})
        assert not result.ok
        assert re.search("outside the files root|is not one folder name", result.content)
        assert "TOP-SECRET-CONTENT" not in result.content


def test_absolute_matter_id_is_refused(files: Path) -> None:
    outside = str(files.parent / "outside")
    result = default_registry(files).invoke(
        "file__parse", {"file_id": "secret.txt"}, {"matter_id": outside}
    )
    assert not result.ok and "is not one folder name" in result.content


# -- element extraction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Plaintiff: John Smith, Defendant: Acme Corp; on March 3, 2024 the parties signed. "
            "Filed 2024-04-01. Damages of $5,000.50 and USD 1,200; plus 300 dollars.",
            {
                "plaintiff": ["John Smith"],
                "defendant": ["Acme Corp"],
                "dates": ["March 3, 2024", "2024-04-01"],
                "amounts": ["$5,000.50", "USD 1,200", "300 dollars"],
            },
        ),
        (
            "原告：张三，被告：李四。2024年3月3日，被告向原告借款人民币5000元，"
            "约定于2024年12月1日归还。原告：张三",
            {
                "plaintiff": ["张三"],
                "defendant": ["李四"],
                "dates": ["2024年3月3日", "2024年12月1日"],
                "amounts": ["人民币5000元"],
            },
        ),
        ("Nothing to see here.", {"plaintiff": [], "defendant": [], "dates": [], "amounts": []}),
    ],
    ids=["english", "chinese", "empty"],
)
def test_extract_elements(text: str, expected: dict[str, list[str]]) -> None:
    assert extract_elements(text) == expected
    result = default_registry().invoke("element__extract", {"text": text}, {})
    assert result.ok and json.loads(result.content) == expected


# -- tool calls inside a run ----------------------------------------------------------------


def _deck(
    tmp_path: Path, skills: Path, registry: ToolRegistry, turns: dict[str, list[Any]]
) -> SkillDeck:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"skills": turns}, allow_unicode=True), "utf-8")
    return SkillDeck(
        skills,
        tools=registry,
        settings=Settings(model=f"scripted:{script}"),
        checkpointer="memory://",
    )


def test_a_grammar_holds_a_written_text_well_inside_the_reply_budget() -> None:
    registry = default_registry(None)
    text = registry.arguments_schema("element__extract", grammar=True)["properties"]["text"]
    assert text["maxLength"] == MAX_WRITTEN_TEXT
    # The tool itself takes a whole document, from any caller.
    long = registry.invoke("element__extract", {"text": "x " * 5_000}, {})
    assert long.ok, long.content


def test_tool_not_in_meta_is_refused(tmp_path: Path, skills_dir: Path) -> None:
    write_bundle(skills_dir, "alpha", meta={"tools": ["file__get_info"]})
    info_calls: list[dict[str, Any]] = []
    parse_calls: list[dict[str, Any]] = []
    registry = ToolRegistry(
        [probe("file__get_info", info_calls), probe("file__parse", parse_calls)]
    )
    turns = {
        "alpha": [
            {"tool_calls": [{"name": "file__parse", "args": {"q": "complaint.txt"}}]},
            {"tool_calls": [{"name": "file__get_info", "args": {"q": "complaint.txt"}}]},
            output(data={"note": "done"}),
        ]
    }
    deck = _deck(tmp_path, skills_dir, registry, turns)
    result = deck.run(context="ctx", user_id="u1", matter_id="m1")
    assert result.status == "finished", result.error
    assert result.state["note"] == "done"

    attempt = result.state["attempt"]
    assert [c["name"] for c in attempt["tool_calls"]] == ["file__parse", "file__get_info"]
    assert [c["status"] for c in attempt["tool_calls"]] == ["refused", "ok"]
    assert parse_calls == []  # never executed
    assert info_calls == [{"q": "complaint.txt", "user_id": "u1", "matter_id": "m1"}]

    messages = transcript.read(deck.store, attempt["turn"], attempt["head"])
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    refusal = tool_messages[0]
    assert refusal.name == "file__parse" and refusal.status == "error"
    assert "not allowed" in refusal.content and "file__get_info" in refusal.content
    # The refusal is in the conversation before the model's next turn.
    ai_positions = [i for i, m in enumerate(messages) if isinstance(m, AIMessage)]
    assert ai_positions[0] < messages.index(refusal) < ai_positions[1]
    assert refusal.tool_call_id == messages[ai_positions[0]].tool_calls[0]["id"]


def test_identity_in_tool_args_is_refused_and_bound_from_the_run(
    tmp_path: Path, skills_dir: Path
) -> None:
    write_bundle(skills_dir, "alpha", meta={"tools": ["probe__whoami"]})
    calls: list[dict[str, Any]] = []
    registry = ToolRegistry([probe("probe__whoami", calls)])
    turns = {
        "alpha": [
            {"tool_calls": [{"name": "probe__whoami", "args": {"q": "a", "user_id": "evil"}}]},
            {"tool_calls": [{"name": "probe__whoami", "args": {"q": "b"}}]},
            output(),
        ]
    }
    deck = _deck(tmp_path, skills_dir, registry, turns)
    result = deck.run({"note": "hi"}, context="ctx", user_id="u1", matter_id="m1")
    assert result.status == "finished", result.error
    assert calls == [{"q": "b", "user_id": "u1", "matter_id": "m1"}]

    attempt = result.state["attempt"]
    assert [c["status"] for c in attempt["tool_calls"]] == ["error", "ok"]
    messages = transcript.read(deck.store, attempt["turn"], attempt["head"])
    forged, ok = [m for m in messages if isinstance(m, ToolMessage)]
    assert forged.status == "error"
    assert "user_id" in forged.content and "bound by the runtime" in forged.content
    assert "evil" not in forged.content
    assert ok.status == "success" and json.loads(ok.content) == {"echo": "b"}


def test_a_crashing_tool_is_an_error_for_the_model_not_a_stuck_run(
    tmp_path: Path, skills_dir: Path
) -> None:
    def explode(q: str) -> str:
        """Always fails."""
        raise PermissionError("denied")

    write_bundle(skills_dir, "alpha", meta={"tools": ["probe__explode"]})
    registry = ToolRegistry([StructuredTool.from_function(explode, name="probe__explode")])
    turns = {
        "alpha": [
            {"tool_calls": [{"name": "probe__explode", "args": {"q": "x"}}]},
            output(data={"note": "recovered"}),
        ]
    }
    deck = _deck(tmp_path, skills_dir, registry, turns)
    result = deck.run(context="ctx")
    assert result.status == "finished", result.error
    assert result.state["attempt"]["tool_calls"][0]["status"] == "error"
    messages = transcript.read(
        deck.store, result.state["attempt"]["turn"], result.state["attempt"]["head"]
    )
    failure = next(m for m in messages if isinstance(m, ToolMessage))
    # The model hears that the tool failed and how; the exception's own text is for the log.
    assert "probe__explode failed: PermissionError; the details are in the" in failure.content
    assert "denied" not in failure.content
