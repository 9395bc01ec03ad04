"""Regression tests of the security review (issue 14): each finding, tried as the attacker or
the careless operator who found it. Nothing a user, a model or a bundle sends reaches another
matter, leaves a thread stuck, or writes what the skill's schema forbids."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import sqlite3
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, own_matter, write_bundle
from endpoint import Answer, serve, settings_for, text
from fastapi.testclient import TestClient
from langchain_core.tools import StructuredTool
from typer.testing import CliRunner

import skilldeck.errors
from skilldeck import InvalidAnswersError, Resume, Settings, SkillDeck, SkillDeckError
from skilldeck._internal.redact import PublicReason, safe_reason
from skilldeck.checkpoints.claims import RUN_LEASE
from skilldeck.cli import app as cli
from skilldeck.errors import BundleError, MatterRequiredError, ModelConfigError, ToolError
from skilldeck.nodes.route_model import RouteModelError
from skilldeck.scripted import load_script
from skilldeck.server import create_app, hash_key, limits
from skilldeck.server.errors import LOC_PART_CHARS, MAX_LISTED_ERRORS
from skilldeck.server.fairness import RunQueue
from skilldeck.server.runlog import SKILLDECK_EVENTS, RunLog, RunLogs
from skilldeck.skills import builtin_skills_dir, load_skills
from skilldeck.skills.contract import PATH_PART_CHARS, OutputLimits
from skilldeck.tools import ToolRegistry, default_registry
from skilldeck.tools.cards import save_card
from skilldeck.tools.skill_files import skill_file_tool
from skilldeck.types import DeltaEvent

pytestmark = pytest.mark.L2

KEYS = {"alice": "sdk_alice_hardening_key_000", "bob": "sdk_bob_hardening_key_1111"}
HASHES = {hash_key(k): u for u, k in KEYS.items()}


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[user]}"}


# -- 1. matters ------------------------------------------------------------------------------
@pytest.fixture
def matters(tmp_path: Path) -> Path:
    """Two matters, each with a confidential file of its own."""
    root = tmp_path / "matters"
    for matter, secret in (
        ("matter-a", "Contract price: 100 euros"),
        ("matter-b", "Contract price: B-SECRET-77 euros"),
    ):
        (root / matter).mkdir(parents=True)
        (root / matter / "contract.txt").write_text(secret, "utf-8")
    return root


@pytest.fixture
def rag_client(tmp_path: Path, matters: Path) -> Iterator[tuple[TestClient, SkillDeck]]:
    deck = SkillDeck(
        builtin_skills_dir() / "rag-retrieve",
        checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}",
        settings=Settings(
            model="", files_root=str(matters), knowledge_path=str(tmp_path / "kb"),
            chroma_path=str(tmp_path / "chroma"), matter_policy="claim",
        ),
    )  # fmt: skip
    with TestClient(create_app(deck, api_keys=HASHES)) as client:
        yield client, deck
    deck.close()


def _run(client: TestClient, user: str, body: dict[str, Any]) -> Any:
    thread = client.post("/threads", headers=auth(user)).json()["thread_id"]
    return thread, client.post(f"/threads/{thread}/runs", headers=auth(user), json=body)


def test_a_run_without_a_matter_never_reaches_the_files_root(
    rag_client: tuple[TestClient, SkillDeck],
) -> None:
    client, deck = rag_client
    question = {"input": {"question": "What is in B's contract?"}, "context": "knowledge"}
    thread, answer = _run(client, "alice", question)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "MATTER_REQUIRED"
    assert client.get(f"/threads/{thread}", headers=auth("alice")).json()["status"] == "new"
    with pytest.raises(MatterRequiredError, match="rag-retrieve"):
        deck.run({"question": "x"}, context="knowledge", user_id="alice")


def test_a_matter_belongs_to_its_first_user_and_others_get_404(
    rag_client: tuple[TestClient, SkillDeck],
) -> None:
    client, deck = rag_client
    ask = {"input": {"question": "What is the contract price?"}, "context": "knowledge"}
    _, bobs = _run(client, "bob", {**ask, "matter_id": "matter-b"})
    assert bobs.status_code == 200 and "B-SECRET-77" in bobs.text  # his own matter
    thread, alices = _run(client, "alice", {**ask, "matter_id": "matter-b"})
    assert alices.status_code == 404
    assert alices.json()["error"]["code"] == "MATTER_NOT_FOUND"
    assert "B-SECRET-77" not in alices.text
    assert client.get(f"/threads/{thread}", headers=auth("alice")).json()["status"] == "new"
    # An operator grants it; then alice may.
    deck.index.grant("matter-b", "alice")
    _, granted = _run(client, "alice", {**ask, "matter_id": "matter-b"})
    assert granted.status_code == 200


@pytest.mark.parametrize("matter", ["matter-a/../matter-b", "..", "a/b"])
def test_a_matter_id_names_one_folder(
    rag_client: tuple[TestClient, SkillDeck], matter: str
) -> None:
    client, deck = rag_client
    body = {"input": {"question": "x"}, "context": "knowledge", "matter_id": matter}
    _, answer = _run(client, "alice", body)
    assert answer.status_code == 422
    with pytest.raises(SkillDeckError, match="must be 1 to 128 letters"):
        deck.run({"question": "x"}, context="knowledge", matter_id=matter)


def test_ownership_is_stored_with_the_threads(database_url: str) -> None:
    with SkillDeck(checkpointer=database_url) as deck:
        assert deck.index.may_use_matter("ann", "m1")  # claimed
        assert not deck.index.may_use_matter("bob", "m1")
        assert not deck.index.may_use_matter("bob", "m2", claim=False)
        assert deck.index.add_matter("m2", "carol") and not deck.index.add_matter("m2", "dan")
        deck.index.grant("m2", "bob")
    with SkillDeck(checkpointer=database_url) as again:  # another process, later
        assert again.index.matter("m1") == ("ann", ())
        assert again.index.may_use_matter("bob", "m2", claim=False)
        again.index.revoke("m2", "bob")
        assert not again.index.may_use_matter("bob", "m2", claim=False)
        assert [m for m, _, _ in again.index.matters()] == ["m1", "m2"]


def test_granted_policy_serves_only_matters_made_for_the_user(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    settings = Settings(
        model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), matter_policy="granted"
    )
    with SkillDeck(checkpointer=url, settings=settings) as deck:
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            body = {"input": {"documents": ["complaint.txt"]}, "context": "matter"}
            _, refused = _run(client, "alice", {**body, "matter_id": "demo-matter"})
            assert refused.status_code == 404
        result = CliRunner().invoke(
            cli, ["matters", "add", "demo-matter", "--owner", "alice", "--checkpoint", url]
        )
        assert result.exit_code == 0, result.output
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            _, served = _run(client, "alice", {**body, "matter_id": "demo-matter"})
            assert served.status_code == 200 and "event: card" in served.text


def test_serve_has_no_silent_files_root(tmp_path: Path) -> None:
    (tmp_path / "keys.json").write_text(json.dumps(HASHES))
    env = {k: v for k, v in os.environ.items() if k != "SKILLDECK_FILES_ROOT"}
    result = CliRunner(env={**env, "SKILLDECK_FILES_ROOT": ""}).invoke(
        cli, ["serve", "--keys", str(tmp_path / "keys.json"), "--checkpoint", "memory://"]
    )
    assert result.exit_code == 2
    assert "--files-root" in result.stderr and "litigation-intake" in result.stderr


# -- 2. model output that used to crash the run --------------------------------------------------
def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"x": 1}
    for _ in range(levels):
        value = {"x": value}
    return value


CRASHERS = {
    "brackets": {"text": "[" * 100_000},
    "huge integer": {
        "text": '{"response": "x", "profile": {}, "data": {"n": 1' + "0" * 5000 + "}}"
    },
    "int past 64 bits": {"output": {**output()["output"], "data": {"n": 2**70}}},
    # 300 levels as the model's text (a cassette refuses such nesting itself), 60 as a call.
    "deep data": {"text": json.dumps({**output()["output"], "data": {"blob": deep(300)}})},
    "nan": {
        "text": '{"response": NaN, "profile": {}, "data": {}, "control": {"action": "finish"}}'
    },
    "lone surrogate": {"output": {**output()["output"], "response": "x\ud800"}},
    "deep tool arguments": {
        "tool_calls": [{"name": "element__extract", "args": {"text": deep(60)}}]
    },
}


@pytest.mark.parametrize("turn", list(CRASHERS.values()), ids=list(CRASHERS))
def test_no_model_output_leaves_a_thread_stuck(
    turn: dict[str, Any], skills_dir: Path, tmp_path: Path
) -> None:
    write_bundle(
        skills_dir,
        "intake",
        meta={"tools": ["element__extract"]},
        data={"n": {"type": "integer"}, "blob": {"type": "object"}},
    )
    retry = {**turn, "invalid": True}

    def deck_on(turns: list[dict[str, Any]], name: str) -> SkillDeck:
        script = tmp_path / f"{name}.yaml"
        script.write_text(json.dumps({"skills": {"intake": turns}}))
        return SkillDeck(
            skills_dir,
            checkpointer=f"sqlite:///{tmp_path / f'{name}.sqlite'}",
            settings=Settings(model=f"scripted:{script}", max_retries=2),
        )

    # Twice the same bad reply (a model repeats itself), then a good one: re-asked each time.
    with deck_on([retry, retry, output(data={"n": 3})], "c") as deck:
        result = deck.run(context="ctx")
        assert result.status == "finished", result.error
        assert result.state["n"] == 3
        rejected = [r for r in deck.history(result.thread_id) if r["action"] == "rejected"]
        assert len(rejected) == 2
    # With no good reply left: failed, cleanly, and the thread is not running.
    with deck_on([retry] * 3, "d") as deck:
        failed = deck.run(context="ctx")
        assert failed.status == "failed"
        assert failed.error is not None and failed.error.code == "CONTRACT_VIOLATION"
        assert deck.get_thread(failed.thread_id).status == "failed"


def test_a_run_broken_by_the_unforeseen_ends_failed(
    skills_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_bundle(skills_dir, "intake")
    script = tmp_path / "turns.yaml"
    script.write_text(json.dumps({"skills": {"intake": [output()]}}))
    import skilldeck.nodes.transcript as transcript

    def broken(*args: Any) -> str:
        raise RuntimeError("disk full; token=sk-verysecretvalue1234567890")

    monkeypatch.setattr(transcript, "append", broken)
    with SkillDeck(
        skills_dir,
        checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}",
        settings=Settings(model=f"scripted:{script}"),
    ) as deck:
        result = deck.run(context="ctx")
        assert result.status == "failed"
        assert result.error is not None and result.error.code == "INTERNAL_ERROR"
        assert "sk-verysecret" not in json.dumps(result.error.dump())
        assert deck.get_thread(result.thread_id).status == "failed"


# -- 3. card answers are checked against the field they write ----------------------------------
def _asker(skills_dir: Path, question: dict[str, Any], data: dict[str, Any]) -> Path:
    return write_bundle(
        skills_dir,
        "asker",
        meta={"outputs": {"provides": ["profile.status"]}},
        data=data,
    )


def _card(question: dict[str, Any]) -> dict[str, Any]:
    return output(action="ask_user", review_type="clarify", questions=[question])


@pytest.mark.parametrize(
    ("question", "message"),
    [
        (
            {"question": "How many?", "field_key": "count", "input_type": "text", "required": True},
            "a text answer cannot be integer",
        ),
        (
            {
                "question": "First?",
                "field_key": "items.first",
                "input_type": "text",
                "required": True,
            },
            "'items' holds array, not an object with 'first'",
        ),
    ],
)
def test_a_card_whose_field_cannot_hold_its_answer_is_a_contract_error(
    question: dict[str, Any], message: str, skills_dir: Path, tmp_path: Path
) -> None:
    folder = _asker(
        skills_dir, question, {"count": {"type": "integer"}, "items": {"type": "array"}}
    )
    (folder / "assets" / "output_schema.json").write_text(json.dumps({"properties": {
        "profile": {"properties": {"status": {"enum": ["open", "closed"]}}},
        "data": {"properties": {"count": {"type": "integer"}, "items": {"type": "array"}}},
    }}))  # fmt: skip
    script = tmp_path / "t.yaml"
    script.write_text(json.dumps({"skills": {"asker": [_card(question)]}}))
    with SkillDeck(
        skills_dir, checkpointer="memory://", settings=Settings(model=f"scripted:{script}")
    ) as deck:
        result = deck.run(context="ctx")
    assert result.status == "failed"
    assert any(message in e["message"] for e in result.error.dump()["errors"]), result.error


def test_answers_that_the_fields_schema_forbids_are_refused(
    skills_dir: Path, tmp_path: Path
) -> None:
    question = {
        "question": "Status?",
        "field_key": "profile.status",
        "input_type": "text",
        "required": True,
    }
    folder = _asker(skills_dir, question, {"count": {"type": "integer"}})
    (folder / "assets" / "output_schema.json").write_text(json.dumps({"properties": {
        "profile": {"properties": {"status": {"enum": ["open", "closed"]}}},
        "data": {"properties": {"count": {"type": "integer"}}},
    }}))  # fmt: skip
    script = tmp_path / "t.yaml"
    script.write_text(json.dumps({"skills": {"asker": [_card(question), output()]}}))
    with SkillDeck(
        skills_dir, checkpointer="memory://", settings=Settings(model=f"scripted:{script}")
    ) as deck:
        paused = deck.run(context="ctx")
        assert paused.card is not None
        assert paused.card["answers_schema"]["properties"]["profile.status"]["allOf"][1] == {
            "enum": ["open", "closed"]
        }
        with pytest.raises(InvalidAnswersError) as refused:
            deck.run(Resume(paused.thread_id, {"profile.status": "hacked"}))
        assert refused.value.errors[0]["field_key"] == "profile.status"
        assert deck.get_thread(paused.thread_id).status == "interrupted"
        assert deck.get_thread(paused.thread_id).state.get("profile") in (None, {})
        done = deck.run(Resume(paused.thread_id, {"profile.status": "open"}))
        assert done.state["profile"] == {"status": "open"}


# -- 4. upstream error text ----------------------------------------------------------------------
SECRET = "sk-upstream-secret-0123456789abcdef"


@pytest.fixture
def echoing_provider() -> Iterator[str]:
    """An OpenAI-compatible endpoint that answers 401 echoing the request's Authorization."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.dumps({"error": {"message": f"bad key: {self.headers['Authorization']}"}})
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_a_providers_error_text_never_reaches_an_api_client(
    echoing_provider: str, skills_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_bundle(skills_dir, "intake")
    settings = Settings(model="compatible:some-model", base_url=echoing_provider, api_key=SECRET)  # type: ignore[arg-type]
    with (
        SkillDeck(
            skills_dir, checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings
        ) as deck,
        TestClient(create_app(deck, api_keys=HASHES)) as client,
    ):
        thread, answer = _run(client, "alice", {"context": "ctx"})
        view = client.get(f"/threads/{thread}", headers=auth("alice")).text
    assert "event: error" in answer.text and "MODEL_ERROR" in answer.text
    assert "HTTP 401" in view
    assert SECRET not in answer.text and SECRET not in view
    logged = caplog.text
    assert "bad key" in logged and SECRET not in logged  # the log has it, redacted


# -- 5. bundle resources ----------------------------------------------------------------------
def test_a_reference_that_links_out_of_the_bundle_is_refused(skills_dir: Path) -> None:
    folder = write_bundle(skills_dir, "alpha", references={"a.md": "fine"})
    (folder / "references" / "passwd.md").symlink_to("/etc/passwd")
    with pytest.raises(BundleError) as refused:
        load_skills(skills_dir)
    assert "passwd.md" in refused.value.file
    assert "outside the bundle" in refused.value.reason


def test_a_huge_reference_is_refused_without_being_read(skills_dir: Path) -> None:
    folder = write_bundle(
        skills_dir, "alpha", meta={"references": "inline"}, references={"a.md": "fine"}
    )
    with (folder / "references" / "huge.md").open("wb") as big:
        big.truncate(200 * 1024 * 1024)  # sparse: 200 MB that take no disk
    with pytest.raises(BundleError, match=r"209,715,200 bytes"):
        load_skills(skills_dir)
    # On demand (the default), it is listed, and the read tool refuses it by its size.
    (folder / "skill.meta.json").write_text(
        json.dumps({"name": "alpha", "description": "d", "triggers": {"contexts": ["ctx"]}})
    )
    (bundle,) = load_skills(skills_dir)
    assert ("references/huge.md", 200 * 1024 * 1024) in bundle.files
    tool = skill_file_tool({"alpha": (bundle.path, tuple(f for f, _ in bundle.files))})
    with pytest.raises(ToolError, match=r"209,715,200 bytes"):
        tool.invoke({"path": "references/huge.md", "skill": "alpha"})


BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ]
)


def test_alias_bombs_and_repeated_keys_are_refused(skills_dir: Path, tmp_path: Path) -> None:
    folder = write_bundle(skills_dir, "alpha")
    (folder / "SKILL.md").write_text(f"---\nname: alpha\ndescription: d\n{BOMB}\n---\nbody\n")
    with pytest.raises(BundleError, match="aliases are not allowed"):
        load_skills(skills_dir)
    (folder / "SKILL.md").write_text("---\nname: alpha\ndescription: d\n---\nbody\n")
    (folder / "skill.meta.json").write_text(
        '{"name": "alpha", "description": "d", "priority": 1, "priority": 9}'
    )
    with pytest.raises(BundleError, match="duplicate key 'priority'"):
        load_skills(skills_dir)
    (tmp_path / "tape.yaml").write_text(BOMB)
    with pytest.raises(ModelConfigError, match="alias bomb"):
        load_script(tmp_path / "tape.yaml")


# -- 6. HTTP bodies ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [
        '{"context": "matter", "input": ' + '{"a": ' * 300 + "1" + "}" * 300 + "}",
        '{"context": "matter", "input": {"n": NaN}}',
        '{"context": "matter", "input": {"n": Infinity}}',
        '{"context": "matter", "input": {"t": "\\ud800"}}',
    ],
    ids=["300 levels", "NaN", "Infinity", "lone surrogate"],
)
def test_bodies_only_python_would_parse_are_422_before_the_stream(
    demo_deck: SkillDeck, raw: str
) -> None:
    with TestClient(create_app(demo_deck, api_keys=HASHES)) as client:
        thread = client.post("/threads", headers=auth("alice")).json()["thread_id"]
        answer = client.post(
            f"/threads/{thread}/runs",
            content=raw,
            headers={**auth("alice"), "content-type": "application/json"},
        )
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "INVALID_REQUEST"
        assert client.get(f"/threads/{thread}", headers=auth("alice")).json()["status"] == "new"


# -- 7. resume claims do not pile up -------------------------------------------------------------
@pytest.mark.slow
def test_claims_stay_bounded_over_a_thousand_flows(skills_dir: Path, tmp_path: Path) -> None:
    question = {"question": "?", "field_key": "note", "input_type": "text", "required": True}
    write_bundle(skills_dir, "asker")
    script = tmp_path / "t.yaml"
    script.write_text(
        json.dumps({"skills": {"asker": [_card(question), output(data={"note": "x"})]}})
    )
    db = tmp_path / "c.sqlite"
    with SkillDeck(
        skills_dir, checkpointer=f"sqlite:///{db}", settings=Settings(model=f"scripted:{script}")
    ) as deck:
        for i in range(1000):
            paused = deck.run(context="ctx", thread_id=f"t{i}")
            assert deck.run(Resume(paused.thread_id, {"note": "hi"})).status == "finished"
            if i % 250 == 0:
                with sqlite3.connect(db) as conn:
                    rows = conn.execute("SELECT count(*) FROM skilldeck_interrupt_claims")
                    assert rows.fetchone()[0] == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM skilldeck_interrupt_claims").fetchone()[0] == 0


# -- issue 32, finding 3: a revoked grant stops a pending card ------------------------------------
DEMO_RUN = {
    "input": {"documents": ["complaint.txt"]},
    "context": "matter",
    "matter_id": "demo-matter",
}


def test_a_revoked_grant_stops_a_pending_card_on_every_route_that_goes_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    deck = SkillDeck(
        checkpointer=url,
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES)),
    )
    deck.index.add_matter("demo-matter", "alice")
    deck.index.grant("demo-matter", "bob")
    try:
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            thread, paused = _run(client, "bob", DEMO_RUN)
            card = [
                json.loads(line[6:]) for line in paused.text.splitlines() if line[:6] == "data: "
            ]
            interrupt = card[-1]["interrupt_id"]
            revoked = CliRunner().invoke(
                cli, ["matters", "revoke", "demo-matter", "--user", "bob", "--checkpoint", url]
            )
            assert revoked.exit_code == 0, revoked.output
            before = client.get(f"/threads/{thread}/history", headers=auth("bob")).json()
            answers = {"answers": DEMO_ANSWERS, "interrupt_id": interrupt}
            resolved = {"interruptId": interrupt, "status": "resolved", "payload": DEMO_ANSWERS}
            agui = {
                "threadId": thread, "runId": "r1", "messages": [], "tools": [], "context": [],
                "state": {}, "forwardedProps": {}, "resume": [resolved],
            }  # fmt: skip
            for path, body in (
                (f"/threads/{thread}/resume", answers),
                ("/agui", agui),
                (f"/threads/{thread}/continue", {}),
            ):
                refused = client.post(path, headers=auth("bob"), json=body)
                assert refused.status_code == 404, (path, refused.text)
                assert refused.json()["error"]["code"] == "MATTER_NOT_FOUND"
            after = client.get(f"/threads/{thread}/history", headers=auth("bob")).json()
            assert after == before  # no tool ran in the matter, nothing was written
            view = client.get(f"/threads/{thread}", headers=auth("bob")).json()
            assert view["status"] == "interrupted" and view["card"]["interrupt_id"] == interrupt
            # Granted again, the same card is answered as if nothing had happened.
            deck.index.grant("demo-matter", "bob")
            done = client.post(f"/threads/{thread}/resume", headers=auth("bob"), json=answers)
            assert '"event": "done"' in done.text
    finally:
        deck.close()


# -- issue 32, finding 4: one user cannot occupy every worker -------------------------------------
def test_a_user_over_the_thread_rate_gets_429_and_nothing_is_created(tmp_path: Path) -> None:
    deck = SkillDeck(
        checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}",
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", threads_per_minute=3),
    )
    try:
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            for _ in range(3):
                assert client.post("/threads", headers=auth("bob")).status_code == 201
            refused = client.post("/threads", headers=auth("bob"))
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "TOO_MANY_THREADS"
            assert 1 <= int(refused.headers["retry-after"]) <= 60
            assert "SKILLDECK_THREADS_PER_MINUTE" in refused.json()["error"]["message"]
            agui = {"threadId": "bobs-new", "runId": "r", "messages": [], "tools": [],
                    "context": [], "state": {}, "forwardedProps": {"input": {"x": 1}}}  # fmt: skip
            assert client.post("/agui", headers=auth("bob"), json=agui).status_code == 429
            assert len(deck.threads(user_id="bob")) == 3 and deck.index.get("bobs-new") is None
            assert client.post("/threads", headers=auth("alice")).status_code == 201  # per user
    finally:
        deck.close()


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[SkillDeck, Path]]:
    """A deck with a ``gate`` skill that waits while the file ``closed`` exists (context
    ``gate``) and a ``quick`` one that finishes at once (context ``quick``)."""
    closed = tmp_path / "closed"
    skills = tmp_path / "skills"
    write_bundle(
        skills,
        "gate",
        meta={"triggers": {"contexts": ["gate"]}},
        scripts={
            "preprocess": "import os, time\n"
            "def preprocess(state):\n"
            f"    while os.path.exists({str(closed)!r}):\n"
            "        time.sleep(0.05)\n"
        },
    )
    write_bundle(skills, "quick", meta={"triggers": {"contexts": ["quick"]}})
    script = tmp_path / "script.yaml"
    script.write_text(json.dumps({"skills": {"gate": [output()], "quick": [output()]}}))
    closed.touch()
    settings = Settings(
        model=f"scripted:{script}", runs_per_user=1, queued_runs_per_user=2, threads_per_minute=100
    )
    deck = SkillDeck(
        skills, checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings, trust=True
    )
    try:
        yield deck, closed
    finally:
        closed.unlink(missing_ok=True)
        deck.close()


def test_one_users_backlog_neither_blocks_another_user_nor_grows_past_its_limit(
    gated: tuple[SkillDeck, Path],
) -> None:
    deck, closed = gated
    with TestClient(create_app(deck, api_keys=HASHES, workers=2)) as client:
        queue = client.app.state.service.runs.queue  # type: ignore[attr-defined]
        answers: dict[str, Any] = {}

        def post(name: str, user: str, context: str) -> threading.Thread:
            thread = client.post("/threads", headers=auth(user)).json()["thread_id"]
            answers[name + ":thread"] = thread

            def go() -> None:
                answers[name] = client.post(
                    f"/threads/{thread}/runs", headers=auth(user), json={"context": context}
                )

            worker = threading.Thread(target=go, daemon=True)
            worker.start()
            return worker

        bobs = [post(f"bob{i}", "bob", "gate") for i in range(3)]  # one runs, two wait
        deadline = time.monotonic() + 30
        while queue.waiting("bob") < 2:
            assert time.monotonic() < deadline, "bob's runs never queued"
            time.sleep(0.02)
        # Bob's queue is full: his next run is refused at once, nothing of it started.
        extra = post("bob3", "bob", "gate")
        extra.join(30)
        assert not extra.is_alive()
        refused = answers["bob3"]
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "TOO_MANY_RUNS"
        assert refused.headers["retry-after"] == "5"
        assert deck.index.get(answers["bob3:thread"]).status == "new"  # type: ignore[union-attr]
        assert deck.claims.claim(answers["bob3:thread"], RUN_LEASE)  # no lease was taken
        # Alice's run starts on the free worker and ends while bob's backlog still waits.
        alice = post("alice", "alice", "quick")
        alice.join(30)
        assert not alice.is_alive(), "alice's run waited behind bob's backlog"
        assert '"event": "done"' in answers["alice"].text
        assert queue.waiting("bob") == 2
        closed.unlink()
        for worker in bobs:
            worker.join(60)
        assert all('"event": "done"' in answers[f"bob{i}"].text for i in range(3))


def test_the_run_queue_serves_the_user_served_least_recently_first() -> None:
    queue = RunQueue(workers=1, per_user=1, queued_per_user=10)
    order: list[str] = []
    gate = threading.Event()

    def job(name: str) -> Callable[[], None]:
        def run() -> None:
            if name == "bob1":
                gate.wait(10)
            order.append(name)

        return run

    for name in ("bob1", "bob2", "bob3", "alice1", "carol1", "alice2"):
        queue.reserve(name.rstrip("0123456789")).submit(job(name))
    gate.set()
    queue.shutdown()
    assert order == ["bob1", "alice1", "carol1", "bob2", "alice2", "bob3"]


# -- 8. card files ------------------------------------------------------------------------------
def test_two_fact_ids_never_share_a_card_file(tmp_path: Path) -> None:
    card = {"title": "t", "template_ids": ["compact"], "tags": [], "ui_config": {}, "content": "c"}
    save_card(tmp_path, {**card, "fact_id": "2026/05/25.md#ts_1", "content": "first"})
    with pytest.raises(Exception, match=r"holds the card of fact_id '2026/05/25\.md#ts_1'"):
        save_card(tmp_path, {**card, "fact_id": "2026_05_25_md_ts_1", "content": "second"})
    saved = yaml.safe_load((tmp_path / "Cards" / "2026_05_25_md_ts_1.yaml").read_text())
    assert saved["fact_id"] == "2026/05/25.md#ts_1" and saved["content"] == "first"


# -- 10. smaller items ----------------------------------------------------------------------------
def test_misspelt_tool_arguments_are_errors_not_ignored(tmp_path: Path) -> None:
    registry = default_registry(tmp_path)
    result = registry.invoke("file__parse", {"file_id": "x", "User_Id": "bob"}, {"matter_id": "m"})
    assert not result.ok and "unknown argument(s) 'User_Id'" in result.content


def test_a_corrupt_checkpoint_answers_json_500(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    deck = SkillDeck(
        checkpointer=f"sqlite:///{db}",
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES)),
    )
    own_matter(deck, "demo-matter", "alice")
    with TestClient(create_app(deck, api_keys=HASHES), raise_server_exceptions=False) as client:
        thread, _ = _run(
            client,
            "alice",
            {
                "input": {"documents": ["complaint.txt"]},
                "context": "matter",
                "matter_id": "demo-matter",
            },
        )
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE checkpoints SET checkpoint = X'c1c1c1c1'")
        broken = client.get(f"/threads/{thread}", headers=auth("alice"))
    deck.close()
    assert broken.status_code == 500
    assert broken.headers["content-type"] == "application/json"
    assert broken.json()["error"]["code"] == "INTERNAL_ERROR"


def test_concurrent_first_requests_build_one_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import skilldeck.deck as deck_module

    built: list[str] = []
    real = deck_module.build_model

    def slow(*args: Any) -> Any:
        built.append("model")
        time.sleep(0.05)
        return real(*args)

    monkeypatch.setattr(deck_module, "build_model", slow)
    with SkillDeck(
        checkpointer="memory://", settings=Settings(model=f"scripted:{DEMO_SCRIPT}")
    ) as deck:
        threads = [
            threading.Thread(target=deck._model_for, args=("litigation-intake",)) for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert built == ["model"]


def test_docs_pages_load_nothing_from_a_cdn_unless_asked(demo_deck: SkillDeck) -> None:
    with TestClient(create_app(demo_deck, api_keys=HASHES)) as client:
        assert client.get("/docs").status_code == 404
        assert client.get("/openapi.json").status_code == 200
    with TestClient(create_app(demo_deck, api_keys=HASHES, docs=True)) as client:
        assert client.get("/docs").status_code == 200


# == issue 32: hardening, round two ============================================================
LEAKED = "sk-proj-LEAKED0123456789abcdefXYZ"


def _events(text: str) -> list[dict[str, Any]]:
    """The JSON ``data`` of each SSE message (skilldeck's events, or AG-UI's)."""
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def _agui(thread: str, run: str, **fields: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [], "tools": [], "context": [],
            "state": {}, "forwardedProps": {}, **fields}  # fmt: skip


def _said(text: str) -> dict[str, Any]:
    return {"id": "m1", "role": "user", "content": text}


# -- 1. routing-model errors ------------------------------------------------------------------
def _provider_refuses_routing(body: dict[str, Any]) -> Any:
    """A provider that refuses the routing call 401 with the key it was sent in its error body
    (as OpenAI's does), and answers a skill's call."""
    if "You route a user's request" in str(body["messages"][0]["content"]):
        return Answer(status=401, error=f"Incorrect API key provided: {LEAKED}.")
    return text(json.dumps(output(response="Soup tonight.")["output"]))


@pytest.fixture
def routing_deck(skills_dir: Path, tmp_path: Path) -> Iterator[SkillDeck]:
    """Two skills routed by description (context ``auto``) by a real model whose every routing
    call fails with the key echoed."""
    write_bundle(skills_dir, "recipes", meta={"description": "Suggest a recipe to cook"})
    write_bundle(skills_dir, "poems", meta={"description": "Write a short poem"})
    with serve([_provider_refuses_routing] * 40) as endpoint:
        settings = settings_for(endpoint, api_key=LEAKED, output_mode="json")
        with SkillDeck(
            skills_dir, checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings
        ) as deck:
            yield deck


def test_routing_model_errors_reach_no_client_surface(
    routing_deck: SkillDeck, caplog: pytest.LogCaptureFixture
) -> None:
    deck, failed = routing_deck, "AuthenticationError (HTTP 401)); "
    # The reason says the routing model failed, and why in words anyone may read.
    # Python API: the lexical ranker still picks a skill, and the checkpointed reason is safe.
    picked = deck.run("suggest a recipe to cook", context="auto", user_id="alice")
    assert picked.status == "finished", picked.error
    reason = picked.state["attempt"]["route"]["reason"]
    assert reason.startswith("the routing model failed (") and failed in reason
    # No skill matches: the reason is the run's error.
    nothing = deck.run("zzz qqq", context="auto", user_id="alice")
    assert nothing.status == "no_skill" and failed in nothing.error.message
    seen = [picked.to_dict(), nothing.to_dict(), deck.history(picked.thread_id)]
    seen += [deck.history(nothing.thread_id), deck.get_thread(picked.thread_id).to_dict()]
    with TestClient(create_app(deck, api_keys=HASHES)) as client:
        for request in ("suggest a recipe to cook", "zzz qqq"):
            thread = client.post("/threads", headers=auth("alice")).json()["thread_id"]
            body = {"input": {"request": request}, "context": "auto"}
            sse = client.post(f"/threads/{thread}/runs", headers=auth("alice"), json=body).text
            agui = _agui(f"agui-{len(seen)}", "r1", messages=[_said(request)])
            agui_text = client.post("/agui", headers=auth("alice"), json=agui).text
            reads = [
                client.get(path, headers=auth("alice")).text
                for path in (
                    f"/threads/{thread}",
                    f"/threads/{thread}/history",
                    f"/threads/{agui['threadId']}",
                    f"/threads/{agui['threadId']}/history",
                    "/threads",
                )
            ]
            seen += [sse, agui_text, *reads]
        error = next(e for e in _events(sse) if e["event"] == "error")
        assert error["code"] == "NO_SKILL" and failed in error["message"]
        run_error = next(e for e in _events(agui_text) if e["type"] == "RUN_ERROR")
        assert failed in run_error["message"]
    shown = json.dumps(seen)
    assert shown.count(failed) >= 8
    assert LEAKED not in shown and "Incorrect API key" not in shown
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("skilldeck"))
    assert "Incorrect API key provided: [redacted]" in logged and LEAKED not in logged


def test_only_safe_reason_builds_what_a_route_reason_or_an_error_event_takes() -> None:
    with pytest.raises(TypeError, match="safe_reason"):
        PublicReason(f"Error code: 401 - {LEAKED}")
    with pytest.raises(TypeError, match="PublicReason"):
        RouteModelError(f"Error code: 401 - {LEAKED}")  # type: ignore[arg-type]
    reason = safe_reason(RuntimeError(LEAKED))
    assert str(RouteModelError(reason)) == "RuntimeError"
    event = SKILLDECK_EVENTS.error("t", "MODEL_ERROR", reason).to_dict()
    assert LEAKED not in json.dumps(event)


def test_a_failing_tools_text_reaches_the_model_as_its_public_reason_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with serve([Answer(status=500)]) as service:

        def lookup(q: str) -> str:
            """Look ``q`` up in a service whose key is in its URL."""
            response = httpx.post(f"{service.url}/lookup?api_key={LEAKED}", json={"q": q})
            response.raise_for_status()
            return response.text

        registry = ToolRegistry([StructuredTool.from_function(lookup, name="svc__lookup")])
        result = registry.invoke("svc__lookup", {"q": "x"}, {})
    assert not result.ok
    assert result.content.startswith("Error: svc__lookup failed: HTTPStatusError (HTTP 500)")
    assert LEAKED not in result.content and "lookup?" not in result.content
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "skilldeck")
    assert "api_key=[redacted]" in logged and LEAKED not in logged


def test_no_foreign_exception_text_is_formatted_where_clients_read() -> None:
    """The structural guard: in the modules whose text reaches clients, models or a thread's
    state, a caught exception is never formatted (``f"{exc}"``, ``str(exc)``, ``exc.args``)
    unless it is one of skilldeck's own errors or a parse error of the caller's own input;
    anything else goes through ``redact.safe_reason``/``log_error``."""
    root = Path(__file__).resolve().parents[1]
    modules = [
        *sorted((root / "nodes").rglob("*.py")),
        *sorted((root / "skilldeck" / "server").glob("*.py")),
        root / "skilldeck" / "_internal" / "driver.py",
        root / "skilldeck" / "_internal" / "events.py",
        root / "skilldeck" / "deck.py",
        root / "tools" / "registry.py",
        root / "tools" / "mcp.py",
    ]
    # Errors whose text is skilldeck's own words, or says what is wrong with the caller's (or
    # the model's) own input.
    own = {
        "DeadlineError", "RetryableModelError", "_Refused",
        "DocumentError", "JSONDecodeError", "ValidationError", "ToolException", "ValueError",
    }  # fmt: skip
    own |= {  # every error skilldeck raises on purpose says only what skilldeck chose to say
        name
        for name, value in vars(skilldeck.errors).items()
        if isinstance(value, type) and issubclass(value, skilldeck.errors.SkillDeckError)
    }
    # ValueError is allowed only where jsonschema-rs or json read the caller's own data.
    value_error_sites = {"card.py", "skill.py", "contract.py"}
    found = []
    for module in modules:
        tree = ast.parse(module.read_text("utf-8"))
        for handler in ast.walk(tree):
            if not isinstance(handler, ast.ExceptHandler) or handler.name is None:
                continue
            caught = handler.type
            names = {
                n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "")
                for n in (caught.elts if isinstance(caught, ast.Tuple) else [caught])
            }
            if "ValueError" in names and module.name not in value_error_sites:
                names.discard("ValueError")
            if names and names <= own:
                continue
            for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
                shown = (
                    (
                        isinstance(node, ast.FormattedValue)
                        and isinstance(node.value, ast.Name)
                        and node.value.id == handler.name
                    )
                    or (
                        isinstance(node, ast.Call)
                        and getattr(node.func, "id", None) in ("str", "repr")
                        and any(getattr(a, "id", None) == handler.name for a in node.args)
                    )
                    or (
                        isinstance(node, ast.Attribute)
                        and node.attr == "args"
                        and getattr(node.value, "id", None) == handler.name
                    )
                )
                if shown:
                    found.append(f"{module.relative_to(root)}:{node.lineno}")
    assert found == [], f"exception text formatted where clients read it: {found}"


# -- 2. ids and the run log --------------------------------------------------------------------
@pytest.fixture
def agui_app(tmp_path: Path) -> Iterator[tuple[TestClient, SkillDeck]]:
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), run_log_mb=0.2)
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings) as deck:
        own_matter(deck, "demo-matter", "alice")
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            yield client, deck


DEMO_RUN = {"input": {"documents": ["complaint.txt"]}, "context": "matter",
            "matter_id": "demo-matter"}  # fmt: skip


@pytest.mark.parametrize(
    "fields",
    [
        {"runId": "r" * 900_000},
        {"runId": "r" * 129},
        {"runId": "../r"},
        {"threadId": "t" * 129},
        {"parentRunId": "p" * 5000},
        {"messages": [{"id": "m" * 5000, "role": "user", "content": "hi"}]},
        {"resume": [{"interruptId": "i" * 5000, "status": "resolved", "payload": {}}]},
    ],
    ids=[
        "900 KB runId",
        "129 chars",
        "a path",
        "threadId",
        "parentRunId",
        "message id",
        "interruptId",
    ],
)
def test_agui_ids_past_the_one_rule_are_refused_422_before_anything_runs(
    agui_app: tuple[TestClient, SkillDeck], fields: dict[str, Any]
) -> None:
    client, deck = agui_app
    body = _agui("agui-ids", "r1", forwardedProps=DEMO_RUN, **fields)
    answer = client.post("/agui", headers=auth("alice"), json=body)
    assert answer.status_code == 422, answer.text[:500]
    assert answer.json()["error"]["code"] == "INVALID_REQUEST"
    assert len(answer.content) < 5000  # the refusal does not echo the id back
    runs = client.app.state.service.runs  # type: ignore[attr-defined]
    assert deck.index.get("agui-ids") is None and runs.logs.held == 0
    ok = client.post("/agui", headers=auth("alice"), json=_agui("agui-ids", "r" * 128))
    assert ok.status_code == 200  # the longest id is fine


def test_every_client_chosen_id_follows_the_one_rule(
    agui_app: tuple[TestClient, SkillDeck],
) -> None:
    client, deck = agui_app
    long = "x" * 129
    thread = client.post("/threads", headers=auth("alice")).json()["thread_id"]
    refused = [
        client.post(f"/threads/{thread}/runs", headers=auth("alice"),
                    json={**DEMO_RUN, "matter_id": long}),
        client.post(f"/threads/{thread}/resume", headers=auth("alice"),
                    json={"answers": {}, "interrupt_id": long}),
        client.get(f"/threads/{long}", headers=auth("alice")),
        client.get(f"/threads/{thread}/stream",
                   headers={**auth("alice"), "Last-Event-ID": long}),
    ]  # fmt: skip
    assert [r.status_code for r in refused] == [422] * 4
    for kind, call in (
        ("thread_id", lambda: deck.run(DEMO_RUN["input"], context="matter", thread_id=long)),
        ("matter_id", lambda: deck.run({}, context="matter", matter_id=long)),
        ("thread_id", lambda: deck.run({}, context="matter", thread_id="a/b")),
    ):
        with pytest.raises(SkillDeckError, match=f"{kind} .*1 to 128 letters"):
            call()
    assert deck.threads() == [] or all(t.thread_id == thread for t in deck.threads())


@pytest.mark.slow
def test_run_logs_hold_at_most_their_budget_over_many_runs(
    agui_app: tuple[TestClient, SkillDeck], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = agui_app
    logs = client.app.state.service.runs.logs  # type: ignore[attr-defined]
    assert logs.budget == 200_000
    peaks: list[int] = []
    real_append = RunLog.append

    def append(self: RunLog, event: Any) -> None:
        real_append(self, event)
        peaks.append(logs.held)
        kept = [lg for lg in logs._logs.values()]
        reserved = sum(lg.reserve for lg in kept if not lg.done and not lg.cut)
        assert logs.held == sum(lg.size for lg in kept) + reserved  # the count is honest

    monkeypatch.setattr(RunLog, "append", append)
    for i in range(60):  # AG-UI runs stream the models' text: each run's log is ~20 KB
        body = _agui(f"log-{i}", f"run-{i}", forwardedProps=DEMO_RUN)
        answer = client.post("/agui", headers=auth("alice"), json=body)
        assert answer.status_code == 200 and '"RUN_FINISHED"' in answer.text
    assert len(peaks) > 60 * 10 and max(peaks) <= logs.budget
    assert sum(peaks) / len(peaks) > logs.budget / 4  # the budget is used, not just respected
    # The latest runs can still be followed; the oldest were dropped to make room.
    assert client.get("/threads/log-59/stream", headers=auth("alice")).status_code == 200
    assert client.get("/threads/log-0/stream", headers=auth("alice")).status_code == 404


def test_a_run_that_outgrows_the_run_log_is_cut_off_and_goes_on(tmp_path: Path) -> None:
    settings = Settings(
        model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), run_log_mb=0.01
    )
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings) as deck:
        own_matter(deck, "demo-matter", "alice")
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            answer = client.post(
                "/agui", headers=auth("alice"), json=_agui("big", "r1", forwardedProps=DEMO_RUN)
            )
            said = _events(answer.text)
            assert said[-1]["type"] == "RUN_ERROR" and said[-1]["code"] == "RUN_LOG_FULL"
            assert "GET /threads/big" in said[-1]["message"]
            assert len(answer.content) <= 10_000
            for _ in range(200):  # the run went on to its card
                status = client.get("/threads/big", headers=auth("alice")).json()["status"]
                if status != "running":
                    break
                time.sleep(0.05)
            assert status == "interrupted"


def test_runs_that_cannot_get_room_in_the_run_log_are_refused_503() -> None:
    async def fill() -> None:
        logs = RunLogs(budget=5_000)
        opened = []
        with pytest.raises(SkillDeckError) as full:
            for i in range(100):
                opened.append(logs.open(f"t{i}", "alice"))
        assert full.value.code == "RUN_LOG_FULL" and logs.held <= logs.budget
        for log in opened:
            logs.drop(log)
        assert logs.held == 0
        assert logs.open("again", "alice").reserve > 0

    asyncio.run(fill())


# -- 9. AG-UI matter ids are checked before they are claimed ------------------------------------
@pytest.mark.parametrize(
    "matter",
    ["../x", "m" * 900_000, {"a": 1}, 7, ["demo-matter"]],
    ids=["path", "900 KB", "object", "int", "list"],
)
def test_agui_matter_ids_are_validated_before_they_are_claimed(tmp_path: Path, matter: Any) -> None:
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES),
                        matter_policy="claim")  # fmt: skip
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'c.sqlite'}", settings=settings) as deck:
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            props = {**DEMO_RUN, "matter_id": matter}
            answer = client.post(
                "/agui", headers=auth("alice"), json=_agui("m-1", "r1", forwardedProps=props)
            )
            assert answer.status_code == 422, answer.text[:300]
            assert "forwardedProps.matter_id" in answer.json()["error"]["message"]
            assert len(answer.content) < 2000
        assert deck.index.matters() == [] and deck.index.get("m-1") is None


# -- 10. quotas on stored rows ------------------------------------------------------------------
def test_threads_and_matters_past_a_users_quota_are_403_and_nothing_is_stored(
    database_url: str,
) -> None:
    settings = Settings(
        model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), matter_policy="claim",
        max_threads_per_user=3, max_matters_per_user=1,
    )  # fmt: skip
    with SkillDeck(checkpointer=database_url, settings=settings) as deck:
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            made = [client.post("/threads", headers=auth("alice")) for _ in range(2)]
            assert [r.status_code for r in made] == [201, 201]
            # An AG-UI request that is refused stores no thread: not counted, not kept.
            for body in (
                _agui("a-refused", "r1"),  # nothing to run
                _agui("a-refused", "r1", forwardedProps={**DEMO_RUN, "matter_id": None}),
            ):
                client.post("/agui", headers=auth("alice"), json=body)
            assert deck.index.get("a-refused") is None
            first = _agui("a-1", "r1", forwardedProps=DEMO_RUN)  # claims demo-matter
            assert client.post("/agui", headers=auth("alice"), json=first).status_code == 200
            over = client.post("/threads", headers=auth("alice"))
            assert over.status_code == 403
            assert over.json()["error"]["code"] == "QUOTA_EXCEEDED"
            assert over.json()["error"]["quota"] == "threads"
            assert "SKILLDECK_MAX_THREADS_PER_USER" in over.json()["error"]["message"]
            agui_over = client.post("/agui", headers=auth("alice"), json=_agui("a-2", "r1",
                                    messages=[_said("hi")]))  # fmt: skip
            assert agui_over.status_code == 403 and deck.index.get("a-2") is None
            assert len(deck.threads(user_id="alice")) == 3
            assert client.post("/threads", headers=auth("bob")).status_code == 201  # per user
            # Matters: bob claims one, and is refused a second.
            thread = client.post("/threads", headers=auth("bob")).json()["thread_id"]
            mine = {**DEMO_RUN, "matter_id": "bobs-1"}
            client.post(f"/threads/{thread}/runs", headers=auth("bob"), json=mine)
            second = client.post(
                f"/threads/{thread}/runs", headers=auth("bob"),
                json={**DEMO_RUN, "matter_id": "bobs-2"},
            )  # fmt: skip
            assert second.status_code == 403 and second.json()["error"]["quota"] == "matters"
        assert [m for m, _, _ in deck.index.matters()] == ["bobs-1", "demo-matter"]
        assert deck.index.add_matter("for-bob", "bob")  # an operator is never refused


# -- 11. the granted matter policy is the service's default ------------------------------------
def test_serve_lets_users_name_only_matters_granted_to_them_unless_claim_is_chosen(
    tmp_path: Path,
) -> None:
    assert Settings.model_fields["matter_policy"].default == "granted"
    base = {"model": f"scripted:{DEMO_SCRIPT}", "files_root": str(DEMO_FILES)}
    url = f"sqlite:///{tmp_path / 'a.sqlite'}"
    with (
        SkillDeck(checkpointer=url, settings=Settings(**base)) as deck,
        TestClient(create_app(deck, api_keys=HASHES)) as client,
    ):
        _, refused = _run(client, "alice", DEMO_RUN)
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "MATTER_NOT_FOUND"
        assert deck.index.matters() == []  # naming it claimed nothing
        own_matter(deck, "demo-matter", "alice")
        _, served = _run(client, "alice", DEMO_RUN)
        assert served.status_code == 200 and "event: card" in served.text
        _, bobs = _run(client, "bob", DEMO_RUN)
        assert bobs.status_code == 404
    claim = Settings(**base, matter_policy="claim")
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'b.sqlite'}", settings=claim) as deck:
        with TestClient(create_app(deck, api_keys=HASHES)) as client:
            _, claimed = _run(client, "alice", DEMO_RUN)
            assert claimed.status_code == 200
        assert deck.index.matter("demo-matter") == ("alice", ())


# -- 12. card field keys ---------------------------------------------------------------------------
def test_a_card_field_key_nested_too_deep_is_re_asked(skills_dir: Path, tmp_path: Path) -> None:
    write_bundle(skills_dir, "asker", data={"n": {"type": "object"}})

    def ask(key: str) -> dict[str, Any]:
        question = {"question": "?", "field_key": key, "input_type": "text", "required": True}
        return output(action="ask_user", review_type="clarify", questions=[question])

    deep = "n." + ".".join(["a"] * 300)
    turns = [
        {**ask(deep), "invalid": True},
        {**ask("n." + "b" * 300), "invalid": True},
        ask("n." + ".".join(["a"] * 15)),  # 16 parts: the most there may be
        output(),
    ]
    script = tmp_path / "t.json"
    script.write_text(json.dumps({"skills": {"asker": turns}}))
    settings = Settings(model=f"scripted:{script}", max_retries=2)
    with SkillDeck(skills_dir, checkpointer="memory://", settings=settings) as deck:
        paused = deck.run(context="ctx")
        assert paused.status == "interrupted", paused.error
        rejected = [r for r in deck.history(paused.thread_id) if r["action"] == "rejected"]
        errors = [e for r in rejected for e in r["validation_errors"]]
        assert all(e["path"].endswith(".field_key") for e in errors) and len(rejected) == 2
        assert paused.card is not None
        (question,) = paused.card["questions"]
        done = deck.run(Resume(paused.thread_id, {question["field_key"]: "yes"}))
        assert done.status == "finished", done.error


# -- attacker review, H1: checking a body's limits costs memory linear in its size ---------------
def test_a_long_key_over_many_children_is_checked_in_memory_linear_in_its_size() -> None:
    key = "K" * 40_000
    value = {key: {**{str(i): 0 for i in range(4_000)}, "last": float("inf")}}
    tracemalloc.start()
    try:
        (problem,) = OutputLimits().problems(value, "body")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # an 83 KB value: a path string per node held 4,000 copies of the key (about 160 MB)
    assert peak < 2_000_000, f"{peak} bytes at peak"
    assert problem["path"] == f"body.{'K' * (PATH_PART_CHARS - 1)}….last"
    assert problem["message"] == "inf is not a JSON number"


def test_a_large_body_is_checked_off_the_event_loop(
    demo_deck: SkillDeck, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked_on_loop: list[bool] = []
    check = limits.json_problem

    def watched(body: bytes, bounds: OutputLimits) -> str | None:
        try:
            asyncio.get_running_loop()
            checked_on_loop.append(True)
        except RuntimeError:
            checked_on_loop.append(False)
        return check(body, bounds)

    monkeypatch.setattr(limits, "json_problem", watched)
    big = json.dumps({"context": "matter", "input": {"n": ["x" * 100] * 1_000}})
    with TestClient(create_app(demo_deck, api_keys=HASHES)) as client:
        thread = client.post("/threads", headers=auth("alice")).json()["thread_id"]
        answer = client.post(
            f"/threads/{thread}/runs",
            content=big.replace('"x', '"\\ud800', 1),
            headers={**auth("alice"), "content-type": "application/json"},
        )
    assert answer.status_code == 422, answer.text
    assert "lone UTF-16 surrogate" in answer.json()["error"]["message"]
    assert checked_on_loop == [False]


# -- attacker review, H2: a 422 is bounded whatever the body --------------------------------------
_LONG = "K" * 20_000


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("runs", {"context": "matter", "input": {_LONG: [1e300] * 200}}),
        ("resume", {"answers": {_LONG: [{"n": -1e300}] * 200}}),
        ("continue", {f"{_LONG[:2_000]}{i}": 1 for i in range(100)}),
        ("agui", _agui("t-422", "r1", messages=[{"role": "user", "content": 5}] * 2_000)),
    ],
)
def test_a_422_lists_a_bounded_number_of_bounded_errors(
    demo_deck: SkillDeck, route: str, body: dict[str, Any]
) -> None:
    with TestClient(create_app(demo_deck, api_keys=HASHES)) as client:
        thread = client.post("/threads", headers=auth("alice")).json()["thread_id"]
        path = "/agui" if route == "agui" else f"/threads/{thread}/{route}"
        answer = client.post(path, headers=auth("alice"), json=body)
    assert answer.status_code == 422, answer.text[:500]
    error = answer.json()["error"]
    assert error["code"] == "INVALID_REQUEST"
    # before: one error per union branch per value, each with the 20,000-character key (24 MB)
    assert len(answer.content) < 16_000, len(answer.content)
    assert len(error["errors"]) == MAX_LISTED_ERRORS and error["more_errors"] > 0
    assert all(len(part) <= LOC_PART_CHARS for e in error["errors"] for part in e["loc"])
    assert f"(and {MAX_LISTED_ERRORS + error['more_errors'] - 3} more)" in error["message"]


def test_one_bad_json_value_is_one_error_naming_its_json_type(demo_deck: SkillDeck) -> None:
    with TestClient(create_app(demo_deck, api_keys=HASHES)) as client:
        thread = client.post("/threads", headers=auth("alice")).json()["thread_id"]
        body = {"context": "matter", "input": {"n": [1, 2.5, None, 1e300, {"m": -1e300}]}}
        answer = client.post(f"/threads/{thread}/runs", headers=auth("alice"), json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert [(e["loc"], e["type"]) for e in error["errors"]] == [
        (["body", "input", "n", "array", "3", "number"], "less_than_equal"),
        (["body", "input", "n", "array", "4", "object", "m", "number"], "greater_than_equal"),
    ]
    assert error["more_errors"] == 0


# -- attacker review, M1 and L1: the run log is shared fairly and counts what it costs ----------
def _delta(n: int = 200) -> DeltaEvent:
    return DeltaEvent("t", "skill", 1, "x" * n)


def _honest(logs: RunLogs) -> None:
    """The count of held bytes is the logs' sizes plus the reserves of running ones."""
    kept = set(logs._logs.values()) | set(logs._running)
    reserved = sum(lg.reserve for lg in kept if not lg.done and not lg.cut)
    assert logs.held == sum(lg.size for lg in kept) + reserved
    assert logs.held <= logs.budget


def test_one_users_running_logs_never_refuse_another_users_run() -> None:
    async def starve() -> None:
        logs = RunLogs(budget=1_000_000)
        mine = [logs.open(f"a{i}", "alice") for i in range(4)]
        for log in mine:
            logs.publish(log)
        for _ in range(2_000):  # alice's four runs stream 2.2 MB of deltas
            for log in mine:
                log.append(_delta())
            _honest(logs)
        assert any(log.cut for log in mine)
        theirs = logs.open("b", "bob")  # before: 503 RUN_LOG_FULL
        logs.publish(theirs)
        for _ in range(1_000):
            theirs.append(_delta())
            for log in mine:
                log.append(_delta())
        _honest(logs)
        assert not theirs.cut  # bob's 280 KB fit his half of the budget
        assert sum(log.size for log in mine) <= logs.budget // 2 + 4 * mine[0].reserve
        assert all(log.cut for log in mine)  # alice's logs past her half were cut off
        for log in [*mine, theirs]:
            log.close()
        _honest(logs)
        assert logs._users == {}

    asyncio.run(starve())


def test_a_cut_log_keeps_only_what_its_readers_have_not_read() -> None:
    async def read() -> None:
        logs = RunLogs(budget=200_000)
        log = logs.open("a", "alice")
        logs.publish(log)
        for _ in range(100):
            log.append(_delta())
        reader = log.follow()
        first = [await anext(reader) for _ in range(40)]
        while not log.cut:
            log.append(_delta())
        _honest(logs)
        assert log.first == 40  # the 40 read are let go, the unread kept for the reader
        rest = [m async for m in _until_done(log, reader)]
        assert b"RUN_LOG_FULL" in rest[-1] and len(first) + len(rest) == log.first + 1
        assert len(log.messages) == 1 and log.size < 2_000  # the last event only
        late = [m async for m in _until_done(log, log.follow())]
        assert len(late) == 1 and b"RUN_LOG_FULL" in late[0]
        _honest(logs)

    asyncio.run(read())


async def _until_done(log: RunLog, reader: Any) -> Any:
    log.close()
    async for message in reader:
        yield message


@pytest.mark.slow
def test_run_logs_count_what_they_cost_in_memory() -> None:
    from ag_ui.core import RunErrorEvent, RunStartedEvent

    from skilldeck.server.agui import AGUI_EVENTS

    async def refuse_many() -> tuple[int, int]:
        logs = RunLogs(budget=64_000_000)
        tracemalloc.start()
        try:
            for i in range(5_000):
                log = logs.open(f"t{i:08d}", "alice", AGUI_EVENTS)
                logs.publish(log)
                log.append(RunStartedEvent(thread_id=f"t{i:08d}", run_id="r"))
                log.append(RunErrorEvent(message="nothing to run", code="NOTHING_TO_RUN"))
                log.close()
            used, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return used, logs.held

    used, held = asyncio.run(refuse_many())
    assert used <= held * 1.15, f"{used} bytes used, {held} counted"  # before: 7x


# -- attacker review, L4: the LangGraph server holds users to their matter quota -----------------
def test_the_langgraph_server_holds_a_claiming_user_to_the_matter_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_sdk import Auth

    from skilldeck import langgraph_app

    class Caller:
        identity, display_name, is_authenticated, permissions = "alice", "alice", True, ()

    def run_on(matter: str) -> Any:
        value = {"kwargs": {"input": {"matter_id": matter}}, "metadata": {}}
        ctx = Auth.types.AuthContext(
            permissions=[], user=Caller(), resource="threads", action="create_run"
        )
        return asyncio.run(langgraph_app._create_run(ctx, value))

    monkeypatch.setenv("SKILLDECK_CHECKPOINT_URL", f"sqlite:///{tmp_path / 'c.sqlite'}")
    monkeypatch.setenv("SKILLDECK_MATTER_POLICY", "claim")
    monkeypatch.setenv("SKILLDECK_MAX_MATTERS_PER_USER", "2")
    langgraph_app._matters.cache_clear()
    try:
        assert run_on("matter-1") == run_on("matter-2") == {"owner": "alice"}
        with pytest.raises(Auth.exceptions.HTTPException) as refused:
            run_on("matter-3")  # before: alice claimed it, past her quota of 2
        assert refused.value.status_code == 403
        assert "SKILLDECK_MAX_MATTERS_PER_USER" in str(refused.value.detail)
        index, _ = langgraph_app._matters()
        assert index.matter("matter-3") is None and index.matter("matter-1") == ("alice", ())
    finally:
        langgraph_app._matters.cache_clear()


# -- attacker review, L5: no run is accepted once the process shuts down --------------------------
def test_a_run_asked_for_while_the_queue_shuts_down_is_refused_and_claims_nothing(
    demo_deck: SkillDeck,
) -> None:
    queue = RunQueue(workers=1, per_user=1, queued_per_user=1)
    ran: list[str] = []
    slot = queue.reserve("alice")  # set up before the shutdown: it still runs
    closing = threading.Thread(target=queue.shutdown)
    closing.start()
    for _ in range(500):
        if queue._closing:
            break
        time.sleep(0.01)
    with pytest.raises(SkillDeckError) as refused:
        queue.reserve("bob")
    assert refused.value.code == "SHUTTING_DOWN"
    slot.submit(lambda: ran.append("alice"))
    closing.join(30)
    assert ran == ["alice"] and not closing.is_alive()

    own_matter(demo_deck, "demo-matter", "alice")
    with TestClient(create_app(demo_deck, api_keys=HASHES)) as client:
        thread = client.post("/threads", headers=auth("alice")).json()["thread_id"]
        runs = client.app.state.service.runs  # type: ignore[attr-defined]
        assert client.portal is not None
        assert client.portal.call(runs.drain, 5.0) == frozenset()
        body = {"context": "matter", "matter_id": "demo-matter", "input": {"documents": []}}
        answer = client.post(f"/threads/{thread}/runs", headers=auth("alice"), json=body)
        assert answer.status_code == 503 and answer.headers["retry-after"]
        assert answer.json()["error"]["code"] == "SHUTTING_DOWN"
        assert client.get(f"/threads/{thread}", headers=auth("alice")).json()["status"] == "new"
        assert demo_deck.claims.live([thread]) == set()  # no run lease held


# -- attacker review, L2: context auto reaches no matter-bound skill without a matter -------------
def test_an_auto_run_without_a_matter_never_reaches_a_skill_that_works_in_one(
    demo_deck: SkillDeck,
) -> None:
    matter_skills = set(demo_deck.matter_skills())
    assert {"pkm-agent", "card-agent"} <= matter_skills
    with TestClient(create_app(demo_deck, api_keys=HASHES)) as client:
        for request in ("save a note to my pkm", "card for fact"):
            thread = client.post("/threads", headers=auth("bob")).json()["thread_id"]
            body = {"input": {"request": request, "content": "buy milk"}, "context": "auto"}
            answer = client.post(f"/threads/{thread}/runs", headers=auth("bob"), json=body)
            assert answer.status_code == 200, answer.text[:300]
            state = client.get(f"/threads/{thread}", headers=auth("bob")).json()["state"]
            ran = {a["skill"] for a in [state.get("attempt") or {}] if a}
            assert not ran & matter_skills, ran  # before: pkm-agent / card-agent ran
    note = {"request": "save a note to my pkm", "content": "buy milk"}
    result = demo_deck.run(note, context="auto", user_id="bob")
    assert (result.state.get("attempt") or {}).get("skill") not in matter_skills
    if result.status == "no_skill":
        assert result.error is not None
        reasons = {row.skill: row.reason for row in result.error.skills}
        assert "work in a matter" in reasons["pkm-agent"]
    # The route table says why; with a matter, the same request reaches the matter's skill.
    without = demo_deck.route(note, user_id="bob")
    reasons = {row.skill: row.reason for row in without.skills}
    assert "work in a matter" in reasons["pkm-agent"], reasons
    with_matter = demo_deck.route(note, user_id="bob", matter_id="m1")
    assert with_matter.skill == "pkm-agent", with_matter
