"""The rag-retrieve skill end to end: real knowledge base (embedded Chroma), real local files.

Runs without a model (the rules path) and on the scripted provider (the model path: rewrite,
then an answer that the citation contract rejects and the re-ask fixes), and runs every case
of ``skills/rag-retrieve/cases.yaml``, graded by the eval harness's graders.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool

from skilldeck import Settings, SkillDeck
from skilldeck.evals import Task, grade, outcome_of, suite_for_skill
from skilldeck.nodes import transcript
from skilldeck.nodes.retrieval.node import compose_paragraphs
from skilldeck.skills import builtin_skills_dir, load_bundle
from skilldeck.tools import default_registry
from skilldeck.tools.knowledge import KnowledgeBase
from skilldeck.tools.vectors import open_chroma

pytestmark = pytest.mark.L2

ROOT = Path(__file__).resolve().parents[1]
SKILL = "rag-retrieve"
BUNDLE = builtin_skills_dir() / SKILL
FIXTURES = BUNDLE / "fixtures"
CASES = yaml.safe_load((BUNDLE / "cases.yaml").read_text("utf-8"))
SUITE = suite_for_skill(SKILL)  # the cases as the eval harness loads them
SKU = '<CITATION file="docs/glossary.md" lines="5-6" />'
TABLE = "knowledge__table_rag_retrieve"
RAG = "knowledge__rag_retrieve"
MATTER = "m-rag"  # the runs' matter: local files are a matter's files
LOCAL = "file__local_search"


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    folder = tmp_path_factory.mktemp("rag")
    base = KnowledgeBase(folder / "kb", open_chroma(folder / "chroma"))
    base.index(FIXTURES / "kb")
    yield base
    base.close()


@pytest.fixture
def make(kb: KnowledgeBase, tmp_path: Path) -> Iterator[Callable[..., SkillDeck]]:
    """``make(turns=None, bundle=BUNDLE, local=..., files_root=None, extra_tools=())``: a deck
    on the fixture base whose matter ``MATTER`` holds a copy of ``local`` (or on
    ``files_root``); ``turns`` switches to the scripted model."""
    decks: list[SkillDeck] = []

    def factory(
        turns: list[dict[str, Any]] | None = None,
        *,
        bundle: Path = BUNDLE,
        local: Path = FIXTURES / "local",
        files_root: Path | None = None,
        extra_tools: tuple[StructuredTool, ...] = (),
    ) -> SkillDeck:
        if files_root is None:
            files_root = tmp_path / f"files{len(decks)}"
            shutil.copytree(local, files_root / MATTER)
        model = None
        if turns is not None:
            script = tmp_path / f"script{len(decks)}.yaml"
            script.write_text(yaml.safe_dump({"skills": {"rag-retrieve": turns}}), "utf-8")
            model = f"scripted:{script}"
        registry = default_registry(files_root, knowledge=lambda: kb)
        for tool in extra_tools:
            registry.register(tool)
        settings = Settings(model=model, base_url=None, files_root=str(files_root))
        deck = SkillDeck(
            [bundle],
            checkpointer=f"sqlite:///{tmp_path / f'runs{len(decks)}.sqlite'}",
            settings=settings,
            tools=registry,
        )
        decks.append(deck)
        return deck

    yield factory
    for deck in decks:
        deck.close()


def _ask(deck: SkillDeck, question: str, **identity: str) -> dict[str, Any]:
    identity.setdefault("matter_id", MATTER)
    result = deck.run({"question": question}, context="knowledge", **identity)
    assert result.status == "finished", result.error
    return result.state


def _tools(state: Mapping[str, Any]) -> list[str]:
    return [step["tool"] for step in state["attempt"]["trajectory"]["steps"]]


# -- the bundle --------------------------------------------------------------------------------
def test_bundle_carries_the_policy_and_runs_in_retrieval_mode() -> None:
    bundle = load_bundle(BUNDLE)
    assert bundle.name == "rag-retrieve" == BUNDLE.name
    assert bundle.execution.mode == "retrieval"
    assert bundle.execution.model is None and bundle.execution.provider is None
    assert bundle.tools == ("rag_retrieve", "table_rag_retrieve", "local_file_search")
    assert bundle.contexts == ("knowledge",)
    assert set(bundle.data_keys) == {"answer", "citations", "sources_tried", "found"}
    # The model is sent what it acts on (the rewrite, the answer); the sections the runtime
    # executes are a reference, which this mode never puts in a prompt.
    runtime = (BUNDLE / "references" / "retrieval-policy.md").read_text("utf-8")
    for heading in ("Retrieval Order and Tool Selection", "Fallback and Sequential Retry"):
        assert heading in runtime and heading not in bundle.instructions
    for heading in ("Query Preparation", "Citation Requirements"):
        assert heading in bundle.instructions
    seed = ROOT.parent / "shared" / "seeds" / "002_52a49d2a30c4ab07.txt"
    if seed.is_file():  # the policy text is the seed's, word for word
        text = seed.read_text("utf-8")
        policy = text[text.index("# Retrieval Policy") :].splitlines()
        rules = [line for line in policy if line.startswith("- ")]
        assert len(rules) > 30 and all(rule in bundle.instructions + runtime for rule in rules)


# -- the rules path ----------------------------------------------------------------------------
def test_rules_run_records_every_step_and_cites(make: Callable[..., SkillDeck]) -> None:
    deck = make()
    result = deck.run(
        {"question": "Who supplies Widget Pro?"}, context="knowledge", matter_id=MATTER
    )
    state = result.state
    attempt = state["attempt"]
    assert attempt["model"] == "rules:retrieval"
    trajectory = attempt["trajectory"]
    assert _tools(state) == [TABLE, RAG, LOCAL]
    assert trajectory["rewrite"]["by"] == "rules"
    assert trajectory["plan"]["first"] == TABLE
    table, rag, local = trajectory["steps"]
    assert table["args"] == {"query": '"Widget Pro" supplies', "max_rows": 20}
    assert rag["args"] == {"query": '"Widget Pro" supplies', "top_k": 30}
    assert not table["sufficient"] and table["why"].startswith("no usable evidence")
    assert not rag["sufficient"] and rag["why"].startswith("empty")
    assert local["sufficient"] and local["why"] is None
    assert state["sources_tried"] == trajectory["steps"]
    assert state["found"] is True
    assert state["citations"] == ['<CITATION file="suppliers.md" lines="3-3" />']
    assert state["response"].endswith(state["citations"][0])
    # One tool call record per step, each pointing at its result in the transcript.
    assert [c["name"] for c in attempt["tool_calls"]] == [TABLE, RAG, LOCAL]
    messages = transcript.read(deck.store, attempt["turn"], attempt["head"])
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.name for m in results] == [TABLE, RAG, LOCAL]
    assert "Acme Metals" in str(results[2].content)


def test_identity_from_the_run_jails_local_files(
    make: Callable[..., SkillDeck], tmp_path: Path
) -> None:
    root = tmp_path / "files"
    shutil.copytree(FIXTURES / "local", root / "m-1")
    deck = make(files_root=root)
    inside = _ask(deck, "Who supplies Widget Pro?", matter_id="m-1")
    assert inside["found"] is True and "Acme Metals" in inside["response"]
    other = _ask(deck, "Who supplies Widget Pro?", matter_id="m-2")
    local = other["sources_tried"][-1]
    assert local["tool"] == LOCAL and not local["ok"]
    assert "no local files for this matter" in local["why"]
    assert other["found"] is False


def _write_bundle_copy(tmp_path: Path, tools: list[str]) -> Path:
    folder = tmp_path / "skills" / "rag-retrieve"
    shutil.copytree(BUNDLE, folder)
    meta = json.loads((folder / "skill.meta.json").read_text("utf-8"))
    meta["tools"] = tools
    (folder / "skill.meta.json").write_text(json.dumps(meta), "utf-8")
    return folder


def test_skill_enabled_tool_goes_first(make: Callable[..., SkillDeck], tmp_path: Path) -> None:
    asked: list[str] = []

    def faq_search(query: str) -> dict[str, Any]:
        asked.append(query)
        cite = '<CITATION file="faq/skus.md" lines="1-2" />'
        text = "A SKU is the stock keeping unit code of one product variant."
        return {"chunks": [{"file_ref": "faq/skus.md#L1-L2", "text": text, "citation": cite}]}

    tool = StructuredTool.from_function(faq_search, name="faq__search", description="FAQ")
    folder = _write_bundle_copy(
        tmp_path, ["faq__search", "rag_retrieve", "table_rag_retrieve", "local_file_search"]
    )
    state = _ask(make(bundle=folder, extra_tools=(tool,)), "What is a SKU?")
    assert _tools(state) == ["faq__search"]  # sufficient: the standard sources are not needed
    assert asked == ["SKU"]
    assert state["citations"] == ['<CITATION file="faq/skus.md" lines="1-2" />']


def test_tools_outside_the_meta_are_refused(make: Callable[..., SkillDeck], tmp_path: Path) -> None:
    folder = _write_bundle_copy(tmp_path, ["rag_retrieve", "table_rag_retrieve"])
    deck = make(bundle=folder)
    state = _ask(deck, "What is the capital of Mars?")
    steps = state["sources_tried"]
    assert [s["tool"] for s in steps] == [RAG, TABLE, LOCAL]
    assert steps[2] == {
        "tool": LOCAL,
        "args": {},
        "refused": True,
        "why": "refused: not among the skill's tools",
    }
    assert [c["name"] for c in state["attempt"]["tool_calls"]] == [RAG, TABLE]
    assert "rag_retrieve, table_rag_retrieve." in state["response"]
    assert "local_file_search" not in state["response"]


# -- the model path (scripted provider) --------------------------------------------------------
REWRITE = {
    "entity": ["SKU"],
    "time_scope": [],
    "attributes": [],
    "intent": "definition",
    "variants": ["SKU stock keeping unit definition", "SKU product code"],
}


def _answer(text: str, *cite: str) -> dict[str, Any]:
    return {"paragraphs": [{"text": text, "cite": list(cite)}]}


def test_scripted_rewrite_and_answer_with_a_rejected_answer(
    make: Callable[..., SkillDeck],
) -> None:
    turns = [
        {"output": REWRITE},
        {"output": _answer("A SKU is the code of one product variant in the catalog.")},
        {"output": _answer("A SKU is the code of one product variant in the catalog.", SKU)},
    ]
    deck = make(turns)
    result = deck.run({"question": "What is a SKU?"}, context="knowledge", matter_id=MATTER)
    assert result.status == "finished", result.error
    state = result.state
    attempt = state["attempt"]
    assert attempt["model"].startswith("scripted:")
    assert attempt["attempt"] == 2 and attempt["action"] == "finish"
    trajectory = attempt["trajectory"]
    assert trajectory["rewrite"]["by"] == "model"
    assert trajectory["answer_by"] == "model"
    # The model's rewrite adds queries; the question itself stays the first.
    assert trajectory["steps"][0]["args"] == {"query": "What is a SKU?", "top_k": 30}
    assert "SKU stock keeping unit definition" in trajectory["rewrite"]["variants"]
    assert state["citations"] == [SKU] and state["found"] is True
    rows = [h for h in deck.history(result.thread_id) if h["skill"]]
    assert [(h["attempt"], h["action"]) for h in rows] == [(1, "rejected"), (2, "finish")]
    [error] = rows[0]["validation_errors"]
    assert error["path"] == "$.data.answer"
    assert "has no <CITATION .../>" in error["message"]
    assert state["calls"]["rag-retrieve"] == 3  # rewrite, answer, answer again
    # Retrieval ran once: the re-ask answered from the stored evidence.
    messages = transcript.read(deck.store, attempt["turn"], attempt["head"])
    assert sum(isinstance(m, ToolMessage) for m in messages) == len(trajectory["steps"])
    assert "Your output was rejected" in str(messages[-2].content)


def test_scripted_answer_that_never_cites_fails_the_run(make: Callable[..., SkillDeck]) -> None:
    uncited = {"output": _answer("A SKU identifies one product variant in the catalog.")}
    deck = make([{"output": REWRITE}, uncited, uncited, uncited])
    result = deck.run({"question": "What is a SKU?"}, context="knowledge", matter_id=MATTER)
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "CONTRACT_VIOLATION"
    assert "found" not in result.state  # nothing was merged


def test_a_cited_tag_the_evidence_never_showed_is_refused(make: Callable[..., SkillDeck]) -> None:
    """The answer cites from the evidence shown: in ``schema`` mode the grammar holds it, and
    the check after the call refuses any other tag in every mode."""
    made_up = '<CITATION file="docs/nowhere.md" lines="1-2" />'
    turns = [
        {"output": REWRITE},
        {"output": _answer("A SKU is the code of one product variant.", made_up)},
        {"output": _answer("A SKU is the code of one product variant.", SKU)},
    ]
    deck = make(turns)
    result = deck.run({"question": "What is a SKU?"}, context="knowledge", matter_id=MATTER)
    assert result.status == "finished", result.error
    assert result.state["response"] == f"A SKU is the code of one product variant. {SKU}"
    rows = [h for h in deck.history(result.thread_id) if h["action"] == "rejected"]
    assert [e["path"] for e in rows[0]["validation_errors"]] == ["$.paragraphs[0].cite[0]"]


def test_answer_paragraphs_are_composed_with_their_tags_after_each() -> None:
    other = '<CITATION file="docs/other.md" lines="1-1" />'
    text = compose_paragraphs(
        [{"text": " First point. ", "cite": [SKU]}, {"text": "Second.", "cite": [SKU, other]}]
    )
    assert text == f"First point. {SKU}\n\nSecond. {SKU} {other}"


def test_scripted_invalid_rewrite_falls_back_to_the_rules(
    make: Callable[..., SkillDeck],
) -> None:
    turns = [
        {"text": "SKU, I think"},
        {"output": _answer("A SKU is the stock keeping unit code.", SKU)},
    ]
    state = _ask(make(turns), "What is a SKU?")
    rewrite = state["attempt"]["trajectory"]["rewrite"]
    assert rewrite["by"] == "rules" and rewrite["variants"][0] == "SKU"
    assert "not JSON" in rewrite["model_error"]
    assert state["citations"] == [SKU]


def test_scripted_model_is_not_asked_when_nothing_was_found(
    make: Callable[..., SkillDeck],
) -> None:
    rewrite = {**REWRITE, "entity": ["Mars"], "intent": "concept", "variants": ["Mars capital"]}
    state = _ask(make([{"output": rewrite}]), "What is the capital of Mars?")
    assert state["found"] is False and state["calls"]["rag-retrieve"] == 1
    assert state["attempt"]["trajectory"]["answer_by"] == "rules"


# -- the eval cases ----------------------------------------------------------------------------
def test_cases_have_the_seed_003_shape() -> None:
    assert len(CASES) >= 15
    assert len({c["id"] for c in CASES}) == len(CASES)
    assert {c["bucket"] for c in CASES} == {"positive", "negative", "ambiguous"}
    chinese = [c for c in CASES if re.search(r"[\u4e00-\u9fff]", c["input"]["question"])]
    assert 3 <= len(chinese) < len(CASES)
    for case in CASES:
        assert set(case) == {"id", "bucket", "input", "graders"}
        assert {"context", "knowledge", "base_fixture", "question"} <= set(case["input"])
        assert (FIXTURES / case["input"]["knowledge"]).is_dir()
        assert (FIXTURES / case["input"]["base_fixture"]).is_dir()
        names = {g["name"] for g in case["graders"]}
        assert names <= {"must_contain", "trajectory_match", "json_path_equals"}
        assert all(isinstance(g["config"], dict) for g in case["graders"])


@pytest.mark.parametrize("task", SUITE.tasks, ids=[t.id for t in SUITE.tasks])
def test_case(task: Task, make: Callable[..., SkillDeck]) -> None:
    # The harness indexes the case's knowledge folder and copies its base fixture as the local
    # files; here the module's base is that folder, and the fixture is the files root.
    assert SUITE.find_fixture(task, task.input["knowledge"]) == FIXTURES / "kb"
    local = SUITE.fixture(task)
    assert local == FIXTURES / "local"
    deck = make(local=local)
    result = deck.run({"question": task.input["question"]}, context=task.context, matter_id=MATTER)
    graded = grade(task, outcome_of(deck, task, result))
    failures = [(spec.name, r.rationale) for spec, r in graded.grades if not r.passed]
    assert result.status == "finished", result.error
    assert not failures, (failures, result.state.get("response"))
    assert graded.passed is True and graded.score == 1.0


def test_the_case_graders_can_fail(make: Callable[..., SkillDeck]) -> None:
    task = SUITE.tasks[0]  # table first, a price with its citation, found
    deck = make()
    result = deck.run(
        {"question": "What is the capital of Mars?"}, context=task.context, matter_id=MATTER
    )
    graded = grade(task, outcome_of(deck, task, result))
    assert [r.passed for _, r in graded.grades] == [False, False, False]
