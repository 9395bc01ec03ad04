"""Skills written for the Agent Skills standard load and run unedited: the spec's rules as
warnings, ``allowed-tools``, progressive disclosure (files read on demand with
``skill__read_file``) and routing by description (lexical, or a model's strict answer).

The skills here are written for these tests in the shapes found in the wild: scripts, nested
references, long descriptions, a name that differs from its folder, unquoted colons.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from skilldeck import SkillDeck
from skilldeck.check import check_skills
from skilldeck.checkpoints.inspect import transcript
from skilldeck.cli import app as cli
from skilldeck.errors import BundleError, ModelConfigError, ToolError
from skilldeck.settings import Settings
from skilldeck.skills import load_skills
from skilldeck.skills.loader import inspect_bundle
from skilldeck.tools.skill_files import MAX_READ_CHARS, skill_file_tool

pytestmark = pytest.mark.L2

FINISH = {"response": "done", "profile": {}, "data": {}, "control": {"action": "finish"}}


def agent_skill(
    root: Path, folder: str, front: str, body: str = "Do it.\n", files: dict[str, str] | None = None
) -> Path:
    """A plain Agent Skill: ``SKILL.md`` with ``front`` (YAML lines), and ``files``."""
    path = root / folder
    path.mkdir(parents=True)
    (path / "SKILL.md").write_text(f"---\n{front}\n---\n{body}", "utf-8")
    for name, text in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text, "utf-8")
    return path


def warnings_of(folder: Path) -> list[str]:
    bundle, problems = inspect_bundle(folder)
    assert bundle is not None, problems.errors
    assert not problems.errors
    return [p.message for p in problems.warnings]


# -- loading ---------------------------------------------------------------------------------
def test_a_spec_conformant_skill_loads_without_a_warning(skills_dir: Path) -> None:
    folder = agent_skill(
        skills_dir,
        "pdf-tools",
        "name: pdf-tools\ndescription: Merge and split PDF files.\nlicense: Apache-2.0\n"
        "compatibility: Needs python3 and pypdf\nmetadata:\n  author: someone\n  version: '1.0'",
    )
    assert warnings_of(folder) == []
    (bundle,) = load_skills(skills_dir)
    assert (bundle.name, bundle.contexts) == ("pdf-tools", ("pdf-tools",))
    assert bundle.instructions == "Do it."


@pytest.mark.parametrize(
    ("folder", "front", "warning"),
    [
        ("Big", "name: Big-Skill\ndescription: d", "must be lowercase"),
        ("a--b", "name: a--b\ndescription: d", "consecutive hyphens"),
        ("-edge", "name: -edge\ndescription: d", "start or end with a hyphen"),
        ("x" * 70, f"name: {'x' * 70}\ndescription: d", "exceeds 64 character limit"),
        ("long", f"name: long\ndescription: {'d' * 1100}", "exceeds 1024 character limit"),
        ("compat", f"name: compat\ndescription: d\ncompatibility: {'c' * 501}", "500 character"),
        ("extra", "name: extra\ndescription: d\nauthor: me", "Unexpected fields in frontmatter"),
        ("folder-a", "name: other-name\ndescription: d", "must match skill name"),
        ("under_score", "name: under_score\ndescription: d", "invalid characters"),
    ],
)
def test_a_rule_broken_is_a_warning_that_names_it(
    skills_dir: Path, folder: str, front: str, warning: str
) -> None:
    path = agent_skill(skills_dir, folder, front)
    found = warnings_of(path)
    assert any(warning in w for w in found), found
    report = check_skills(skills_dir)
    assert report.ok() and not report.ok(strict=True)
    assert [w.rule for w in report.warnings] == ["agent-skills"] * len(report.warnings)


def test_without_the_standards_validator_check_says_the_rules_went_unchecked(
    skills_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The validator is the agentskills extra (the core install is the engine's): a skill
    still loads without it, and check warns that its front matter was not held to the rules."""
    from skilldeck.skills.agentskills import UNCHECKED

    folder = agent_skill(skills_dir, "Bad_Name", "name: Bad_Name\ndescription: Merge PDFs.")
    monkeypatch.setitem(sys.modules, "skills_ref.validator", None)
    assert warnings_of(folder) == [UNCHECKED]
    report = check_skills(skills_dir)
    assert report.ok() and not report.ok(strict=True)
    assert "pip install 'skilldeck[agentskills]'" in UNCHECKED


def test_the_front_matter_name_names_a_plain_skill(skills_dir: Path) -> None:
    agent_skill(skills_dir, "downloaded-folder", "name: release-notes\ndescription: Notes.")
    (bundle,) = load_skills(skills_dir)
    assert bundle.name == "release-notes" and bundle.contexts == ("release-notes",)
    # A name a graph cannot hold falls back to the folder's, with a warning saying so.
    agent_skill(skills_dir, "fallback", "name: 'a:b'\ndescription: d")
    assert any("loaded as 'fallback'" in w for w in warnings_of(skills_dir / "fallback"))


def test_lowercase_skill_md_and_unquoted_colons_load(skills_dir: Path) -> None:
    path = skills_dir / "notes"
    path.mkdir()
    (path / "skill.md").write_text(
        "---\nname: notes\ndescription: Take notes: meetings, calls and ideas. Use when: asked\n"
        "---\nBody.\n",
        "utf-8",
    )
    (bundle,) = load_skills(skills_dir)
    assert bundle.description == "Take notes: meetings, calls and ideas. Use when: asked"
    assert any("line 3 has ': '" in w for w in warnings_of(path))


def test_what_leaves_nothing_to_route_by_is_an_error(skills_dir: Path) -> None:
    agent_skill(skills_dir, "blank", "name: blank\ndescription: '  '")
    agent_skill(skills_dir, "broken", "name: broken\ndescription: [unclosed")
    with pytest.raises(BundleError) as info:
        load_skills(skills_dir)
    messages = [(Path(p.file).parent.name, p.json_path, p.message) for p in info.value.problems]
    assert ("blank", "$.front_matter.description", "a plain Agent Skill needs a description: "
            "it is what a router chooses it by") in messages  # fmt: skip
    assert any(m[0] == "broken" and "invalid YAML" in m[2] for m in messages)


def test_a_corpus_in_the_shapes_of_the_wild_loads(skills_dir: Path) -> None:
    agent_skill(
        skills_dir,
        "xlsx",
        "name: xlsx\ndescription: "
        + "Comprehensive spreadsheet creation, editing and analysis with formulas. " * 16
        + "\nlicense: Proprietary. LICENSE.txt has complete terms",
        files={
            "scripts/recalc.py": "print('recalculate')\n",
            "references/formulas/financial.md": "# NPV\n",
            "references/formulas/text.md": "# CONCAT\n",
            "LICENSE.txt": "terms\n",
        },
    )
    agent_skill(
        skills_dir,
        "brand_guidelines",
        "name: brand-guidelines\ndescription: Applies brand colors: use when styling.\n"
        "allowed-tools: Read Write Bash(git:*)",
        files={"assets/logo.svg": "<svg/>", "assets/palette.json": "{}"},
    )
    agent_skill(
        skills_dir, "mcp-builder", "name: mcp-builder\ndescription: Build MCP servers.\n"
        "metadata:\n  short-description: MCP", files={"reference/evaluation.md": "# Eval\n"}
    )  # fmt: skip
    report = check_skills(skills_dir)
    assert report.ok(), report.errors
    names = {b.name: b for b in report.bundles}
    assert set(names) == {"xlsx", "brand-guidelines", "mcp-builder"}
    assert [f for f, _ in names["xlsx"].files] == [
        "LICENSE.txt",
        "references/formulas/financial.md",
        "references/formulas/text.md",
        "scripts/recalc.py",
    ]
    assert [f for f, _ in names["brand-guidelines"].files] == [
        "assets/logo.svg",
        "assets/palette.json",
    ]
    assert [f for f, _ in names["mcp-builder"].files] == ["reference/evaluation.md"]
    warned = {Path(w.file).parent.name: w.message for w in report.warnings}
    assert "exceeds 1024 character limit" in warned["xlsx"]
    assert "'Read' is not available in this deck" in " ".join(
        w.message for w in report.warnings if "brand" in w.file
    )


def test_allowed_tools_feed_the_allowlist(skills_dir: Path) -> None:
    agent_skill(
        skills_dir,
        "matter-reader",
        "name: matter-reader\ndescription: Reads a matter's files.\n"
        "allowed-tools: file__parse file__get_info(*) Bash",
    )
    deck = SkillDeck(skills_dir, settings=Settings(checkpoint_url="sqlite:///:memory:"))
    try:
        (bundle,) = deck.bundles
        assert bundle.allowed_tools == ("file__parse", "file__get_info", "Bash")
        assert bundle.tools == ("file__parse", "file__get_info")  # Bash: not in this deck
    finally:
        deck.close()
    agent_skill(skills_dir, "odd", "name: odd\ndescription: d\nallowed-tools: {a: 1}")
    assert any("space-separated" in w for w in warnings_of(skills_dir / "odd"))


# -- progressive disclosure ------------------------------------------------------------------
GUIDE = "# Guide\nThe answer to everything is forty-two.\n"


@pytest.fixture
def guide_skill(skills_dir: Path) -> Path:
    return agent_skill(
        skills_dir,
        "guide",
        "name: guide\ndescription: Answers from the guide.",
        "Read references/guide.md, then answer.\n",
        files={"references/guide.md": GUIDE, "scripts/check.py": "print(1)\n"},
    )


def test_files_are_listed_not_inlined_and_read_on_demand(
    guide_skill: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    turns = {
        "guide": [
            {"tool_calls": [{"name": "skill__read_file", "args": {"path": "references/guide.md"}}]},
            {"output": FINISH},
        ]
    }
    deck = make_deck(guide_skill.parent, turns)
    result = deck.run("what is the answer?", context="auto")
    assert result.status == "finished", result.error
    assert result.state["input"] == {"request": "what is the answer?"}
    messages = transcript(deck, result.thread_id)[0]["messages"]
    system = messages[0]["content"]
    assert "forty-two" not in system  # tier 3: not in the prompt
    assert "- references/guide.md (" in system and "- scripts/check.py (" in system
    assert messages[-2]["name"] == "skill__read_file" and messages[-2]["content"] == GUIDE
    attempt = result.state["attempt"]
    assert attempt["route"]["strategy"] == "lexical"


def test_inline_stays_an_option(skills_dir: Path) -> None:
    folder = agent_skill(
        skills_dir, "inl", "name: inl\ndescription: d", files={"references/r.md": "R"}
    )
    (folder / "skill.meta.json").write_text(
        json.dumps({"name": "inl", "description": "d", "references": "inline"})
    )
    (bundle,) = load_skills(skills_dir)
    assert [r.name for r in bundle.references] == ["r.md"] and bundle.files == ()
    assert "skill__read_file" not in bundle.tools


def test_the_read_tool_is_jailed_to_the_calling_skills_listed_files(
    guide_skill: Path, skills_dir: Path, tmp_path: Path
) -> None:
    other = agent_skill(
        skills_dir, "other", "name: other\ndescription: d", files={"assets/x.txt": "x"}
    )
    bundles = {b.name: b for b in load_skills(skills_dir)}
    tool = skill_file_tool({n: (b.path, tuple(f for f, _ in b.files)) for n, b in bundles.items()})

    def read(path: str, skill: str | None = "guide", **args: Any) -> str:
        return str(tool.invoke({"path": path, "skill": skill, **args}))

    assert read("./references/guide.md") == GUIDE
    with pytest.raises(ToolError, match=r"did you mean 'references/guide.md'"):
        read("references/guid.md")
    for escape in ("../other/assets/x.txt", "/etc/passwd", "SKILL.md"):
        with pytest.raises(ToolError, match="is not a file of skill 'guide'"):
            read(escape)
    with pytest.raises(ToolError, match="is not a file of skill 'other'"):
        read("references/guide.md", skill="other")
    with pytest.raises(ToolError, match="no skill is bound"):
        read("references/guide.md", skill=None)
    # A file swapped for a link out after loading is refused when read.
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (other / "assets" / "x.txt").unlink()
    os.symlink(secret, other / "assets" / "x.txt")
    with pytest.raises(ToolError, match="links outside the skill's folder"):
        read("assets/x.txt", skill="other")
    # Pages: a long file is read with offset.
    (guide_skill / "references" / "guide.md").write_text("a" * (MAX_READ_CHARS + 5))
    first = read("references/guide.md")
    assert first.startswith("a" * MAX_READ_CHARS) and f"offset={MAX_READ_CHARS}" in first
    assert read("references/guide.md", offset=MAX_READ_CHARS) == "a" * 5


def test_a_link_out_of_the_bundle_is_refused_at_load(skills_dir: Path, tmp_path: Path) -> None:
    folder = agent_skill(skills_dir, "linked", "name: linked\ndescription: d")
    (tmp_path / "outside.md").write_text("x")
    (folder / "references").mkdir()
    os.symlink(tmp_path / "outside.md", folder / "references" / "out.md")
    with pytest.raises(BundleError, match="outside the bundle"):
        load_skills(skills_dir)


def test_the_model_cannot_name_the_skill_whose_files_it_reads(
    guide_skill: Path, skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    agent_skill(skills_dir, "other", "name: other\ndescription: d", files={"assets/x.txt": "x"})
    call = {"name": "skill__read_file", "args": {"path": "assets/x.txt", "skill": "other"}}
    deck = make_deck(skills_dir, {"guide": [{"tool_calls": [call]}, {"output": FINISH}]})
    result = deck.run(next_skill="guide", context="guide")
    assert result.status == "finished"
    said = transcript(deck, result.thread_id)[0]["messages"][-2]["content"]
    assert "unknown argument(s) 'skill'" in said and "x" not in said.split("arguments are")[-1]


# -- routing by description ------------------------------------------------------------------
def _deck_of(
    root: Path,
    make_deck: Callable[..., SkillDeck],
    turns: dict[str, list[Any]] | None = None,
    **settings: Any,
) -> SkillDeck:
    agent_skill(root, "recipes", "name: recipes\ndescription: Suggest recipes and meal plans "
                "from ingredients. Use when the user asks what to cook.")  # fmt: skip
    agent_skill(root, "taxes", "name: taxes\ndescription: Estimate income tax, deductions and "
                "refunds. Use when the user asks about taxes.")  # fmt: skip
    agent_skill(root, "poems", "name: poems\ndescription: Write poems and song lyrics, haiku "
                "or sonnets. Use when the user wants a poem.")  # fmt: skip
    return make_deck(root, turns, **settings)


def test_auto_routes_by_description_or_answers_none(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    deck = _deck_of(skills_dir, make_deck)
    decision = deck.route("Suggest a recipe I can cook tonight")
    assert (decision.skill, decision.strategy) == ("recipes", "lexical")
    assert decision.skills[0].skill == "recipes" and decision.skills[0].coverage
    none = deck.route("turn off the lights in the kitchen")
    assert (none.skill, none.strategy) == (None, "none")
    assert "threshold 20%" in none.reason
    result = deck.run("turn off the lights in the kitchen", context="auto")
    assert result.status == "no_skill"
    assert "threshold" in result.error.message
    assert deck.route({"other": 1}).reason.startswith("context 'auto' routes by the request")


def test_a_none_says_which_words_matched_which_skill_and_the_best_score(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    deck = _deck_of(skills_dir, make_deck)
    # 'poems' is in the request but covers too little of it: the best match, its words, its
    # coverage against the threshold, and the words no skill knows.
    none = deck.route("print the poems about weather forecasts in Lyon")
    rows = {row.skill: row for row in none.skills}
    poems = rows["poems"]
    assert none.skill is None and poems.coverage is not None and 0 < poems.coverage < 0.2
    assert none.reason == (
        f"no skill fits the request: the best match, 'poems', covers {poems.coverage:.0%} of it "
        "(threshold 20%); it matches 'poems'; no skill matches 'print', 'weather', "
        "'forecasts', 'lyon'"
    )
    assert poems.matched == ("poems",) and poems.reason == "a candidate: it matches 'poems'"
    assert (
        rows["taxes"].matched == ()
        and "matches none of the request's words" in rows["taxes"].reason
    )
    chosen = deck.route("Suggest a recipe I can cook tonight")
    assert chosen.reason.endswith("(threshold 20%); it matches 'suggest', 'recipe', 'cook'")
    assert deck.route("hello").reason.endswith("it matches none of the request's words; "
                                               "no skill matches 'hello'")  # fmt: skip


def test_the_chain_forced_priority_conditions_order(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    for name, priority in (("a", 0), ("b", 0), ("c", 5)):
        folder = agent_skill(skills_dir, name, f"name: {name}\ndescription: skill {name}")
        meta = {"name": name, "description": f"skill {name}", "priority": priority,
                "triggers": {"contexts": ["x"] if name != "c" else ["y"]}}  # fmt: skip
        (folder / "skill.meta.json").write_text(json.dumps(meta))
    deck = make_deck(skills_dir)
    assert deck.route(context="x").strategy == "order"  # a and b tie, no request
    assert (deck.route(context="y").skill, deck.route(context="y").strategy) == ("c", "conditions")
    assert deck.route("skill b please", context="x").skill == "b"  # ties go by description
    meta = {"name": "c", "description": "c", "priority": 5, "triggers": {"contexts": ["x"]}}
    (skills_dir / "c" / "skill.meta.json").write_text(json.dumps(meta))
    deck = make_deck(skills_dir)
    assert (deck.route("skill b", context="x").skill, deck.route(context="x").strategy) == (
        "c",
        "priority",
    )
    forced = deck.route("skill b", context="x", next_skill="a")
    assert (forced.skill, forced.strategy) == ("a", "forced")
    refused = deck.route(context="y", next_skill="a")
    assert refused.skill is None and "cannot run now: context 'y'" in refused.reason


def test_a_model_routes_from_names_and_descriptions_only(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    router = [
        {"output": {"skill": "poems", "reason": "a haiku is a poem"}},
        {"output": {"skill": "none", "reason": "nothing fits"}},
        {"text": "I think recipes?"},  # not a routing answer: the lexical ranker decides
        {"output": {"skill": "recipes", "reason": "cooking"}},
    ]
    turns = {"router": router, "poems": [{"output": FINISH}]}
    deck = _deck_of(skills_dir, make_deck, turns, router="model")
    decision = deck.route("a haiku about rain")
    assert (decision.skill, decision.strategy, decision.reason) == (
        "poems",
        "model",
        "a haiku is a poem",
    )
    assert decision.model and decision.model.startswith("scripted:")
    # route() asks each time from call 0 (nothing is recorded); a run counts its calls.
    result = deck.run("a haiku about rain", context="auto")
    assert result.status == "finished"
    assert result.state["attempt"]["route"] == {"strategy": "model", "reason": "a haiku is a poem"}
    assert result.state["calls"]["router"] == 1
    second = deck.run("anything", context="auto", thread_id=result.thread_id)
    assert second.status == "no_skill" and second.state["calls"]["router"] == 2
    assert second.error and "nothing fits" in second.error.message
    bad = make_deck(skills_dir, {"router": router[2:]}, router="model")
    fallback = bad.route("suggest a recipe to cook")
    assert fallback.strategy == "lexical" and fallback.skill == "recipes"
    assert fallback.reason.startswith("the routing model failed (")


def test_router_model_needs_a_model(skills_dir: Path) -> None:
    agent_skill(skills_dir, "one", "name: one\ndescription: d")
    with pytest.raises(ModelConfigError, match="SKILLDECK_ROUTER=lexical"):
        SkillDeck(
            skills_dir, settings=Settings(router="model", checkpoint_url="sqlite:///:memory:")
        )


def test_skilldeck_route_shows_the_decision(
    skills_dir: Path, make_deck: Callable[..., SkillDeck]
) -> None:
    _deck_of(skills_dir, make_deck)
    runner = CliRunner()
    done = runner.invoke(
        cli, ["route", "--skills", str(skills_dir), "--json", "estimate my tax refund"]
    )
    assert done.exit_code == 0, done.output
    decision = json.loads(done.stdout)
    assert decision["skill"] == "taxes" and decision["strategy"] == "lexical"
    assert decision["skills"][0]["skill"] == "taxes"
    none = runner.invoke(cli, ["route", "--skills", str(skills_dir), "--fail-on-none", "hello"])
    assert none.exit_code == 1 and none.stdout.startswith("none (none)")
    bad = runner.invoke(cli, ["route", "--skills", str(skills_dir), "--router", "nope", "x"])
    assert bad.exit_code == 2 and "router" in bad.output
