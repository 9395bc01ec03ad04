"""Planner mode (seed 001) on a scripted model: the plan contract, the budget, cited views."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import MEMORY_TEXTS

from skilldeck import RunResult, Settings, SkillDeck
from skilldeck.nodes import find_execution_mode
from skilldeck.nodes.planner import PlannerSkillNode, check_plan, check_view
from skilldeck.nodes.planner.contract import plan_schema
from skilldeck.nodes.transcript import read
from skilldeck.skills import builtin_skills_dir
from skilldeck.tools import default_registry
from skilldeck.tools.memory import Memory
from skilldeck.tools.messages import Message, MessageStore
from skilldeck.tools.vectors import VectorIndex, open_chroma

pytestmark = pytest.mark.L2

BUNDLE = builtin_skills_dir() / "nomemory-recall"
SKILL = "nomemory-recall"
TOOLS = ("messages_list", "lexical_search", "semantic_search", "neighbors")
ALL = {"role": "any", "time_range": {"since": "2020-01-01T00:00:00Z"}}
SPICY = {"query_text": "spicy", "filter": ALL}


def plan(tool: str, **args: Any) -> dict[str, Any]:
    return {"output": {"stop": False, "tool": tool, "args": args}}


STOP = {"output": {"stop": True}}
ANY_SEARCH_FIRST = "no search has run yet and the user has messages: plan a search before stopping"


def view(**items: list[tuple[str, list[str]]]) -> dict[str, Any]:
    body = {k: [{"text": t, "evidence": e} for t, e in items.get(k, [])] for k in VIEW_KEYS}
    return {"output": body}


VIEW_KEYS = ("preferences", "profile", "constraints")
EMPTY = view()


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    """u1's messages, and one of u2 that u1's runs must never see."""
    root = tmp_path_factory.mktemp("memory")
    mem = Memory(MessageStore(root / "m.sqlite"), VectorIndex(open_chroma(root / "chroma")))
    mem.add(Message(i, "u1", "t1", role, ts, text) for i, role, ts, text in MEMORY_TEXTS)
    mem.add([Message("x1", "u2", "t9", "user", "2026-01-05T10:00:00Z", "u2 loves spicy ramen")])
    yield mem
    mem.store.close()


Recall = Callable[..., tuple[SkillDeck, RunResult]]


@pytest.fixture
def recall(tmp_path: Path, memory: Memory) -> Iterator[Recall]:
    """``recall(turns, question=..., skills=..., **settings)`` -> (deck, result)."""
    decks: list[SkillDeck] = []

    def run(
        turns: list[dict[str, Any]] | None,
        *,
        question: str = "What food do I avoid?",
        user: str = "u1",
        skills: Path = BUNDLE,
        **settings: Any,
    ) -> tuple[SkillDeck, RunResult]:
        if turns is not None:
            script = tmp_path / f"script{len(decks)}.yaml"
            script.write_text(yaml.safe_dump({"skills": {SKILL: turns}}), "utf-8")
            settings.setdefault("model", f"scripted:{script}")
        settings.setdefault("model", None)
        deck = SkillDeck(
            skills,
            checkpointer="memory://",
            settings=Settings(**settings),
            tools=default_registry(tmp_path, memory=lambda: memory),
        )
        decks.append(deck)
        return deck, deck.run({"question": question}, context="recall", user_id=user)

    yield run
    for deck in decks:
        deck.close()


def trajectory(result: RunResult) -> list[dict[str, Any]]:
    return result.state["attempt"]["trajectory"]  # type: ignore[no-any-return]


def transcript(deck: SkillDeck, result: RunResult) -> list[Any]:
    attempt = result.state["attempt"]
    return read(deck.store, attempt["turn"], attempt["head"])


# -- the mode and the bundle -------------------------------------------------------------------
def test_planner_is_a_registered_mode_with_a_rules_fallback() -> None:
    assert find_execution_mode("planner") is PlannerSkillNode
    assert PlannerSkillNode.rules_fallback


# -- every rule of the planner contract ---------------------------------------------------------
def _lexical(**filter_: Any) -> dict[str, Any]:
    return {"stop": False, "tool": "lexical_search", "args": {"query_text": "x", "filter": filter_}}


INVALID_PLANS: list[tuple[Any, str, str]] = [
    ({"stop": False, "tool": "search_all", "args": {}}, "$.tool", "must be one of"),
    ({"stop": False, "tool": "memory__lexical_search", "args": SPICY}, "$.tool", "one of"),
    (
        {"stop": False, "tool": "lexical_search", "args": {**SPICY, "user_id": "u2"}},
        "$.args.user_id",
        "bound by the runtime",
    ),
    (
        {"stop": False, "tool": "lexical_search", "args": {"query_text": "x", "filter": {
            **ALL, "time_range": {"since": "2020-01-01T00:00:00Z", "user_id": "u2"}}}},
        "$.args.filter.time_range.user_id",
        "bound by the runtime",
    ),
    (
        {"stop": False, "tool": "neighbors", "args": {"message_id": "m1", "x": [{"user_id": 1}]}},
        "$.args.x[0].user_id",
        "bound by the runtime",
    ),
    ({"stop": False, "tool": "lexical_search", "args": {"query_text": "x"}}, "$.args.filter",
     "filter is required"),
    (_lexical(time_range={"since": "2020-01-01T00:00:00Z"}), "$.args.filter.role", "role is"),
    (_lexical(role="user"), "$.args.filter.time_range", "time_range is required"),
    (_lexical(role="user", time_range={}), "$.args.filter.time_range", "since or until"),
    (
        _lexical(role="any", time_range={"since": "May 2023"}),
        "$.args.filter.time_range.since",
        "not ISO 8601",
    ),
    (
        _lexical(role="any", time_range={"until": 1700000000}),
        "$.args.filter.time_range.until",
        "not ISO 8601",
    ),
    (
        _lexical(role="any", time_range={
            "since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}),
        "$.args.filter.time_range",
        "since must be before until",
    ),
    (
        {"stop": False, "tool": "semantic_search", "args": {"query_text": "x",
                                                            "filter": {"role": "any"}}},
        "$.args.filter.time_range",
        "time_range is required",
    ),
    ({"stop": False, "tool": "messages_list", "args": {"since": "2020-01-01T00:00:00Z"}},
     "$.args.role", "role is required"),
    ({"stop": False, "tool": "messages_list", "args": {"role": "any"}}, "$.args",
     "since or until"),
    (
        {"stop": False, "tool": "messages_list", "args": {"role": "any", "until": "yesterday"}},
        "$.args.until",
        "not ISO 8601",
    ),
    ({"stop": False, "tool": "neighbors", "args": {"before": 8}}, "$.args.message_id", "anchor"),
    ({"stop": False, "tool": "lexical_search", "args": SPICY, "why": "x"}, "$.why", "unknown key"),
    ({"tool": "lexical_search", "args": SPICY}, "$.stop", "stop is required"),
    ({"stop": "no", "tool": "lexical_search", "args": SPICY}, "$.stop", "true or false"),
    ({"stop": False, "tool": "lexical_search", "args": "spicy"}, "$.args", "must be an object"),
    (["lexical_search"], "$", "one JSON object"),
]  # fmt: skip


@pytest.mark.parametrize(("plan_", "path", "message"), INVALID_PLANS)
def test_check_plan_reports_each_rule(plan_: Any, path: str, message: str) -> None:
    errors = check_plan(plan_, TOOLS)
    assert any(e["path"] == path and message in e["message"] for e in errors), errors


@pytest.mark.parametrize(
    "plan_",
    [
        {"stop": True},
        {"stop": True, "tool": None, "args": {}},
        # A stop is a stop: the tool that came with it is not run (the loop records it).
        {"stop": True, "tool": "lexical_search", "args": SPICY},
        {"stop": False, "tool": "lexical_search", "args": SPICY},
        {"stop": False, "tool": "semantic_search", "args": {"query_text": "x", "filter": {
            "role": "user", "time_range": {"until": "2026-01-01T08:00:00+08:00"}}}},
        {"stop": False, "tool": "messages_list", "args": {
            "role": "any", "since": "2026-01-01T00:00:00Z", "until": "2026-02-01T00:00:00Z"}},
        {"stop": False, "tool": "neighbors", "args": {"message_id": "m1", "before": 8}},
    ],
)  # fmt: skip
def test_check_plan_accepts_valid_plans(plan_: Any) -> None:
    assert check_plan(plan_, TOOLS) == []


@pytest.mark.parametrize(
    ("plan_", "path", "message"),
    [
        *[(p, path, m) for p, path, m in INVALID_PLANS if isinstance(p, dict)][:3],
        (_lexical(role="any", time_range={"since": "May 2023"}), "$.args.filter.time_range.since",
         "not ISO 8601"),
    ],
)  # fmt: skip
def test_an_invalid_plan_is_fed_back_and_uses_its_round(
    recall: Recall, plan_: Any, path: str, message: str
) -> None:
    deck, result = recall([{"output": plan_}, plan("lexical_search", **SPICY), STOP, EMPTY])
    assert result.status == "finished", result.error
    rounds = trajectory(result)
    assert [r["valid"] for r in rounds] == [False, True, True]
    assert rounds[0]["tool"] is None and rounds[0]["hit_count"] is None
    assert any(e["path"] == path and message in e["message"] for e in rounds[0]["errors"])
    # Only the valid plan ran, with the run's user: u2's spicy message never shows up.
    assert [c["name"] for c in result.state["attempt"]["tool_calls"]] == ["lexical_search"]
    assert rounds[1]["hit_count"] >= 2 and "x1" not in rounds[1]["anchors"]
    fed_back = json.loads(transcript(deck, result)[4].content)  # the observation of round 1
    assert fed_back["valid"] is False and fed_back["rounds_left"] == 2
    assert fed_back["errors"] == rounds[0]["errors"]


def test_non_json_plans_and_tool_calls_are_invalid_plans(recall: Recall) -> None:
    native = {"tool_calls": [{"name": "lexical_search", "args": SPICY}]}
    _, result = recall([{"text": "let me search for spicy"}, native, STOP, EMPTY])
    rounds = trajectory(result)
    # No round ran a search, so the stop is refused too: there is no evidence to be enough.
    assert [r["valid"] for r in rounds] == [False, False, False]
    assert "plan a search before stopping" in rounds[2]["errors"][0]["message"]
    assert "not JSON" in rounds[0]["errors"][0]["message"]
    assert rounds[0]["plan"] == "let me search for spicy"
    assert "a plan has exactly stop, tool and args" in rounds[1]["errors"][0]["message"]
    assert result.state["attempt"]["tool_calls"] == []


def test_tools_the_meta_does_not_list_are_refused(recall: Recall, tmp_path: Path) -> None:
    bundle = tmp_path / "skills" / SKILL
    shutil.copytree(BUNDLE, bundle)
    meta = json.loads((bundle / "skill.meta.json").read_text("utf-8"))
    meta["tools"] = ["lexical_search", "semantic_search"]
    (bundle / "skill.meta.json").write_text(json.dumps(meta, ensure_ascii=False), "utf-8")
    turns = [plan("neighbors", message_id="m1"), plan("messages_list", role="any", since=ALL[
        "time_range"]["since"]), STOP, EMPTY]  # fmt: skip
    _, result = recall(turns, skills=bundle)
    rounds = trajectory(result)
    assert [r["valid"] for r in rounds] == [False, False, False]  # the stop: no search ran
    assert all("not among this skill's tools" in r["errors"][0]["message"] for r in rounds[:2])
    assert result.state["attempt"]["tool_calls"] == []


# -- the loop: observations, the soft neighbors rule, the budget --------------------------------
def test_plans_run_with_the_user_bound_and_observations_come_back(recall: Recall) -> None:
    turns = [plan("lexical_search", **SPICY), plan("neighbors", message_id="m7", before=8), STOP,
             view(constraints=[("Does not eat spicy food", ["m1"])])]  # fmt: skip
    deck, result = recall(turns)
    assert result.status == "finished", result.error
    assert result.state["attempt"]["model"].startswith("scripted:")
    rounds = trajectory(result)
    assert set(rounds[0]) == {
        "round", "plan", "valid", "errors", "tool", "hit_count", "anchors", "neighbors_preferred"
    }  # fmt: skip
    assert [(r["round"], r["tool"]) for r in rounds] == [
        (1, "lexical_search"), (2, "neighbors"), (3, None)
    ]  # fmt: skip
    assert rounds[0]["plan"] == turns[0]["output"]
    # m3 came a week after m2, so it is read alone: "spicy" does not reach it.
    assert rounds[0]["hit_count"] == 3 and rounds[0]["anchors"] == ["m2", "m1", "m7"]
    # Seed 001's soft rule: no anchors before round 1; neighbors followed it in round 2; the
    # stop in round 3 left anchors without context.
    assert [r["neighbors_preferred"] for r in rounds] == [None, True, False]
    # All 6 turns before m7 came back, but only m6 is in m7's session: m5 is weeks older.
    assert rounds[1]["hit_count"] == 7 and rounds[1]["anchors"] == ["m6"]
    messages = transcript(deck, result)
    # The brief gives the span of the user's own history.
    brief = json.loads(str(messages[2].content).split("\nPlan round 1")[0])
    assert brief["first_message_ts"] == "2026-01-03T09:00:00Z"
    assert brief["latest_message_ts"] == "2026-03-15T18:01:00Z"
    first = json.loads(messages[4].content)
    assert first["hit_count"] == 3 and first["context_missing"] is True
    assert [a["message_id"] for a in first["anchors"]] == ["m2", "m1", "m7"]
    assert all(a["text"] and a["ts"] and a["role"] for a in first["anchors"])
    assert "prefer neighbors" in first["note"]
    second = json.loads(messages[6].content)
    assert "soft rule followed" in second["note"]
    # Every model turn and observation is in the store: system, state, brief, 2 x (plan,
    # observation), the stop, the evidence prompt and the view.
    assert len(messages) == 3 + 4 + 1 + 2
    assert [c["status"] for c in result.state["attempt"]["tool_calls"]] == ["ok", "ok"]


@pytest.mark.parametrize(("mode", "shown"), [("schema", False), ("json", True), ("tool", True)])
def test_the_plan_examples_are_in_the_prompt_unless_a_grammar_holds_the_plan(
    recall: Recall, mode: str, shown: bool
) -> None:
    turns = [plan("lexical_search", **SPICY), STOP, EMPTY]
    deck, result = recall(turns, output_mode=mode)
    assert result.status == "finished", result.error
    system = str(transcript(deck, result)[0].content)
    assert ("## scripts/tool_call_examples.md" in system) is shown
    assert "## Observe → Reflect → Decide" in system and "## Runtime (planner mode)" in system
    assert "## 默认值" not in system  # a reference: the host executes it


def test_no_stop_before_a_search_while_the_user_has_messages(recall: Recall) -> None:
    stop_branch = {"type": "object", "properties": {"stop": {"const": True}},
                   "required": ["stop"], "additionalProperties": False}  # fmt: skip
    assert stop_branch in plan_schema(TOOLS)["anyOf"]
    assert stop_branch not in plan_schema(TOOLS, may_stop=False)["anyOf"]
    (refused,) = check_plan({"stop": True}, TOOLS, may_stop=False)
    assert refused == {"path": "$.stop", "message": ANY_SEARCH_FIRST}
    _, result = recall([STOP, plan("lexical_search", **SPICY), STOP, EMPTY])
    assert [(r["valid"], r["tool"]) for r in trajectory(result)] == [
        (False, None), (True, "lexical_search"), (True, None)
    ]  # fmt: skip
    _, nobody = recall([STOP, EMPTY], user="nobody")  # no messages: nothing to search
    assert [r["valid"] for r in trajectory(nobody)] == [True]


def test_skipping_neighbors_after_good_anchors_is_recorded(recall: Recall) -> None:
    semantic = {"query_text": "spicy food", "filter": ALL}
    deck, result = recall([plan("lexical_search", **SPICY), plan("semantic_search", **semantic),
                           STOP, EMPTY])  # fmt: skip
    rounds = trajectory(result)
    assert rounds[1]["neighbors_preferred"] is False
    observation = json.loads(transcript(deck, result)[6].content)
    assert observation["neighbors_preferred"] is False
    assert "soft rule not followed" in observation["note"]


def test_tool_errors_are_observations_and_use_the_round(recall: Recall) -> None:
    _, result = recall([plan("neighbors", message_id="nope"), STOP, EMPTY])
    rounds = trajectory(result)
    assert rounds[0]["valid"] and rounds[0]["tool"] == "neighbors"
    assert "no message 'nope'" in rounds[0]["errors"][0]["message"]
    assert result.state["attempt"]["tool_calls"][0]["status"] == "error"


def test_a_model_that_never_stops_is_stopped_after_the_budget(recall: Recall) -> None:
    keep_going = [plan("lexical_search", **SPICY)] * 3
    cite = view(constraints=[("No spicy food", ["m1"])])
    deck, result = recall([*keep_going, cite])
    assert result.status == "finished", result.error
    assert len(trajectory(result)) == 3  # the 4th call was the synthesis, not a 4th plan
    assert result.state["calls"] == {SKILL: 4}
    assert "budget of 3 rounds is used up" in transcript(deck, result)[-2].content
    assert result.state["memory_view"]["constraints"][0]["evidence"] == ["m1"]

    _, one = recall([plan("lexical_search", **SPICY), cite], planner_max_rounds=1)
    assert one.status == "finished", one.error
    assert len(trajectory(one)) == 1


def test_evidence_is_capped_by_the_host(recall: Recall) -> None:
    listing = plan("messages_list", role="any", since="2020-01-01T00:00:00Z")
    _, result = recall([listing, STOP, EMPTY])
    assert result.status == "finished", result.error
    assert trajectory(result)[0]["hit_count"] == 7
    evidence = [e["message_id"] for e in result.state["evidence"]]
    assert len(evidence) == 6 and "m1" not in evidence  # the newest six of the listing
    assert set(result.state["evidence"][0]) == {"message_id", "text", "ts", "role"}
    _, small = recall([listing, STOP, EMPTY], planner_max_evidence=2)
    assert [e["message_id"] for e in small.state["evidence"]] == ["m7", "m6"]


# -- synthesis: citations ------------------------------------------------------------------------
def test_citing_a_message_never_retrieved_fails_with_nothing_merged(recall: Recall) -> None:
    forged = view(constraints=[("Allergic to peanuts", ["m6"])])  # m6 does not say "spicy"
    _, result = recall([plan("lexical_search", **SPICY), STOP, forged], max_retries=0)
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "CONTRACT_VIOLATION"
    assert result.error.dump()["errors"] == [
        {"path": "$.constraints[0].evidence[0]", "message": "'m6' was never retrieved"}
    ]
    assert "memory_view" not in result.state and "evidence" not in result.state
    assert result.state["attempt"]["action"] == "rejected"
    assert len(result.state["attempt"]["trajectory"]) == 2


def test_citing_a_retrieved_message_outside_the_evidence_is_rejected(recall: Recall) -> None:
    listing = plan("messages_list", role="any", since="2020-01-01T00:00:00Z")
    outside = view(preferences=[("No spicy food", ["m7", "m1"])])  # m1 is the 7th, left out
    good = view(preferences=[("Spicy curry is fine for the husband only", ["m7"])])
    deck, result = recall([listing, STOP, outside, good])
    assert result.status == "finished", result.error
    assert result.state["attempt"]["attempt"] == 2  # re-asked once, with the errors
    messages = transcript(deck, result)
    feedback = messages[-2].content
    assert "$.preferences[0].evidence[1]: 'm1' is not among the 6 evidence messages" in feedback
    assert "citing only the evidence messages listed above" in feedback
    assert result.state["memory_view"]["preferences"][0]["evidence"] == ["m7"]
    assert result.state["calls"] == {SKILL: 4}  # the re-ask is one call: no second loop


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ({"preferences": [{"text": "x", "evidence": []}], "profile": [], "constraints": []},
         "$.preferences[0].evidence", "without evidence"),
        ({"preferences": [{"text": "x"}], "profile": [], "constraints": []},
         "$.preferences[0]", "exactly"),
        ({"preferences": [], "profile": []}, "$.constraints", "required"),
        ({"preferences": [], "profile": [], "constraints": [], "plans": []}, "$.plans", "unknown"),
        ({"preferences": "spicy", "profile": [], "constraints": []}, "$.preferences", "array"),
        ({"preferences": [{"text": " ", "evidence": ["m1"]}], "profile": [], "constraints": []},
         "$.preferences[0].text", "non-empty"),
    ],
)  # fmt: skip
def test_check_view_rules(body: Any, path: str, message: str) -> None:
    errors = check_view(body, ["m1"], {"m1", "m2"})
    assert any(e["path"] == path and message in e["message"] for e in errors), errors


def test_empty_arrays_are_the_answer_when_nothing_is_found(recall: Recall) -> None:
    nothing = {"query_text": "quantum chromodynamics", "filter": ALL}
    _, result = recall([plan("lexical_search", **nothing), STOP, EMPTY])
    assert result.status == "finished", result.error
    assert result.state["memory_view"] == {"preferences": [], "profile": [], "constraints": []}
    assert result.state["evidence"] == []
    assert result.state["response"] == "No evidence found; memory_view is empty."
    assert trajectory(result)[0]["hit_count"] == 0


def test_a_run_without_a_user_fails_before_any_tool() -> None:
    deck = SkillDeck(BUNDLE, checkpointer="memory://", settings=Settings(model=None))
    result = deck.run({"question": "What food do I avoid?"}, context="recall")
    deck.close()
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "NO_USER"
