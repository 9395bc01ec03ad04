"""Routing benchmark: which skill a request goes to, by description, over a deck of 22 skills.

Usage::

    python bench/routing.py [--model PROVIDER:MODEL] [--limit N] [--json]

The deck is ``bench/routing/skills`` (22 plain Agent Skills of different domains) and the
requests are ``bench/routing/requests.yaml`` (74: three per skill, eight that no skill fits),
all written for this benchmark. Each request is routed in context ``auto`` with
``SkillDeck.route`` (nothing runs) by the lexical ranker, and by the model router when
``--model`` (or ``SKILLDECK_MODEL``) names a model endpoint. Reported: accuracy over all
requests, over those a skill should take, and over those it should not (``none``), with the
misses.

It also measures what progressive disclosure saves, in skilldeck's token estimate: the routing
prompt (tier 1: names and descriptions) against every SKILL.md whole, and each skill's first
prompt with its ``references/`` inlined (as the loader did before) against listed for
``skill__read_file``.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from common import arguments, log, median, progress_bar, report_header, show_report
from rich.console import Console
from rich.table import Table

from skilldeck import SkillDeck
from skilldeck.nodes.prompt import render_system, render_user
from skilldeck.nodes.route_model import route_prompt
from skilldeck.settings import Settings
from skilldeck.skills.bundle import Reference, SkillBundle
from skilldeck.skills.tokens import estimate_tokens

HERE = Path(__file__).parent / "routing"


def _deck(router: str, model: str | None) -> SkillDeck:
    settings = Settings(checkpoint_url="sqlite:///:memory:", router=router, model=model or None)  # type: ignore[call-arg]
    return SkillDeck(HERE / "skills", settings=settings)


def _accuracy(deck: SkillDeck, requests: list[dict[str, str]], label: str) -> dict[str, Any]:
    hits = {"skill": [0, 0], "none": [0, 0]}
    misses, seconds = [], []
    with progress_bar() as bar:
        task = bar.add_task(label, total=len(requests))
        for item in requests:
            start = time.perf_counter()
            decision = deck.route(item["request"])
            seconds.append(time.perf_counter() - start)
            got = decision.skill or "none"
            kind = "none" if item["skill"] == "none" else "skill"
            hits[kind][1] += 1
            if got == item["skill"]:
                hits[kind][0] += 1
            else:
                misses.append({"request": item["request"], "want": item["skill"], "got": got})
            bar.advance(task)
    right = hits["skill"][0] + hits["none"][0]
    return {
        "accuracy": round(100 * right / len(requests), 1),
        "skill_requests": f"{hits['skill'][0]}/{hits['skill'][1]}",
        "none_requests": f"{hits['none'][0]}/{hits['none'][1]}",
        "median_ms": round(1000 * median(seconds), 2),
        "misses": misses,
    }


def _inlined(bundle: SkillBundle) -> SkillBundle:
    """The bundle as the loader built it before progressive disclosure: references/ inlined."""
    refs = tuple(
        Reference(path.removeprefix("references/"), text, estimate_tokens(text), False)
        for path, _ in bundle.files
        if path.startswith("references/")
        for text in [(bundle.path / path).read_text("utf-8")]
    )
    files = tuple(f for f in bundle.files if not f[0].startswith("references/"))
    tools = bundle.tools if files else tuple(t for t in bundle.tools if t != "skill__read_file")
    return replace(bundle, references=refs, files=files, tools=tools)


def _first_prompt(deck: SkillDeck, bundle: SkillBundle) -> int:
    tools = [
        (
            name,
            deck.tools.get(name).description,
            deck.tools.get(name).tool_call_schema.model_json_schema(),
        )
        for name in bundle.tools
    ]
    system = render_system(bundle, output_mode="schema", tools=tools)
    user = render_user({"context": "auto", "input": {"request": "help me"}}, ())
    return estimate_tokens(str(system.content)) + estimate_tokens(str(user.content))


def _tokens(deck: SkillDeck) -> dict[str, Any]:
    bundles = deck.bundles
    whole = sum(estimate_tokens((b.path / "SKILL.md").read_text("utf-8")) for b in bundles)
    tier1 = sum(estimate_tokens(str(m.content)) for m in route_prompt(bundles, "help me"))
    with_refs = [b for b in bundles if any(f.startswith("references/") for f, _ in b.files)]
    before = {b.name: _first_prompt(deck, _inlined(b)) for b in with_refs}
    after = {b.name: _first_prompt(deck, b) for b in with_refs}
    return {
        "skills": len(bundles),
        "routing_prompt": {"every_skill_md": whole, "tier1_names_descriptions": tier1},
        "first_prompt_with_references": {
            name: {"inlined": before[name], "on_demand": after[name]} for name in before
        },
        "first_prompt_total": {
            "inlined": sum(before.values()),
            "on_demand": sum(after.values()),
        },
    }


def measure(model: str | None, limit: int | None) -> dict[str, Any]:
    requests = yaml.safe_load((HERE / "requests.yaml").read_text("utf-8"))[:limit]
    lexical = _deck("lexical", None)
    report = report_header(
        requests=len(requests),
        skills=len(lexical.bundles),
        threshold=lexical.settings.route_threshold,
        lexical=_accuracy(lexical, requests, "lexical"),
        tokens=_tokens(lexical),
    )
    lexical.close()
    if model:
        log(f"model router: {model}")
        with _deck("model", model) as deck:
            report["model"] = {"name": model, **_accuracy(deck, requests, "model")}
    return report


def show(report: dict[str, Any]) -> None:
    table = Table("router", "accuracy %", "skill requests", "none requests", "median ms")
    for key in ("lexical", "model"):
        if key in report:
            row = report[key]
            table.add_row(
                row.get("name", key),
                f"{row['accuracy']}",
                row["skill_requests"],
                row["none_requests"],
                f"{row['median_ms']}",
            )
    console = Console()
    console.print(table)
    for key in ("lexical", "model"):
        for miss in report.get(key, {}).get("misses", []):
            console.print(f"[dim]{key} miss[/] {miss['want']} -> {miss['got']}: {miss['request']}")
    tokens = report["tokens"]
    console.print(f"tokens: {tokens}")


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--model", default=os.environ.get("SKILLDECK_MODEL"), help="model router")
    parser.add_argument("--limit", type=int, default=None, help="route only the first N requests")
    args = parser.parse_args()
    return show_report(measure(args.model, args.limit), args.json, show)


if __name__ == "__main__":
    raise SystemExit(main())
