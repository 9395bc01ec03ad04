"""Shared fixtures: build skill bundles in a temp folder and decks on scripted models."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from leftovers import Leftovers

# The real-server fixtures (postgres_url, chroma_url, ...): see tests/servers.py.
from servers import chroma_url, postgres_server, postgres_url, private_postgres  # noqa: F401
from tiers import Tiers

from skilldeck import Settings, SkillDeck, demo
from skilldeck.skills import builtin_skills_dir

DEMO_SCRIPT = demo.SCRIPT
DEMO_FILES = demo.FILES
DEMO_ANSWERS = demo.ANSWERS
#: A valid litigation-intake output naming both parties, for tests that script an endpoint.
INTAKE_FINAL = {
    "response": "Both parties are named.",
    "profile": {
        "plaintiff": {"name": "Jane Doe", "type": "person"},
        "defendant": {"name": "Acme", "type": "organisation"},
        "intake_status": "completed",
    },
    "data": {"evidence_list": []},
    "control": {"action": "continue"},
}

#: A user's small chat history, for the memory tools and the recall skill.
MEMORY_TEXTS = [
    ("m1", "user", "2026-01-03T09:00:00Z", "I don't eat spicy food, 我不吃辣."),
    ("m2", "assistant", "2026-01-03T09:00:05Z", "Noted: no spicy dishes for you."),
    ("m3", "user", "2026-01-10T12:00:00Z", "我不吃香菜，也不太吃辣的东西。"),
    ("m4", "user", "2026-02-01T08:30:00Z", "I work as a nurse in Lyon and I love hiking."),
    ("m5", "assistant", "2026-02-01T08:31:00Z", "Hiking near Lyon sounds great! Any trail?"),
    ("m6", "user", "2026-03-15T18:00:00Z", "I'm allergic to peanuts, please remember that."),
    ("m7", "user", "2026-03-15T18:01:00Z", "Spicy curry is fine for my husband, not for me."),
]


#: Seed 003's two example tasks, as the seed prints them (JSON text).
SEED_CARD = """{
"id": "card_event_meeting_with_time",
"input": {
"fact_id": "2026/05/25.md#ts_1",
"content": "Standup with the eval team Thursday 10:30am, Zoom."
},
"graders": [
{ "name": "card_completion" },
{
"name": "card_template_choice",
"config": { "expected_template_ids": ["event"] }
},
{
"name": "card_must_contain",
"config": { "substrings": ["10:30", "zoom"] }
}
]
}"""
SEED_PKM = """{
"id": "pkm_starter_route_into_health_sleep",
"input": {
"content": "Slept 5.5h, energy crashed at 2pm...",
"base_fixture": "_starter_pkm"
},
"graders": [
{ "name": "pkm_completion" },
{
"name": "pkm_routed_correctly",
"config": {
"expected_buckets": ["Areas/Health/"],
"expected_files": ["Areas/Health/Sleep.md"]
}
},
{ "name": "pkm_no_overwrite" },
{ "name": "pkm_insight_quality" },
{ "name": "pkm_append_coherence" }
]
}"""


def write_bundle(
    root: Path,
    name: str,
    *,
    meta: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    skill_md: str | None = None,
    scripts: Mapping[str, str] | None = None,
    references: Mapping[str, str] | None = None,
) -> Path:
    """Write a bundle folder ``root/name`` and return it.

    ``meta`` is merged over a minimal valid meta (context ``ctx``); ``data`` is the
    ``properties`` of the data schema (default: one string field ``note``).
    """
    folder = root / name
    (folder / "assets").mkdir(parents=True, exist_ok=True)
    full_meta: dict[str, Any] = {
        "name": name,
        "description": f"test skill {name}",
        "triggers": {"contexts": ["ctx"]},
    }
    full_meta.update(meta or {})
    (folder / "skill.meta.json").write_text(json.dumps(full_meta), "utf-8")
    schema = {"properties": {"data": {"properties": dict(data or {"note": {"type": "string"}})}}}
    (folder / "assets" / "output_schema.json").write_text(json.dumps(schema), "utf-8")
    body = (
        skill_md
        if skill_md is not None
        else f"---\nname: {name}\ndescription: test\n---\nDo {name}.\n"
    )
    (folder / "SKILL.md").write_text(body, "utf-8")
    for script, source in (scripts or {}).items():
        (folder / "scripts").mkdir(exist_ok=True)
        (folder / "scripts" / f"{script}.py").write_text(source, "utf-8")
    for ref, text in (references or {}).items():
        (folder / "references").mkdir(exist_ok=True)
        (folder / "references" / ref).write_text(text, "utf-8")
    return folder


def output(
    *,
    response: str = "ok",
    profile: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    action: str = "finish",
    **control: Any,
) -> dict[str, Any]:
    """A valid four-part output turn for a scripted model."""
    return {
        "output": {
            "response": response,
            "profile": dict(profile or {}),
            "data": dict(data or {}),
            "control": {"action": action, **control},
        }
    }


def write_serve_root(root: Path, key_hashes: Mapping[str, str], sleep_s: float) -> Path:
    """What a ``skilldeck serve`` test process needs in ``root``: ``keys.json``, ``script.yaml``
    (the demo's turns plus the ``slow`` context's) and, in ``root/skills``, the two skills of
    context ``slow``: ``warm`` takes one quick step, then ``slow``'s preprocess step sleeps
    ``sleep_s`` and it asks a card, so a client can leave, or a server die, mid-run after a
    first event and a first checkpointed step."""
    write_bundle(
        root / "skills",
        "warm",
        meta={
            "triggers": {"contexts": ["slow"], "state_conditions": ["state.warmed != true"]},
            "priority": 1,
        },
        data={"warmed": {"type": "boolean"}},
    )
    write_bundle(
        root / "skills",
        "slow",
        meta={"triggers": {"contexts": ["slow"]}, "requires": {"all": ["state.warmed == true"]}},
        scripts={"preprocess": f"import time\ndef preprocess(state):\n    time.sleep({sleep_s})\n"},
    )
    ask = output(
        action="ask_user",
        review_type="clarify",
        questions=[
            {"question": "Note?", "field_key": "note", "input_type": "text", "required": True}
        ],
    )
    script = yaml.safe_load(DEMO_SCRIPT.read_text("utf-8"))
    script["skills"]["warm"] = [output(action="continue", data={"warmed": True})]
    script["skills"]["slow"] = [ask, output(action="finish", data={})]
    (root / "script.yaml").write_text(yaml.safe_dump(script), "utf-8")
    (root / "keys.json").write_text(json.dumps(dict(key_hashes)), "utf-8")
    return root


def own_matter(where: SkillDeck | str, matter: str, owner: str, *others: str) -> None:
    """Make ``matter`` ``owner``'s and grant it to ``others``, as an operator does with
    ``skilldeck matters add/grant`` before users run on it over HTTP (the service's default
    ``granted`` policy). ``where`` is a deck or a checkpoint URL (a ``serve`` process's)."""
    from skilldeck.checkpoints.open import open_persistence

    def register(index: Any) -> None:
        index.add_matter(matter, owner)
        for user in others:
            index.grant(matter, user)

    if isinstance(where, SkillDeck):
        register(where.index)
        return
    persistence = open_persistence(where)
    try:
        register(persistence.threads)
    finally:
        persistence.close()


def serve_command(root: Path, port: int, checkpoint: str) -> list[str]:
    """``skilldeck serve`` on ``port`` with what :func:`write_serve_root` wrote in ``root``:
    its keys, its script, the demo skill and the ``slow`` context's skills. Run it with
    ``SKILLDECK_FILES_ROOT`` set to ``DEMO_FILES``."""
    return [
        sys.executable,
        *("-m", "skilldeck.cli", "serve", "--port", str(port)),
        *("--keys", str(root / "keys.json"), "--checkpoint", checkpoint),
        *("--model", f"scripted:{root / 'script.yaml'}"),
        *("--skills", str(builtin_skills_dir() / "litigation-intake")),
        *("--skills", str(root / "skills"), "--trust", str(root / "skills")),
    ]


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    path = tmp_path / "skills"
    path.mkdir()
    return path


@pytest.fixture
def make_deck(tmp_path: Path) -> Iterator[Callable[..., SkillDeck]]:
    """``make_deck(skills, turns={skill: [turn, ...]}, **settings)`` on a fresh SQLite file;
    ``trust``: the bundles whose scripts may run (the deck's ``trust=``)."""
    decks: list[SkillDeck] = []

    def factory(
        skills: Any,
        turns: Mapping[str, list[Any]] | None = None,
        *,
        checkpointer: Any = None,
        trust: Any = (),
        **settings: Any,
    ) -> SkillDeck:
        script = tmp_path / f"script{len(decks)}.yaml"
        script.write_text(yaml.safe_dump({"skills": dict(turns or {})}), "utf-8")
        settings.setdefault("model", f"scripted:{script}")
        deck = SkillDeck(
            skills,
            checkpointer=checkpointer or f"sqlite:///{tmp_path / 'checkpoints.sqlite'}",
            settings=Settings(**settings),
            trust=trust,
        )
        decks.append(deck)
        return deck

    yield factory
    for deck in decks:
        deck.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.server)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A checkpoint URL per backend: a SQLite file, or a fresh database on the real PostgreSQL."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path / 'checkpoints.sqlite'}"


@pytest.fixture
def demo_deck(tmp_path: Path) -> Iterator[SkillDeck]:
    """The built-in skills with the demo's scripted model and files."""
    deck = SkillDeck(
        checkpointer=f"sqlite:///{tmp_path / 'demo.sqlite'}",
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES)),
    )
    yield deck
    deck.close()


class FakeClock:
    """The time claims and leases go by, moved by the test: a lease runs out without a sleep
    (``open_persistence(url, claim_clock=clock)``)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def elapse(self, url: str, seconds: float) -> None:
        """Let ``seconds`` pass for the claims on checkpoint ``url``: this clock moves on, and
        on PostgreSQL, whose server dates the claims, the claims' dates move back."""
        self.advance(seconds)
        if url.startswith(("postgresql://", "postgres://")):
            import psycopg  # the postgres extra: only PostgreSQL URLs need it

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    "UPDATE skilldeck_interrupt_claims SET claimed_at = claimed_at - %s",
                    (seconds,),
                )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Leftovers(), "leftovers")
    config.pluginmanager.register(Tiers(HEAVY_FIXTURES), "tiers")


#: Fixtures that start real servers: a test that uses one is heavy (tests/tiers.py).
HEAVY_FIXTURES = {
    "postgres_url": "server",
    "private_postgres": "server",
    "chroma_url": "server",
    # The HTTP service in process (tests/test_hardening.py's apps).
    "agui_app": "service",
    "rag_client": "service",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``integration`` tests need a real model endpoint: run them only with SKILLDECK_BASE_URL."""
    if os.environ.get("SKILLDECK_BASE_URL"):
        return
    skip = pytest.mark.skip(reason="set SKILLDECK_BASE_URL (and SKILLDECK_MODEL) to run")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)
