"""The router: picks the next skill, deterministically, or ends the run.

Candidates are the skills whose ``triggers.contexts`` contain ``state.context`` and whose
``state_conditions`` and ``requires`` hold. An explicit ``next_skill`` wins, then the meta's
``priority`` (higher first), then load order. No candidate after a skill has run means the run is
finished; no candidate for a run's first choice means nothing could run, and the run ends as
``no_skill`` with each skill's reason (a typo in the context must not pass for a finished run).
A loop guard stops a run that keeps choosing the same skill while the state does not change.

A run's first choice is made by the request that starts it (:func:`start_update`), and the
graph's entry edge (:func:`entry`) follows it, so a run spends no super-step (and no checkpoint)
on routing: after that, each skill that says ``continue`` routes with :func:`route` itself.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from langgraph.graph import END
from langgraph.types import Command

from skilldeck.nodes.context import NodeContext
from skilldeck.skills.bundle import SkillBundle

__all__ = [
    "RouterNode",
    "candidates",
    "entry",
    "fingerprint",
    "no_skill_error",
    "route",
    "start_update",
]

_WATCHED = ("context", "input", "user_id", "matter_id", "profile")


def candidates(bundles: Mapping[str, SkillBundle], state: Mapping[str, Any]) -> list[SkillBundle]:
    """Skills that may run now, best first."""
    ready = [b for b in bundles.values() if b.is_candidate(state)]
    return sorted(ready, key=lambda b: b.rank)


def fingerprint(state: Mapping[str, Any], data_keys: tuple[str, ...]) -> str:
    """A digest of everything a skill can read or change, for the loop guard."""
    watched = {k: state.get(k) for k in (*_WATCHED, *data_keys)}
    watched["profile"] = watched["profile"] or {}  # never written is empty, as in the graph
    blob = json.dumps(watched, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _fail(code: str, message: str) -> tuple[str, dict[str, Any]]:
    error = {"code": code, "message": message}
    return END, {"status": "failed", "error": error, "guard": None, "next_skill": None}


def route(ctx: NodeContext, state: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The next node for ``state`` and the state update that goes with it."""
    explicit = state.get("next_skill")
    if explicit:
        bundle = ctx.bundles.get(explicit)
        if bundle is None:
            return _fail("UNKNOWN_SKILL", f"next_skill {explicit!r} is not a loaded skill")
        reason = bundle.why_not(state)
        if reason is not None:
            return _fail(
                "NEXT_SKILL_NOT_CANDIDATE", f"next_skill {explicit!r} cannot run now: {reason}"
            )
        chosen = explicit
    else:
        # The best candidate: the first in rank order whose triggers and requires hold.
        best = next((b for b in ctx.ranked if b.is_candidate(state)), None)
        if best is None:
            return END, {"status": "finished", "guard": None, "next_skill": None}
        chosen = best.name
    digest = fingerprint(state, ctx.data_keys)
    guard = state.get("guard") or {}
    same = guard.get("skill") == chosen and guard.get("fingerprint") == digest
    count = guard.get("count", 0) + 1 if same else 1
    if count > ctx.settings.loop_limit:
        return _fail(
            "LOOP_GUARD",
            f"skill {chosen!r} was chosen {count} times in a row without any change to the "
            f"state (loop_limit={ctx.settings.loop_limit}); stopped the run",
        )
    return chosen, {
        "guard": {"skill": chosen, "fingerprint": digest, "count": count},
        "next_skill": None,
        "status": "running",
    }


def no_skill_error(ctx: NodeContext, state: Mapping[str, Any]) -> dict[str, Any]:
    """The error of a run that no skill can start: every skill, best first, with the reason it
    is not a candidate (``skills``), and a hint when the context is unknown."""
    context = state.get("context")
    skills = [{"skill": b.name, "reason": b.why_not(state) or "a candidate"} for b in ctx.ranked]
    known = sorted({c for b in ctx.ranked for c in b.contexts})
    if not known:
        hint = "; no skills are loaded"
    elif context in known:
        hint = f"; {len(skills)} skill(s) considered, each reason is in error.skills"
    else:
        close = difflib.get_close_matches(str(context), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        hint += f"; the loaded skills run in: {', '.join(known)}"
    return {
        "code": "NO_SKILL",
        "message": f"no skill can run in context {context!r}{hint}",
        "skills": skills,
    }


def start_update(
    ctx: NodeContext, state: Mapping[str, Any], update: Mapping[str, Any]
) -> dict[str, Any]:
    """The input that starts a run on ``state``: ``update`` plus its first routing decision.

    When no skill can run, the run ends at once as ``no_skill`` (see :func:`no_skill_error`).
    """
    merged = {**state, **update}
    goto, routed = route(ctx, merged)
    if goto == END and routed["status"] == "finished":
        routed = {**routed, "status": "no_skill", "error": no_skill_error(ctx, merged)}
    return {**update, **routed}


def entry(state: Mapping[str, Any]) -> str:
    """The graph's entry edge: the skill :func:`start_update` chose, or the end."""
    guard = state.get("guard") or {}
    running = state.get("status") == "running" and guard.get("skill")
    return str(guard["skill"]) if running else END


class RouterNode:
    """Routes with :func:`route` where no skill does: after a card that has nothing to ask, and
    where a fork resumes."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    def __call__(self, state: dict[str, Any]) -> Command[str]:
        goto, update = route(self.ctx, state)
        return Command(goto=goto, update=update)
