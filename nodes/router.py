"""The router: picks the next skill, or ends the run, by a chain of strategies.

The chain is seed 004's: a forced skill (``next_skill``) wins; then the candidates, the skills
whose ``triggers.contexts`` contain ``state.context`` and whose ``state_conditions`` and
``requires`` hold: one with the highest ``priority`` wins, and a lone candidate wins. Candidates
that tie, and every skill whose conditions hold in context ``auto``, are routed by description:
a model chooses from the skills' names and descriptions when one is configured, else a lexical
ranker (:mod:`skilldeck.nodes.route_lexical`), and either may answer ``none``. With nothing to
route by (no ``input.request``), tied candidates go in load order.

No candidate after a skill has run means the run is finished; no candidate for a run's first
choice means nothing could run, and the run ends as ``no_skill`` with each skill's reason (a
typo in the context must not pass for a finished run). A loop guard stops a run that keeps
choosing the same skill while the state does not change.

A run's first choice is made by the request that starts it (:func:`start_update`), and the
graph's entry edge (:func:`entry`) follows it, so a run spends no super-step (and no checkpoint)
on routing: after that, each skill that says ``continue`` routes with :func:`route` itself.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.types import Command

from skilldeck.errors import InvalidInputError, UntrustedScriptsError
from skilldeck.graph.records import Guard, Route, RunError, SkillStanding, issues
from skilldeck.graph.state import RunView
from skilldeck.nodes.context import NodeContext
from skilldeck.nodes.route_lexical import Ranked
from skilldeck.nodes.route_model import ROUTER_KEY, RouteModelError
from skilldeck.skills.bundle import SkillBundle
from skilldeck.tools.registry import run_identity
from skilldeck.types import RouteCandidate, RouteDecision

__all__ = [
    "AUTO_CONTEXT",
    "RouterNode",
    "StartNode",
    "candidates",
    "decide",
    "entry",
    "fingerprint",
    "no_skill_error",
    "request_text",
    "route",
    "start_update",
    "why_not",
]

_WATCHED = ("context", "input", "user_id", "matter_id", "profile")
#: The context in which every skill whose conditions hold is routed by its description.
AUTO_CONTEXT = "auto"


def candidates(bundles: Mapping[str, SkillBundle], state: Mapping[str, Any]) -> list[SkillBundle]:
    """Skills that may run now, best first."""
    ready = [b for b in bundles.values() if b.is_candidate(state)]
    return sorted(ready, key=lambda b: b.rank)


def may_run(ctx: NodeContext, bundle: SkillBundle, state: Mapping[str, Any], auto: bool) -> bool:
    """Whether the router may pick ``bundle`` now: :func:`why_not` is ``None``, without
    writing the reason (the hot path of every step)."""
    if state.get("matter_id") is None and bundle.name in ctx.matter_skills:
        return False
    return bundle.is_candidate(state, any_context=auto)


def why_not(
    ctx: NodeContext, bundle: SkillBundle, state: Mapping[str, Any], auto: bool
) -> str | None:
    """Why the router may not pick ``bundle`` now (``None``: it may): its triggers and
    requires, and, for a run without a matter, whether its tools work in one (context
    ``auto`` reaches every skill, so a request could otherwise route to a matter's skill)."""
    why = bundle.why_not(state, any_context=auto)
    if why is None and state.get("matter_id") is None and bundle.name in ctx.matter_skills:
        return "its tools work in a matter, and the run names none (give it a matter_id)"
    return why


def fingerprint(state: Mapping[str, Any], data_keys: tuple[str, ...]) -> str:
    """A digest of everything a skill can read or change, for the loop guard."""
    watched = {k: state.get(k) for k in (*_WATCHED, *data_keys)}
    watched["profile"] = watched["profile"] or {}  # never written is empty, as in the graph
    blob = json.dumps(watched, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _fail(code: str, message: str) -> tuple[str, dict[str, Any]]:
    error = RunError(code=code, message=message).dump()
    return END, {"status": "failed", "error": error, "guard": None, "next_skill": None}


def request_text(state: Mapping[str, Any]) -> str | None:
    """The request a run routes by description: ``input.request``."""
    request = (state.get("input") or {}).get("request")
    return request if isinstance(request, str) and request.strip() else None


def _table(
    ctx: NodeContext, state: Mapping[str, Any], auto: bool, ranked: Sequence[Ranked] = ()
) -> tuple[RouteCandidate, ...]:
    scores = {r.skill: r for r in ranked}
    rows = []
    for b in ctx.ranked:
        why = why_not(ctx, b, state, auto)
        score = scores.get(b.name)
        if why is not None:
            reason = why
        elif score is not None:
            reason = f"a candidate: {_matching(score)}"
        else:
            reason = "a candidate: its triggers and requires hold"
        rows.append(
            RouteCandidate(
                b.name,
                why is None,
                reason,
                score.score if score else None,
                score.coverage if score else None,
                score.matched if score else None,
            )
        )
    # Best first: candidates before the others, the best lexical match first among them.
    return tuple(sorted(rows, key=lambda r: (not r.candidate, -(r.score or 0.0))))


def decide(ctx: NodeContext, state: Mapping[str, Any], *, explain: bool = False) -> RouteDecision:
    """The routing decision for ``state`` (see the module docstring); ``explain`` fills in
    every skill's standing (``skills``), which the hot path of a run does without."""
    auto = state.get("context") == AUTO_CONTEXT
    decision, ranked = _decide(ctx, state, auto)
    return replace(decision, skills=_table(ctx, state, auto, ranked)) if explain else decision


def _decide(
    ctx: NodeContext, state: Mapping[str, Any], auto: bool
) -> tuple[RouteDecision, Sequence[Ranked]]:
    """The decision, and the lexical ranking when one was made."""
    explicit = state.get("next_skill")
    if explicit:
        bundle = ctx.bundles.get(explicit)
        if bundle is None:
            return RouteDecision(
                None, "forced", f"next_skill {explicit!r} is not a loaded skill"
            ), ()
        why = why_not(ctx, bundle, state, auto)
        if why is not None:
            return RouteDecision(
                None, "forced", f"next_skill {explicit!r} cannot run now: {why}"
            ), ()
        return RouteDecision(explicit, "forced", "next_skill names it"), ()
    qualified = [b for b in ctx.ranked if may_run(ctx, b, state, auto)]
    if not qualified:
        return RouteDecision(None, "conditions", "no skill's triggers and requires hold"), ()
    if not auto and len(qualified) == 1:
        reason = "the one skill whose triggers and requires hold"
        return RouteDecision(qualified[0].name, "conditions", reason), ()
    tied = [b for b in qualified if b.priority == qualified[0].priority]
    if not auto and len(tied) == 1:
        reason = f"priority {tied[0].priority} is the highest of {len(qualified)} candidates"
        return RouteDecision(tied[0].name, "priority", reason), ()
    return _by_description(ctx, state, tied, auto)


def _by_description(
    ctx: NodeContext, state: Mapping[str, Any], tied: list[SkillBundle], auto: bool
) -> tuple[RouteDecision, Sequence[Ranked]]:
    request = request_text(state)
    if request is None:
        if auto:
            reason = "context 'auto' routes by the request, and the input has no input.request"
            return RouteDecision(None, "none", reason), ()
        reason = f"{len(tied)} candidates tie on priority and there is no input.request; load order"
        return RouteDecision(tied[0].name, "order", reason), ()
    chosen, ranked = ctx.ranker.choose(request, [b.name for b in tied])
    router = ctx.route_model
    # Whenever the routing model was asked, the decision names it (a run counts the call).
    asked = router.label if router is not None else None
    fallback = ""
    if router is not None:
        index = int((state.get("calls") or {}).get(ROUTER_KEY, 0))
        try:
            skill, why = router.choose(request, tied, index)
        except RouteModelError as exc:  # its reason is public; the log has the rest
            fallback = f"the routing model failed ({exc.reason}); "
        else:
            return RouteDecision(skill, "model" if skill else "none", why, model=asked), ranked
    best = ranked[0] if ranked else None
    threshold = f"threshold {ctx.ranker.threshold:.0%}"
    if chosen is not None and best is not None:
        reason = (
            f"{fallback}its name and description cover {best.coverage:.0%} of the request "
            f"({threshold}); {_matching(best)}"
        )
        return RouteDecision(chosen, "lexical", reason, model=asked), ranked
    low = _too_low(ranked, threshold)
    if auto:
        return RouteDecision(None, "none", f"{fallback}{low}", model=asked), ranked
    return RouteDecision(tied[0].name, "order", f"{fallback}{low}; load order", model=asked), ranked


def _matching(ranked: Ranked) -> str:
    """Which of the request's words a skill's name and description match."""
    if not ranked.matched:
        return "it matches none of the request's words"
    return f"it matches {_quoted(ranked.matched)}"


def _too_low(ranked: Sequence[Ranked], threshold: str) -> str:
    """Why no skill fits a request: the best match, the words it matches and its coverage
    against the threshold, and the words no skill matches."""
    if not ranked:
        return "no skill to match the request against"
    best = ranked[0]
    said = (
        f"no skill fits the request: the best match, {best.skill!r}, covers {best.coverage:.0%} "
        f"of it ({threshold}); {_matching(best)}"
    )
    nowhere = [w for w in best.missed if all(w in r.missed for r in ranked)]
    return f"{said}; no skill matches {_quoted(nowhere)}" if nowhere else said


def _quoted(words: Sequence[str]) -> str:
    return ", ".join(repr(w) for w in words)


def route(ctx: NodeContext, state: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The next node for ``state`` and the state update that goes with it."""
    decision = decide(ctx, state)
    update: dict[str, Any] = {}
    if decision.model is not None:  # a scripted replay finds the same routing call again
        calls = dict(state.get("calls") or {})
        calls[ROUTER_KEY] = calls.get(ROUTER_KEY, 0) + 1
        update["calls"] = calls
    explicit = state.get("next_skill")
    if decision.skill is None:
        if explicit:
            code = "UNKNOWN_SKILL" if explicit not in ctx.bundles else "NEXT_SKILL_NOT_CANDIDATE"
            return _fail(code, decision.reason)
        return END, {"status": "finished", "guard": None, "next_skill": None, **update}
    chosen = decision.skill
    try:  # a skill without the scripts it has would run unchecked: the deck must trust it
        ctx.bundles[chosen].require_trust("preprocess", "validate")
    except UntrustedScriptsError as exc:
        return _fail(exc.code.value, str(exc))
    digest = fingerprint(state, ctx.data_keys)
    guard = RunView(state).guard
    same = guard is not None and guard.skill == chosen and guard.fingerprint == digest
    count = guard.count + 1 if guard is not None and same else 1
    if count > ctx.settings.loop_limit:
        return _fail(
            "LOOP_GUARD",
            f"skill {chosen!r} was chosen {count} times in a row without any change to the "
            f"state (loop_limit={ctx.settings.loop_limit}); stopped the run",
        )
    chosen_by = Route(strategy=decision.strategy, reason=str(decision.reason))
    return chosen, {
        "guard": Guard(skill=chosen, fingerprint=digest, count=count, route=chosen_by).dump(),
        "next_skill": None,
        "status": "running",
        **update,
    }


def no_skill_error(ctx: NodeContext, state: Mapping[str, Any]) -> RunError:
    """The error of a run that no skill can start: every skill, best first, with the reason it
    is not a candidate (``skills``), and a hint when the context is unknown."""
    context = state.get("context")
    decision = decide(ctx, state, explain=True)
    skills = tuple(SkillStanding(skill=c.skill, reason=str(c.reason)) for c in decision.skills)
    known = sorted({c for b in ctx.ranked for c in b.contexts})
    if not known:
        hint = "; no skills are loaded"
    elif context == AUTO_CONTEXT:
        hint = f": {decision.reason}"
    elif context in known:
        hint = f"; {len(skills)} skill(s) considered, each reason is in error.skills"
    else:
        close = difflib.get_close_matches(str(context), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        hint += f"; the loaded skills run in: {', '.join(known)} (or 'auto': by description)"
    return RunError(
        code="NO_SKILL", message=f"no skill can run in context {context!r}{hint}", skills=skills
    )


def start_update(
    ctx: NodeContext, state: Mapping[str, Any], update: Mapping[str, Any]
) -> dict[str, Any]:
    """The input that starts a run on ``state``: ``update`` plus its first routing decision.

    When no skill can run, the run ends at once as ``no_skill`` (see :func:`no_skill_error`);
    when the input does not fit the input schema of the skill it would start with, as
    ``failed`` with that skill's ``INVALID_INPUT`` error (a deck raises it before anything is
    written).
    """
    merged = {**state, **update}
    goto, routed = route(ctx, merged)
    if goto == END and routed["status"] == "finished":
        routed = {**routed, "status": "no_skill", "error": no_skill_error(ctx, merged).dump()}
    elif goto != END and (errors := ctx.bundles[goto].input_errors(merged.get("input"))):
        refused = InvalidInputError(goto, errors)
        error = RunError(
            code=refused.code.value, message=str(refused), skill=goto, errors=issues(errors)
        )
        routed = {**routed, "status": "failed", "error": error.dump(), "guard": None}
    return {**update, **routed}


def entry(state: Mapping[str, Any]) -> str:
    """The graph's entry edge: the skill :func:`start_update` chose, or the end."""
    view = RunView(state)
    guard = view.guard
    return guard.skill if view.status == "running" and guard is not None else END


class RouterNode:
    """Routes with :func:`route` where no skill does: after a card that has nothing to ask, and
    where a fork resumes."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    def __call__(self, state: dict[str, Any]) -> Command[str]:
        goto, update = route(self.ctx, state)
        return Command(goto=goto, update=update)


class StartNode:
    """The first step of a run that comes into the graph itself, as from LangGraph's own
    server (``langgraph dev``), not through a deck: it makes the run's first choice that
    :func:`start_update` makes for a deck's requests, and records the run's identity (from
    its config, as a deck does: never from the input)."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    def __call__(self, state: dict[str, Any], config: RunnableConfig) -> Command[str]:
        identity = run_identity(config.get("configurable", {}))
        fresh = {"status": "running", "error": None, "guard": None, "turn": None}
        fresh |= {k: identity[k] for k in ("user_id", "matter_id")}
        update = start_update(self.ctx, state, {**fresh, "next_skill": state.get("next_skill")})
        return Command(goto=entry({**state, **update}), update=update)
