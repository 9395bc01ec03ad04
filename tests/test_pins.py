"""Output fields pinned to the run's state (``x-state``): found at load, held by the grammar in
``schema`` mode, and checked after the reply in every mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_bundle
from endpoint import serve, text

from skilldeck import Settings, SkillDeck
from skilldeck.errors import BundleError
from skilldeck.skills import builtin_skills_dir, load_bundle
from skilldeck.skills.pins import Pin, find_pins, pin_errors, pin_values, pinned

NOTE = {"note": {"type": "string", "x-state": "input.ref"}}


def _final(note: str) -> dict[str, Any]:
    return {
        "response": "ok",
        "profile": {},
        "data": {"note": note},
        "control": {"action": "finish"},
    }


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


def test_card_agent_pins_the_records_fact_id() -> None:
    bundle = load_bundle(builtin_skills_dir() / "card-agent")
    assert bundle.pins == (Pin(("data", "timeline_card", "fact_id"), "input.fact_id"),)


@pytest.mark.parametrize("mode", ["schema", "json"])
def test_the_grammar_holds_a_pin_and_the_check_refuses_another_value(
    mode: str, tmp_path: Path
) -> None:
    bundle = write_bundle(tmp_path, "alpha", data=NOTE)
    wrong, right = _final("r-2"), _final("r-1")
    steps = [text(json.dumps({"final": o} if mode == "schema" else o)) for o in (wrong, right)]
    with serve(steps) as endpoint:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            model="compatible:local-model",
            api_key="local",
            base_url=endpoint.url,
            output_mode=mode,
        )
        with SkillDeck([bundle], checkpointer="memory://", settings=settings) as deck:
            result = deck.run({"ref": "r-1"}, context="ctx")
            history = deck.history(result.thread_id)
    assert result.status == "finished", result.error
    assert result.state["note"] == "r-1"
    (rejected,) = [r for r in history if r["action"] == "rejected"]
    assert rejected["validation_errors"][0]["path"] == "$.data.note"
    if mode == "schema":
        grammar = json.dumps(endpoint.requests[0]["response_format"])
        assert '"const": "r-1"' in grammar and "x-state" not in grammar
