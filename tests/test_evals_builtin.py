"""L2: the built-in nomemory-recall and rag-retrieve cases run through ``skilldeck eval run``
with no model, prepared by their bundles' eval setup hooks; and what a bad hook does."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import output, write_bundle
from typer.testing import CliRunner

from skilldeck import Settings, SkillDeck
from skilldeck.cli import app
from skilldeck.errors import EvalConfigError
from skilldeck.evals import (
    GradeContext,
    Outcome,
    build_grader,
    load_setup,
    load_suite,
    run_suite,
    suite_for_skill,
)
from skilldeck.skills import builtin_skills_dir, load_skills
from skilldeck.skills.examples import EXAMPLES_FILE

pytestmark = pytest.mark.L2

NO_MODEL = {"SKILLDECK_MODEL": ""}  # the rule-based paths, whatever the environment says


def _expected(skill: str) -> dict[str, int]:
    """Cases per bucket. The per-case tests (test_recall_skill, test_rag_skill) assert that
    every case passes on the no-model path, none is marked xfail: so must the suite."""
    cases = yaml.safe_load((builtin_skills_dir() / skill / "cases.yaml").read_text("utf-8"))
    return dict(Counter(f"{skill}/{c['bucket']}" for c in cases))


@pytest.mark.slow  # a whole suite
@pytest.mark.parametrize("skill", ["nomemory-recall", "rag-retrieve"])
def test_builtin_suite_runs_with_no_model_through_the_cli(
    skill: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the run must not touch the user's stores in the cwd
    out = tmp_path / "out"
    args = ["eval", "run", "--skill", skill, "--out", str(out), "--concurrency", "2", "--json"]
    result = CliRunner(env=NO_MODEL).invoke(app, args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    body = json.loads(result.stdout)
    expected = _expected(skill)
    assert {k: b["trials"] for k, b in body["buckets"].items()} == expected
    for key, bucket in body["buckets"].items():
        assert (bucket["mean_score"], bucket["pass_rate"]) == (1.0, 1.0), key
    total = sum(expected.values())
    assert body["summary"]["trials"] == body["summary"]["scored"] == total
    assert body["summary"]["pass_rate"] == 1.0

    report = json.loads((out / "report.json").read_text("utf-8"))
    assert report["models"] == {skill: "rules"}
    failing = [t["id"] for t in report["tasks"] if t["pass_rate"] != 1.0]
    assert failing == []
    # Stores of the run's own, under --out; none in the working directory.
    assert not (tmp_path / ".skilldeck").exists()
    assert [p.name for p in (out / "stores").iterdir()] == [report["run_id"]]
    # The hook's run input reached the skill: only the question, not the setup data.
    task = report["tasks"][0]
    checkpoints = f"sqlite:///{out / 'checkpoints.sqlite'}"
    with SkillDeck(builtin_skills_dir() / skill, checkpointer=checkpoints) as deck:
        state = deck.get_thread(task["trials"][0]["thread_id"]).state
    assert state["input"] == {"question": task["input"]["question"]}


# -- setup hooks ---------------------------------------------------------------------------------
CASE = {
    "id": "one",
    "bucket": "positive",
    "input": {"base_fixture": "talk", "secret": "kept out"},
    "graders": [{"name": "json_path_equals", "config": {"path": "state.note", "value": "x"}}],
}


def _bundle(root: Path, hook: str | None, *, cases: list[dict[str, Any]] | None = None) -> Path:
    folder = write_bundle(root, "notes", scripts={"eval_setup": hook} if hook is not None else None)
    (folder / "cases.yaml").write_text(yaml.safe_dump(cases or [CASE]), "utf-8")
    (folder / "fixtures").mkdir()
    (folder / "fixtures" / "talk.jsonl").write_text('{"text": "hello"}\n', "utf-8")
    return folder


def _cassette(tmp_path: Path) -> str:
    path = tmp_path / "cassette.yaml"
    turn = output(data={"note": "x"})
    path.write_text(yaml.safe_dump({"skills": {"notes": [turn, turn, turn]}}), "utf-8")
    return f"scripted:{path}"


GOOD_HOOK = """
def setup(task, trial):
    calls = trial.once("calls", list)
    calls.append(trial.id)
    (trial.workspace / "from_setup.txt").write_text(trial.fixture.read_text("utf-8"), "utf-8")
    return {"fixture": trial.fixture.name, "user": trial.user_id, "calls": len(calls),
            "input_keys": sorted(task.input)}
"""


def test_a_setup_hook_prepares_every_trial_and_gives_the_run_input(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    _bundle(skills, GOOD_HOOK)
    suite = suite_for_skill("notes", [skills], trust=[skills])
    assert set(suite.setups) == {"notes"}
    assert suite.fixture(suite.tasks[0]) == skills / "notes" / "fixtures" / "talk.jsonl"
    out = tmp_path / "out"
    report = run_suite(suite, out=out, model=_cassette(tmp_path), epochs=2)
    assert report["summary"]["pass_rate"] == 1.0
    trials = report["tasks"][0]["trials"]
    with SkillDeck(
        list(suite.bundles), checkpointer=f"sqlite:///{out / 'checkpoints.sqlite'}"
    ) as deck:
        inputs = [deck.get_thread(t["thread_id"]).state["input"] for t in trials]
    # once() is shared by the run's trials; a file fixture is not copied, the hook reads it.
    assert sorted(i["calls"] for i in inputs) == [1, 2]
    assert {i["fixture"] for i in inputs} == {"talk.jsonl"}
    assert all(i["input_keys"] == ["secret"] and i["user"] is None for i in inputs)
    for trial in trials:
        workspace = out / "workspaces" / trial["trial_id"]
        assert sorted(p.name for p in workspace.iterdir()) == ["from_setup.txt"]
        assert trial["diff"] == []  # what the hook wrote is the trial's starting point


@pytest.mark.parametrize(
    ("hook", "message"),
    [
        ("def prepare(task, trial):\n    return None\n", "must define a function setup"),
        ("setup = 3\n", r"must define a function setup\(task, trial\)"),
        ("raise RuntimeError('no database')\n", "import failed: RuntimeError: no database"),
        ("def setup(task, trial)\n", "import failed: SyntaxError"),
    ],
)
def test_a_hook_that_cannot_load_fails_the_suite_naming_its_file(
    tmp_path: Path, hook: str, message: str
) -> None:
    skills = tmp_path / "skills"
    folder = _bundle(skills, hook)
    hook_file = folder / "scripts" / "eval_setup.py"
    with pytest.raises(EvalConfigError, match=message) as caught:
        suite_for_skill("notes", [skills], trust=[skills])
    assert str(caught.value).startswith(f"{hook_file}: ")
    # The skill itself still loads: only evals import the hook.
    (bundle,) = load_skills(skills, trust=[skills])
    assert bundle.eval_setup_path == hook_file
    command = ["eval", "run", "--skill", "notes", "--skills", str(skills), "--trust", str(skills)]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2 and "INVALID_EVAL" in result.stderr
    assert str(hook_file) in result.stderr.replace("\n", "")


@pytest.mark.parametrize(
    ("hook", "message"),
    [
        ("def setup(task, trial):\n    raise KeyError('user_id')\n", "KeyError: 'user_id'"),
        ("def setup(task, trial):\n    return 42\n", "returned int .* return the run input"),
    ],
)
def test_a_hook_that_fails_stops_the_run_naming_its_file_and_task(
    tmp_path: Path, hook: str, message: str
) -> None:
    skills = tmp_path / "skills"
    folder = _bundle(skills, hook, cases=[CASE, {**CASE, "id": "two"}])
    suite = suite_for_skill("notes", [skills], trust=[skills])
    with pytest.raises(EvalConfigError, match=message) as caught:
        run_suite(suite, out=tmp_path / "out", model=_cassette(tmp_path))
    text = str(caught.value)
    assert text.startswith(f"{folder / 'scripts' / 'eval_setup.py'}: ")
    assert "task 'one'" in text
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_file_fixture_needs_a_setup_hook(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    _bundle(skills, None)
    with pytest.raises(EvalConfigError, match=r"talk\.jsonl is a file, .*eval_setup\.py"):
        suite_for_skill("notes", [skills])
    assert load_setup(load_skills(skills)[0]) is None


def test_two_files_with_the_fixture_name_are_ambiguous(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    folder = _bundle(skills, GOOD_HOOK)
    (folder / "fixtures" / "talk.json").write_text("[]", "utf-8")
    with pytest.raises(EvalConfigError, match="base fixture 'talk' is ambiguous"):
        suite_for_skill("notes", [skills], trust=[skills])


def test_rag_cases_of_one_run_must_share_their_knowledge_folder(tmp_path: Path) -> None:
    other = tmp_path / "fixtures" / "other"
    other.mkdir(parents=True)
    (other / "notes.md").write_text("# Notes\n\nNothing here.\n", "utf-8")
    graders = [{"name": "json_path_equals", "config": {"path": "state.found", "value": True}}]
    tasks = [
        {"id": f"ask_{name}", "input": {"knowledge": name, "question": "What is a SKU?"},
         "graders": graders}
        for name in ("kb", "other")
    ]  # fmt: skip
    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump(tasks), "utf-8")
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(
        yaml.safe_dump({"tasks": [{"file": "tasks.yaml", "skill": "rag-retrieve"}]}), "utf-8"
    )
    suite = load_suite(suite_file)
    with pytest.raises(EvalConfigError, match=r"task 'ask_other'.*one knowledge folder"):
        run_suite(suite, out=tmp_path / "out", settings=Settings(model=None))


# -- cites_evidence ------------------------------------------------------------------------------
def _outcome(state: dict[str, Any]) -> Outcome:
    return Outcome("t-e0", "t", "nomemory-recall", 0, "th", "finished", state, Path("."))


EVIDENCE = [{"message_id": "m1", "text": "a"}, {"message_id": "m2", "text": "b"}]


@pytest.mark.parametrize(
    ("view", "score", "why"),
    [
        ({"profile": [{"text": "x", "evidence": ["m1", "m2"]}]}, 1.0, "all 1 item"),
        ({"profile": [], "constraints": []}, 1.0, "has no items"),
        (
            {"profile": [{"text": "x", "evidence": ["m1"]}], "preferences": [
                {"text": "y", "evidence": ["m9"]}]},
            0.5,
            r"1 of 2 item\(s\) cite outside the evidence: \['m9'\] not in state.evidence",
        ),
        ({"profile": [{"text": "x"}, "loose"]}, 0.0, "an item without an evidence list"),
    ],
)  # fmt: skip
def test_cites_evidence_gives_credit_per_item(view: Any, score: float, why: str) -> None:
    task = suite_for_skill("nomemory-recall").tasks[0]
    outcome = _outcome({"memory_view": view, "evidence": EVIDENCE})
    result = build_grader("cites_evidence", {}).evaluate(GradeContext(task, outcome))
    assert result.score == score and result.passed is (score == 1.0)
    assert re.search(why, result.rationale), result.rationale


def test_cites_evidence_reads_other_paths_and_refuses_unknown_keys() -> None:
    task = suite_for_skill("nomemory-recall").tasks[0]
    state = {"view": {"a": [{"evidence": ["m2"]}]}, "shown": EVIDENCE[1:]}
    grader = build_grader("cites_evidence", {"view": "state.view", "evidence": "state.shown"})
    assert grader.evaluate(GradeContext(task, _outcome(state))).passed is True
    moved = replace(_outcome(state), state={**state, "shown": []})
    assert grader.evaluate(GradeContext(task, moved)).passed is False
    with pytest.raises(EvalConfigError, match=r"unknown config key.*views"):
        build_grader("cites_evidence", {"views": "state.view"})


# -- the cases stay out of the prompts -------------------------------------------------------------
def _word_runs(text: str, n: int = 4) -> set[tuple[str, ...]]:
    """The runs of ``n`` words in ``text`` (each CJK character counts as a word)."""
    words = re.findall(r"[\u3400-\u9fff]|[^\W_]+", text.lower())
    return set(zip(*(words[i:] for i in range(n)), strict=False))


def _case_texts(value: Any, key: str = "") -> list[str]:
    """The free text of a case's input; record ids (``fact_id``) are shared structure."""
    if isinstance(value, str):
        return [] if key.endswith("_id") else [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _case_texts(v, str(k))]
    if isinstance(value, list):
        return [s for v in value for s in _case_texts(v, key)]
    return []


@pytest.mark.parametrize(
    "skill", sorted(p.parent.name for p in builtin_skills_dir().glob("*/cases.yaml"))
)
def test_no_case_text_is_in_what_the_model_reads(skill: str) -> None:
    """A skill that quotes its eval cases in SKILL.md, a reference or a worked example passes
    them by rote: no run of four words of any case's input may appear there."""
    bundle = builtin_skills_dir() / skill
    read = [
        bundle / "SKILL.md",
        bundle / EXAMPLES_FILE,
        *sorted((bundle / "references").glob("*")),
    ]
    prompt = _word_runs("\n".join(p.read_text("utf-8") for p in read if p.is_file()))
    cases = yaml.safe_load((bundle / "cases.yaml").read_text("utf-8"))
    quoted: dict[str, list[str]] = {}
    for case in cases:
        runs = set().union(*(_word_runs(text) for text in _case_texts(case["input"])))
        if runs & prompt:
            quoted[case["id"]] = sorted(" ".join(run) for run in runs & prompt)
    assert not quoted, quoted
