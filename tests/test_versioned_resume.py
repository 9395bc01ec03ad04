"""Versioned resume: a thread paused in a skill that changed since goes on only as the skill's
policy says (refuse, latest, or the bundle's scripts/migrate.py), never silently."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import output, write_bundle
from fastapi.testclient import TestClient

from skilldeck import Resume, Settings, SkillDeck
from skilldeck.errors import ErrorCode, SkillChangedError, UntrustedScriptsError
from skilldeck.server import create_app, hash_key
from skilldeck.server.errors import status_of

pytestmark = pytest.mark.L2

ASK = output(
    action="ask_user",
    review_type="clarify",
    questions=[{"question": "Note?", "field_key": "note", "input_type": "text", "required": True}],
)

#: The migration writes a line to its log each time it runs, and moves the old note.
MIGRATE = """
import json, pathlib

def migrate(state, old_fingerprint):
    log = pathlib.Path(__file__).parent.parent / "migrations.log"
    with log.open("a") as out:
        out.write(old_fingerprint + "\\n")
    return {"profile": {"migrated_from": old_fingerprint}, "tag": "v2"}
"""


@pytest.fixture
def paused(tmp_path: Path, database_url: str) -> dict[str, Any]:
    """A thread of skill ``asker`` (version 1) paused on its card; its skills folder, script
    and checkpoint URL, and the fingerprint of version 1."""
    skills = tmp_path / "skills"
    write_bundle(skills, "asker", data={"note": {"type": "string"}, "tag": {"type": "string"}})
    script = tmp_path / "turns.yaml"
    finish = output(data={"note": "done"})
    script.write_text(yaml.safe_dump({"skills": {"asker": [ASK, finish]}}), "utf-8")
    settings = Settings(model=f"scripted:{script}")
    with SkillDeck(skills, checkpointer=database_url, settings=settings, trust=True) as deck:
        result = deck.run(context="ctx")
        assert result.status == "interrupted"
        old = deck.bundles[0].fingerprint
    return {"skills": skills, "url": database_url, "thread": result.thread_id, "old": old,
            "script": script}  # fmt: skip


def change(skills: Path, *, meta: dict[str, Any] | None = None, migrate: str | None = None) -> None:
    """Version 2 of ``asker``: another SKILL.md (and the given meta and migration)."""
    write_bundle(
        skills,
        "asker",
        meta=meta,
        data={"note": {"type": "string"}, "tag": {"type": "string"}},
        skill_md="---\nname: asker\ndescription: test\n---\nDo asker, version 2.\n",
        scripts={"migrate": migrate} if migrate is not None else None,
    )


def deck(paused: dict[str, Any], *, trust: bool = True, **settings: Any) -> SkillDeck:
    return SkillDeck(
        paused["skills"],
        checkpointer=paused["url"],
        settings=Settings(model=f"scripted:{paused['script']}", **settings),
        trust=trust,
    )


def upgrades(deck: SkillDeck, thread: str) -> list[dict[str, Any]]:
    """The upgrades the thread's history rows show, oldest first."""
    return [row["upgrade"] for row in deck.history(thread) if row["upgrade"]]


def test_the_card_and_each_attempt_record_the_skills_fingerprint(paused: dict[str, Any]) -> None:
    with deck(paused) as same:
        state = same.get_thread(paused["thread"]).state
        assert state["card"]["fingerprint"] == paused["old"]
        assert state["attempt"]["fingerprint"] == paused["old"]
        assert same.run(Resume(paused["thread"], {"note": "hi"})).status == "finished"
        rows = same.history(paused["thread"])
        assert {r["fingerprint"] for r in rows if r["action"]} == {paused["old"]}
        assert [r["action"] for r in rows if r["action"]] == ["ask_user", "finish"]
        assert upgrades(same, paused["thread"]) == []


def test_a_changed_skill_is_refused_by_default_and_nothing_changes(
    paused: dict[str, Any],
) -> None:
    change(paused["skills"])
    with deck(paused) as changed:
        new = changed.bundles[0].fingerprint
        assert new != paused["old"]
        before = changed.get_thread(paused["thread"])
        with pytest.raises(SkillChangedError) as refused:
            changed.run(Resume(paused["thread"], {"note": "hi"}))
        message = str(refused.value)
        assert "'asker'" in message and paused["old"] in message and new in message
        assert "SKILLDECK_CHANGED_SKILL" in message and "on_change" in message
        assert refused.value.code == ErrorCode.SKILL_CHANGED
        assert status_of(refused.value) == 409
        body = refused.value.to_dict()
        assert (body["skill"], body["old"], body["new"]) == ("asker", paused["old"], new)
        after = changed.get_thread(paused["thread"])
        assert after.status == "interrupted"
        assert after.checkpoint_id == before.checkpoint_id
        assert after.state == before.state


def test_over_http_a_changed_skill_answers_409_skill_changed_and_nothing_changes(
    paused: dict[str, Any],
) -> None:
    key = "sdk_versioned_resume_key_0123456789"
    auth = {"Authorization": f"Bearer {key}"}
    with deck(paused) as same:  # a thread of alice's, paused on version 1's card
        thread = same.run(context="ctx", user_id="alice").thread_id
    change(paused["skills"])
    with (
        deck(paused) as changed,
        TestClient(create_app(changed, api_keys={hash_key(key): "alice"})) as http,
    ):
        before = http.get(f"/threads/{thread}", headers=auth).json()
        assert before["status"] == "interrupted"
        body = {"answers": {"note": "hi"}, "interrupt_id": before["card"]["interrupt_id"]}
        response = http.post(f"/threads/{thread}/resume", headers=auth, json=body)
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["code"] == "SKILL_CHANGED"
        assert (error["skill"], error["old"], error["new"]) == (
            "asker", paused["old"], changed.bundles[0].fingerprint,
        )  # fmt: skip
        assert "SKILLDECK_CHANGED_SKILL" in error["message"]
        after = http.get(f"/threads/{thread}", headers=auth).json()
        assert after == before  # nothing written: the card still waits for the same answer


def test_latest_runs_the_new_version_and_the_history_records_it(paused: dict[str, Any]) -> None:
    change(paused["skills"])
    with deck(paused, changed_skill="latest") as changed:
        new = changed.bundles[0].fingerprint
        result = changed.run(Resume(paused["thread"], {"note": "hi"}))
        assert result.status == "finished"
        assert result.state["attempt"]["fingerprint"] == new
        assert upgrades(changed, paused["thread"]) == [
            {"skill": "asker", "policy": "latest", "old": paused["old"], "new": new}
        ]


def test_a_skills_own_policy_comes_before_the_decks(paused: dict[str, Any]) -> None:
    change(paused["skills"], meta={"on_change": "refuse"})
    with (
        deck(paused, changed_skill="latest") as changed,
        pytest.raises(SkillChangedError, match=r"its skill\.meta\.json"),
    ):
        changed.run(Resume(paused["thread"], {"note": "hi"}))


def test_migrate_runs_the_bundles_migration_once_and_applies_its_update(
    paused: dict[str, Any],
) -> None:
    change(paused["skills"], meta={"on_change": "migrate"}, migrate=MIGRATE)
    with deck(paused) as changed:
        new = changed.bundles[0].fingerprint
        result = changed.run(Resume(paused["thread"], {"note": "hi"}))
        assert result.status == "finished"
        log = paused["skills"] / "asker" / "migrations.log"
        assert log.read_text("utf-8").splitlines() == [paused["old"]]
        assert result.state["profile"]["migrated_from"] == paused["old"]
        assert result.state["tag"] == "v2"
        assert upgrades(changed, paused["thread"]) == [
            {"skill": "asker", "policy": "migrate", "old": paused["old"], "new": new}
        ]


def test_an_untrusted_bundles_migration_is_refused_and_never_runs(
    paused: dict[str, Any],
) -> None:
    change(paused["skills"], meta={"on_change": "migrate"}, migrate=MIGRATE)
    with deck(paused, trust=False) as changed:
        before = changed.get_thread(paused["thread"])
        with pytest.raises(UntrustedScriptsError, match=r"scripts/migrate\.py"):
            changed.run(Resume(paused["thread"], {"note": "hi"}))
        assert not (paused["skills"] / "asker" / "migrations.log").exists()
        assert changed.get_thread(paused["thread"]).checkpoint_id == before.checkpoint_id


@pytest.mark.parametrize(
    ("migrate", "reason"),
    [
        (None, "has no scripts/migrate.py"),
        ("def migrate(state, old):\n    return {'status': 'finished'}\n", "may not write"),
        ("def migrate(state, old):\n    raise ValueError('no')\n", "failed"),
    ],
)
def test_a_migration_that_cannot_be_made_is_refused(
    paused: dict[str, Any], migrate: str | None, reason: str
) -> None:
    change(paused["skills"], meta={"on_change": "migrate"}, migrate=migrate)
    with deck(paused) as changed:
        before = changed.get_thread(paused["thread"])
        with pytest.raises(SkillChangedError, match=reason):
            changed.run(Resume(paused["thread"], {"note": "hi"}))
        assert changed.get_thread(paused["thread"]).checkpoint_id == before.checkpoint_id


def test_an_edited_script_changes_the_fingerprint(tmp_path: Path) -> None:
    """New code is a new version: a run script's bytes are part of the fingerprint."""
    fingerprints = []
    for body in ("return None", "return {}"):
        folder = write_bundle(
            tmp_path, "s", scripts={"preprocess": f"def preprocess(state):\n    {body}\n"}
        )
        with SkillDeck(folder, checkpointer="memory://", trust=True) as one:
            fingerprints.append(one.bundles[0].fingerprint)
    assert fingerprints[0] != fingerprints[1]
    assert json.dumps(fingerprints)  # plain strings


def test_a_run_cut_off_inside_a_changed_skill_continues_only_as_its_policy_says(
    tmp_path: Path,
) -> None:
    """A process died in the middle of a turn (after a tool round); the skill was redeployed
    since. Continuing the thread is refused by default, and nothing changes; with ``latest``
    the new version finishes the turn and the history says so."""
    from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT

    from skilldeck import Continue
    from skilldeck.skills import builtin_skills_dir

    skills = tmp_path / "skills"
    shutil.copytree(builtin_skills_dir() / "litigation-intake", skills / "litigation-intake")
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    run = {"context": "matter", "matter_id": "demo-matter", "user_id": "u"}

    def open_deck(**settings: Any) -> SkillDeck:
        chosen = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), **settings)
        return SkillDeck(skills, checkpointer=url, settings=chosen, trust=True)

    with open_deck() as first:
        events = first.stream({"documents": ["complaint.txt"]}, thread_id="t", **run)
        for _, _ in zip(range(3), events, strict=False):  # into the turn's tool rounds
            pass
        events.close()  # as a process that died: the turn is in flight
        assert first.get_thread("t").state["turn"] is not None
        old = first.bundles[0].fingerprint
    skill_md = skills / "litigation-intake" / "SKILL.md"
    skill_md.write_text(skill_md.read_text("utf-8") + "\nVersion 2.\n", "utf-8")
    with open_deck() as changed:
        before = changed.get_thread("t")
        with pytest.raises(SkillChangedError) as refused:
            changed.run(Continue("t"))
        assert old in str(refused.value) and changed.bundles[0].fingerprint in str(refused.value)
        assert changed.get_thread("t").checkpoint_id == before.checkpoint_id
    with open_deck(changed_skill="latest") as latest:
        new = latest.bundles[0].fingerprint
        paused = latest.run(Continue("t"))
        assert paused.status == "interrupted", paused.error
        assert latest.run(Resume("t", DEMO_ANSWERS)).status == "finished"
        assert upgrades(latest, "t")[0] == {
            "skill": "litigation-intake",
            "policy": "latest",
            "old": old,
            "new": new,
        }
