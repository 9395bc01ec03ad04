"""Output fields pinned to the run's state (``x-state``), to the attempt's calls (``x-calls``)
or to what a call returned (``x-result``): found at load, held by the grammar in ``schema``
mode, and checked after the reply in every mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_bundle
from endpoint import call, serve, settings_for, text

from skilldeck import SkillDeck
from skilldeck.errors import BundleError
from skilldeck.graph.records import ToolCall
from skilldeck.skills import builtin_skills_dir, load_bundle
from skilldeck.skills.pins import (
    CallsPin,
    Pin,
    ResultPin,
    find_pins,
    pin_errors,
    pin_values,
    pinned,
    result_fields,
)

pytestmark = pytest.mark.L2

NOTE = {"note": {"type": "string", "x-state": "input.ref"}}


def _output(**data: Any) -> dict[str, Any]:
    return {"response": "ok", "profile": {}, "data": data, "control": {"action": "finish"}}


def _final(note: str) -> dict[str, Any]:
    return _output(note=note)


def _run(bundle: Path, mode: str, steps: list[Any], inputs: dict[str, Any]) -> Any:
    """Run ``bundle`` on a local endpoint serving ``steps``: the result, its attempt history
    and the requests the endpoint got."""
    with serve(steps) as endpoint:
        settings = settings_for(endpoint, output_mode=mode)
        with SkillDeck([bundle], checkpointer="memory://", settings=settings) as deck:
            result = deck.run(inputs, context="ctx")
            return result, deck.history(result.thread_id), endpoint.requests


def test_pins_are_found_on_properties_and_take_the_states_scalars() -> None:
    schema = {"properties": {"data": {"properties": NOTE}}}
    pins = find_pins(schema)
    assert pins == (Pin(("data", "note"), "input.ref"),)
    assert pin_values(pins, {"input": {"ref": "r-1"}}) == {("data", "note"): "r-1"}
    # Nothing known, nothing pinned: a missing value or one that is not a scalar.
    assert pin_values(pins, {"input": {}}) == {}
    assert pin_values(pins, {"input": {"ref": {"a": 1}}}) == {}
    assert pinned(schema, {("data", "note"): "r-1"})["properties"]["data"]["properties"][
        "note"
    ] == {"type": "string", "x-state": "input.ref", "const": "r-1"}
    assert "const" not in schema["properties"]["data"]["properties"]["note"]  # a copy


def test_a_pinned_field_that_differs_is_an_error_naming_its_source() -> None:
    pins = find_pins({"properties": {"data": {"properties": NOTE}}})
    state = {"input": {"ref": "r-1"}}
    assert pin_errors(pins, _final("r-1"), state) == []
    assert pin_errors(pins, _final("r-1"), {"input": {}}) == []
    (error,) = pin_errors(pins, _final("r-2"), state)
    assert error == {"path": "$.data.note", "message": "'r-2' must be input.ref, 'r-1', unchanged"}


@pytest.mark.parametrize(
    ("note", "message"),
    [
        ({"type": "array", "items": {"type": "string", "x-state": "input.ref"}}, "inside a list"),
        ({"anyOf": [{"type": "string", "x-state": "input.ref"}]}, "inside a list or a branch"),
        ({"type": "string", "x-state": "input..ref"}, "not a dotted state path"),
        ({"type": "string", "x-state": 3}, "not a dotted state path"),
    ],
)
def test_a_pin_out_of_place_fails_the_bundle_at_load(
    note: dict[str, Any], message: str, tmp_path: Path
) -> None:
    bundle = write_bundle(tmp_path, "alpha", data={"note": note})
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle)


def test_card_agent_pins_the_records_fact_id_and_the_saved_path() -> None:
    bundle = load_bundle(builtin_skills_dir() / "card-agent")
    saved = ("title", "template_ids", "tags", "ui_config", "path")
    assert bundle.pins == (
        Pin(("data", "timeline_card", "fact_id"), "input.fact_id"),
        *(ResultPin(("data", "timeline_card", f), "card__save", f) for f in saved),
    )
    assert result_fields(bundle.pins) == {"card__save": saved}


@pytest.mark.parametrize("mode", ["schema", "json"])
def test_the_grammar_holds_a_pin_and_the_check_refuses_another_value(
    mode: str, tmp_path: Path
) -> None:
    bundle = write_bundle(tmp_path, "alpha", data=NOTE)
    wrong, right = _final("r-2"), _final("r-1")
    steps = [text(json.dumps({"final": o} if mode == "schema" else o)) for o in (wrong, right)]
    result, history, requests = _run(bundle, mode, steps, {"ref": "r-1"})
    assert result.status == "finished", result.error
    assert result.state["note"] == "r-1"
    (rejected,) = [r for r in history if r["action"] == "rejected"]
    assert rejected["validation_errors"][0]["path"] == "$.data.note"
    if mode == "schema":
        grammar = json.dumps(requests[0]["response_format"])
        assert '"const": "r-1"' in grammar and "x-state" not in grammar


# -- x-calls: a list that reports what the attempt's calls did ---------------------------------
READ = {
    "read": {"type": "array", "items": {"type": "string"}, "x-calls": ["element__extract.text"]}
}
TOOLS = {"tools": ["element__extract"], "execution_config": {"max_tool_rounds": 3}}


def _made(name: str, args: dict[str, Any], returned: dict[str, Any] | None = None) -> ToolCall:
    """A call that worked, as the run's records keep it."""
    return ToolCall(id=f"c{len(args)}", name=name, args=args, status="ok", returned=returned)


def _reported(read: list[str]) -> dict[str, Any]:
    return _output(read=read)


def test_a_calls_pin_takes_the_values_of_successful_calls_and_holds_them() -> None:
    schema = {"properties": {"data": {"properties": READ}}}
    (pin,) = find_pins(schema)
    assert pin == CallsPin(("data", "read"), (("element__extract", "text"),))
    calls = [
        _made("element__extract", {"text": "a"}),
        _made("other", {"text": "b"}),
        _made("element__extract", {"text": "a"}),
    ]
    assert pin_values((pin,), {}, calls) == {("data", "read"): ("a",)}
    assert pin_values((pin,), {}, []) == {("data", "read"): ()}
    node = lambda values: pinned(schema, values)["properties"]["data"]["properties"]["read"]  # noqa: E731
    assert node({("data", "read"): ("a",)})["items"] == {"type": "string", "enum": ["a"]}
    assert node({("data", "read"): ("a",)})["minItems"] == 1
    assert node({("data", "read"): ()})["maxItems"] == 0
    assert pin_errors((pin,), _reported(["a"]), {}, calls) == []
    assert pin_errors((pin,), _reported([]), {}, []) == []
    (unmade,) = pin_errors((pin,), _reported(["a", "z"]), {}, calls)
    assert unmade["path"] == "$.data.read[1]"
    assert "'z' is not the element__extract.text of a successful call" in unmade["message"]
    (missing,) = pin_errors((pin,), _reported([]), {}, calls)
    assert missing == {
        "path": "$.data.read",
        "message": "this attempt's successful calls gave element__extract.text 'a': name them here",
    }


@pytest.mark.parametrize(
    ("read", "message"),
    [
        ({"type": "string", "x-calls": ["element__extract.text"]}, '"type": "array"'),
        ({"type": "array", "x-calls": "element__extract.text"}, "TOOL.ARGUMENT"),
        ({"type": "array", "x-calls": ["element__extract"]}, "TOOL.ARGUMENT"),
        ({"type": "array", "x-calls": []}, "TOOL.ARGUMENT"),
        ({"type": "array", "x-calls": ["file__parse.file_id"]}, "file__parse is not one of"),
    ],
)
def test_a_calls_pin_out_of_shape_fails_the_bundle_at_load(
    read: dict[str, Any], message: str, tmp_path: Path
) -> None:
    bundle = write_bundle(tmp_path, "alpha", meta=TOOLS, data={"read": read})
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle)


def test_pkm_agent_reports_the_files_its_writes_named() -> None:
    bundle = load_bundle(builtin_skills_dir() / "pkm-agent")
    writes = (("pkm__append", "path"), ("pkm__create", "path"), ("pkm__write", "path"))
    assert bundle.pins == (CallsPin(("data", "pkm", "files"), writes),)


@pytest.mark.parametrize("mode", ["schema", "json"])
def test_the_grammar_holds_a_calls_pin_and_the_check_refuses_an_unmade_call(
    mode: str, tmp_path: Path
) -> None:
    bundle = write_bundle(tmp_path, "alpha", meta=TOOLS, data=READ)
    claim, right = _reported(["never read"]), _reported(["the text"])
    call = {"tool": "element__extract", "arguments": {"text": "the text"}}
    steps = [
        text(json.dumps(call)),
        *(text(json.dumps({"final": o} if mode == "schema" else o)) for o in (claim, right)),
    ]
    result, history, requests = _run(bundle, mode, steps, {})
    assert result.status == "finished", result.error
    assert result.state["read"] == ["the text"]
    (rejected,) = [r for r in history if r["action"] == "rejected"]
    assert rejected["validation_errors"][0]["path"] == "$.data.read[0]"
    if mode == "schema":
        before, after = (json.dumps(r["response_format"]) for r in requests[:2])
        # Before the call the list can hold nothing; after it, only what the call was given.
        assert '"maxItems": 0' in before and '"enum": ["the text"]' not in before
        assert '"enum": ["the text"]' in after and "x-calls" not in after


# -- x-result: a field that repeats what a call returned ---------------------------------------
SAVED = {"saved": {"type": "string", "x-result": "card__save.path"}}


def test_a_result_pin_takes_the_last_successful_calls_value_and_holds_it() -> None:
    schema = {"properties": {"data": {"properties": SAVED}}}
    (pin,) = find_pins(schema)
    assert pin == ResultPin(("data", "saved"), "card__save", "path")
    calls = [
        _made("card__save", {}, {"path": "Cards/a.yaml"}),
        _made("other", {}, {"path": "elsewhere"}),
        _made("card__save", {}, {"path": "Cards/b.yaml"}),
    ]
    assert pin_values((pin,), {}, calls) == {("data", "saved"): "Cards/b.yaml"}
    assert pin_values((pin,), {}, [*calls[:1], _made("card__save", {})]) == {
        ("data", "saved"): "Cards/a.yaml"
    }
    assert pin_values((pin,), {}, []) == {}  # nothing returned yet: nothing held
    held = pinned(schema, {("data", "saved"): "Cards/b.yaml"})["properties"]["data"]
    assert held["properties"]["saved"]["const"] == "Cards/b.yaml"
    listed = [_made("card__save", {}, {"path": ["a", {"b": 1}]})]
    assert pin_values((pin,), {}, listed) == {("data", "saved"): ["a", {"b": 1}]}
    assert pin_errors((pin,), _output(saved=["a", {"b": 1}]), {}, listed) == []
    assert pin_errors((pin,), _output(saved=["a"]), {}, listed)
    assert pin_errors((pin,), _output(saved="Cards/b.yaml"), {}, calls) == []
    assert pin_errors((pin,), _output(saved="anything"), {}, []) == []
    (wrong,) = pin_errors((pin,), _output(saved="cards/b.yaml"), {}, calls)
    assert wrong == {
        "path": "$.data.saved",
        "message": "'cards/b.yaml' must be the path that card__save returned, 'Cards/b.yaml', "
        "unchanged",
    }


@pytest.mark.parametrize(
    ("saved", "meta", "message"),
    [
        ({"type": "string", "x-result": "card__save"}, {"tools": ["card__save"]}, "TOOL.FIELD"),
        ({"type": "string", "x-result": ["card__save.path"]}, {"tools": ["card__save"]}, "TOOL"),
        ({"type": "string", "x-result": "card__save.path"}, {}, "card__save is not one of"),
        (
            {"type": "array", "items": {"type": "string", "x-result": "card__save.path"}},
            {"tools": ["card__save"]},
            "inside a list",
        ),
    ],
)
def test_a_result_pin_out_of_shape_fails_the_bundle_at_load(
    saved: dict[str, Any], meta: dict[str, Any], message: str, tmp_path: Path
) -> None:
    bundle = write_bundle(tmp_path, "alpha", meta=meta, data={"saved": saved})
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle)


@pytest.mark.parametrize("mode", ["schema", "json"])
def test_the_grammar_holds_the_path_a_save_returned_and_the_check_refuses_another(
    mode: str, tmp_path: Path
) -> None:
    record = {"fact_id": "2026/05/25.md#ts_1", "content": "Pay rent, 900 EUR."}
    card = {
        "fact_id": record["fact_id"],
        "title": "Rent",
        "template_ids": ["transaction"],
        "tags": ["home"],
        "ui_config": {"item": "rent", "amount": 900, "currency": "EUR"},
        "content": record["content"],
    }
    saved = {k: v for k, v in card.items() if k != "content"}

    def final(path: str) -> dict[str, Any]:
        timeline_card = {**saved, "path": path}
        output = {
            "response": "Saved the rent card.",
            "profile": {"card_status": "completed"},
            "data": {"timeline_card": timeline_card},
            "control": {"action": "finish"},
        }
        return {"final": output} if mode == "schema" else output

    save = {"card": card}
    steps = [
        text(json.dumps({"tool": "card__save", "arguments": save}))
        if mode == "schema"
        else call("card__save", save, "c1"),
        text(json.dumps(final("Cards/rent.yaml"))),
        text(json.dumps({"tool": "card__save", "arguments": save}))
        if mode == "schema"
        else call("card__save", save, "c2"),
        text(json.dumps(final("Cards/2026_05_25_md_ts_1.yaml"))),
    ]
    with serve(steps) as endpoint:
        settings = settings_for(endpoint, output_mode=mode, files_root=str(tmp_path))
        bundle = builtin_skills_dir() / "card-agent"
        with SkillDeck([bundle], checkpointer="memory://", settings=settings) as deck:
            result = deck.run(record, context="card", matter_id="m")
            history, requests = deck.history(result.thread_id), endpoint.requests
    assert result.status == "finished", result.error
    assert result.state["timeline_card"]["path"] == "Cards/2026_05_25_md_ts_1.yaml"
    (rejected,) = [r for r in history if r["action"] == "rejected"]
    (error,) = rejected["validation_errors"]
    assert error["path"] == "$.data.timeline_card.path"
    assert "must be the path that card__save returned" in error["message"]
    if mode == "schema":
        before, after = (json.dumps(r["response_format"]) for r in requests[:2])
        assert '"const": "Cards/2026_05_25_md_ts_1.yaml"' not in before
        assert '"const": "Cards/2026_05_25_md_ts_1.yaml"' in after and "x-result" not in after
