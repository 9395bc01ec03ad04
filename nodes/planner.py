"""Planner execution mode (seed 001): a bounded ``{stop, tool, args}`` loop, then a cited view.

One node call runs the whole turn. Each round the model (or, without a model, the rules of
``nodes/planner_rules.py``) outputs one plan; the runtime checks every rule of the planner
contract, runs the plan with the run's user bound and only if the skill's meta lists the tool,
and answers with an observation. Invalid plans come back as errors and use up their round. The
host's settings bound the loop: ``planner_max_rounds`` rounds and ``planner_max_evidence``
evidence messages, whatever the model says. The model then writes ``memory_view``; every item
must cite evidence messages that the loop retrieved and the runtime selected, or the view is
re-asked with the errors (``max_retries``) and the run fails with nothing merged.

Every model turn, plan and observation goes to the turn's transcript in the store; the
trajectory of rounds goes to the attempt record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from langgraph.types import Command

from skilldeck.errors import ToolError
from skilldeck.nodes.context import NodeContext
from skilldeck.nodes.planner_rules import (
    LoopView,
    RulesConfig,
    RulesPlanner,
    extract_view,
    latest_message_ts,
)
from skilldeck.nodes.skill import SkillNode, _describe, parse_output
from skilldeck.nodes.transcript import append_messages, read_messages
from skilldeck.skills.bundle import SkillBundle
from skilldeck.tools.fusion import rrf
from skilldeck.tools.memory import HYBRID_WEIGHTS
from skilldeck.tools.messages import format_ts, parse_ts
from skilldeck.tools.registry import IDENTITY_KEYS

__all__ = [
    "ANCHORS",
    "PLANNER_TOOLS",
    "SESSION_GAP_S",
    "VIEW_KEYS",
    "Loop",
    "PlannerSkillNode",
    "check_plan",
    "check_view",
]

PLANNER_TOOLS = ("messages_list", "lexical_search", "semantic_search", "neighbors")
VIEW_KEYS = ("preferences", "profile", "constraints")
#: Fused hits that enter the evidence before neighbors fill the remaining slots.
ANCHORS = 5
#: Silence that separates two conversations: neighbors across it are not an anchor's context.
SESSION_GAP_S = 6 * 3600
_PLAN_KEYS = frozenset(("stop", "tool", "args"))
_WEIGHTS = {"lexical_search": HYBRID_WEIGHTS[0], "semantic_search": HYBRID_WEIGHTS[1]}
_SHOWN = 3  # anchors shown per observation (seed 001: top 1-3)
_TEXT = 300  # characters of a message shown in an observation

Errors = list[dict[str, str]]


def _error(path: str, message: str) -> dict[str, str]:
    return {"path": path, "message": message}


# -- the planner contract -----------------------------------------------------------------------
def _identity_paths(value: Any, path: str) -> list[str]:
    """Where identity keys hide in ``value``, at any depth."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}"
            if key in IDENTITY_KEYS:
                found.append(where)
            found += _identity_paths(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _identity_paths(item, f"{path}[{i}]")
    return found


def _check_filter(raw: Any, where: str, *, nested: bool) -> Errors:
    """Explicit role and time range, ISO 8601 times, since before until."""
    if not isinstance(raw, Mapping):
        return [_error(where, "filter is required: {role, time_range: {since, until}}")]
    errors: Errors = []
    role = raw.get("role")
    if not isinstance(role, str) or not role:
        errors.append(_error(f"{where}.role", "role is required (use 'any' for every role)"))
    times, at = (raw.get("time_range"), f"{where}.time_range") if nested else (raw, where)
    if not isinstance(times, Mapping):
        return [*errors, _error(at, "time_range is required: {since, until}")]
    if times.get("since") is None and times.get("until") is None:
        errors.append(_error(at, "since or until is required: the time range must be explicit"))
    moments: dict[str, datetime] = {}
    for key in ("since", "until"):
        value = times.get(key)
        if value is None:
            continue
        try:
            if not isinstance(value, str):
                raise ToolError("not a string")
            moments[key] = parse_ts(value)
        except ToolError:
            errors.append(
                _error(f"{at}.{key}", f"{value!r} is not ISO 8601 (e.g. 2026-01-01T00:00:00Z)")
            )
    if len(moments) == 2 and moments["since"] >= moments["until"]:
        errors.append(_error(at, "since must be before until"))
    return errors


def check_plan(plan: Any, allowed: Collection[str]) -> Errors:
    """Every rule of seed 001's planner contract; ``allowed``: the tools the skill may call."""
    if not isinstance(plan, Mapping):
        return [_error("$", "a plan is one JSON object {stop, tool, args}")]
    errors = [
        _error(f"$.{key}", "unknown key: a plan has exactly stop, tool and args")
        for key in sorted(set(plan) - _PLAN_KEYS)
    ]
    stop = plan.get("stop")
    if not isinstance(stop, bool):
        errors.append(_error("$.stop", "stop is required: true or false"))
    elif stop:
        for key in ("tool", "args"):
            if plan.get(key) not in (None, {}):
                errors.append(_error(f"$.{key}", "a stop plan runs no tool: omit tool and args"))
        return errors
    tool = plan.get("tool")
    if tool not in PLANNER_TOOLS:
        errors.append(_error("$.tool", f"tool must be one of {', '.join(PLANNER_TOOLS)}"))
    elif tool not in allowed:
        errors.append(
            _error("$.tool", f"{tool} is not among this skill's tools ({', '.join(allowed)})")
        )
    args = plan.get("args")
    if not isinstance(args, Mapping):
        return [*errors, _error("$.args", "args must be an object")]
    errors += [
        _error(path, "identity (user_id) is bound by the runtime: never pass it")
        for path in _identity_paths(args, "$.args")
    ]
    if tool == "messages_list":
        errors += _check_filter(args, "$.args", nested=False)
    elif tool in ("lexical_search", "semantic_search"):
        errors += _check_filter(args.get("filter"), "$.args.filter", nested=True)
    elif tool == "neighbors" and not (
        isinstance(args.get("message_id"), str) and args["message_id"]
    ):
        errors.append(_error("$.args.message_id", "neighbors needs the anchor's message_id"))
    return errors


def check_view(view: Any, evidence: Sequence[str], retrieved: Collection[str]) -> Errors:
    """The synthesis contract: exactly ``{preferences, profile, constraints}``, every item
    ``{text, evidence}`` citing only retrieved messages among the selected evidence."""
    if not isinstance(view, Mapping):
        return [_error("$", "memory_view is one JSON object {preferences, profile, constraints}")]
    errors = [_error(f"$.{k}", "unknown key") for k in sorted(set(view) - set(VIEW_KEYS))]
    errors += [_error(f"$.{k}", "required (an empty array)") for k in VIEW_KEYS if k not in view]
    for key in VIEW_KEYS:
        items = view.get(key, [])
        if not isinstance(items, list):
            errors.append(_error(f"$.{key}", "must be an array"))
            continue
        for i, item in enumerate(items):
            at = f"$.{key}[{i}]"
            if not isinstance(item, Mapping) or set(item) != {"text", "evidence"}:
                errors.append(_error(at, 'an item is exactly {"text", "evidence"}'))
                continue
            if not isinstance(item["text"], str) or not item["text"].strip():
                errors.append(_error(f"{at}.text", "must be a non-empty string"))
            cited = item["evidence"]
            if not isinstance(cited, list) or not cited:
                errors.append(_error(f"{at}.evidence", "an item without evidence is not allowed"))
                continue
            for j, message_id in enumerate(cited):
                where = f"{at}.evidence[{j}]"
                if not isinstance(message_id, str) or message_id not in retrieved:
                    errors.append(_error(where, f"{message_id!r} was never retrieved"))
                elif message_id not in evidence:
                    errors.append(
                        _error(
                            where,
                            f"{message_id!r} is not among the {len(evidence)} evidence messages",
                        )
                    )
    return errors


# -- what the rounds retrieved ------------------------------------------------------------------
@dataclass
class Loop:
    """Hits, rankings and neighbors of the rounds so far, and the trajectory."""

    session_gap_s: float = SESSION_GAP_S
    hits: dict[str, dict[str, Any]] = field(default_factory=dict)
    rankings: list[tuple[str, list[str]]] = field(default_factory=list)  # (tool, ids)
    searches: list[dict[str, Any]] = field(default_factory=list)  # every search run, even failed
    expansions: list[tuple[str, list[str]]] = field(default_factory=list)
    tried: set[str] = field(default_factory=set)  # anchors whose neighbors call failed
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def fused(self) -> list[str]:
        """Every search hit, ranked by weighted reciprocal-rank fusion of the rounds' rankings:
        lexical rounds weigh as in ``Memory.hybrid_search``, the others as its dense side."""
        weights = [_WEIGHTS.get(tool, HYBRID_WEIGHTS[1]) for tool, _ in self.rankings]
        ranked = rrf(*(ids for _, ids in self.rankings), weights=weights)
        return [message_id for message_id, _ in ranked]

    def pending(self) -> list[str]:
        """Top anchors whose neighbors have not been fetched: their context is missing."""
        expanded = {anchor for anchor, _ in self.expansions}
        return [a for a in self.fused()[:_SHOWN] if a not in expanded]

    def view(self) -> LoopView:
        expanded = frozenset(anchor for anchor, _ in self.expansions) | self.tried
        return LoopView(self.searches, self.fused(), expanded)

    def fail(self, tool: str, args: Mapping[str, Any]) -> None:
        """Record a call that failed, so that a planner does not repeat it."""
        if tool == "neighbors":
            self.tried.add(str(args.get("message_id")))
        else:
            self.searches.append({"tool": tool, "args": dict(args), "hits": 0, "ok": False})

    def add(
        self, tool: str, args: Mapping[str, Any], result: Mapping[str, Any]
    ) -> tuple[int, list[str]]:
        """Record a tool result; returns its hit count and its message ids, best first (for
        neighbors: the anchor's session, nearest first)."""
        hits = [h for h in result.get("hits") or [] if isinstance(h, Mapping)]
        for hit in hits:
            self.hits.setdefault(str(hit["message_id"]), dict(hit))
        ids = [str(h["message_id"]) for h in hits]
        if tool == "neighbors":
            anchor = str(args["message_id"])
            ids = _nearest_first(_session(hits, anchor, self.session_gap_s), anchor)
            self.expansions.append((anchor, ids))
            return len(hits), ids
        if tool == "messages_list":
            ids.reverse()  # time order; the newest of a listing rank first
        self.rankings.append((tool, ids))
        count = int(result.get("total", len(ids)))
        self.searches.append({"tool": tool, "args": dict(args), "hits": count, "ok": True})
        return count, ids

    def evidence(self, limit: int, anchors: int) -> list[str]:
        """Anchors first by fused rank, then neighbors nearest first, then further hits."""
        fused = self.fused()
        chosen = fused[: min(anchors, limit)]
        extra = [i for _, ids in self.expansions for i in ids] + fused[anchors:]
        for message_id in extra:
            if len(chosen) >= limit:
                break
            if message_id not in chosen:
                chosen.append(message_id)
        return chosen


def _session(hits: Sequence[Mapping[str, Any]], anchor: str, gap: float) -> list[str]:
    """The ids of ``hits`` (in time order) in the anchor's session: the run of turns around it
    with no silence longer than ``gap`` seconds. Turns of an earlier conversation are not the
    anchor's context."""
    ids = [str(h["message_id"]) for h in hits]
    if anchor not in ids:
        return ids
    at = ids.index(anchor)
    times = [parse_ts(str(h["ts"])).timestamp() for h in hits]
    lo = at
    while lo > 0 and times[lo] - times[lo - 1] <= gap:
        lo -= 1
    hi = at
    while hi + 1 < len(ids) and times[hi + 1] - times[hi] <= gap:
        hi += 1
    return ids[lo : hi + 1]


def _nearest_first(ids: list[str], anchor: str) -> list[str]:
    """The neighbors of ``anchor`` by distance; at equal distance the earlier turn first, as
    the indexes read a turn after the one before it."""
    if anchor not in ids:
        return ids
    at = ids.index(anchor)
    order: list[str] = []
    for distance in range(1, len(ids)):
        order += [ids[i] for i in (at - distance, at + distance) if 0 <= i < len(ids)]
    return order


# -- prompts ------------------------------------------------------------------------------------
_RUNTIME = """\
## Runtime (planner mode)
The runtime runs the planner contract above and binds the user to every tool call.
- Each round, reply with exactly one JSON object {{"stop": false, "tool": ..., "args": {{...}}}}
  and nothing else; reply {{"stop": true}} when the evidence is enough.
- Every contract rule is checked. An invalid plan is not run: it comes back as an error and
  still uses up its round.
- After each call you get an observation: the hit count, the top anchors, whether their context
  is missing, and whether the neighbors rule was followed.
- Budget (host settings): at most {rounds} rounds and {evidence} evidence messages. The runtime
  selects the evidence: your searches' best hits (fused by reciprocal rank), then the neighbors
  you fetched.
- Then you see the evidence messages and reply with only the memory_view object
  {{"preferences": [], "profile": [], "constraints": []}}, each item
  {{"text": "...", "evidence": ["message_id", ...]}} citing only the evidence messages shown.
  An item without evidence is rejected; leave an array empty when evidence is missing."""

_RETRY = (
    'Reply with only the memory_view object {"preferences": [], "profile": [], '
    '"constraints": []}, citing only the evidence messages listed above.'
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _shown(hit: Mapping[str, Any]) -> dict[str, Any]:
    text = str(hit.get("text", ""))
    text = text if len(text) <= _TEXT else text[: _TEXT - 1] + "…"
    return {k: hit.get(k) for k in ("message_id", "ts", "role")} | {"text": text}


def _read_json(message: AIMessage, what: str) -> tuple[Any, Errors]:
    """A plan or a view: one JSON object as text; tool calls are not how this mode talks."""
    if message.tool_calls:
        return None, [_error("$", f"reply with the {what} as one JSON object, not a tool call")]
    return parse_output(message)


class PlannerSkillNode(SkillNode):
    """Runs a skill in planner mode; see the module docstring.

    ``anchors``, ``session_gap_s`` and ``rules`` are class attributes so that benchmarks can
    compare variants.
    """

    rules_fallback = True
    anchors: int = ANCHORS
    session_gap_s: float = SESSION_GAP_S
    rules: RulesConfig = RulesConfig()

    def __init__(self, ctx: NodeContext, bundle: SkillBundle) -> None:
        super().__init__(ctx, bundle)
        listed = {ctx.registry.resolve(name) for name in bundle.tools}
        self.allowed = tuple(t for t in PLANNER_TOOLS if (ctx.registry.resolve(t) or "") in listed)
        self.system = self._system(bundle, ctx)

    @staticmethod
    def _system(bundle: SkillBundle, ctx: NodeContext) -> SystemMessage:
        parts = [f"# Skill: {bundle.name}\n{bundle.description}", bundle.instructions]
        if bundle.references:
            refs = "\n\n".join(f"### {r.name}\n{r.text.strip()}" for r in bundle.references)
            parts.append(f"## References\n{refs}")
        examples = Path(bundle.path) / "scripts" / "tool_call_examples.md"
        if examples.is_file():  # SKILL.md points the model at this file
            parts.append(f"## scripts/tool_call_examples.md\n{examples.read_text('utf-8')}")
        settings = ctx.settings
        parts.append(
            _RUNTIME.format(
                rounds=settings.planner_max_rounds, evidence=settings.planner_max_evidence
            )
        )
        return SystemMessage("\n\n".join(parts))

    # -- the node ---------------------------------------------------------------------------
    def __call__(
        self, state: dict[str, Any], config: RunnableConfig, store: BaseStore
    ) -> Command[str]:
        configurable = config.get("configurable", {})
        thread_id = str(configurable["thread_id"])
        identity = {k: configurable.get(k) for k in IDENTITY_KEYS}
        calls = dict(state.get("calls") or {})
        turn = state.get("turn")
        if turn and turn.get("skill") == self.name and turn.get("planner") is not None:
            # A re-ask after a rejected view: the loop is done and its evidence is in the turn.
            conversation = read_messages(store, thread_id, turn["id"])
            return self._synthesize(state, dict(turn), calls, conversation, [], thread_id, store)
        if not identity.get("user_id"):
            message = f"skill {self.name!r} needs a user: start the run with user_id (--user)"
            return self._fail(state, "NO_USER", message, None)
        try:
            turn, opening = self.open_turn(state)
        except Exception as exc:
            return self._fail(state, "SCRIPT_ERROR", _describe("preprocess.py", exc), None)
        question = (state.get("input") or {}).get("question")
        question = question if isinstance(question, str) else ""
        latest, empty = self._latest(identity)
        brief = {
            "question": question,
            "latest_message_ts": format_ts(latest) if latest else None,
            "now": format_ts(datetime.now(UTC)),
            "budget": {
                "rounds": self.ctx.settings.planner_max_rounds,
                "evidence": self.ctx.settings.planner_max_evidence,
            },
        }
        opening.append(HumanMessage(f"{_dumps(brief)}\nPlan round 1: reply with one plan."))
        rules = None
        if not self.ctx.has_model(self.name):
            rules = RulesPlanner(question, latest, empty=empty, config=self.rules)
        return self._loop(state, turn, calls, opening, rules, identity, thread_id, store)

    def _latest(self, identity: Mapping[str, Any]) -> tuple[datetime | None, bool]:
        """The user's latest message time (relative time signals count from it), and whether
        the user has no messages at all."""
        if "messages_list" not in self.allowed:
            return None, False

        failed: list[str] = []

        def call(tool: str, args: Mapping[str, Any]) -> Mapping[str, Any] | None:
            result = self.ctx.registry.invoke(tool, args, identity)
            if not result.ok:
                failed.append(result.content)
                return None
            return json.loads(result.content)  # type: ignore[no-any-return]

        latest = latest_message_ts(call)
        # A failing probe says nothing about the messages: the searches run and report it.
        return latest, latest is None and not failed

    def _loop(
        self,
        state: dict[str, Any],
        turn: dict[str, Any],
        calls: dict[str, int],
        opening: list[BaseMessage],
        rules: RulesPlanner | None,
        identity: Mapping[str, Any],
        thread_id: str,
        store: BaseStore,
    ) -> Command[str]:
        loop = Loop(session_gap_s=self.session_gap_s)
        conversation, unsaved = list(opening), list(opening)
        budget = self.ctx.settings.planner_max_rounds
        stopped = f"the budget of {budget} rounds is used up"
        turn["trajectory"] = loop.rounds  # the same list: a failure mid-loop records it too
        for number in range(1, budget + 1):
            plan: Any
            if rules is None:
                try:
                    message = self.ask_json(conversation, calls, turn)
                except Exception as exc:
                    return self._fail(state, "MODEL_ERROR", f"{type(exc).__name__}: {exc}", turn)
                plan, errors = _read_json(message, "plan")
            else:
                plan, errors = rules.plan(loop.view()), []
                message = AIMessage(_dumps(plan), name="rules")
            if plan is not None:
                errors += check_plan(plan, self.allowed)
            pending = loop.pending()
            step: dict[str, Any] = {
                "round": number,
                "plan": plan if plan is not None else str(message.content)[:_TEXT],
                "valid": not errors,
                "errors": errors,
                "tool": None,
                "hit_count": None,
                "anchors": [],
                # Seed 001's soft rule: after good anchors, prefer neighbors. None: no anchors.
                "neighbors_preferred": None,
            }
            loop.rounds.append(step)
            if pending and not errors:
                step["neighbors_preferred"] = plan.get("tool") == "neighbors"
            if not errors and plan["stop"]:
                stopped = f"the planner stopped after {number} round(s)"
                conversation.append(message)
                unsaved.append(message)
                break
            ref = f"{turn['id']}/{turn['pos'] + len(unsaved) + 1:06d}"
            observation = self._observe(loop, step, plan, identity, turn, ref, pending, budget)
            answer = HumanMessage(_dumps(observation))
            conversation += [message, answer]
            turn["pos"] = append_messages(
                store, thread_id, turn["id"], turn["pos"], [*unsaved, message, answer]
            )
            unsaved = []
        limit = self.ctx.settings.planner_max_evidence
        chosen = loop.evidence(limit, self.anchors)
        evidence = [
            {k: loop.hits[i].get(k) for k in ("message_id", "text", "ts", "role")} for i in chosen
        ]
        turn["round"] = len(loop.rounds)
        turn["planner"] = {"evidence": evidence, "retrieved": sorted(loop.hits)}
        prompt = HumanMessage(_synthesis_prompt(stopped, evidence, limit))
        conversation.append(prompt)
        unsaved.append(prompt)
        return self._synthesize(state, turn, calls, conversation, unsaved, thread_id, store)

    def _observe(
        self,
        loop: Loop,
        step: dict[str, Any],
        plan: Any,
        identity: Mapping[str, Any],
        turn: dict[str, Any],
        ref: str,
        pending: list[str],
        budget: int,
    ) -> dict[str, Any]:
        """Run a checked plan (or not, if invalid) and describe the outcome for the model."""
        left = budget - step["round"]
        if step["errors"]:
            return {
                "round": step["round"],
                "rounds_left": left,
                "valid": False,
                "errors": step["errors"],
                "note": "invalid plan: nothing was run, and the round counts against the budget",
            }
        tool, args = plan["tool"], plan["args"]
        started = time.perf_counter()
        result = self.ctx.registry.invoke(tool, args, identity)
        turn["tool_calls"] = [
            *turn["tool_calls"],
            {
                "id": f"{turn['id']}-r{step['round']}",
                "name": tool,
                "status": "ok" if result.ok else "error",
                "ms": round((time.perf_counter() - started) * 1000, 2),
                "ref": ref,
            },
        ]
        step["tool"] = tool
        observation: dict[str, Any] = {"round": step["round"], "rounds_left": left, "tool": tool}
        if not result.ok:
            loop.fail(tool, args)
            step["errors"] = [_error("$.tool_result", result.content)]
            return {**observation, "ok": False, "error": result.content}
        step["hit_count"], ids = loop.add(tool, args, json.loads(result.content))
        step["anchors"] = ids[:_SHOWN]
        missing = loop.pending()
        notes = []
        if step["neighbors_preferred"] is False:
            notes.append(
                f"soft rule not followed: anchors {', '.join(pending)} were waiting for their "
                "context and neighbors was preferred"
            )
        elif step["neighbors_preferred"]:
            notes.append("soft rule followed: neighbors fetched the context of an anchor")
        if missing:
            notes.append(f"context missing: prefer neighbors(message_id={missing[0]!r}) next")
        return {
            **observation,
            "ok": True,
            "hit_count": step["hit_count"],
            "anchors": [_shown(loop.hits[i]) for i in step["anchors"]],
            "context_missing": bool(missing),
            "neighbors_preferred": step["neighbors_preferred"],
            "note": "; ".join(notes) or None,
        }

    def _synthesize(
        self,
        state: dict[str, Any],
        turn: dict[str, Any],
        calls: dict[str, int],
        conversation: list[BaseMessage],
        unsaved: list[BaseMessage],
        thread_id: str,
        store: BaseStore,
    ) -> Command[str]:
        """Ask for ``memory_view`` (or extract it by rules), check its citations, accept it."""
        evidence: list[dict[str, Any]] = turn["planner"]["evidence"]
        if self.ctx.has_model(self.name):
            try:
                message = self.ask_json(conversation, calls, turn)
            except Exception as exc:
                return self._fail(state, "MODEL_ERROR", f"{type(exc).__name__}: {exc}", turn)
            view, errors = _read_json(message, "memory_view")
        else:
            view, errors = extract_view(evidence), []
            message = AIMessage(_dumps(view), name="rules")
        turn["pos"] = append_messages(
            store, thread_id, turn["id"], turn["pos"], [*unsaved, message]
        )
        if view is not None:
            ids = [e["message_id"] for e in evidence]
            errors += check_view(view, ids, set(turn["planner"]["retrieved"]))
        if errors:
            return self._reject(state, turn, calls, errors, _RETRY, thread_id, store)
        output = {
            "response": _summary(view, evidence),
            "profile": {},
            "data": {"memory_view": view, "evidence": evidence},
            "control": {"action": "finish"},
        }
        return self.accept_output(state, turn, calls, output, thread_id, store)


def _synthesis_prompt(stopped: str, evidence: list[dict[str, Any]], limit: int) -> str:
    if not evidence:
        return (
            f"Retrieval is over ({stopped}) and found no evidence. Reply with only "
            '{"preferences": [], "profile": [], "constraints": []}.'
        )
    return (
        f"Retrieval is over ({stopped}). The evidence messages ({len(evidence)}, at most "
        f"{limit}), the only ones you may cite:\n{_dumps([_shown(e) for e in evidence])}\n"
        'Reply with only the memory_view object {"preferences": [], "profile": [], '
        '"constraints": []}; each item {"text": "...", "evidence": ["message_id", ...]}. Keep '
        "an array empty when the evidence does not support an item."
    )


def _summary(view: Mapping[str, Any], evidence: Sequence[Mapping[str, Any]]) -> str:
    counts = ", ".join(f"{len(view[k])} {k}" for k in VIEW_KEYS)
    if not evidence:
        return "No evidence found; memory_view is empty."
    return f"{len(evidence)} evidence message(s); memory_view: {counts}."
