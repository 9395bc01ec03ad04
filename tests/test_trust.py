"""A bundle's code runs only when the deck trusts the bundle (issue 32, finding 7).

Every script here writes a marker file when it is imported, with what it could read of the
environment: the markers say exactly which code ran. ``skilldeck check`` and loading never
import an untrusted bundle's scripts (nor start the commands of a ``mcp.json`` beside it); a
run, an eval or a ``rules`` model that would need them is refused, naming the bundle and how to
trust it; the built-in bundles, those ``skilldeck new`` writes (edited or not) and those the
host names are trusted, and a folder swapped in for a trusted one is not.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import output, write_bundle
from endpoint import serve, text
from typer.testing import CliRunner, Result

from skilldeck import Settings, SkillDeck
from skilldeck.check import check_skills
from skilldeck.cli import app
from skilldeck.errors import ThreadNotFoundError, UntrustedScriptsError
from skilldeck.evals.suites import suite_for_skill
from skilldeck.skills import builtin_skills_dir, load_skills
from skilldeck.skills.template import write_template
from skilldeck.skills.trust import MARKER

pytestmark = pytest.mark.L2

SECRET = "sk-test-trust-0123456789"


def _script(marker: Path, function: str) -> str:
    """A script that, once imported, has read the environment and written it to ``marker``."""
    bodies = {
        "validate": "def validate(output, state):\n    return 'continue'\n",
        "preprocess": "def preprocess(state):\n    return {'prepared': True}\n",
        "setup": "def setup(task, trial):\n    return None\n",
        "respond": "def respond(state, results):\n    return {'output': OUTPUT}\n",
    }
    finish = output(data={"note": "by rules"})["output"]
    return (
        f"import os, pathlib\nOUTPUT = {finish!r}\n"
        f"pathlib.Path({str(marker)!r}).write_text(os.environ.get('TRUST_TEST_KEY', 'none'))\n"
        f"{bodies[function]}"
    )


def _bundle(root: Path, name: str, markers: Path, **kwargs: Any) -> Path:
    """A bundle whose four scripts each leave ``markers/<name>.<script>`` when imported."""
    functions = {"validate": "validate", "preprocess": "preprocess"}
    functions |= {"eval_setup": "setup", "rules": "respond"}
    scripts = {s: _script(markers / f"{name}.{s}", f) for s, f in functions.items()}
    return write_bundle(root, name, scripts=scripts, **kwargs)


def _ran(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


@pytest.fixture
def markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder for the markers; the state home and a key-like variable of the test's."""
    monkeypatch.setenv("SKILLDECK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRUST_TEST_KEY", SECRET)
    monkeypatch.delenv("SKILLDECK_TRUSTED_SKILLS", raising=False)
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


def _cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def test_check_and_loading_never_import_an_untrusted_bundles_scripts(
    tmp_path: Path, markers: Path
) -> None:
    skills = tmp_path / "downloaded"
    good = _bundle(skills, "good", markers)
    broken = _bundle(skills, "broken", markers, meta={"priority": "high"})  # does not load
    report = check_skills(skills)
    assert _ran(markers) == []
    assert [b.name for b in report.bundles] == ["good"]
    for folder in (good, broken):
        (warning,) = [p for p in report.of(folder) if p.rule == "trust"]
        assert warning.severity == "warning"
        assert warning.message.startswith(
            "not imported: scripts/preprocess.py, scripts/validate.py, scripts/eval_setup.py, "
            "scripts/rules.py. skilldeck runs a bundle's scripts (in its own process, with its "
            "environment) only when it trusts the bundle, and a run of this skill fails with "
            "UNTRUSTED_SCRIPTS until then. Read them, then trust it: "
            f"`skilldeck trust {folder}` (kept in SKILLDECK_HOME), `--trust {folder}` for one "
            "command, trust=[...] in Python, or SKILLDECK_TRUSTED_SKILLS"
        ), warning.message
    body = json.loads(_cli("check", str(skills), "--json").stdout)
    assert [p["rule"] for p in body["problems"] if p["severity"] == "warning"] == ["trust"] * 2
    assert _cli("check", str(good)).exit_code == 0  # a warning: the bundle is fine otherwise
    (bundle,) = load_skills(good)
    assert (bundle.trusted, bundle.preprocess, bundle.validate) == (False, None, None)
    assert bundle.scripts == ("preprocess", "validate", "eval_setup", "rules")
    SkillDeck(good, checkpointer="memory://").close()
    assert _ran(markers) == []

    check_skills(skills, trust=[skills])  # trusted: imported, with the process's environment
    assert _ran(markers) == [
        "broken.preprocess",
        "broken.validate",
        "good.preprocess",
        "good.validate",
    ]
    assert (markers / "good.validate").read_text() == SECRET


def test_a_run_that_needs_untrusted_scripts_is_refused_and_changes_nothing(
    tmp_path: Path, markers: Path
) -> None:
    skills = tmp_path / "skills"
    folder = _bundle(skills, "scripted", markers)
    write_bundle(skills, "plain", meta={"triggers": {"contexts": ["other"]}})
    script = tmp_path / "turns.yaml"
    turns = {"scripted": [output(data={"note": "x"})], "plain": [output(data={"note": "y"})]}
    script.write_text(yaml.safe_dump({"skills": turns}), "utf-8")
    settings = Settings(model=f"scripted:{script}")
    with SkillDeck(skills, checkpointer="memory://", settings=settings) as deck:
        for context in ("ctx", "auto"):  # auto may reach any skill
            with pytest.raises(UntrustedScriptsError) as refused:
                deck.run({"request": "x"}, context=context, thread_id=f"t-{context}")
            assert refused.value.code.value == "UNTRUSTED_SCRIPTS"
            assert str(refused.value).startswith(
                "skill 'scripted' needs scripts/preprocess.py, scripts/validate.py, and "
                "skilldeck runs a bundle's scripts only when it trusts the bundle; nothing ran."
            )
            assert f"`skilldeck trust {folder}`" in str(refused.value)
            assert refused.value.to_dict()["skill"] == "scripted"
            with pytest.raises(ThreadNotFoundError):
                deck.get_thread(f"t-{context}")
        # The deck loads: a skill without scripts runs, and the thread's route stops at the
        # router when a run that came into the graph otherwise reaches the untrusted skill.
        assert deck.run(context="other").status == "finished"
        state = deck.server_graph().invoke({"context": "ctx", "input": {}})
        assert state["status"] == "failed"
        assert state["error"]["code"] == "UNTRUSTED_SCRIPTS"
    assert _ran(markers) == []
    refused_cli = _cli("run", "--skills", str(skills), "--context", "ctx", "--model",
                       f"scripted:{script}", "--json")  # fmt: skip
    assert refused_cli.exit_code == 2
    assert json.loads(refused_cli.stdout)["error"]["code"] == "UNTRUSTED_SCRIPTS"
    assert _ran(markers) == []
    trusted = _cli("run", "--skills", str(skills), "--context", "ctx", "--model",
                   f"scripted:{script}", "--trust", str(folder), "--json")  # fmt: skip
    assert json.loads(trusted.stdout)["status"] == "finished", trusted.stdout
    assert _ran(markers) == ["scripted.preprocess", "scripted.validate"]


def test_serve_refuses_to_start_with_an_untrusted_skill(tmp_path: Path, markers: Path) -> None:
    skills = tmp_path / "skills"
    _bundle(skills, "scripted", markers)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"0" * 64: "alice"}), "utf-8")
    common = ["serve", "--keys", str(keys), "--skills", str(skills)]
    result = _cli(*common, "--checkpoint", "memory://", "--port", "0")
    assert result.exit_code == 2
    assert "[UNTRUSTED_SCRIPTS] skill 'scripted'" in result.stderr.replace("\n", "")
    assert _ran(markers) == []


def test_the_service_refuses_a_run_of_an_untrusted_skill_as_the_operators_to_fix(
    tmp_path: Path, markers: Path
) -> None:
    from fastapi.testclient import TestClient

    from skilldeck.server import create_app
    from skilldeck.server.keys import hash_key

    _bundle(tmp_path / "skills", "scripted", markers)
    key, deck = "sdk_" + "k" * 40, SkillDeck(tmp_path / "skills", checkpointer="memory://")
    with deck, TestClient(create_app(deck, api_keys={hash_key(key): "alice"})) as client:
        auth = {"X-API-Key": key}
        thread = client.post("/threads", headers=auth).json()["thread_id"]
        reply = client.post(f"/threads/{thread}/runs", json={"context": "ctx"}, headers=auth)
        assert reply.status_code == 503, reply.text
        assert reply.json()["error"]["code"] == "UNTRUSTED_SCRIPTS"
        assert client.get(f"/threads/{thread}", headers=auth).json()["status"] == "new"
    assert _ran(markers) == []


def test_eval_setup_and_rules_of_an_untrusted_bundle_are_never_imported(
    tmp_path: Path, markers: Path
) -> None:
    skills = tmp_path / "skills"
    folder = _bundle(skills, "scripted", markers)
    case = {"id": "one", "input": {}, "graders": [{"name": "must_contain",
            "config": {"path": "response", "substrings": ["ok"]}}]}  # fmt: skip
    (folder / "cases.yaml").write_text(yaml.safe_dump([case]), "utf-8")
    with pytest.raises(UntrustedScriptsError, match="skill 'scripted' needs scripts/preprocess"):
        suite_for_skill("scripted", [skills])
    result = _cli("eval", "run", "--skills", str(skills), "--skill", "scripted", "--json")
    assert json.loads(result.stdout)["error"]["code"] == "UNTRUSTED_SCRIPTS"
    # The rules model: the skill's own rules.py, or a file its execution_config names outside
    # it (a path the bundle chose is the bundle's code wherever it is).
    outside = tmp_path / "outside.py"
    outside.write_text(_script(markers / "outside.rules", "respond"), "utf-8")
    plain = write_bundle(tmp_path / "other", "plain")
    (plain / "scripts").mkdir()
    (plain / "scripts" / "rules.py").write_text(_script(markers / "plain.rules", "respond"))
    chosen = {"execution_config": {"provider": "rules", "model": "../../outside.py"}}
    elsewhere = write_bundle(tmp_path / "third", "elsewhere", meta=chosen)
    for bundle, settings in ((plain, Settings(model="rules")), (elsewhere, Settings())):
        with (
            SkillDeck(bundle, checkpointer="memory://", settings=settings) as deck,
            pytest.raises(UntrustedScriptsError, match=r"rules\.py|outside\.py"),
        ):
            deck.run(context="ctx")
    assert _ran(markers) == []
    with SkillDeck(plain, checkpointer="memory://", settings=Settings(model="rules"),
                   trust=[plain]) as deck:  # fmt: skip
        assert deck.run(context="ctx").status == "finished"
    assert _ran(markers) == ["plain.rules"]


@pytest.mark.subprocess
def test_a_mcp_json_beside_untrusted_bundles_starts_nothing(tmp_path: Path, markers: Path) -> None:
    skills = tmp_path / "skills"
    write_bundle(skills, "agent", meta={"tools": ["mcp:evil/run"]})
    started = markers / "mcp.command"
    command = f"import pathlib; pathlib.Path({str(started)!r}).write_text('ran')"
    config = {"mcpServers": {"evil": {"command": sys.executable, "args": ["-c", command]}}}
    (skills / "mcp.json").write_text(json.dumps(config), "utf-8")
    error = check_skills(skills).errors[0]  # then: its tools are unknown
    assert error.message.startswith("skill 'agent' needs ") and "(server 'evil')" in error.message
    with pytest.raises(UntrustedScriptsError, match=r"mcp\.json \(server 'evil'\)"):
        SkillDeck(skills, checkpointer="memory://")
    assert _ran(markers) == []
    trusted = check_skills(skills, settings=Settings(mcp_timeout_s=10), trust=True)
    assert "did not list its tools" in trusted.errors[0].message  # trusted: its command ran
    assert _ran(markers) == ["mcp.command"]


def test_new_bundles_stay_trusted_when_edited_and_a_swapped_folder_is_not(
    tmp_path: Path, markers: Path
) -> None:
    made = json.loads(_cli("new", "mine", "--dir", str(tmp_path), "--json").stdout)
    folder = Path(made["folder"])
    assert made["trusted"] is True and MARKER not in made["files"]
    (folder / "scripts").mkdir()
    (folder / "scripts" / "validate.py").write_text(_script(markers / "mine", "validate"))
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "\nEdited by hand.\n")
    (bundle,) = load_skills(folder)
    assert bundle.trusted and bundle.validate is not None
    assert _ran(markers) == ["mine"]
    (markers / "mine").unlink()

    # A copy elsewhere, token and all, is not the trusted bundle.
    copy = tmp_path / "copies" / "mine"
    shutil.copytree(folder, copy)
    assert not load_skills(copy)[0].trusted
    # Nor is another folder put in its place, even one that brings a token of its own.
    shutil.rmtree(folder)
    _bundle(tmp_path, "mine", markers)
    (folder / MARKER).write_text(json.dumps({"token": "0" * 32}))
    assert not load_skills(folder)[0].trusted
    # Nor a trusted bundle under another state home.
    other = write_template("theirs", tmp_path)
    assert load_skills(other)[0].trusted
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SKILLDECK_HOME", str(tmp_path / "other-home"))
        assert not load_skills(other)[0].trusted
    assert _ran(markers) == []

    # `skilldeck trust` records a bundle the same way, after its reader has read it.
    assert json.loads(_cli("trust", str(folder), "--json").stdout) == {"trusted": [str(folder)]}
    assert load_skills(folder)[0].trusted
    assert _ran(markers) == ["mine.preprocess", "mine.validate"]


def test_the_built_in_bundles_are_trusted(markers: Path) -> None:
    bundles = load_skills(builtin_skills_dir())
    assert all(b.trusted for b in bundles)
    assert {b.name for b in bundles if b.validate is not None} >= {
        "card-agent",
        "litigation-intake",
    }


def test_the_setting_and_trust_name_folders_and_globs(
    tmp_path: Path, markers: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = _bundle(tmp_path / "packs" / "a", "one", markers)
    two = _bundle(tmp_path / "packs" / "b", "two", markers)
    assert not any(b.trusted for b in load_skills([one, two]))
    assert [b.trusted for b in load_skills([one, two], trust=str(tmp_path / "packs" / "*"))] == [
        True,
        True,
    ]
    assert [b.trusted for b in load_skills([one, two], trust=[one])] == [True, False]
    monkeypatch.setenv("SKILLDECK_TRUSTED_SKILLS", f"{tmp_path / 'nowhere'}:{tmp_path}/packs/b")
    assert [b.trusted for b in load_skills([one, two])] == [False, True]
    monkeypatch.delenv("SKILLDECK_TRUSTED_SKILLS")
    settings = Settings(trusted_skills=str(one))
    with SkillDeck([one, two], checkpointer="memory://", settings=settings) as deck:
        assert [b.trusted for b in deck.bundles] == [True, False]


@pytest.mark.parametrize("trusted", [False, True])
def test_an_untrusted_bundles_own_endpoint_never_gets_the_hosts_api_key(
    tmp_path: Path, markers: Path, trusted: bool
) -> None:
    """A bundle's ``execution_config.base_url`` is called with the host's key only when the
    deck trusts the bundle: else a folder someone sent would learn the key by naming its own
    server."""
    reply = text(json.dumps(output(data={"note": "ok"})["output"]))
    with serve([reply]) as endpoint:
        execution = {"provider": "openai", "model": "any", "base_url": endpoint.url}
        skills = tmp_path / "skills"
        write_bundle(skills, "own", meta={"execution_config": execution})
        settings = Settings(_env_file=None, api_key=SECRET, model=None, output_mode="schema")  # type: ignore[call-arg]
        trust = [skills] if trusted else False
        with SkillDeck(skills, checkpointer="memory://", settings=settings, trust=trust) as deck:
            result = deck.run(context="ctx")
    assert result.status == "finished", result.error
    assert endpoint.authorizations == [f"Bearer {SECRET if trusted else 'not-needed'}"]
