"""The router: candidates, ordering, next_skill, the loop guard, and routing inside a run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import output, write_bundle
from langgraph.graph import END

from skilldeck import SkillDeck, SkillDeckError, ThreadNotFoundError
from skilldeck.nodes import NodeContext
from skilldeck.nodes.router import candidates, fingerprint, may_run, route, why_not
from skilldeck.settings import Settings
from skilldeck.skills import SkillBundle, load_skills
from skilldeck.tools import default_registry

pytestmark = pytest.mark.L2

FLAG = {"type": "boolean"}


def _by_name(bundles: tuple[SkillBundle, ...]) -> dict[str, SkillBundle]:
    return {b.name: b for b in bundles}


def _names(ready: list[SkillBundle]) -> list[str]:
    return [b.name for b in ready]


def _ctx(bundles: tuple[SkillBundle, ...], **settings: Any) -> NodeContext:
    """A node context for calling :func:`route` directly; route never calls a model."""

    def no_model(name: str) -> Any:
        raise AssertionError(f"route must not build a model (asked for {name!r})")

    return NodeContext(
        bundles=_by_name(bundles),
        registry=default_registry("."),
        settings=Settings(**settings),
        model_for=no_model,
        model_label=lambda name: "none",
        has_model=lambda name: False,
        output_mode=no_model,
    )


def _skills_run(deck: SkillDeck, thread_id: str) -> list[str]:
    """The skills that recorded an attempt, in order, from the checkpoint history."""
    seen: list[str] = []
    for row in deck.history(thread_id):
        if row["skill"] and (not seen or seen[-1] != row["skill"]):
            seen.append(row["skill"])
    return seen


# -- candidates ---------------------------------------------------------------------------


def test_candidate_needs_the_run_context(skills_dir: Path) -> None:
    write_bundle(skills_dir, "matter-skill", meta={"triggers": {"contexts": ["matter", "case"]}})
    write_bundle(skills_dir, "chat-skill", meta={"triggers": {"contexts": ["chat"]}})
    write_bundle(skills_dir, "no-context", meta={"triggers": {}})
    bundles = _by_name(load_skills(skills_dir))

    assert _names(candidates(bundles, {"context": "matter"})) == ["matter-skill"]
    assert _names(candidates(bundles, {"context": "case"})) == ["matter-skill"]
    assert _names(candidates(bundles, {"context": "chat"})) == ["chat-skill"]
    assert candidates(bundles, {"context": "other"}) == []
    assert candidates(bundles, {}) == []


def test_candidate_needs_every_state_condition(skills_dir: Path) -> None:
    write_bundle(
        skills_dir,
        "gated",
        meta={
            "triggers": {
                "contexts": ["ctx"],
                "state_conditions": ["state.ready == true", "state.count >= 2"],
            }
        },
    )
    bundles = _by_name(load_skills(skills_dir))

    assert _names(candidates(bundles, {"context": "ctx", "ready": True, "count": 2})) == ["gated"]
    assert candidates(bundles, {"context": "ctx", "ready": True, "count": 1}) == []
    assert candidates(bundles, {"context": "ctx", "ready": False, "count": 5}) == []
    assert candidates(bundles, {"context": "other", "ready": True, "count": 5}) == []


def test_candidate_needs_requires_all(skills_dir: Path) -> None:
    write_bundle(
        skills_dir,
        "needs-all",
        meta={"requires": {"all": ["state.matter_id != null", "state.user_id != null"]}},
    )
    bundles = _by_name(load_skills(skills_dir))
    base = {"context": "ctx"}

    assert _names(candidates(bundles, {**base, "matter_id": "m", "user_id": "u"})) == ["needs-all"]
    assert candidates(bundles, {**base, "matter_id": "m"}) == []
    assert candidates(bundles, {**base, "user_id": "u"}) == []


def test_candidate_needs_one_of_requires_any_when_given(skills_dir: Path) -> None:
    write_bundle(
        skills_dir,
        "needs-any",
        meta={
            "requires": {
                "all": ["state.matter_id != null"],
                "any": ["state.documents != null", "state.profile.summary != null"],
            }
        },
    )
    write_bundle(skills_dir, "no-any", meta={"requires": {"all": ["state.matter_id != null"]}})
    bundles = _by_name(load_skills(skills_dir))
    base = {"context": "ctx", "matter_id": "m"}

    assert _names(candidates(bundles, base)) == ["no-any"]
    assert _names(candidates(bundles, {**base, "documents": ["a"]})) == ["needs-any", "no-any"]
    with_summary = {**base, "profile": {"summary": "s"}}
    assert _names(candidates(bundles, with_summary)) == ["needs-any", "no-any"]
    # requires.any does not stand in for requires.all
    assert candidates(bundles, {"context": "ctx", "documents": ["a"]}) == []


def test_missing_path_in_a_condition_is_null(skills_dir: Path) -> None:
    write_bundle(
        skills_dir,
        "when-missing",
        meta={"triggers": {"contexts": ["ctx"], "state_conditions": ["state.profile.a.b == null"]}},
    )
    write_bundle(
        skills_dir,
        "when-present",
        meta={"triggers": {"contexts": ["ctx"], "state_conditions": ["state.profile.a.b != null"]}},
    )
    bundles = _by_name(load_skills(skills_dir))

    assert _names(candidates(bundles, {"context": "ctx"})) == ["when-missing"]
    assert _names(candidates(bundles, {"context": "ctx", "profile": {}})) == ["when-missing"]
    assert _names(candidates(bundles, {"context": "ctx", "profile": {"a": "x"}})) == [
        "when-missing"
    ]
    present = {"context": "ctx", "profile": {"a": {"b": 1}}}
    assert _names(candidates(bundles, present)) == ["when-present"]


def test_order_is_priority_then_folder_name(skills_dir: Path) -> None:
    # Written out of name order: load order is folder name order, not creation order.
    write_bundle(skills_dir, "delta", meta={"priority": 5})
    write_bundle(skills_dir, "charlie")
    write_bundle(skills_dir, "bravo", meta={"priority": 5})
    write_bundle(skills_dir, "alpha", meta={"priority": -1})
    write_bundle(skills_dir, "echo", meta={"priority": 10})
    loaded = load_skills(skills_dir)

    assert [b.name for b in loaded] == ["alpha", "bravo", "charlie", "delta", "echo"]
    expected = ["echo", "bravo", "delta", "charlie", "alpha"]
    state = {"context": "ctx"}
    assert _names(candidates(_by_name(loaded), state)) == expected
    # Deterministic: the same answer however the mapping is ordered, every time.
    shuffled = {b.name: b for b in (loaded[2], loaded[4], loaded[0], loaded[3], loaded[1])}
    for _ in range(3):
        assert _names(candidates(shuffled, state)) == expected


def test_priority_tie_follows_folder_order_across_roots(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    write_bundle(first, "zulu")
    write_bundle(second, "alpha")
    bundles = _by_name(load_skills([first, second]))

    assert _names(candidates(bundles, {"context": "ctx"})) == ["zulu", "alpha"]


# -- fingerprint and route ----------------------------------------------------------------


def test_fingerprint_watches_what_a_skill_can_change() -> None:
    state = {"context": "ctx", "input": {"a": 1}, "profile": {"x": 1}, "n": 1}
    digest = fingerprint(state, ("n",))

    reordered = {"n": 1, "profile": {"x": 1}, "input": {"a": 1}, "context": "ctx"}
    assert fingerprint(reordered, ("n",)) == digest
    # bookkeeping keys and undeclared keys do not count
    noisy = {**state, "response": "hi", "calls": {"s": 3}, "attempt": {"skill": "s"}, "z": 9}
    assert fingerprint(noisy, ("n",)) == digest
    assert fingerprint({**state, "n": 2}, ("n",)) != digest
    assert fingerprint({**state, "profile": {"x": 2}}, ("n",)) != digest
    assert fingerprint({**state, "input": {"a": 2}}, ("n",)) != digest
    assert fingerprint({**state, "matter_id": "m"}, ("n",)) != digest
    assert fingerprint({**state, "n": 2}, ()) == fingerprint(state, ())


def test_route_without_candidates_ends_the_run_finished(skills_dir: Path) -> None:
    write_bundle(skills_dir, "only", meta={"triggers": {"contexts": ["matter"]}})
    ctx = _ctx(load_skills(skills_dir))

    goto, update = route(ctx, {"context": "chat"})

    assert goto == END
    assert update["status"] == "finished"
    assert update.get("error") is None


def test_route_picks_the_best_candidate_and_starts_the_guard(skills_dir: Path) -> None:
    write_bundle(skills_dir, "a-low")
    write_bundle(skills_dir, "z-high", meta={"priority": 3})
    ctx = _ctx(load_skills(skills_dir))
    state = {"context": "ctx"}

    goto, update = route(ctx, state)

    assert goto == "z-high"
    assert update["status"] == "running"
    assert update["next_skill"] is None
    assert update["guard"] == {
        "skill": "z-high",
        "fingerprint": fingerprint(state, ctx.data_keys),
        "count": 1,
        "route": {"strategy": "priority", "reason": "priority 3 is the highest of 2 candidates"},
    }


def test_route_explicit_next_skill_wins_over_priority(skills_dir: Path) -> None:
    write_bundle(skills_dir, "a-low")
    write_bundle(skills_dir, "z-high", meta={"priority": 3})
    ctx = _ctx(load_skills(skills_dir))

    goto, update = route(ctx, {"context": "ctx", "next_skill": "a-low"})

    assert goto == "a-low"
    assert update["next_skill"] is None
    assert update["guard"]["skill"] == "a-low"


def test_route_explicit_next_skill_must_be_a_candidate(skills_dir: Path) -> None:
    write_bundle(skills_dir, "open")
    write_bundle(
        skills_dir,
        "closed",
        meta={"triggers": {"contexts": ["ctx"], "state_conditions": ["state.ready == true"]}},
    )
    ctx = _ctx(load_skills(skills_dir))

    goto, update = route(ctx, {"context": "ctx", "next_skill": "closed"})
    assert goto == END
    assert update["status"] == "failed"
    assert update["error"]["code"] == "NEXT_SKILL_NOT_CANDIDATE"
    assert "closed" in update["error"]["message"]

    goto, update = route(ctx, {"context": "ctx", "next_skill": "ghost"})
    assert goto == END
    assert update["status"] == "failed"
    assert update["error"]["code"] == "UNKNOWN_SKILL"


def test_route_loop_guard_counts_unchanged_states(skills_dir: Path) -> None:
    write_bundle(skills_dir, "looper", data={"n": {"type": "integer"}})
    ctx = _ctx(load_skills(skills_dir), loop_limit=2)
    state: dict[str, Any] = {"context": "ctx", "n": 1}
    digest = fingerprint(state, ctx.data_keys)

    _, update = route(
        ctx, {**state, "guard": {"skill": "looper", "fingerprint": digest, "count": 1}}
    )
    assert update["guard"]["count"] == 2

    goto, update = route(
        ctx, {**state, "guard": {"skill": "looper", "fingerprint": digest, "count": 2}}
    )
    assert goto == END
    assert update["status"] == "failed"
    assert update["error"]["code"] == "LOOP_GUARD"
    assert "looper" in update["error"]["message"]

    # a changed state resets the count
    changed = {**state, "n": 2, "guard": {"skill": "looper", "fingerprint": digest, "count": 2}}
    goto, update = route(ctx, changed)
    assert goto == "looper"
    assert update["guard"]["count"] == 1


# -- in a run -----------------------------------------------------------------------------


def test_run_without_candidate_ends_as_no_skill_with_each_reason(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "matter-only", meta={"triggers": {"contexts": ["matter"]}})
    write_bundle(
        skills_dir,
        "gated",
        meta={
            "triggers": {"contexts": ["chat"], "state_conditions": ["state.input.q > 5"]},
        },
    )
    write_bundle(
        skills_dir,
        "needs-matter",
        meta={"triggers": {"contexts": ["chat"]}, "requires": {"all": ["state.matter_id != null"]}},
    )
    deck = make_deck(skills_dir, {"matter-only": [output()]})

    result = deck.run({"q": 1}, context="chat")

    assert result.status == "no_skill"
    assert result.card is None
    assert result.state.get("attempt") is None
    assert not result.state.get("calls")
    assert _skills_run(deck, result.thread_id) == []
    assert result.error is not None and result.error.code == "NO_SKILL"
    reasons = {r["skill"]: r["reason"] for r in result.error.dump()["skills"]}
    assert reasons == {
        "matter-only": "context 'chat' is not in triggers.contexts ('matter')",
        "gated": "triggers.state_conditions: `state.input.q > 5` is false (state.input.q = 1)",
        "needs-matter": "requires.all: `state.matter_id != null` is false (state.matter_id = null)",
    }
    assert deck.get_thread(result.thread_id).status == "no_skill"


def test_no_skill_suggests_the_context_meant(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "intake", meta={"triggers": {"contexts": ["matter"]}})
    deck = make_deck(skills_dir, {"intake": [output()]})
    error = deck.run(context="matters").error
    assert error is not None
    assert "did you mean 'matter'?" in error.message
    assert "the loaded skills run in: matter" in error.message


def test_a_skill_that_finds_no_successor_finishes(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    """Only a run's first choice can be no_skill: after a skill ran, no candidate is the end."""
    write_bundle(
        skills_dir,
        "once",
        meta={"triggers": {"contexts": ["ctx"], "state_conditions": ["state.note == null"]}},
    )
    deck = make_deck(skills_dir, {"once": [output(action="continue", data={"note": "x"})]})
    result = deck.run(context="ctx")
    assert result.status == "finished"
    assert result.error is None


def test_next_skill_wins_over_priority_in_a_run(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(
        skills_dir,
        "z-high",
        meta={
            "priority": 10,
            "triggers": {"contexts": ["ctx"], "state_conditions": ["state.high_done != true"]},
        },
        data={"high_done": FLAG},
    )
    write_bundle(
        skills_dir,
        "a-low",
        meta={"triggers": {"contexts": ["ctx"], "state_conditions": ["state.low_done != true"]}},
        data={"low_done": FLAG},
    )
    turns = {
        "z-high": [output(data={"high_done": True}, action="continue")],
        "a-low": [output(data={"low_done": True}, action="continue")],
    }
    deck = make_deck(skills_dir, turns)

    by_priority = deck.run(context="ctx")
    assert by_priority.status == "finished"
    assert _skills_run(deck, by_priority.thread_id) == ["z-high", "a-low"]

    deck = make_deck(skills_dir, turns)
    explicit = deck.run(context="ctx", next_skill="a-low")
    assert explicit.status == "finished"
    assert _skills_run(deck, explicit.thread_id) == ["a-low", "z-high"]
    assert explicit.state["low_done"] is True
    assert explicit.state["high_done"] is True


def test_next_skill_that_is_not_a_candidate_fails_the_run(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "open")
    write_bundle(
        skills_dir,
        "closed",
        meta={"triggers": {"contexts": ["ctx"], "state_conditions": ["state.ready == true"]}},
    )
    deck = make_deck(skills_dir, {"open": [output()], "closed": [output()]})

    result = deck.run(context="ctx", next_skill="closed")

    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == "NEXT_SKILL_NOT_CANDIDATE"
    assert "closed" in result.error.message
    assert result.state.get("attempt") is None
    assert _skills_run(deck, result.thread_id) == []


def test_unknown_next_skill_raises_before_anything_is_written(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "open")
    deck = make_deck(skills_dir, {"open": [output()]})

    with pytest.raises(SkillDeckError, match="ghost"):
        deck.run(context="ctx", thread_id="t-ghost", next_skill="ghost")

    with pytest.raises(ThreadNotFoundError):
        deck.get_thread("t-ghost")
    assert deck.threads() == []


def test_chain_merges_data_and_deep_merges_profile(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(
        skills_dir,
        "a-first",
        meta={
            "triggers": {"contexts": ["ctx"], "state_conditions": ["state.a_done != true"]},
            "outputs": {"provides": ["profile.party", "profile.stage"]},
        },
        data={"a_done": FLAG},
    )
    write_bundle(
        skills_dir,
        "b-second",
        meta={
            "triggers": {
                "contexts": ["ctx"],
                "state_conditions": ["state.a_done == true", "state.b_done != true"],
            },
            "outputs": {"provides": ["profile.party", "profile.stage"]},
        },
        data={"b_done": FLAG, "b_note": {"type": "string"}},
    )
    turns = {
        "a-first": [
            output(
                profile={"party": {"name": "Jane Doe", "type": "person"}, "stage": "a"},
                data={"a_done": True},
                action="continue",
            )
        ],
        "b-second": [
            output(
                profile={"party": {"role": "plaintiff"}, "stage": "b"},
                data={"b_done": True, "b_note": "done"},
                action="continue",
            )
        ],
    }
    deck = make_deck(skills_dir, turns)

    result = deck.run(context="ctx")

    assert result.status == "finished", result.error
    assert _skills_run(deck, result.thread_id) == ["a-first", "b-second"]
    assert result.state["a_done"] is True
    assert result.state["b_done"] is True
    assert result.state["b_note"] == "done"
    assert "data" not in result.state
    assert result.state["profile"] == {
        "party": {"name": "Jane Doe", "type": "person", "role": "plaintiff"},
        "stage": "b",
    }
    assert result.state["calls"] == {"a-first": 1, "b-second": 1}
    assert candidates(_by_name(deck.bundles), result.state) == []


def test_loop_guard_stops_a_skill_that_changes_nothing(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "stuck")
    deck = make_deck(
        skills_dir, {"stuck": [output(action="continue") for _ in range(6)]}, loop_limit=2
    )

    result = deck.run(context="ctx")

    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == "LOOP_GUARD"
    assert "stuck" in result.error.message
    # it ran exactly loop_limit times, then the guard refused a third run
    assert result.state["calls"] == {"stuck": 2}


def test_loop_guard_lets_a_changing_skill_run_on(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(
        skills_dir,
        "counter",
        meta={
            "triggers": {
                "contexts": ["ctx"],
                "state_conditions": ["state.n == null or state.n < 4"],
            }
        },
        data={"n": {"type": "integer"}},
    )
    turns = {"counter": [output(data={"n": i}, action="continue") for i in range(1, 7)]}
    deck = make_deck(skills_dir, turns, loop_limit=2)

    result = deck.run(context="ctx")

    assert result.status == "finished", result.error
    assert result.error is None
    assert result.state["n"] == 4
    assert result.state["calls"] == {"counter": 4}


def test_finish_ends_the_run_while_candidates_remain(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    write_bundle(skills_dir, "first", meta={"priority": 1})
    write_bundle(skills_dir, "second")
    deck = make_deck(
        skills_dir,
        {
            "first": [output(response="all done", action="finish")],
            "second": [output(action="finish")],
        },
    )

    result = deck.run(context="ctx")

    assert result.status == "finished"
    assert result.state["response"] == "all done"
    assert result.state["calls"] == {"first": 1}
    assert _skills_run(deck, result.thread_id) == ["first"]
    assert _names(candidates(_by_name(deck.bundles), result.state)) == ["first", "second"]


def test_the_hot_paths_yes_or_no_is_the_explanations() -> None:
    """A step asks only whether each skill may run (:func:`may_run`); ``explain`` and a ``none``
    say why not (:func:`why_not`). Over the built-in skills and states of every context, with
    and without a matter, and with each requirement's key set or not, the two agree."""
    deck = SkillDeck(checkpointer="memory://")
    with deck:
        ctx = deck._ctx
        contexts = [*sorted({c for b in deck.bundles for c in b.contexts}), "auto", "nowhere"]
        keys = sorted({k for b in deck.bundles for k in b.data_keys})
        checked = 0
        for context in contexts:
            for matter in (None, "m-1"):
                for key in [None, *keys]:
                    state: dict[str, Any] = {"context": context, "matter_id": matter}
                    if key is not None:
                        state[key] = True
                    auto = context == "auto"
                    for bundle in deck.bundles:
                        said = why_not(ctx, bundle, state, auto)
                        assert may_run(ctx, bundle, state, auto) is (said is None), (
                            bundle.name,
                            state,
                            said,
                        )
                        checked += 1
    assert checked > 100
