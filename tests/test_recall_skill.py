"""The nomemory-recall bundle, its no-model planner end to end, its cases and ``recall``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import MEMORY_TEXTS
from typer.testing import CliRunner

from skilldeck import RunResult, Settings, SkillDeck
from skilldeck.cli import app
from skilldeck.evals import (
    GradeContext,
    Outcome,
    Task,
    TrialSetup,
    build_grader,
    grade,
    outcome_of,
    registered_graders,
    suite_for_skill,
)
from skilldeck.nodes.planner import PlannerSkillNode
from skilldeck.nodes.planner_rules import (
    ALL_TIME,
    RulesPlanner,
    extract_view,
    keywords,
    latest_message_ts,
    time_window,
)
from skilldeck.skills import builtin_skills_dir, load_skills
from skilldeck.tools import default_registry
from skilldeck.tools.memory import Memory
from skilldeck.tools.messages import Message

pytestmark = pytest.mark.L2

SKILL = "nomemory-recall"
BUNDLE = builtin_skills_dir() / SKILL
SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "001_0fee95d1ec7294ad.txt"
EMPTY_VIEW = {"preferences": [], "profile": [], "constraints": []}
CASES = yaml.safe_load((BUNDLE / "cases.yaml").read_text("utf-8"))
SUITE = suite_for_skill(SKILL)  # the cases as the eval harness loads them
TASKS = SUITE.tasks


def prepare(deck: SkillDeck, task: Task, folder: Path) -> dict[str, Any]:
    """What the harness does before a case: the bundle's setup hook fills the memory."""
    trial = TrialSetup(
        id=task.id,
        deck=deck,
        bundle=SUITE.bundle(SKILL),
        workspace=folder,
        fixture=SUITE.fixture(task),
        user_id=task.user_id,
        find_fixture=lambda name: SUITE.find_fixture(task, name),
    )
    return SUITE.setups[SKILL](task, trial)


@pytest.fixture(scope="module")
def deck(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkillDeck]:
    """The built-in bundle with no model (the rule-based planner runs) and its own stores:
    u1's messages and every case's, each case as its own user."""
    root = tmp_path_factory.mktemp("recall")
    settings = Settings(
        model=None,
        messages_path=str(root / "m.sqlite"),
        chroma_path=str(root / "chroma"),
        chroma_url=None,
        files_root=str(root / "files"),
    )
    with SkillDeck(BUNDLE, checkpointer="memory://", settings=settings) as d:
        d.memory.add(Message(i, "u1", "t1", role, ts, text) for i, role, ts, text in MEMORY_TEXTS)
        for task in TASKS:
            assert prepare(d, task, root) == {"question": task.input["question"]}
        yield d


@pytest.fixture(scope="module")
def memory(deck: SkillDeck) -> Memory:
    return deck.memory


def ask(deck: SkillDeck, question: str, user: str = "u1") -> RunResult:
    return deck.run({"question": question}, context="recall", user_id=user)


# -- the bundle -----------------------------------------------------------------------------------
def test_the_bundle_is_the_seed_skill() -> None:
    (bundle,) = load_skills(BUNDLE)
    assert bundle.name == "nomemory-recall" and bundle.contexts == ("recall",)
    assert bundle.tools == (
        "messages_list",
        "lexical_search",
        "semantic_search",
        "neighbors",
    )  # no skill__read_file: the planner mode's prompt holds what the model acts on
    assert bundle.execution.mode == "planner"
    assert bundle.execution.provider is None and bundle.execution.model is None
    assert bundle.data_keys == ("memory_view", "evidence")
    skill_md = (BUNDLE / "SKILL.md").read_text("utf-8")
    runtime = (BUNDLE / "references" / "runtime.md").read_text("utf-8")
    assert "name: nomemory-recall\n" in skill_md
    # The sections the host executes (tools, how they are called, defaults) are a reference,
    # which planner mode never puts in a prompt; what the model acts on stays in SKILL.md.
    for heading in ("## 可用工具", "## 工具调用方式", "## 默认值"):
        assert heading in runtime and heading not in bundle.instructions
    for heading in ("## Observe → Reflect → Decide", "## Planner 输出契约", "## 合成输出契约"):
        assert heading in bundle.instructions
    if SEED.is_file():  # the seed text as given, section by section; the name follows the folder
        seed = SEED.read_text("utf-8")
        named = seed.replace("name: nomemory-recall-default\n", "name: nomemory-recall\n")
        sections = re.split(r"(?m)^(?=## )", named)
        assert len(sections) == 7
        assert all(s.strip() in skill_md or s.strip() in runtime for s in sections)
        description = re.search(r"^description: (.+)$", seed, re.M)
        assert description is not None and bundle.description == description.group(1)
    assert (BUNDLE / "scripts" / "tool_call_examples.md").is_file()  # SKILL.md points to it


def test_cases_follow_the_seed_003_task_shape() -> None:
    assert len(CASES) >= 15
    assert len({c["id"] for c in CASES}) == len(CASES)
    assert {c["bucket"] for c in CASES} == {"positive", "negative", "ambiguous"}
    chinese = [c for c in CASES if re.search(r"[\u4e00-\u9fff]", c["input"]["question"])]
    assert 4 <= len(chinese) < len(CASES)  # English and Chinese
    for case in CASES:
        assert set(case) == {"id", "bucket", "input", "graders"}
        assert {"user_id", "question", "messages"} <= set(case["input"])
        base = case["input"].get("base_fixture")
        assert base is None or (BUNDLE / "fixtures" / f"{base}.jsonl").is_file()
        assert case["graders"] and all(set(g) == {"name", "config"} for g in case["graders"])
        assert {g["name"] for g in case["graders"]} <= set(registered_graders())


# -- the rules: time signals, keywords, the latest message, cues ---------------------------------
LATEST = datetime(2023, 12, 20, 7, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("question", "since", "until", "kind"),
    [
        ("What did I eat in May 2023?", "2023-05-01T00:00:00Z", "2023-06-01T00:00:00Z", "month"),
        ("May 2023 plans?", "2023-05-01T00:00:00Z", "2023-06-01T00:00:00Z", "month"),
        ("What happened in 2022?", "2022-01-01T00:00:00Z", "2023-01-01T00:00:00Z", "year"),
        ("What did I say on October 13, 2023?", "2023-10-13T00:00:00Z", "2023-10-14T00:00:00Z",
         "day"),
        ("What did I find on 1 February, 2023?", "2023-02-01T00:00:00Z", "2023-02-02T00:00:00Z",
         "day"),
        ("2023年5月我说了什么？", "2023-05-01T00:00:00Z", "2023-06-01T00:00:00Z", "month"),
        ("2023年5月3日吃了什么", "2023-05-03T00:00:00Z", "2023-05-04T00:00:00Z", "day"),
        ("When did I go camping in June?", "2023-06-01T00:00:00Z", "2023-07-01T00:00:00Z",
         "month"),
        ("What did I do recently?", "2023-11-20T07:30:00Z", "2023-12-20T07:30:01Z", "recent"),
        ("我最近喜欢什么？", "2023-11-20T07:30:00Z", "2023-12-20T07:30:01Z", "recent"),
        ("What did I say last time about work?", "2023-09-21T07:30:00Z",
         "2023-12-20T07:30:01Z", "last"),
        ("我上次说了什么？", "2023-09-21T07:30:00Z", "2023-12-20T07:30:01Z", "last"),
        ("我长期的饮食习惯？", ALL_TIME, None, "long"),
        ("What food do I avoid?", ALL_TIME, None, "all"),
        # Not a day, so the month it names decides.
        ("What happened on 31 February, 2023?", "2023-02-01T00:00:00Z", "2023-03-01T00:00:00Z",
         "month"),
    ],
)  # fmt: skip
def test_time_signals_become_explicit_ranges(
    question: str, since: str, until: str | None, kind: str
) -> None:
    window = time_window(question, LATEST)
    assert (window.since, window.until, window.kind) == (since, until, kind)


def test_relative_signals_count_from_the_latest_message_not_from_today() -> None:
    old = time_window("recently?", datetime(2019, 3, 1, tzinfo=UTC))
    assert old.since == "2019-01-30T00:00:00Z"


def test_keywords_drop_signals_question_words_and_stop_words() -> None:
    assert keywords("What did Gina's team perform in May 2023?") == ["Gina", "team", "perform"]
    assert keywords("我最近对什么过敏？") == ["我", "对", "过敏"]
    assert keywords("What do you know about me?") == []


def test_latest_message_is_found_with_messages_list(memory: Memory, tmp_path: Path) -> None:
    registry = default_registry(tmp_path, memory=lambda: memory)

    def call(user: str) -> Any:
        def invoke(tool: str, args: Mapping[str, Any]) -> Any:
            assert tool == "messages_list"
            result = registry.invoke(tool, args, {"user_id": user})
            return json.loads(result.content) if result.ok else None

        return invoke

    assert latest_message_ts(call("u1")) == datetime(2026, 3, 15, 18, 1, tzinfo=UTC)
    assert latest_message_ts(call("case-en-recent")) == datetime(
        2023, 12, 20, 7, 30, 10, tzinfo=UTC
    )
    assert latest_message_ts(call("nobody")) is None
    # Messages dated after "now" are found too.
    now = datetime(2020, 1, 1, tzinfo=UTC)
    assert latest_message_ts(call("u1"), now) == datetime(2026, 3, 15, 18, 1, tzinfo=UTC)


def test_cues_fill_the_view_from_the_users_own_messages() -> None:
    evidence = [
        {"message_id": "a", "role": "user", "text": "I love hiking. It looks like rain."},
        {"message_id": "b", "role": "assistant", "text": "I love spicy food!"},
        {"message_id": "c", "role": "user", "text": "我对花生过敏。我住在上海。我喜欢喝茶"},
        {
            "message_id": "d",
            "role": "user",
            "text": "I can't wait for Friday! My sister likes cats",
        },
        {"message_id": "e", "role": "user", "text": "I'm a nurse and I must sleep before 10."},
        {"message_id": "f", "role": "user", "text": "I love hiking."},
    ]
    view = extract_view(evidence)
    assert view["preferences"] == [
        {"text": "I love hiking.", "evidence": ["a", "f"]},
        {"text": "我喜欢喝茶", "evidence": ["c"]},
        {"text": "My sister likes cats", "evidence": ["d"]},
    ]
    assert view["constraints"] == [
        {"text": "我对花生过敏。", "evidence": ["c"]},
        {"text": "I'm a nurse and I must sleep before 10.", "evidence": ["e"]},
    ]
    assert view["profile"] == [
        {"text": "我住在上海。", "evidence": ["c"]},
        {"text": "I'm a nurse and I must sleep before 10.", "evidence": ["e"]},
    ]
    assert extract_view([]) == EMPTY_VIEW


# -- the no-model planner, end to end --------------------------------------------------------------
def test_no_model_recall_end_to_end(deck: SkillDeck) -> None:
    result = ask(deck, "What food do I avoid?")
    assert result.status == "finished", result.error
    attempt = result.state["attempt"]
    assert attempt["model"] == "rules:planner" and attempt["action"] == "finish"
    rounds = attempt["trajectory"]
    assert [r["tool"] for r in rounds] == ["lexical_search", "semantic_search", "neighbors"]
    assert all(r["valid"] and not r["errors"] for r in rounds)
    lexical = rounds[0]["plan"]["args"]
    assert lexical["query_text"] == "food avoid"
    assert lexical["filter"] == {"role": "any", "time_range": {"since": ALL_TIME}}
    assert rounds[1]["plan"]["args"]["min_score"] == PlannerSkillNode.rules.semantic_floor
    assert rounds[2]["plan"]["args"] == {"message_id": rounds[0]["anchors"][0], "before": 8,
                                         "after": 0}  # fmt: skip
    evidence = result.state["evidence"]
    assert 1 <= len(evidence) <= 6 and evidence[0]["message_id"] == "m1"
    assert set(evidence[0]) == {"message_id", "text", "ts", "role"}
    view = result.state["memory_view"]
    assert {"text": "I don't eat spicy food, 我不吃辣.", "evidence": ["m1"]} in view["constraints"]
    cited = {i for items in view.values() for item in items for i in item["evidence"]}
    assert cited <= {e["message_id"] for e in evidence}
    assert result.state["response"].startswith(f"{len(evidence)} evidence message(s)")


def test_no_model_recall_narrows_then_takes_context(deck: SkillDeck) -> None:
    result = ask(deck, "我最近对什么过敏？")
    rounds = result.state["attempt"]["trajectory"]
    window = rounds[0]["plan"]["args"]["filter"]["time_range"]
    assert window == {"since": "2026-02-13T18:01:00Z", "until": "2026-03-15T18:01:01Z"}
    assert [r["tool"] for r in rounds] == ["lexical_search", "semantic_search", "neighbors"]
    # m7 is read after m6 by the index; its neighbors bring m6 itself, and the cue.
    assert "m6" in [e["message_id"] for e in result.state["evidence"]]
    constraints = result.state["memory_view"]["constraints"]
    assert {"text": "I'm allergic to peanuts, please remember that.", "evidence": ["m6"]} in (
        constraints
    )


def test_no_model_recall_widens_an_empty_window(deck: SkillDeck) -> None:
    result = ask(deck, "What did I say about hiking in May 2023?")
    rounds = result.state["attempt"]["trajectory"]
    assert rounds[0]["plan"]["args"]["filter"]["time_range"]["since"] == "2023-05-01T00:00:00Z"
    assert rounds[0]["hit_count"] == 0 and rounds[1]["hit_count"] == 0
    assert rounds[2]["tool"] == "lexical_search"
    assert rounds[2]["plan"]["args"]["filter"]["time_range"] == {"since": ALL_TIME}
    assert "m4" in [e["message_id"] for e in result.state["evidence"]]


def test_no_model_recall_of_another_user_and_of_nothing(deck: SkillDeck) -> None:
    other = ask(deck, "What food do I avoid?", user="case-zh-diet")
    assert all(e["message_id"].startswith("z") for e in other.state["evidence"])
    empty = ask(deck, "What food do I avoid?", user="nobody")
    assert empty.status == "finished"
    assert empty.state["memory_view"] == EMPTY_VIEW and empty.state["evidence"] == []
    assert [r["plan"] for r in empty.state["attempt"]["trajectory"]] == [{"stop": True}]


def test_a_failing_memory_is_reported_not_taken_for_an_empty_one(tmp_path: Path) -> None:
    def down() -> Memory:
        raise RuntimeError("message store unavailable")

    tools = default_registry(tmp_path, memory=down)
    with SkillDeck(
        BUNDLE, checkpointer="memory://", settings=Settings(model=None), tools=tools
    ) as d:
        result = ask(d, "What food do I avoid?")
    rounds = result.state["attempt"]["trajectory"]
    assert [r["tool"] for r in rounds] == ["lexical_search", "semantic_search", None]
    # Reported by its type (a tool's exception text may hold anything, so only the log has it).
    messages = [r["errors"][0]["message"] for r in rounds[:2]]
    assert all("RuntimeError" in m and "unavailable" not in m for m in messages), messages
    assert [c["status"] for c in result.state["attempt"]["tool_calls"]] == ["error", "error"]
    assert result.state["memory_view"] == EMPTY_VIEW


def test_the_rules_planner_goes_through_the_same_validation(
    deck: SkillDeck, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forged(self: RulesPlanner, loop: Any) -> dict[str, Any]:
        args = {"query_text": "spicy", "filter": {"role": "any"}, "user_id": "u2"}
        return {"stop": False, "tool": "lexical_search", "args": args}

    monkeypatch.setattr(RulesPlanner, "plan", forged)
    result = ask(deck, "What food do I avoid?")
    rounds = result.state["attempt"]["trajectory"]
    assert len(rounds) == 3 and not any(r["valid"] for r in rounds)
    paths = {e["path"] for e in rounds[0]["errors"]}
    assert paths == {"$.args.user_id", "$.args.filter.time_range"}
    assert result.state["attempt"]["tool_calls"] == []
    assert result.state["memory_view"] == EMPTY_VIEW


# -- the cases, graded on the no-model path by the harness's graders ----------------------------
@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_case_passes_on_the_no_model_planner(deck: SkillDeck, task: Task) -> None:
    result = ask(deck, task.input["question"], user=str(task.user_id))
    graded = grade(task, outcome_of(deck, task, result))
    failed = [(spec.name, r.rationale) for spec, r in graded.grades if not r.passed]
    assert not failed, (failed, result.state.get("memory_view"), result.state.get("evidence"))
    assert graded.passed is True and graded.score == 1.0


def test_the_graders_can_fail(deck: SkillDeck) -> None:
    result = ask(deck, "What food do I avoid?")
    outcome = outcome_of(deck, TASKS[0], result)

    def passes(name: str, config: dict[str, Any], seen: Outcome = outcome) -> bool | None:
        return build_grader(name, config).evaluate(GradeContext(TASKS[0], seen)).passed

    assert passes("must_contain", {"path": "state.evidence", "substrings": ["m1"]})
    assert not passes("must_contain", {"path": "state.evidence", "substrings": ["m99"]})
    assert not passes("tool_called", {"tool": "messages_list"})
    assert not passes("trajectory_match", {"tools": ["neighbors", "lexical_search"]})
    assert passes("cites_evidence", {})
    forged = {**result.state, "memory_view": {"profile": [{"text": "x", "evidence": ["m99"]}]}}
    assert not passes("cites_evidence", {}, replace(outcome, state=forged))


# -- the command line ------------------------------------------------------------------------------
def test_recall_command(tmp_path: Path) -> None:
    data = tmp_path / "msgs.json"
    data.write_text(
        json.dumps([{"id": i, "role": r, "ts": ts, "text": t} for i, r, ts, t in MEMORY_TEXTS]),
        "utf-8",
    )
    env = {
        "SKILLDECK_MESSAGES_PATH": str(tmp_path / "m.sqlite"),
        "SKILLDECK_CHROMA_PATH": str(tmp_path / "chroma"),
        "SKILLDECK_MODEL": "",
    }
    runner = CliRunner(env=env)
    imported = runner.invoke(app, ["messages", "import", str(data), "--user", "u1"])
    assert imported.exit_code == 0, imported.output
    checkpoint = ["--checkpoint", f"sqlite:///{tmp_path / 'c.sqlite'}"]
    raw = runner.invoke(app, ["recall", "--user", "u1", "What food do I avoid?", "--json",
                              *checkpoint])  # fmt: skip
    assert raw.exit_code == 0, (raw.stdout, raw.stderr)
    body = json.loads(raw.stdout)
    assert body["status"] == "finished" and body["model"] == "rules:planner"
    assert body["evidence"][0]["message_id"] == "m1"
    assert {"text": "I don't eat spicy food, 我不吃辣.", "evidence": ["m1"]} in (
        body["memory_view"]["constraints"]
    )
    assert [r["tool"] for r in body["trajectory"]] == [
        "lexical_search",
        "semantic_search",
        "neighbors",
    ]

    table = runner.invoke(app, ["recall", "--user", "u1", "What food do I avoid?", *checkpoint])
    assert table.exit_code == 0, table.output
    assert "memory_view" in table.stdout and "constraints" in table.stdout
    assert "I don't eat spicy food" in table.stdout and "m1" in table.stdout
    assert "model: rules:planner" in table.stderr

    nothing = runner.invoke(app, ["recall", "--user", "u9", "What food do I avoid?", *checkpoint])
    assert nothing.exit_code == 0 and "memory_view is empty" in nothing.stdout


def test_recall_command_reports_a_failed_run(tmp_path: Path) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text(yaml.safe_dump({"skills": {"nomemory-recall": [
        {"output": {"stop": True}},
        {"output": {"preferences": [{"text": "x", "evidence": ["m1"]}], "profile": [],
                    "constraints": []}},
    ]}}), "utf-8")  # fmt: skip
    env = {
        "SKILLDECK_MESSAGES_PATH": str(tmp_path / "m.sqlite"),
        "SKILLDECK_CHROMA_PATH": str(tmp_path / "chroma"),
        "SKILLDECK_MAX_RETRIES": "0",
    }
    args = ["recall", "--user", "u1", "anything", "--model", f"scripted:{script}", "--json",
            "--checkpoint", f"sqlite:///{tmp_path / 'c.sqlite'}"]  # fmt: skip
    result = CliRunner(env=env).invoke(app, args)
    assert result.exit_code == 1, result.output
    body = json.loads(result.stdout)
    assert body["status"] == "failed" and body["error"]["code"] == "CONTRACT_VIOLATION"
    assert body["memory_view"] is None
