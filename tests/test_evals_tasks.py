"""L2: eval tasks (the seed's JSON examples verbatim), suites, fixtures and bucket promotion."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
import yaml
from conftest import SEED_CARD, SEED_PKM, write_bundle
from typer.testing import CliRunner

from skilldeck.cli import app
from skilldeck.errors import EvalConfigError
from skilldeck.evals import load_suite, load_tasks, promote, suite_for_skill, task_from_dict
from skilldeck.evals.suites import skill_suite_path

pytestmark = pytest.mark.L2


def test_the_seed_examples_load_verbatim(tmp_path: Path) -> None:
    (tmp_path / "card.json").write_text(SEED_CARD, "utf-8")
    (card,) = load_tasks(tmp_path / "card.json", skill="card-agent")
    assert card.id == "card_event_meeting_with_time"
    assert card.input == json.loads(SEED_CARD)["input"]
    assert [g.name for g in card.graders] == [
        "card_completion",
        "card_template_choice",
        "card_must_contain",
    ]
    assert card.graders[1].config == {"expected_template_ids": ["event"]}
    assert (card.bucket, card.skill, card.base_fixture, card.matter) == (
        "default",
        "card-agent",
        None,
        True,
    )
    pkm = task_from_dict(json.loads(SEED_PKM))
    assert pkm.base_fixture == "_starter_pkm"
    assert pkm.input == {"content": "Slept 5.5h, energy crashed at 2pm..."}  # fixture popped
    assert len(pkm.graders) == 5


def test_harness_keys_leave_the_run_input() -> None:
    task = task_from_dict(
        {
            "id": "t",
            "bucket": "positive",
            "base_fixture": "_fresh",
            "input": {
                "context": "matter",
                "user_id": "u1",
                "answers": [{"a": 1}, {"b": 2}],
                "documents": ["complaint.txt"],
            },
            "graders": [{"name": "card_completion"}],
        }
    )
    assert task.input == {"documents": ["complaint.txt"]}
    assert (task.context, task.user_id, task.answers) == ("matter", "u1", ({"a": 1}, {"b": 2}))
    assert (task.base_fixture, task.fixture_optional, task.bucket) == ("_fresh", False, "positive")
    named = task_from_dict({"id": "m", "input": {"matter_id": "demo"}, "graders": [
        {"name": "card_completion"}]})  # fmt: skip
    assert (named.base_fixture, named.fixture_optional, named.matter) == ("demo", True, True)
    none = task_from_dict({"id": "n", "input": {"matter_id": None}, "graders": [
        {"name": "card_completion"}]})  # fmt: skip
    assert none.matter is False


def test_task_files_hold_a_list_or_tasks_key(tmp_path: Path) -> None:
    tasks = [json.loads(SEED_CARD), {**json.loads(SEED_CARD), "id": "second"}]
    (tmp_path / "list.yaml").write_text(yaml.safe_dump(tasks), "utf-8")
    (tmp_path / "wrapped.json").write_text(json.dumps({"tasks": tasks}), "utf-8")
    for name in ("list.yaml", "wrapped.json"):
        loaded = load_tasks(tmp_path / name)
        assert [t.id for t in loaded] == ["card_event_meeting_with_time", "second"]
        assert all(t.source == tmp_path / name for t in loaded)


GOOD = {"id": "t", "input": {}, "graders": [{"name": "card_completion"}]}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (["x"], "a task must be a mapping"),
        ({**GOOD, "id": ""}, "id must be a non-empty string"),
        ({**GOOD, "grader": []}, "unknown key(s) grader; a task has id, bucket"),
        ({**GOOD, "input": "text"}, "input must be a mapping"),
        ({**GOOD, "graders": []}, "graders must be a non-empty list"),
        ({**GOOD, "graders": [{"name": "card_completion", "cfg": {}}]}, "unknown key(s) cfg"),
        ({**GOOD, "graders": [{"name": "must_contain", "config": {}}]},
         "task (t): graders[0]: grader 'must_contain': config.substrings: is required"),
        ({**GOOD, "input": {"answers": "yes"}}, "input.answers must map field_key"),
        ({**GOOD, "input": {"matter_id": 3}}, "input.matter_id must be a string or null"),
        ({**GOOD, "base_fixture": "a", "input": {"base_fixture": "b"}},
         "base_fixture is given twice"),
        ({**GOOD, "bucket": 3}, "bucket must be a non-empty string"),
        ({**GOOD, "base_fixture": "../../.."}, "must name a folder beside the cases"),
        ({**GOOD, "input": {"base_fixture": "/etc"}}, "must name a folder beside the cases"),
        ({**GOOD, "base_fixture": "a/../b"}, "not a path"),
        ({**GOOD, "base_fixture": ".."}, "not a path"),
        ({**GOOD, "id": "../../victim"}, "no '/', no '..'"),
        ({**GOOD, "id": ".."}, "no '/', no '..'"),
    ],
)  # fmt: skip
def test_bad_tasks_are_clear_errors(raw: object, message: str) -> None:
    with pytest.raises(EvalConfigError) as info:
        task_from_dict(raw)
    assert message in str(info.value)


def test_bad_task_files(tmp_path: Path) -> None:
    with pytest.raises(EvalConfigError, match="does not exist"):
        load_tasks(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("- id: [", "utf-8")
    with pytest.raises(EvalConfigError, match="invalid YAML"):
        load_tasks(tmp_path / "bad.yaml")
    (tmp_path / "dup.yaml").write_text(yaml.safe_dump([GOOD, GOOD]), "utf-8")
    with pytest.raises(EvalConfigError, match="task id 't' is used twice"):
        load_tasks(tmp_path / "dup.yaml")
    (tmp_path / "empty.yaml").write_text("[]", "utf-8")
    with pytest.raises(EvalConfigError, match="expected a task"):
        load_tasks(tmp_path / "empty.yaml")
    (tmp_path / "twice.yaml").write_text("id: t\nid: u\ninput: {}\n", "utf-8")
    with pytest.raises(EvalConfigError, match="duplicate key 'id' \\(line 2\\)"):
        load_tasks(tmp_path / "twice.yaml")
    # A few hundred bytes of nested aliases that would expand to 9^9 values.
    names = "abcdefghi"
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in pairwise(names)
    ]
    (tmp_path / "bomb.yaml").write_text("\n".join(levels) + "\n", "utf-8")
    assert (tmp_path / "bomb.yaml").stat().st_size < 700
    with pytest.raises(EvalConfigError, match="alias bomb"):
        load_tasks(tmp_path / "bomb.yaml")


# -- suites -------------------------------------------------------------------------------------
def cases(*tasks: dict[str, object]) -> str:
    return yaml.safe_dump([{"graders": [{"name": "card_completion"}], "input": {}, **t}
                           for t in tasks])  # fmt: skip


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    one = write_bundle(root, "one")
    (one / "cases.yaml").write_text(
        cases(
            {"id": "a", "bucket": "positive", "base_fixture": "_ws"},
            {"id": "b", "bucket": "negative"},
            {"id": "c", "bucket": "positive", "input": {"matter_id": "nowhere"}},
        ),
        "utf-8",
    )
    (one / "fixtures" / "_ws").mkdir(parents=True)
    (one / "fixtures" / "_ws" / "note.md").write_text("hello", "utf-8")
    write_bundle(root, "two")
    return root


def test_a_skill_suite_finds_cases_and_fixtures(skills: Path) -> None:
    suite = suite_for_skill("one", [skills])
    assert [t.id for t in suite.tasks] == ["a", "b", "c"]
    assert suite.buckets() == ["one/negative", "one/positive"]
    assert [b.name for b in suite.bundles] == ["one"]
    a, b, c = suite.tasks
    assert suite.fixture(a) == skills / "one" / "fixtures" / "_ws"
    assert suite.fixture(b) is None
    assert suite.fixture(c) is None  # a matter_id that names no fixture: an empty workspace
    assert suite.kind("one/positive") == "capability"


def test_suite_files_and_errors(skills: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text(cases({"id": "x", "base_fixture": "_shared"}), "utf-8")
    (tmp_path / "shared" / "_shared").mkdir(parents=True)
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(
        yaml.safe_dump(
            {
                "name": "mine",
                "skills": ["one"],
                "skills_path": "skills",
                "tasks": [{"file": "extra.yaml", "skill": "two"}],
                "fixtures": ["shared"],
                "kinds": {"positive": "regression"},
            }
        ),
        "utf-8",
    )
    suite = load_suite(suite_file)
    assert [t.id for t in suite.tasks] == ["a", "b", "c", "x"]
    assert suite.fixture(suite.tasks[-1]) == tmp_path / "shared" / "_shared"
    assert (suite.kind("one/positive"), suite.kind("one/negative")) == ("regression", "capability")
    suite_file.write_text(yaml.safe_dump({"skills": ["three"], "skills_path": "skills"}), "utf-8")
    with pytest.raises(EvalConfigError, match="no skill 'three'; found: one, two"):
        load_suite(suite_file)
    suite_file.write_text(yaml.safe_dump({"skills": ["two"], "skills_path": "skills"}), "utf-8")
    with pytest.raises(EvalConfigError, match=r"skill 'two' has no cases\.yaml"):
        load_suite(suite_file)
    suite_file.write_text(yaml.safe_dump({"skills": ["one"], "kinds": {"a": "gate"}}), "utf-8")
    with pytest.raises(EvalConfigError, match="kinds must map buckets to capability or regression"):
        load_suite(suite_file)
    suite_file.write_text(yaml.safe_dump({"skill": ["one"]}), "utf-8")
    with pytest.raises(EvalConfigError, match="unknown key"):
        load_suite(suite_file)


def test_a_missing_fixture_fails_before_anything_runs(skills: Path) -> None:
    (skills / "one" / "cases.yaml").write_text(cases({"id": "a", "base_fixture": "_gone"}), "utf-8")
    with pytest.raises(EvalConfigError, match=r"base fixture '_gone' not found in .*create"):
        suite_for_skill("one", [skills])


def test_promote_records_the_bucket_in_the_skill_suite_file(skills: Path) -> None:
    suite = suite_for_skill("one", [skills])
    target = skill_suite_path(suite.bundle("one"))
    assert promote("one/positive", target, suite.buckets()) is True
    assert yaml.safe_load(target.read_text("utf-8")) == {"kinds": {"one/positive": "regression"}}
    assert promote("one/positive", target, suite.buckets()) is False
    again = suite_for_skill("one", [skills])  # the skill's own suite file is read back
    assert again.kind("one/positive") == "regression"
    assert [t.id for t in again.tasks] == ["a", "b", "c"]
    with pytest.raises(EvalConfigError, match="no bucket 'one/other' in the suite; buckets: "):
        promote("one/other", target, suite.buckets())


def test_promote_through_the_cli(skills: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app, ["eval", "promote", "one/negative", "--skills", str(skills), "--json"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["changed"] is True
    assert Path(body["suite_file"]) == skills / "one" / "evals" / "suite.yaml"
    bare = runner.invoke(app, ["eval", "promote", "negative", "--skills", str(skills)])
    assert bare.exit_code == 2
    assert "give SKILL/BUCKET, or --suite FILE" in bare.output
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(yaml.safe_dump({"skills": ["one"], "skills_path": "skills"}), "utf-8")
    ok = runner.invoke(app, ["eval", "promote", "positive", "--suite", str(suite_file)])
    assert ok.exit_code == 0, ok.output
    assert yaml.safe_load(suite_file.read_text("utf-8"))["kinds"] == {"positive": "regression"}
