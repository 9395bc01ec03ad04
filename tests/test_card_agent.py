"""The card-agent skill of seed 003: the card tools, the bundle, its cases and cassettes, and
runs of the real SkillDeck on the scripted cassettes with the cards checked on disk."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import SEED_CARD
from endpoint import serve

from skilldeck import Settings, SkillDeck
from skilldeck.errors import ToolError
from skilldeck.skills import builtin_skills_dir, load_bundle
from skilldeck.tools import TEMPLATES, default_registry
from skilldeck.tools.cards import (
    CARD_KEYS,
    MAX_FIELD_CHARS,
    MAX_LIST_ITEMS,
    MAX_TEMPLATES,
    TEMPLATE_IDS,
    card_relpath,
    card_slug,
    card_tools,
    read_card,
    save_card,
    update_insight,
)

pytestmark = pytest.mark.L2

BUNDLE = builtin_skills_dir() / "card-agent"
GOOD = BUNDLE / "evals" / "scripted.yaml"
WORSE = BUNDLE / "evals" / "worse.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load((BUNDLE / "cases.yaml").read_text("utf-8"))
SEED_CASE = json.loads(SEED_CARD)


def a_card(**changes: Any) -> dict[str, Any]:
    card: dict[str, Any] = {
        "fact_id": "2026/05/25.md#ts_1",
        "title": "Eval team standup",
        "template_ids": ["event"],
        "tags": ["meeting"],
        "ui_config": {"start": "Thursday 10:30am", "medium": "Zoom"},
        "content": "Standup with the eval team Thursday 10:30am, Zoom.",
    }
    card.update(changes)
    return {k: v for k, v in card.items() if v is not ...}


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


# -- the template set -------------------------------------------------------------------------


def test_templates_are_one_set_everywhere() -> None:
    assert tuple(TEMPLATES) == TEMPLATE_IDS
    memex = "link person place spec_sheet transaction metric rating mood progress event duration "
    memex += (
        "task routine procedure compact snippet article conversation quote snapshot gallery video"
    )
    assert tuple(memex.split()) == TEMPLATE_IDS  # Memex's 22 template ids
    for template in TEMPLATES.values():
        assert template.description and template.fields
    schema = json.loads((BUNDLE / "assets" / "output_schema.json").read_text("utf-8"))
    card = schema["properties"]["data"]["properties"]["timeline_card"]
    assert card["properties"]["template_ids"]["items"]["enum"] == list(TEMPLATE_IDS)
    assert card["properties"]["template_ids"]["maxItems"] == MAX_TEMPLATES  # as card__save
    reference = (BUNDLE / "references" / "templates.md").read_text("utf-8")
    for template in TEMPLATES.values():
        row = next(line for line in reference.splitlines() if line.startswith(f"| `{template.id}`"))
        shape = ", ".join(f"{name} ({kind})" for name, kind in template.shape)
        assert row.rstrip(" |").endswith(shape), row


# -- card__save ------------------------------------------------------------------------------


def test_slug_replaces_every_unsafe_character() -> None:
    assert card_slug("2026/05/25.md#ts_1") == "2026_05_25_md_ts_1"
    assert card_slug("a-b_C9") == "a-b_C9"
    assert card_slug("../x y") == "___x_y"
    assert card_relpath("周报#1") == "Cards/___1.yaml"


def test_save_writes_exactly_the_card_keys(tmp_path: Path) -> None:
    result = save_card(tmp_path, a_card(title="  Eval team standup  "))
    assert result == {
        "ok": True,
        "fact_id": "2026/05/25.md#ts_1",  # what the output names the card by, not the path
        "path": "Cards/2026_05_25_md_ts_1.yaml",
        "status": "completed",
        "title": "Eval team standup",  # as saved: what an output reporting the card repeats
        "template_ids": ["event"],
        "tags": ["meeting"],
        "ui_config": {"start": "Thursday 10:30am", "medium": "Zoom"},
    }
    text = (tmp_path / result["path"]).read_text("utf-8")
    saved = yaml.safe_load(text)
    assert tuple(saved) == CARD_KEYS
    assert saved == {
        "fact_id": "2026/05/25.md#ts_1",
        "title": "Eval team standup",
        "status": "completed",
        "template_ids": ["event"],
        "tags": ["meeting"],
        "ui_config": {"start": "Thursday 10:30am", "medium": "Zoom"},
        "content": "Standup with the eval team Thursday 10:30am, Zoom.",
        "insight": None,
    }
    assert list((tmp_path / "Cards").iterdir()) == [tmp_path / result["path"]]  # no temp file


def test_saved_yaml_keeps_long_values_on_one_line(tmp_path: Path) -> None:
    # Graders scan the file as text: a folded line would split "Rue de la Bûcherie".
    content = "word " * 40 + "37 Rue de la Bûcherie, Paris: ¥1,290"
    save_card(tmp_path, a_card(content=content))
    text = (tmp_path / "Cards" / "2026_05_25_md_ts_1.yaml").read_text("utf-8")
    assert "37 Rue de la Bûcherie, Paris: ¥1,290" in text


def test_save_keeps_an_insight_already_on_file(tmp_path: Path) -> None:
    update_insight(tmp_path, "2026/05/25.md#ts_1", "Standups moved to Thursdays.")
    save_card(tmp_path, a_card())
    card = read_card(tmp_path, "2026/05/25.md#ts_1") or {}
    assert tuple(card) == CARD_KEYS
    assert card["status"] == "completed" and card["title"] == "Eval team standup"
    assert card["insight"] == "Standups moved to Thursdays."
    save_card(tmp_path, a_card(insight="New insight."))
    assert (read_card(tmp_path, "2026/05/25.md#ts_1") or {})["insight"] == "New insight."


@pytest.mark.parametrize(
    ("card", "message"),
    [
        ("not a card", "card must be an object"),
        (a_card(fact_id=...), "fact_id is required"),
        (a_card(fact_id="   "), "fact_id is required"),
        (a_card(fact_id="x" * 201), "fact_id is too long"),
        (a_card(title=...), "card.title is required"),
        (a_card(title=""), "card.title is required"),
        (a_card(template_ids=[]), "template_ids must be a non-empty list"),
        (a_card(template_ids="event"), "template_ids must be a non-empty list"),
        (a_card(template_ids=["event", "meeting"]), "unknown template(s) ['meeting']"),
        (a_card(template_ids=["event", "event"]), "lists a template twice"),
        (a_card(template_ids=["event", "link", "rating", "place"]), "at most 3"),
        (a_card(tags="work"), "tags must be a list of strings"),
        (a_card(ui_config=...), "ui_config must be an object"),
        (a_card(ui_config=["Thursday"]), "ui_config must be an object"),
        (a_card(content=...), "card.content is required"),
        (a_card(insight=3), "insight must be a string or null"),
        (a_card(status="completed"), "status is set by the tool"),
        (a_card(colour="red"), "unknown key(s) colour"),
    ],
)
def test_bad_card_is_refused_and_nothing_written(tmp_path: Path, card: Any, message: str) -> None:
    save_card(tmp_path, a_card(fact_id="other"))
    before = files_under(tmp_path)
    with pytest.raises(ToolError) as info:
        save_card(tmp_path, card)
    assert message in str(info.value)
    assert files_under(tmp_path) == before


def _schema_errors(card: Any) -> list[str]:
    schema = card_tools(None)[0].tool_call_schema.model_json_schema()
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors({"card": card})]


@pytest.mark.parametrize("template", TEMPLATE_IDS)
def test_the_save_schema_accepts_every_template_with_all_its_fields(
    tmp_path: Path, template: str
) -> None:
    """What a grammar-constrained model may write is what the tool saves: all of a
    template's fields, each of its type."""
    values = {"string": "x", "number": 8, "list": ["a"], "object": {"k": "v"}}
    ui = {name: values[kind] for name, kind in TEMPLATES[template].shape}
    card = a_card(template_ids=[template], ui_config=ui)
    assert _schema_errors(card) == []
    save_card(tmp_path, card)


@pytest.mark.parametrize(
    "card",
    [
        a_card(ui_config={"transaction": "meeting"}),  # no template has this field
        a_card(template_ids=list(TEMPLATE_IDS[: MAX_TEMPLATES + 1])),
        a_card(colour="red"),
    ],
)
def test_the_save_schema_refuses_what_the_tool_refuses(tmp_path: Path, card: Any) -> None:
    assert _schema_errors(card)
    with pytest.raises(ToolError):
        save_card(tmp_path, card)


def test_a_failed_write_leaves_the_old_card_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_card(tmp_path, a_card())
    before = files_under(tmp_path)

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        save_card(tmp_path, a_card(title="Changed"))
    assert files_under(tmp_path) == before


# -- card__update_insight --------------------------------------------------------------------


def test_update_insight_sets_it_and_keeps_the_card(tmp_path: Path) -> None:
    save_card(tmp_path, a_card())
    result = update_insight(tmp_path, "2026/05/25.md#ts_1", "  Weekly sync, not daily.  ")
    assert result == {
        "ok": True,
        "fact_id": "2026/05/25.md#ts_1",
        "path": "Cards/2026_05_25_md_ts_1.yaml",
        "status": "completed",
        "insight": "Weekly sync, not daily.",
    }
    card = read_card(tmp_path, "2026/05/25.md#ts_1") or {}
    assert tuple(card) == CARD_KEYS
    assert card["insight"] == "Weekly sync, not daily." and card["title"] == "Eval team standup"


def test_update_insight_without_a_card_starts_a_draft(tmp_path: Path) -> None:
    result = update_insight(tmp_path, "2026/06/01.md#ts_9", "Sleep debt builds on Mondays.")
    assert result["status"] == "draft"
    assert read_card(tmp_path, "2026/06/01.md#ts_9") == {
        "fact_id": "2026/06/01.md#ts_9",
        "status": "draft",
        "insight": "Sleep debt builds on Mondays.",
    }


@pytest.mark.parametrize(
    ("fact_id", "insight", "message"),
    [
        ("", "x", "fact_id is required"),
        (None, "x", "fact_id is required"),
        ("2026/05/25.md#ts_1", "", "insight is required"),
        ("2026/05/25.md#ts_1", None, "insight is required"),
        ("2026/05/25.md#ts_1", "x" * 401, "insight is 401 characters; write at most 400"),
    ],
)
def test_bad_insight_arguments_are_refused(
    tmp_path: Path, fact_id: Any, insight: Any, message: str
) -> None:
    save_card(tmp_path, a_card())
    before = files_under(tmp_path)
    with pytest.raises(ToolError, match=message):
        update_insight(tmp_path, fact_id, insight)
    assert files_under(tmp_path) == before


def test_a_card_file_that_is_not_a_card_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / card_relpath("f1")
    path.parent.mkdir()
    path.write_text("- just\n- a list\n", "utf-8")
    with pytest.raises(ToolError, match="does not hold a card"):
        update_insight(tmp_path, "f1", "x")
    path.write_text("key: [unclosed\n", "utf-8")
    with pytest.raises(ToolError, match="is not valid YAML"):
        save_card(tmp_path, a_card(fact_id="f1"))
    assert path.read_text("utf-8") == "key: [unclosed\n"


# -- the tools in the registry: workspace = files_root / matter_id ---------------------------


def test_registry_tools_write_in_the_matter_workspace(tmp_path: Path) -> None:
    registry = default_registry(tmp_path)
    assert {"card__save", "card__update_insight"} <= set(registry.names())
    assert registry.identity_params("card__save") == {"matter_id"}
    # The model sees the card's fields and the template set, not a bare "object".
    schema = json.dumps(registry.get("card__save").tool_call_schema.model_json_schema())
    assert '"enum": ["link", "person", "place"' in schema and '"ui_config"' in schema
    assert "matter_id" not in schema
    result = registry.invoke("card__save", {"card": a_card()}, {"matter_id": "trial-1"})
    assert result.ok, result.content
    assert json.loads(result.content)["path"] == "Cards/2026_05_25_md_ts_1.yaml"
    assert (tmp_path / "trial-1" / "Cards" / "2026_05_25_md_ts_1.yaml").is_file()
    result = registry.invoke(
        "card__update_insight",
        {"fact_id": "2026/05/25.md#ts_1", "insight": "ok"},
        {"matter_id": "trial-1"},
    )
    assert result.ok and json.loads(result.content)["status"] == "completed"


def test_registry_reports_bad_cards_to_the_model(tmp_path: Path) -> None:
    registry = default_registry(tmp_path)
    result = registry.invoke(
        "card__save", {"card": a_card(template_ids=["meeting"])}, {"matter_id": "t"}
    )
    assert not result.ok and "unknown template(s) ['meeting']" in result.content
    forged = registry.invoke("card__save", {"card": a_card(), "matter_id": "x"}, {})
    assert not forged.ok and "bound by the runtime" in forged.content
    assert not any(tmp_path.rglob("*.yaml"))


@pytest.mark.parametrize("matter_id", ["../outside", "/etc", "a/../../outside"])
def test_card_tools_are_jailed_to_the_files_root(tmp_path: Path, matter_id: str) -> None:
    root = tmp_path / "trials"
    root.mkdir()
    save, set_insight = card_tools(root)
    with pytest.raises(ToolError, match="not one folder name"):
        save.invoke({"card": a_card(), "matter_id": matter_id})
    with pytest.raises(ToolError, match="not one folder name"):
        set_insight.invoke({"fact_id": "f", "insight": "x", "matter_id": matter_id})
    assert files_under(tmp_path) == {}


# -- the bundle ------------------------------------------------------------------------------


def test_bundle_loads_with_its_contract() -> None:
    bundle = load_bundle(BUNDLE)
    assert bundle.name == "card-agent"
    assert bundle.contexts == ("card",)
    assert bundle.tools == (
        "card__save",
        "fact__read",
        "skill__read_file",
    )  # templates.md on demand
    assert bundle.provides == ("profile.card_status",)
    assert bundle.data_keys == ("timeline_card",)
    assert bundle.execution.mode == "single"
    assert bundle.validate is not None
    assert [f for f, _ in bundle.files] == ["references/templates.md"]
    assert "fact_id" in bundle.instructions and "card__save" in bundle.instructions


def test_the_default_deck_includes_card_agent(tmp_path: Path) -> None:
    deck = SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=Settings())
    try:
        assert "card-agent" in deck.mermaid()
    finally:
        deck.close()


def test_validate_checks_the_card_against_the_run() -> None:
    bundle = load_bundle(BUNDLE)
    assert bundle.validate is not None
    card = {"fact_id": "f/1", "path": "Cards/f_1.yaml"}
    state = {"input": {"fact_id": "f/1", "content": "x"}}
    saved = {"tool_calls": [{"name": "card__save", "args": {}}]}
    verdict = bundle.validate({"data": {"timeline_card": card}}, state, saved)
    assert verdict == {"action": "continue"}

    def errors(card: dict[str, Any], turn: dict[str, Any]) -> str:
        verdict = bundle.validate({"data": {"timeline_card": card}}, state, turn)
        assert isinstance(verdict, dict) and verdict["action"] == "retry"
        return " ".join(verdict["errors"])

    assert "returned 'Cards/f_1.yaml'" in errors({**card, "path": "Cards/x.yaml"}, saved)
    # The turn lists only the calls that stand: a failed or undone save is not there.
    assert "no successful card__save call" in errors(card, {"tool_calls": []})


# -- cases, fixtures and cassettes -----------------------------------------------------------


def test_cases_have_the_seed_shape() -> None:
    ids = [case["id"] for case in CASES]
    assert len(ids) >= 25 and len(set(ids)) == len(ids)
    assert {case["bucket"] for case in CASES} == {"positive", "negative", "ambiguous"}
    seed = next(case for case in CASES if case["id"] == SEED_CASE["id"])
    assert {k: v for k, v in seed.items() if k != "bucket"} == SEED_CASE
    for case in CASES:
        assert set(case["input"]) == {"fact_id", "content"}, case["id"]
        assert case.get("base_fixture", "_fresh") == "_fresh"
        graders = {g["name"]: g.get("config") for g in case["graders"]}
        assert set(graders) == {"card_completion", "card_template_choice", "card_must_contain"}
        expected = graders["card_template_choice"]["expected_template_ids"]
        assert expected and set(expected) <= set(TEMPLATE_IDS), case["id"]
        if case["bucket"] == "ambiguous":
            assert len(expected) >= 2, case["id"]
        for text in graders["card_must_contain"]["substrings"]:
            assert text.lower() in case["input"]["content"].lower(), (case["id"], text)


def test_negative_cases_are_never_events() -> None:
    for case in CASES:
        if case["bucket"] == "negative":
            expected = case["graders"][1]["config"]["expected_template_ids"]
            assert "event" not in expected, case["id"]


def test_fresh_fixture_is_an_empty_workspace() -> None:
    fresh = BUNDLE / "fixtures" / "_fresh"
    assert fresh.is_dir()
    # Only the placeholder that keeps the folder in git: no card, no markdown for PKM listings.
    assert sorted(p.name for p in fresh.rglob("*")) == [".gitkeep"]


@pytest.mark.parametrize("cassette", [GOOD, WORSE], ids=["good", "worse"])
def test_cassettes_cover_every_case_with_allowed_tools(cassette: Path) -> None:
    tape = yaml.safe_load(cassette.read_text("utf-8"))
    assert set(tape["cases"]) == {case["id"] for case in CASES}
    for case_id, entry in tape["cases"].items():
        assert set(entry["skills"]) == {"card-agent"}, case_id
        for turn in entry["skills"]["card-agent"]:
            for call in turn.get("tool_calls", []):
                assert call["name"] == "card__save", case_id


# -- end to end: the real SkillDeck on the cassettes -----------------------------------------


@pytest.fixture
def trials(tmp_path: Path) -> Path:
    return tmp_path / "trials"


def deck_on(cassette: Path, trials: Path, tmp_path: Path) -> SkillDeck:
    return SkillDeck(
        [BUNDLE],
        checkpointer=f"sqlite:///{tmp_path / f'{cassette.stem}.sqlite'}",
        settings=Settings(model=f"scripted:{cassette}", files_root=str(trials)),
    )


@pytest.fixture
def good_deck(trials: Path, tmp_path: Path) -> Iterator[SkillDeck]:
    deck = deck_on(GOOD, trials, tmp_path)
    yield deck
    deck.close()


def run_case(deck: SkillDeck, trials: Path, case_id: str, trial: str) -> Any:
    case = next(c for c in CASES if c["id"] == case_id)
    shutil.copytree(BUNDLE / "fixtures" / case.get("base_fixture", "_fresh"), trials / trial)
    return deck.run(
        case["input"], context="card", matter_id=trial, metadata={"skilldeck_case": case_id}
    )


def test_seed_case_end_to_end_saves_the_event_card(good_deck: SkillDeck, trials: Path) -> None:
    result = run_case(good_deck, trials, "card_event_meeting_with_time", "trial-1")
    assert result.status == "finished", result.error
    text = (trials / "trial-1" / "Cards" / "2026_05_25_md_ts_1.yaml").read_text("utf-8")
    saved = yaml.safe_load(text)
    assert saved["fact_id"] == "2026/05/25.md#ts_1" and saved["status"] == "completed"
    assert saved["template_ids"][0] == "event"
    assert saved["title"] and saved["ui_config"]
    assert "10:30" in text and "zoom" in text.lower()
    state = result.state
    assert state["timeline_card"]["path"] == "Cards/2026_05_25_md_ts_1.yaml"
    assert state["timeline_card"]["template_ids"] == saved["template_ids"]
    assert state["profile"] == {"card_status": "completed"}
    assert [c["name"] for c in state["attempt"]["tool_calls"]] == ["card__save"]
    assert state["attempt"]["tool_calls"][0]["status"] == "ok"
    # The trial writes only its own card in its own workspace.
    assert sorted(files_under(trials)) == [
        "trial-1/.gitkeep",
        "trial-1/Cards/2026_05_25_md_ts_1.yaml",
    ]


def test_every_good_case_finishes_with_its_card_saved(good_deck: SkillDeck, trials: Path) -> None:
    for i, case in enumerate(CASES):
        result = run_case(good_deck, trials, case["id"], f"t{i}")
        assert result.status == "finished", (case["id"], result.error)
        saved = yaml.safe_load(
            (trials / f"t{i}" / card_relpath(case["input"]["fact_id"])).read_text("utf-8")
        )
        assert saved["fact_id"] == case["input"]["fact_id"] and saved["status"] == "completed"


def test_worse_model_that_never_saves_fails_with_no_card(trials: Path, tmp_path: Path) -> None:
    deck = deck_on(WORSE, trials, tmp_path)
    try:
        result = run_case(deck, trials, "card_amb_hotel_booking", "trial-w")
    finally:
        deck.close()
    assert result.status == "failed"
    assert result.error.code == "CONTRACT_VIOLATION"
    # tool_choice: required refuses an output before a call (the scripted model's tool mode
    # cannot hold it): every attempt is sent back to call card__save first.
    assert result.error is not None
    assert "(tool_choice: required): call one of card__save" in json.dumps(result.error.dump())
    assert not (trials / "trial-w" / "Cards").exists()
    assert "timeline_card" not in result.state


# -- the grammar of card__save (schema mode) ------------------------------------------------------


def _grammar() -> dict[str, Any]:
    return default_registry(".").arguments_schema("card__save", grammar=True)


@pytest.mark.parametrize("template", TEMPLATE_IDS)
def test_the_grammar_allows_a_template_with_its_own_fields_and_save_accepts_it(
    template: str, tmp_path: Path
) -> None:
    """Each branch is a card the tool saves: the grammar allows only what card__save accepts."""
    fields = {name: _a_value(kind) for name, kind in TEMPLATES[template].shape}
    card = a_card(template_ids=[template], ui_config=fields)
    assert jsonschema.Draft202012Validator(_grammar()).is_valid({"card": card})
    assert save_card(tmp_path, card)["ok"] is True


def _a_value(kind: str) -> Any:
    return {"string": "x", "number": 3, "list": ["a"], "object": {"k": "v"}}[kind]


def test_the_grammar_ties_the_fields_to_the_one_template() -> None:
    grammar = jsonschema.Draft202012Validator(_grammar())
    mixed = a_card(template_ids=["rating"], ui_config={"score": "4/5", "start": "9am"})
    assert not grammar.is_valid({"card": mixed})  # an event's field on a rating card
    with pytest.raises(ToolError, match="start"):
        save_card(Path("/nonexistent"), mixed)  # the tool refuses it too, in every mode
    two = a_card(template_ids=["rating", "transaction"], ui_config={"score": "4/5"})
    assert not grammar.is_valid({"card": two})  # secondaries: the other modes only
    # The facts come first: ui_config precedes template_ids in every branch.
    for branch in _grammar()["properties"]["card"]["anyOf"]:
        keys = list(branch["properties"])
        assert keys.index("ui_config") < keys.index("template_ids")


def _first_request(mode: str, files: Path) -> dict[str, Any]:
    """The first request card-agent sends in ``mode`` to an endpoint that fails every call."""
    card = a_card()
    with serve([]) as endpoint:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            model="compatible:local-model",
            api_key="local",
            base_url=endpoint.url,
            files_root=str(files),
            output_mode=mode,
            max_retries=0,
        )
        with SkillDeck([BUNDLE], checkpointer="memory://", settings=settings) as deck:
            run_input = {"fact_id": card["fact_id"], "content": card["content"]}
            deck.run(run_input, context="card", matter_id="m")
        return endpoint.requests[0]


def test_schema_mode_holds_card_save_to_the_grammar(tmp_path: Path) -> None:
    envelope = _first_request("schema", tmp_path)["response_format"]["json_schema"]["schema"]
    branches = [b for b in envelope["anyOf"] if b["properties"]["tool"]["const"] == "card__save"]
    card = branches[0]["properties"]["arguments"]["properties"]["card"]
    assert len(card["anyOf"]) == len(TEMPLATE_IDS)


def test_tool_mode_sends_the_tools_own_short_schema(tmp_path: Path) -> None:
    tools = _first_request("tool", tmp_path)["tools"]
    [save] = [t for t in tools if t["function"]["name"] == "card__save"]
    assert "anyOf" not in json.dumps(save)  # the grammar's branches stay out of every prompt


@pytest.mark.parametrize(
    "ui_config",
    [
        {"summary": "the sound is great; " * 40},
        {"participants": [f"person {i}" for i in range(MAX_LIST_ITEMS + 1)]},
        {"participants": ["x" * (MAX_FIELD_CHARS + 1)]},
    ],
    ids=["long-text", "long-list", "long-item"],
)
def test_a_field_too_long_is_refused_and_the_grammar_cannot_write_it(
    ui_config: dict[str, Any], tmp_path: Path
) -> None:
    """A repetition loop inside a field ends at the field's bound, not at the token limit."""
    card = a_card(template_ids=["conversation"], ui_config=ui_config)
    with pytest.raises(ToolError, match="too long"):
        save_card(tmp_path, card)
    assert files_under(tmp_path) == {}
    assert not jsonschema.Draft202012Validator(_grammar()).is_valid({"card": card})
