"""Seed 004's ``matters__*`` tools: a matter's record (title, status, the fields skills write),
read with ``matters__get`` and merged with ``matters__update`` under the rules of the file tools
(the skill's allowlist, the run's matter bound by the runtime, the run's user owning it), on
SQLite and PostgreSQL, and shown by ``skilldeck matters show``."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from conftest import output, write_bundle
from fastapi.testclient import TestClient
from langchain_core.messages import ToolMessage
from typer.testing import CliRunner

from skilldeck import Settings, SkillDeck
from skilldeck.checkpoints import open_persistence
from skilldeck.checkpoints.threads import BLANK_RECORD
from skilldeck.cli import app as cli
from skilldeck.errors import BundleError, MatterRequiredError, SkillDeckError
from skilldeck.nodes import transcript
from skilldeck.nodes.prompt import render_system
from skilldeck.server import create_app, hash_key
from skilldeck.skills import load_skills
from skilldeck.tools import ToolRegistry, default_registry
from skilldeck.tools.matters import MAX_RECORD_BYTES

pytestmark = pytest.mark.L2

KEYS = {"alice": "sdk_alice_matters_key_0000", "bob": "sdk_bob_matters_key_11111"}
HASHES = {hash_key(k): u for u, k in KEYS.items()}
#: What the ``keeper`` skill may write of its matter's record.
WRITES = ["matter.status", "matter.parties", "matter.intake.summary"]


def keeper(skills: Path, **meta: Any) -> Path:
    """A skill that reads and writes its matter's record."""
    return write_bundle(
        skills,
        "keeper",
        meta={
            "triggers": {"contexts": ["matter"]},
            "tools": ["matters__get", "matters__update"],
            "outputs": {"matter": WRITES},
            **meta,
        },
    )


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def turn(*calls: dict[str, Any]) -> dict[str, Any]:
    """One model turn that makes ``calls``, in order."""
    return {"tool_calls": list(calls)}


#: The keeper's turns: read; write its fields, then fields it may not write. (Each update
#: answers with the record it left: the runtime does not run a call that repeats one that
#: worked, so a second matters__get would not.)
TURNS = [
    turn(call("matters__get")),
    turn(
        call("matters__update", fields={"status": "intake_done", "parties": {"plaintiff": "Jane"}}),
        call("matters__update", fields={"intake": {"summary": "A contract dispute."}}),
        call("matters__update", fields={"title": "Hijacked", "status": "closed"}),
        call("matters__update", fields={"intake": "flattened"}),
    ),
    output(data={"note": "recorded"}),
]


def deck_for(
    tmp_path: Path, skills: Path, url: str, turns: list[Any], **settings: Any
) -> SkillDeck:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"skills": {"keeper": turns}}), "utf-8")
    return SkillDeck(
        skills, checkpointer=url, settings=Settings(model=f"scripted:{script}", **settings)
    )


def tool_results(deck: SkillDeck, state: dict[str, Any]) -> list[tuple[str, str]]:
    """``(status, content)`` of each tool call of the run's last attempt."""
    attempt = state["attempt"]
    messages = transcript.read(deck.store, attempt["turn"], attempt["head"])
    contents = [m.content for m in messages if isinstance(m, ToolMessage)]
    return list(zip([c["status"] for c in attempt["tool_calls"]], contents, strict=True))


# -- a skill reads and updates its matter -----------------------------------------------------


def test_a_skill_reads_and_merges_into_its_matter_record(
    tmp_path: Path, skills_dir: Path, database_url: str
) -> None:
    keeper(skills_dir)
    with deck_for(tmp_path, skills_dir, database_url, TURNS) as deck:
        assert deck.index.add_matter("m-1", "alice")
        deck.index.update_matter_record("m-1", lambda r: {**r, "title": "Doe v Acme"})
        result = deck.run({"note": "go"}, context="matter", user_id="alice", matter_id="m-1")
        assert result.status == "finished", result.error
        calls = tool_results(deck, {**result.state, "thread_id": result.thread_id})
        record = deck.index.matter_record("m-1")

    assert [status for status, _ in calls] == ["ok", "ok", "ok", "error", "error"], calls
    assert json.loads(calls[0][1]) == {"title": "Doe v Acme", "status": "open"}
    assert set(json.loads(calls[1][1])["written"]) == {"matter.status", "matter.parties"}
    expected = {
        "title": "Doe v Acme",
        "status": "intake_done",
        "parties": {"plaintiff": "Jane"},
        "intake": {"summary": "A contract dispute."},
    }
    assert json.loads(calls[2][1]) == {"written": ["matter.intake.summary"], "record": expected}
    # A write outside outputs.matter names what was refused and what the skill may write.
    assert "may not write matter.title" in calls[3][1] and "matter.status" in calls[3][1]
    assert "Nothing was written" in calls[3][1]
    # Above a declared field only an object may go (a string would replace the whole of it).
    assert "may not write matter.intake;" in calls[4][1]
    # The refused calls changed nothing: not even the declared status of the mixed write.
    assert record == expected


def test_the_model_never_names_the_matter(tmp_path: Path, skills_dir: Path) -> None:
    keeper(skills_dir)
    turns = [
        turn(
            call("matters__update", fields={"status": "x"}, matter_id="m-bob"),
            call("matters__get", matter_id="m-bob"),
        ),
        output(),
    ]
    registry = default_registry(None, matters=lambda: None)  # type: ignore[arg-type, return-value]
    for name in ("matters__get", "matters__update"):
        shown = registry.arguments_schema(name).get("properties", {})
        assert not set(shown) & {"user_id", "matter_id", "skill", "matter_fields"}, shown
        assert {"user_id", "matter_id"} <= registry.identity_params(name)
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    with deck_for(tmp_path, skills_dir, url, turns) as deck:
        deck.index.add_matter("m-bob", "bob")
        result = deck.run(context="matter", user_id="alice", matter_id="m-alice")
        calls = tool_results(deck, {**result.state, "thread_id": result.thread_id})
        assert deck.index.matter_record("m-bob") == dict(BLANK_RECORD)
    assert [s for s, _ in calls] == ["error", "error"]
    assert all("bound by the runtime" in text for _, text in calls)


def test_a_run_in_another_users_matter_changes_nothing(
    tmp_path: Path, skills_dir: Path, database_url: str
) -> None:
    """The service refuses the matter (404, as if unknown); a run that reaches the tools some
    other way (the Python API, LangGraph's server) is refused by the tools themselves."""
    keeper(skills_dir)
    turns = [
        turn(call("matters__get"), call("matters__update", fields={"status": "stolen"})),
        output(),
    ]
    with deck_for(tmp_path, skills_dir, database_url, turns) as deck:
        deck.index.add_matter("m-1", "alice")
        deck.index.update_matter_record("m-1", lambda r: {**r, "title": "Secret title"})
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            thread = client.post("/threads", headers=auth("bob")).json()["thread_id"]
            body = {"input": {"note": "x"}, "context": "matter", "matter_id": "m-1"}
            refused = client.post(f"/threads/{thread}/runs", headers=auth("bob"), json=body)
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "MATTER_NOT_FOUND"
        assert "Secret title" not in refused.text

        result = deck.run(context="matter", user_id="bob", matter_id="m-1")
        assert result.status == "finished", result.error
        calls = tool_results(deck, {**result.state, "thread_id": result.thread_id})
        assert [s for s, _ in calls] == ["error", "error"]
        assert all("matter 'm-1' not found for user 'bob'" in text for _, text in calls)
        assert not any("Secret title" in text for _, text in calls)
        assert deck.index.matter_record("m-1") == {"title": "Secret title", "status": "open"}

        # Granted, bob may: the same rule as the service's.
        deck.index.grant("m-1", "bob")
        again = deck_for(tmp_path, skills_dir, database_url, turns)
        with again:
            again.run(context="matter", user_id="bob", matter_id="m-1")
        assert deck.index.matter_record("m-1") == {"title": "Secret title", "status": "stolen"}


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[user]}"}


@pytest.mark.parametrize(
    ("policy", "claimed"), [("claim", True), ("granted", False)], ids=["claim", "granted"]
)
def test_the_tools_follow_the_matter_policy(
    tmp_path: Path, skills_dir: Path, policy: str, claimed: bool
) -> None:
    keeper(skills_dir)
    turns = [turn(call("matters__update", fields={"status": "new"})), output()]
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    with deck_for(tmp_path, skills_dir, url, turns, matter_policy=policy) as deck:
        result = deck.run(context="matter", user_id="ann", matter_id="fresh")
        status = result.state["attempt"]["tool_calls"][0]["status"]
        assert status == ("ok" if claimed else "error")
        assert deck.index.matter("fresh") == (("ann", ()) if claimed else None)


def test_the_tools_need_a_user_and_a_matter(tmp_path: Path, skills_dir: Path) -> None:
    keeper(skills_dir)
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    with deck_for(tmp_path, skills_dir, url, [turn(call("matters__get")), output()]) as deck:
        with pytest.raises(MatterRequiredError, match="keeper"):
            deck.run(context="matter", user_id="ann")
        result = deck.run(context="matter", matter_id="m-1")
        calls = tool_results(deck, {**result.state, "thread_id": result.thread_id})
        assert calls[0][0] == "error" and "need the run's user" in calls[0][1]
        assert deck.index.matter("m-1") is None  # nobody claimed it
        # A record lives in the checkpoint database, not in the files root.
        assert deck.matter_skills() == ["keeper"] and deck.matter_skills(files=True) == []


# -- the tool's own checks ------------------------------------------------------------------


class _Records:
    """The thread index of a memory database, for the tool alone."""

    def __init__(self) -> None:
        self.persistence = open_persistence("memory://")
        self.index = self.persistence.threads
        self.index.add_matter("m", "ann")


@pytest.fixture
def matters_registry() -> Any:
    records = _Records()
    yield default_registry(None, matters=lambda: records.index), records.index
    records.persistence.close()


IDENTITY = {"user_id": "ann", "matter_id": "m", "skill": "s", "matter_fields": tuple(WRITES)}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([1, 2], "fields must be a non-empty JSON object"),
        ("status", "fields must be a non-empty JSON object"),
        ({}, "fields must be a non-empty JSON object"),
        ({"Status": "x"}, "may not write matter.Status"),
        ({"intake": {"summary": "x", "judge": "y"}}, "may not write matter.intake.judge"),
        ({"intake": {}}, "may not write matter.intake;"),
        ({"status": "x" * MAX_RECORD_BYTES}, "at most 65,536 are kept"),
    ],
    ids=["list", "string", "empty", "case", "sibling", "empty-parent", "too-large"],
)
def test_a_bad_update_is_a_clear_error_and_writes_nothing(
    matters_registry: tuple[ToolRegistry, Any], fields: Any, message: str
) -> None:
    registry, index = matters_registry
    before = index.matter_record("m")
    result = registry.invoke("matters__update", {"fields": fields}, IDENTITY)
    assert not result.ok and message in result.content, result.content
    assert index.matter_record("m") == before


def test_an_update_needs_the_skills_declaration(
    matters_registry: tuple[ToolRegistry, Any],
) -> None:
    registry, _ = matters_registry
    args = {"fields": {"status": "x"}}
    unbound = registry.invoke("matters__update", args, {**IDENTITY, "skill": None})
    assert "no skill is bound" in unbound.content
    undeclared = registry.invoke("matters__update", args, {**IDENTITY, "matter_fields": ()})
    assert "declares no matter fields" in undeclared.content and "outputs" in undeclared.content


def test_a_write_below_a_declared_field_merges(matters_registry: tuple[ToolRegistry, Any]) -> None:
    registry, index = matters_registry
    for fields in ({"parties": {"plaintiff": "Jane"}}, {"parties": {"defendant": "Acme"}}):
        assert registry.invoke("matters__update", {"fields": fields}, IDENTITY).ok
    assert index.matter_record("m")["parties"] == {"plaintiff": "Jane", "defendant": "Acme"}


# -- the store ------------------------------------------------------------------------------


def test_records_survive_reopening_and_older_databases_get_the_table(
    database_url: str,
) -> None:
    persistence = open_persistence(database_url)
    try:
        index = persistence.threads
        assert index.matter_record("m") is None  # nobody owns it
        index.add_matter("m", "ann")
        assert index.matter_record("m") == dict(BLANK_RECORD)
        with pytest.raises(SkillDeckError, match="no matter 'other'"):
            index.update_matter_record("other", lambda r: r)
        index.update_matter_record("m", lambda r: {**r, "status": "closed"})
        with pytest.raises(RuntimeError):  # a failing change rolls back
            index.update_matter_record("m", _explode)
    finally:
        persistence.close()
    _drop_records(database_url)
    reopened = open_persistence(database_url)
    try:
        assert reopened.threads.matter_record("m") == dict(BLANK_RECORD)
        reopened.threads.update_matter_record("m", lambda r: {**r, "title": "T"})
        assert reopened.threads.matter_record("m") == {"title": "T", "status": "open"}
    finally:
        reopened.close()


def _explode(record: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("refused")


def _drop_records(url: str) -> None:
    """Make the database at ``url`` one from before records: its matters, no records table."""
    stored = "SELECT record FROM skilldeck_matter_records"
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            assert conn.execute(stored).fetchall() == [('{"title": null, "status": "closed"}',)]
            conn.execute("DROP TABLE skilldeck_matter_records")
            conn.commit()
        finally:
            conn.close()
        return
    with psycopg.connect(url, autocommit=True) as pg:
        assert pg.execute(stored).fetchall() == [('{"title": null, "status": "closed"}',)]
        pg.execute("DROP TABLE skilldeck_matter_records")


WRITER = """
import sys, time
from skilldeck.checkpoints import open_persistence

url, who = sys.argv[1], sys.argv[2]
persistence = open_persistence(url)
for i in range(15):
    def change(record, i=i):
        time.sleep(0.01)  # between the read and the write: a lost update would show
        return {**record, f"{who}{i}": i}
    persistence.threads.update_matter_record("m", change)
persistence.close()
"""


@pytest.mark.subprocess
def test_concurrent_writers_in_two_processes_lose_no_field(database_url: str) -> None:
    persistence = open_persistence(database_url)
    persistence.threads.add_matter("m", "ann")
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, database_url, who], text=True)
        for who in ("a", "b")
    ]
    try:
        assert [w.wait(timeout=120) for w in writers] == [0, 0]
    finally:
        for w in writers:
            w.kill()
    try:
        record = persistence.threads.matter_record("m")
    finally:
        persistence.close()
    assert record is not None
    assert {k for k in record if k[0] in "ab"} == {f"{w}{i}" for w in "ab" for i in range(15)}


# -- loading --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("meta", "where", "message"),
    [
        ({"outputs": {"matter": ["status"]}}, "$.outputs.matter[0]", "a dot path under matter"),
        ({"outputs": {"matter": ["matter"]}}, "$.outputs.matter[0]", "a dot path under matter"),
        ({"outputs": {"matter": ["matter.a-b"]}}, "$.outputs.matter[0]", "dot path"),
        ({"tools": ["matters__get"]}, "$.outputs.matter", "add 'matters__update' to tools"),
        (
            {"tools": ["matters__update"], "outputs": {}},
            "$.tools[0]",
            "it declares none",
        ),
        (
            {"execution_config": {"mode": "planner"}},
            "$.outputs.matter",
            "single mode only",
        ),
    ],
    ids=["no-prefix", "bare", "bad-key", "no-tool", "nothing-declared", "planner"],
)
def test_the_loader_refuses_a_wrong_matter_declaration(
    skills_dir: Path, meta: dict[str, Any], where: str, message: str
) -> None:
    folder = keeper(skills_dir, **meta)
    with pytest.raises(BundleError) as caught:
        load_skills(skills_dir)
    found = [p for p in caught.value.problems if p.json_path == where]
    assert found, caught.value.problems
    assert found[0].file == str(folder / "skill.meta.json")
    assert message in found[0].message


def test_the_prompt_names_the_fields_a_skill_may_write(skills_dir: Path) -> None:
    keeper(skills_dir)
    (bundle,) = load_skills(skills_dir)
    assert bundle.matter_fields == tuple(WRITES)
    system = render_system(bundle, output_mode="json").content
    assert "## Matter" in system and ", ".join(WRITES) in system


# -- the CLI --------------------------------------------------------------------------------


def test_matters_show_prints_the_record(tmp_path: Path, skills_dir: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(cli, ["matters", *args, "--checkpoint", url])

    added = invoke("add", "m-1", "--owner", "alice", "--title", "Doe v Acme")
    assert added.exit_code == 0, added.output
    assert invoke("add", "m-2", "--owner", "alice", "--title", " ").exit_code == 2
    keeper(skills_dir)
    with deck_for(tmp_path, skills_dir, url, TURNS) as deck:
        deck.index.grant("m-1", "bob")
        assert deck.run(context="matter", user_id="bob", matter_id="m-1").status == "finished"

    shown = invoke("show", "m-1", "--json")
    assert shown.exit_code == 0, shown.output
    body = json.loads(shown.stdout)
    assert body["owner"] == "alice" and body["granted"] == ["bob"]
    assert body["record"]["title"] == "Doe v Acme"
    assert body["record"]["status"] == "intake_done"
    assert body["record"]["intake"] == {"summary": "A contract dispute."}

    human = invoke("show", "m-1")
    assert human.exit_code == 0
    assert human.stdout.splitlines()[0] == "m-1\talice (also: bob)"
    assert json.loads(human.stdout.split("\n", 1)[1]) == body["record"]

    missing = invoke("show", "m-9", "--json")
    assert missing.exit_code == 2
    assert "no matter 'm-9'" in json.loads(missing.stdout)["error"]["message"]
