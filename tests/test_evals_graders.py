"""L2: every built-in grader on hand-made outcomes, partial credit, and bad configs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from skilldeck import ScriptedChatModel
from skilldeck.errors import EvalConfigError, PluginError
from skilldeck.evals import (
    ConfigReader,
    GradeContext,
    Grader,
    GradeResult,
    Judge,
    Outcome,
    ToolCall,
    build_grader,
    grader,
    registered_graders,
    to_turn,
)
from skilldeck.evals import grade as run_graders
from skilldeck.evals.outcome import diff_files, snapshot
from skilldeck.evals.tasks import task_from_dict

pytestmark = pytest.mark.L2

SEED = "<!-- seed:sleep-1 -->"
SLEEP = f"# Sleep\n{SEED}\n- 2026-05-01: 7h, fine\n"
CARD_YAML = """fact_id: f1
title: Eval team standup
status: completed
template_ids: [event, note]
tags: [meeting]
ui_config: {start: Thursday 10:30am, medium: Zoom}
content: Standup Thursday 10:30am, Zoom.
insight: null
"""


def make_outcome(
    tmp_path: Path,
    *,
    fixture: Mapping[str, str] | None = None,
    files: Mapping[str, str | None] | None = None,
    state: Mapping[str, Any] | None = None,
    calls: Sequence[ToolCall] = (),
    status: str = "finished",
    card: Mapping[str, Any] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> Outcome:
    """An outcome whose workspace went from ``fixture`` to ``fixture`` + ``files``."""
    workspace = tmp_path / "ws"
    workspace.mkdir(parents=True)
    for path, text in (fixture or {}).items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(text, "utf-8")
    before = snapshot(workspace)
    for path, text in (files or {}).items():
        if text is None:
            (workspace / path).unlink()
        else:
            (workspace / path).parent.mkdir(parents=True, exist_ok=True)
            (workspace / path).write_text(text, "utf-8")
    table = dict(aliases or {})
    return Outcome(
        trial_id="t-e0",
        task_id="t",
        skill="s",
        epoch=0,
        thread_id="th",
        status=status,
        state=dict(state or {}),
        workspace=workspace,
        card=dict(card) if card else None,
        changes=diff_files(before, snapshot(workspace)),
        tool_calls=tuple(calls),
        fixture=before,
        resolve=lambda name: table.get(name, name),
    )


def grade(
    name: str,
    config: Mapping[str, Any] | None,
    outcome: Outcome,
    *,
    task_input: Mapping[str, Any] | None = None,
    judge: Judge | None = None,
    index: int = 0,
) -> GradeResult:
    task = task_from_dict(
        {"id": "t", "input": dict(task_input or {}), "graders": [{"name": "tool_called",
                                                                   "config": {"tool": "x"}}]}
    )  # fmt: skip
    return build_grader(name, config).evaluate(GradeContext(task, outcome, judge, index))


def call(name: str, ok: bool = True, result: str = "{}", **args: Any) -> ToolCall:
    return ToolCall(name=name, args=args, ok=ok, result=result)


# -- GradeResult --------------------------------------------------------------------------------
def test_grade_result_keeps_its_invariants() -> None:
    assert GradeResult.of(2 / 3, "x") == GradeResult(0.666667, False, "x")
    assert GradeResult.of(0.7, "x", threshold=0.7).passed is True
    assert GradeResult.not_scored("why").to_dict() == {
        "score": None,
        "passed": None,
        "rationale": "why",
    }
    with pytest.raises(ValueError, match="outside"):
        GradeResult(1.5, True, "x")
    with pytest.raises(ValueError, match="cannot pass"):
        GradeResult(None, True, "x")


# -- generic ------------------------------------------------------------------------------------
def test_must_contain_gives_credit_per_substring_in_any_case(tmp_path: Path) -> None:
    outcome = make_outcome(tmp_path, state={"response": "Saved at 10:30 on ZOOM."})
    full = grade("must_contain", {"path": "response", "substrings": ["zoom", "10:30"]}, outcome)
    assert (full.score, full.passed) == (1.0, True)
    part = grade(
        "must_contain", {"path": "state.response", "substrings": ["zoom", "x", "y"]}, outcome
    )
    assert (part.score, part.passed) == (0.333333, False)
    assert "['x', 'y']" in part.rationale


def test_must_contain_without_path_scans_the_outputs_not_the_input(tmp_path: Path) -> None:
    outcome = make_outcome(tmp_path, state={"input": {"q": "secret"}, "answer": "public"})
    assert grade("must_contain", {"substrings": ["public"]}, outcome).passed is True
    assert grade("must_contain", {"substrings": ["secret"]}, outcome).passed is False


def test_must_not_contain_gives_credit_per_absent_substring(tmp_path: Path) -> None:
    outcome = make_outcome(tmp_path, state={"memory_view": {"likes": ["Gym at 7"]}})
    result = grade(
        "must_not_contain", {"path": "state.memory_view", "substrings": ["gym", "pool"]}, outcome
    )
    assert (result.score, result.passed) == (0.5, False)
    assert grade("must_not_contain", {"substrings": ["pool"]}, outcome).passed is True


def test_json_path_equals_reads_state_and_card_paths(tmp_path: Path) -> None:
    card = {"questions": [{"field_key": "profile.defendant.name"}]}
    outcome = make_outcome(tmp_path, state={"profile": {"intake_status": "completed"}}, card=card)
    ok = {"path": "card.questions[0].field_key", "value": "profile.defendant.name"}
    assert grade("json_path_equals", ok, outcome).score == 1.0
    assert grade("json_path_equals", {"path": "state.status", "value": "finished"}, outcome).passed
    assert grade("json_path_equals", {"path": "state.attempt", "value": None}, outcome).passed
    wrong = grade(
        "json_path_equals", {"path": "state.profile.intake_status", "value": "x"}, outcome
    )
    assert (wrong.score, wrong.passed) == (0.0, False)
    assert '"completed"' in wrong.rationale


def test_tool_called_resolves_aliases_and_counts(tmp_path: Path) -> None:
    calls = [call("memory__lexical_search"), call("memory__lexical_search")]
    outcome = make_outcome(
        tmp_path, calls=calls, aliases={"lexical_search": "memory__lexical_search"}
    )
    assert grade("tool_called", {"tool": "lexical_search"}, outcome).passed is True
    assert grade("tool_called", {"tool": "lexical_search", "times": 3}, outcome).passed is False
    assert grade("tool_called", {"tool": "pkm__read"}, outcome).score == 0.0


@pytest.mark.parametrize(
    ("mode", "tools", "score", "passed"),
    [
        # calls: a, b, c, b
        ("strict", ["a", "b", "c", "b"], 1.0, True),
        ("strict", ["a", "c"], 0.5, False),  # LCS 2 / longer 4
        ("unordered", ["b", "b", "c", "a"], 1.0, True),
        ("unordered", ["a", "b", "d"], 0.5, False),  # common {a, b} 2 / 4
        ("subset", ["a", "b", "c", "d"], 1.0, True),
        ("subset", ["a", "b"], 0.75, False),  # 3 of 4 calls inside
        ("superset", ["b", "c"], 1.0, True),
        ("superset", ["a", "d", "e", "c"], 0.5, False),  # 2 of 4 reference tools called
        ("in_order", ["a", "c"], 1.0, True),
        ("in_order", ["c", "a", "b"], 0.666667, False),  # longest in-order part: a, b (or c, b)
        ("prefix", ["a", "b"], 1.0, True),
        ("prefix", ["a", "c", "b"], 0.333333, False),
    ],
)
def test_trajectory_match_modes_give_partial_credit(
    tmp_path: Path, mode: str, tools: list[str], score: float, passed: bool
) -> None:
    outcome = make_outcome(tmp_path, calls=[call(t) for t in ("a", "b", "c", "b")])
    result = grade("trajectory_match", {"tools": tools, "mode": mode}, outcome)
    assert (result.score, result.passed) == (score, passed), result.rationale


def test_trajectory_match_reads_planner_rounds_and_older_configs(tmp_path: Path) -> None:
    rounds = [{"tool": "lexical_search"}, {"tool": None}, {"tool": "neighbors"}]
    steps = {"steps": [{"tool": "knowledge__table_rag_retrieve"}, {"tool": "file__local_search"}]}
    state = {"attempt": {"trajectory": rounds}, "sources": steps}
    outcome = make_outcome(tmp_path, state=state)
    # the seed skills' spellings: {tools} (in order) and {path, key, expected, order}
    assert grade("trajectory_match", {"tools": ["lexical_search", "neighbors"]}, outcome).passed
    assert not grade("trajectory_match", {"tools": ["neighbors", "lexical_search"]}, outcome).passed
    exact = {
        "path": "state.sources.steps",
        "key": "tool",
        "expected": ["knowledge__table_rag_retrieve"],
        "order": "exact",
    }
    assert grade("trajectory_match", exact, outcome).score == 0.5
    assert grade("trajectory_match", {**exact, "order": "prefix"}, outcome).passed is True


def scripted_judge(*turns: dict[str, Any]) -> Judge:
    model = ScriptedChatModel.from_source({"cases": {"t": {"skills": {"judge": list(turns)}}}})
    return Judge(model, "scripted:inline")


def test_llm_judge_is_not_scored_without_a_judge_and_scored_with_one(tmp_path: Path) -> None:
    outcome = make_outcome(tmp_path, state={"response": "Paris is the capital."})
    config = {"rubric": "Is it correct?"}
    missing = grade("llm_judge", config, outcome)
    assert (missing.score, missing.passed) == (None, None)
    assert "not scored" in missing.rationale
    judge = scripted_judge({"output": {"score": 0.5, "rationale": "half right"}})
    judged = grade("llm_judge", config, outcome, judge=judge)
    assert (judged.score, judged.passed, judged.rationale) == (0.5, False, "judge: half right")
    bad = scripted_judge({"text": "I think it is fine"})
    assert grade("llm_judge", config, outcome, judge=bad).score is None


# -- card-agent -----------------------------------------------------------------------------------
def saved(tmp_path: Path, text: str = CARD_YAML, ok: bool = True) -> Outcome:
    result = '{"ok": true, "path": "Cards/f1.yaml"}' if ok else "Error: bad card"
    return make_outcome(
        tmp_path, files={"Cards/f1.yaml": text}, calls=[call("card__save", ok=ok, result=result)]
    )


def test_card_completion_checks_every_part(tmp_path: Path) -> None:
    result = grade("card_completion", None, saved(tmp_path), task_input={"fact_id": "f1"})
    assert (result.score, result.passed) == (1.0, True)


@pytest.mark.parametrize(
    ("text", "ok", "failed"),
    [
        (CARD_YAML.replace("status: completed", "status: draft"), True, "status is completed"),
        (CARD_YAML.replace("ui_config: {start: Thursday 10:30am, medium: Zoom}", ""), True,
         "ui_config present"),
        (CARD_YAML.replace("title: Eval team standup", "title: ''"), True, "title present"),
        (CARD_YAML, False, "card__save succeeded"),
    ],
)  # fmt: skip
def test_card_completion_fails_with_the_reason(
    tmp_path: Path, text: str, ok: bool, failed: str
) -> None:
    result = grade("card_completion", {}, saved(tmp_path, text, ok), task_input={"fact_id": "f1"})
    assert (result.score, result.passed) == (0.0, False)
    assert failed in result.rationale


def test_card_completion_without_a_card_file(tmp_path: Path) -> None:
    result = grade("card_completion", {}, make_outcome(tmp_path), task_input={"fact_id": "f1"})
    assert result.passed is False and "card file exists" in result.rationale


@pytest.mark.parametrize(
    ("expected", "score"), [(["event"], 1.0), (["todo", "note"], 0.5), (["link"], 0.0)]
)
def test_card_template_choice_primary_secondary_none(
    tmp_path: Path, expected: list[str], score: float
) -> None:
    config = {"expected_template_ids": expected}
    result = grade("card_template_choice", config, saved(tmp_path), task_input={"fact_id": "f1"})
    assert (result.score, result.passed) == (score, score == 1.0)


def test_card_must_contain_scans_the_yaml_in_any_case(tmp_path: Path) -> None:
    config = {"substrings": ["10:30", "zoom", "KL1234"]}
    result = grade("card_must_contain", config, saved(tmp_path), task_input={"fact_id": "f1"})
    assert (result.score, result.passed) == (0.666667, False)
    assert "KL1234" in result.rationale
    empty = grade("card_must_contain", config, make_outcome(tmp_path / "x"))
    assert empty.score == 0.0


# -- pkm-agent ------------------------------------------------------------------------------------
STARTER = {"PKM/Areas/Health/Sleep.md": SLEEP, "PKM/Projects/Kitchen.md": "# Kitchen\n"}


def test_pkm_completion_accepts_a_valid_write_or_a_clean_skip(tmp_path: Path) -> None:
    write = make_outcome(
        tmp_path / "a",
        fixture=STARTER,
        files={"PKM/Areas/Health/Sleep.md": SLEEP + "- 5.5h\n"},
        state={"pkm": {"action": "saved", "files": ["Areas/Health/Sleep.md"]}},
    )
    assert grade("pkm_completion", None, write).passed is True
    skip = make_outcome(tmp_path / "b", fixture=STARTER, state={"pkm": {"action": "skipped"}})
    assert grade("pkm_completion", None, skip).passed is True
    assert grade("pkm_completion", {"expect": "skipped"}, skip).passed is True
    assert grade("pkm_completion", {"expect": "saved"}, skip).passed is False
    assert grade("pkm_completion", {"expect": "skipped"}, write).passed is False


@pytest.mark.parametrize(
    ("files", "state", "status", "why"),
    [
        ({"PKM/Areas/Health/Sleep.md": SLEEP + "x\n"}, {"action": "skipped"}, "finished",
         "skipped but changed"),
        ({}, {"action": "saved", "files": ["Areas/Health/Sleep.md"]}, "finished",
         "no PKM file changed"),
        ({"PKM/Health.md": "# x\n"}, {"action": "saved"}, "finished", "not a markdown note under"),
        ({"PKM/Areas/a.md": "# x\n"}, {"action": "saved", "files": ["Areas/b.md"]}, "finished",
         "Areas/b.md is listed but missing"),
        ({}, {"action": "skipped"}, "failed", "run failed"),
        ({}, {}, "finished", "not saved or skipped"),
    ],
)  # fmt: skip
def test_pkm_completion_failures(
    tmp_path: Path, files: dict[str, str], state: dict[str, Any], status: str, why: str
) -> None:
    outcome = make_outcome(
        tmp_path, fixture=STARTER, files=files, state={"pkm": state}, status=status
    )
    result = grade("pkm_completion", None, outcome)
    assert (result.score, result.passed) == (0.0, False)
    assert why in result.rationale


@pytest.mark.parametrize(
    ("written", "score"),
    [
        ("PKM/Areas/Health/Sleep.md", 1.0),
        ("PKM/Areas/Health/Energy.md", 0.5),
        ("PKM/Resources/Sleep.md", 0.0),
    ],
)
def test_pkm_routed_correctly_exact_bucket_or_nothing(
    tmp_path: Path, written: str, score: float
) -> None:
    outcome = make_outcome(tmp_path, fixture=STARTER, files={written: SLEEP + "- 5.5h\n"})
    config = {"expected_buckets": ["Areas/Health/"], "expected_files": ["Areas/Health/Sleep.md"]}
    result = grade("pkm_routed_correctly", config, outcome)
    assert (result.score, result.passed) == (score, score == 1.0), result.rationale


def test_pkm_routed_correctly_without_a_write(tmp_path: Path) -> None:
    config = {"expected_files": ["Areas/Health/Sleep.md"]}
    result = grade("pkm_routed_correctly", config, make_outcome(tmp_path, fixture=STARTER))
    assert (result.score, result.rationale) == (0.0, "nothing was written under PKM/")


def test_pkm_read_before_write_checks_the_trajectory(tmp_path: Path) -> None:
    sleep, kitchen = "Areas/Health/Sleep.md", "Projects/Kitchen.md"
    files = {
        f"PKM/{sleep}": SLEEP + "x\n",
        f"PKM/{kitchen}": "# Kitchen\ny\n",
        "PKM/Areas/N.md": "n",
    }
    careful = [
        call("pkm__list"), call("pkm__read", path=sleep), call("pkm__append", path=sleep),
        call("pkm__read", path=f"PKM/{kitchen}"), call("pkm__write", path=kitchen),
        call("pkm__create", path="Areas/N.md"),
    ]  # fmt: skip
    good = make_outcome(tmp_path / "a", fixture=STARTER, files=files, calls=careful)
    assert grade("pkm_read_before_write", None, good).passed is True
    # Kitchen was read only after it was overwritten: one of two edited notes was blind.
    late = [
        call("pkm__read", path=sleep), call("pkm__append", path=sleep),
        call("pkm__write", path=kitchen), call("pkm__read", path=kitchen),
    ]  # fmt: skip
    blind = make_outcome(tmp_path / "b", fixture=STARTER, files=files, calls=late)
    result = grade("pkm_read_before_write", None, blind)
    assert (result.score, result.passed) == (0.5, False)
    assert kitchen in result.rationale
    untouched = make_outcome(tmp_path / "c", fixture=STARTER, files={"PKM/Areas/N.md": "n"})
    assert grade("pkm_read_before_write", None, untouched).score == 1.0


def test_pkm_no_overwrite_needs_every_seed_marker(tmp_path: Path) -> None:
    fixture = {**STARTER, "PKM/Projects/Kitchen.md": "# Kitchen\n<!-- seed:k1 -->\n"}
    merged = {"PKM/Projects/Kitchen.md": None, "PKM/Areas/Home.md": "<!-- seed:k1 -->\n"}
    ok = make_outcome(tmp_path / "a", fixture=fixture, files=merged)
    assert grade("pkm_no_overwrite", None, ok).passed is True  # moved, not destroyed
    lost = make_outcome(tmp_path / "b", fixture=fixture, files={"PKM/Areas/Health/Sleep.md": "x"})
    result = grade("pkm_no_overwrite", None, lost)  # one of two markers lost: a destructive edit
    assert (result.score, result.passed) == (0.0, False)
    assert result.rationale == f"lost 1 of 2 seed markers: ['{SEED}']"
    assert grade("pkm_no_overwrite", None, make_outcome(tmp_path / "c")).score == 1.0


def test_pkm_no_overwrite_with_a_seed_marker_keeps_every_occurrence(tmp_path: Path) -> None:
    """Memex's suites name the marker text: each of its occurrences in the fixture must
    survive, merged into another note or not."""
    config = {"seed_marker": "SEED"}
    kitchen = "# Kitchen\n- tiles SEED\n- sink SEED\n"
    fixture = {**STARTER, "PKM/Projects/Kitchen.md": kitchen, "PKM/Areas/Garden.md": "SEED\n"}
    merged = {"PKM/Projects/Kitchen.md": None, "PKM/Areas/Home.md": kitchen + "- new\n"}
    ok = make_outcome(tmp_path / "a", fixture=fixture, files=merged)
    result = grade("pkm_no_overwrite", config, ok)
    assert (result.passed, result.rationale) == (True, "all 3 occurrences of 'SEED' survive")
    # The note still has the marker, once: an occurrence was destroyed.
    cut = make_outcome(tmp_path / "b", fixture=fixture, files={"PKM/Projects/Kitchen.md": "SEED"})
    result = grade("pkm_no_overwrite", config, cut)
    assert (result.score, result.passed) == (0.0, False)
    assert result.rationale == (
        "lost 1 of 3 occurrences of seed marker 'SEED' (fewer than before in "
        "PKM/Projects/Kitchen.md)"
    )
    # The fixture's <!-- seed:... --> markers are not what this config checks.
    assert (
        grade("pkm_no_overwrite", config, make_outcome(tmp_path / "c", fixture=STARTER)).score
        == 1.0
    )


def test_pkm_judge_graders_are_not_scored_without_a_judge(tmp_path: Path) -> None:
    outcome = make_outcome(
        tmp_path,
        fixture=STARTER,
        files={"PKM/Areas/Health/Sleep.md": SLEEP + "- 2026-05-25: 5.5h, crash at 2pm\n"},
        state={"pkm": {"action": "saved", "insight": "Short sleep precedes the 2pm crash."}},
    )
    for name in ("pkm_insight_quality", "pkm_append_coherence"):
        result = grade(name, None, outcome)
        assert (result.score, result.passed) == (None, None)
        assert "no judge model" in result.rationale


def test_pkm_judge_graders_with_a_scripted_judge(tmp_path: Path) -> None:
    outcome = make_outcome(
        tmp_path,
        fixture=STARTER,
        files={"PKM/Areas/Health/Sleep.md": SLEEP + "- 2026-05-25: 5.5h, crash at 2pm\n"},
        state={"pkm": {"action": "saved", "insight": "Short sleep precedes the 2pm crash."}},
    )
    judge = scripted_judge(
        {"output": {"score": 1, "rationale": "grounded and short"}},
        {"output": {"score": 0.67, "rationale": "style kept, a bit long"}},
    )
    insight = grade("pkm_insight_quality", None, outcome, judge=judge, index=0)
    assert (insight.score, insight.passed) == (1.0, True)
    coherence = grade("pkm_append_coherence", None, outcome, judge=judge, index=1)
    assert (coherence.score, coherence.passed) == (0.67, False)
    skipped = make_outcome(tmp_path / "s", fixture=STARTER, state={"pkm": {"action": "skipped"}})
    assert grade("pkm_insight_quality", None, skipped, judge=judge).score is None
    assert grade("pkm_append_coherence", None, skipped, judge=judge).score is None
    silent = make_outcome(tmp_path / "n", state={"pkm": {"action": "saved"}})
    assert grade("pkm_insight_quality", None, silent, judge=judge).score == 0.0


# -- bad configs ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "config", "message"),
    [
        ("no_such_grader", {}, "unknown grader 'no_such_grader'; registered graders: "),
        ("must_contain", {"path": "state.x"}, "config.substrings: is required"),
        ("must_contain", {"substrings": "zoom"}, "config.substrings: must be a list of non-empty"),
        ("must_contain", {"substrings": []}, "must list at least one string"),
        ("must_contain", {"substrings": ["a"], "paht": "x"}, "unknown config key(s) paht"),
        ("must_contain", {"substrings": ["a"], "path": "state..x"}, "is not a dotted path"),
        ("json_path_equals", {"path": "state.x"}, "config.value: is required"),
        ("tool_called", {"tool": ""}, "config.tool: must be a non-empty string"),
        ("trajectory_match", {"mode": "strict"}, "config.tools: is required"),
        ("trajectory_match", {"tools": ["a"], "mode": "fuzzy"}, "must be one of strict"),
        ("card_template_choice", {}, "config.expected_template_ids: is required"),
        ("pkm_routed_correctly", {}, "give expected_files and/or expected_buckets"),
        ("pkm_completion", {"expect": "maybe"}, "must be one of any, saved, skipped"),
        ("pkm_insight_quality", {"threshold": 2}, "must be between 0.0 and 1.0"),
        ("pkm_no_overwrite", {"seed_marker": 3}, "config.seed_marker: must be a non-empty string"),
        ("pkm_no_overwrite", {"seed_marker": ""}, "config.seed_marker: must be a non-empty string"),
        (
            "pkm_no_overwrite",
            {"marker": "x"},
            "unknown config key(s) marker; it reads: seed_marker",
        ),
        ("llm_judge", {}, "config.rubric: is required"),
        ("card_completion", ["x"], "config must be a mapping"),
    ],
)
def test_bad_grader_config_is_a_clear_error(name: str, config: Any, message: str) -> None:
    with pytest.raises(EvalConfigError, match="grader") as info:
        build_grader(name, config)
    assert message in str(info.value)
    assert info.value.to_dict()["code"] == "INVALID_EVAL"


# -- custom graders and the recorder's turns -------------------------------------------------
@grader("test_half_or_crash")
@dataclass(frozen=True, slots=True)
class HalfOrCrash(Grader):
    crash: bool = False

    @classmethod
    def from_config(cls, config: ConfigReader) -> HalfOrCrash:
        return cls(bool(config.value("crash", required=False, default=False)))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        if self.crash:
            raise KeyError("boom")
        return GradeResult.of(0.5, "half")


def test_a_registered_grader_runs_and_a_crash_scores_zero(tmp_path: Path) -> None:
    assert "test_half_or_crash" in registered_graders()
    task = task_from_dict(
        {
            "id": "t",
            "input": {},
            "graders": [
                {"name": "test_half_or_crash"},
                {"name": "test_half_or_crash", "config": {"crash": True}},
            ],
        }
    )
    result = run_graders(task, make_outcome(tmp_path))
    assert [(g.score, g.rationale) for _, g in result.grades] == [
        (0.5, "half"),
        (0.0, "grader crashed: KeyError: 'boom'"),
    ]
    assert (result.score, result.passed) == (0.25, False)
    with pytest.raises(PluginError, match="grader 'must_contain' is already registered by "):
        grader("must_contain")(HalfOrCrash)


def test_model_messages_become_scripted_turns() -> None:
    submit = AIMessage(
        content="", tool_calls=[{"name": "submit_output", "args": {"a": 1}, "id": "1"}]
    )
    assert to_turn(submit) == {"output": {"a": 1}}
    calls = AIMessage(
        content="", tool_calls=[{"name": "pkm__read", "args": {"path": "x"}, "id": "2"}]
    )
    assert to_turn(calls) == {"tool_calls": [{"name": "pkm__read", "args": {"path": "x"}}]}
    assert to_turn(AIMessage(content='{"score": 1}')) == {"output": {"score": 1}}
    assert to_turn(AIMessage(content="not json")) == {"text": "not json"}
    assert to_turn(AIMessage(content="[1]")) == {"text": "[1]"}
