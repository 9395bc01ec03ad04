"""Planner execution mode (seed 001): a bounded ``{stop, tool, args}`` loop, then a cited view.

One node call runs the whole turn. Each round the model (or, without a model, the rules of
:mod:`skilldeck.nodes.planner_rules`) outputs one plan; the runtime checks every rule of the planner
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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from langgraph.types import Command

from skilldeck.errors import ModelUnavailableError
from skilldeck.graph.records import ToolCall, Turn
from skilldeck.nodes.context import NodeContext
from skilldeck.nodes.model_call import RetryableModelError
from skilldeck.nodes.modes import execution_mode
from skilldeck.nodes.planner.contract import (
    PLANNER_TOOLS,
    VIEW_KEYS,
    Errors,
    check_plan,
    check_view,
    error,
    plan_schema,
    view_schema,
)
from skilldeck.nodes.planner.loop import ANCHORS, SESSION_GAP_S, SHOWN, Loop
from skilldeck.nodes.planner_rules import (
    RulesConfig,
    RulesPlanner,
    extract_view,
    first_message_ts,
    latest_message_ts,
)
from skilldeck.nodes.skill import SkillNode, Visit, _describe, parse_output
from skilldeck.skills.bundle import SkillBundle
from skilldeck.skills.contract import OutputLimits
from skilldeck.tools.messages import format_ts
from skilldeck.tools.registry import run_identity

__all__ = ["PlannerSkillNode"]

_TEXT = 300  # characters of a message shown in an observation


# -- prompts ------------------------------------------------------------------------------------
# The plan's and the view's shapes are in SKILL.md's two contracts: this adds only what the
# runtime does with them.
_RUNTIME = """\
## Runtime (planner mode)
The runtime binds the user to every call.
- Each round, reply with one plan by the planner contract, or {{"stop": true}} when the
  evidence is enough. An invalid plan is not run: its error comes back, its round used up.
- Budget: {rounds} rounds and {evidence} evidence messages: your searches' best hits, then the
  neighbors you fetched.
- Shown the evidence, reply with only the memory_view, each item {{"text": "...", "evidence":
  ["message_id", ...]}} citing messages shown; an item without evidence is rejected."""

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


def _read_json(message: AIMessage, what: str, limits: OutputLimits) -> tuple[Any, Errors]:
    """A plan or a view: one JSON object as text; tool calls are not how this mode talks."""
    if message.tool_calls:
        return None, [error("$", f"reply with the {what} as one JSON object, not a tool call")]
    return parse_output(message, limits)


@execution_mode("planner")
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
        self._messages: dict[str | None, SystemMessage] = {}
        self.plan_schemas = {may: plan_schema(self.allowed, may_stop=may) for may in (True, False)}

    def system(self) -> SystemMessage:
        """The planner mode's own system message (its JSON steps are its output), rendered
        once per output mode (the rules planner has none)."""
        mode = self.caller.mode if self.ctx.has_model(self.name) else None
        if mode not in self._messages:
            self._messages[mode] = self._system(self.bundle, self.ctx, mode)
        return self._messages[mode]

    @staticmethod
    def _system(bundle: SkillBundle, ctx: NodeContext, mode: str | None) -> SystemMessage:
        parts = [f"# Skill: {bundle.name}\n{bundle.description}", bundle.instructions]
        if bundle.references:
            refs = "\n\n".join(f"### {r.name}\n{r.text.strip()}" for r in bundle.references)
            parts.append(f"## References\n{refs}")
        examples = Path(bundle.path) / "scripts" / "tool_call_examples.md"
        # The examples show each plan's shape; in schema mode the grammar holds that shape,
        # and the examples would be the schema sent a second time.
        if examples.is_file() and mode != "schema":
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
        identity = run_identity(config.get("configurable", {}))
        visit = Visit.of(state, config, store)
        turn = visit.view.turn
        if turn is not None and turn.skill == self.name and turn.mode_state is not None:
            # A re-ask after a rejected view: the loop is done and its evidence is in the turn.
            return self._synthesize(visit, turn, visit.conversation(turn), [])
        if not identity.get("user_id"):
            message = f"skill {self.name!r} needs a user: start the run with user_id (--user)"
            return self._fail(visit, "NO_USER", message, None)
        try:
            turn, opening = self.open_turn(visit)
        except Exception as exc:
            return self._fail(visit, "SCRIPT_ERROR", _describe("preprocess.py", exc), None)
        question = (state.get("input") or {}).get("question")
        question = question if isinstance(question, str) else ""
        first, latest, empty = self._span(identity)
        # The history's span, not only its end: a window anchored in "latest" and "now" holds
        # the last message alone, and a model planning from the brief has nothing else to go on.
        brief = {  # the question is in the state view above it
            "first_message_ts": format_ts(first) if first else None,
            "latest_message_ts": format_ts(latest) if latest else None,
            "now": format_ts(datetime.now(UTC)),
        }
        opening.append(HumanMessage(f"{_dumps(brief)}\nPlan round 1: reply with one plan."))
        rules = None
        if not self.ctx.has_model(self.name):
            rules = RulesPlanner(question, latest, empty=empty, config=self.rules)
        return self._loop(visit, turn, opening, rules, identity, history=not empty)

    def _span(self, identity: Mapping[str, Any]) -> tuple[datetime | None, datetime | None, bool]:
        """The user's first and latest message times (relative time signals count from the
        latest), and whether the user has no messages at all."""
        if "messages_list" not in self.allowed:
            return None, None, False

        failed: list[str] = []

        def call(tool: str, args: Mapping[str, Any]) -> Mapping[str, Any] | None:
            result = self.ctx.registry.invoke(tool, args, identity)
            if not result.ok:
                failed.append(result.content)
                return None
            return json.loads(result.content)  # type: ignore[no-any-return]

        latest = latest_message_ts(call)
        first = first_message_ts(call) if latest is not None else None
        # A failing probe says nothing about the messages: the searches run and report it.
        return first, latest, latest is None and not failed

    def _loop(
        self,
        visit: Visit,
        turn: Turn,
        opening: list[BaseMessage],
        rules: RulesPlanner | None,
        identity: Mapping[str, Any],
        *,
        history: bool,
    ) -> Command[str]:
        loop = Loop(session_gap_s=self.session_gap_s)
        conversation, unsaved = list(opening), list(opening)
        budget = self.ctx.settings.planner_max_rounds
        stopped = f"the budget of {budget} rounds is used up"

        def so_far(turn: Turn) -> Turn:
            """``turn`` with the rounds so far (a failure mid-loop records them too)."""
            return turn.model_copy(update={"trajectory": [dict(r) for r in loop.rounds]})

        for number in range(1, budget + 1):
            plan: Any
            may_stop = not history or any(r["tool"] for r in loop.rounds)
            if rules is None:
                try:
                    message, turn = self.ask_json(
                        conversation, visit.calls, turn, "plan", self.plan_schemas[may_stop]
                    )
                except RetryableModelError as exc:  # the rules plan the rest of the loop
                    turn = turn.model_copy(update={"model_error": exc.reason})
                    rules = RulesPlanner(
                        str(visit.state.get("input", {}).get("question") or ""),
                        None,
                        empty=False,
                        config=self.rules,
                    )
                    plan, errors = rules.plan(loop.view()), list[dict[str, str]]()
                    message = AIMessage(_dumps(plan), name="rules")
                except ModelUnavailableError:
                    raise  # the thread stops resumable at its last checkpoint
                except Exception as exc:
                    return self._model_error(visit, exc, so_far(turn))
                else:
                    plan, errors = _read_json(message, "plan", self.limits)
            else:
                plan, errors = rules.plan(loop.view()), []
                message = AIMessage(_dumps(plan), name="rules")
            if plan is not None:
                errors += check_plan(plan, self.allowed, may_stop=may_stop)
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
                ignored = {k: plan[k] for k in ("tool", "args") if plan.get(k) not in (None, {})}
                if ignored:  # a stop is a stop; what came with it is recorded, not run
                    step["ignored"] = ignored
                stopped = f"the planner stopped after {number} round(s)"
                conversation.append(message)
                unsaved.append(message)
                break
            ref = f"{turn.id}/{turn.length + len(unsaved) + 1:06d}"
            observation, call = self._observe(
                loop, step, plan, identity, turn, ref, pending, budget
            )
            answer = HumanMessage(_dumps(observation))
            conversation += [message, answer]
            ran = () if call is None else (call,)
            turn = visit.save(turn, [*unsaved, message, answer], ran)
            unsaved = []
        limit = self.ctx.settings.planner_max_evidence
        chosen = loop.evidence(limit, self.anchors)
        evidence = [
            {k: loop.hits[i].get(k) for k in ("message_id", "text", "ts", "role")} for i in chosen
        ]
        turn = so_far(turn).model_copy(
            update={
                "round": len(loop.rounds),
                "mode_state": {"evidence": evidence, "retrieved": sorted(loop.hits)},
            }
        )
        prompt = HumanMessage(_synthesis_prompt(stopped, evidence, limit))
        conversation.append(prompt)
        unsaved.append(prompt)
        return self._synthesize(visit, turn, conversation, unsaved)

    def _observe(
        self,
        loop: Loop,
        step: dict[str, Any],
        plan: Any,
        identity: Mapping[str, Any],
        turn: Turn,
        ref: str,
        pending: list[str],
        budget: int,
    ) -> tuple[dict[str, Any], ToolCall | None]:
        """Run a checked plan (or not, if invalid): what the model is told of the outcome, and
        the record of the call it made (the transcript keeps it with the observation)."""
        left = budget - step["round"]
        if step["errors"]:
            return {
                "round": step["round"],
                "rounds_left": left,
                "valid": False,
                "errors": step["errors"],
                "note": "invalid plan: nothing was run, and the round counts against the budget",
            }, None
        tool, args = plan["tool"], plan["args"]
        started = time.perf_counter()
        result = self.ctx.registry.invoke(tool, args, identity)
        call = ToolCall(
            id=f"{turn.id}-r{step['round']}",
            name=tool,
            status="ok" if result.ok else "error",
            ms=round((time.perf_counter() - started) * 1000, 2),
            ref=ref,
        )
        step["tool"] = tool
        observation: dict[str, Any] = {"round": step["round"], "rounds_left": left, "tool": tool}
        if not result.ok:
            loop.fail(tool, args)
            step["errors"] = [error("$.tool_result", result.content)]
            return {**observation, "ok": False, "error": result.content}, call
        step["hit_count"], ids = loop.add(tool, args, json.loads(result.content))
        step["anchors"] = ids[:SHOWN]
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
        }, call

    def _synthesize(
        self,
        visit: Visit,
        turn: Turn,
        conversation: list[BaseMessage],
        unsaved: list[BaseMessage],
    ) -> Command[str]:
        """Ask for ``memory_view`` (or extract it by rules), check its citations, accept it."""
        found: dict[str, Any] = turn.mode_state  # type: ignore[assignment]
        evidence: list[dict[str, Any]] = found["evidence"]
        if self.ctx.has_model(self.name):
            schema = view_schema([e["message_id"] for e in evidence])
            try:
                message, turn = self.ask_json(
                    conversation, visit.calls, turn, "memory_view", schema
                )
            except RetryableModelError as exc:  # the rules extract the view instead
                turn = turn.model_copy(update={"model_error": exc.reason})
                view, errors = extract_view(evidence), list[dict[str, str]]()
                message = AIMessage(_dumps(view), name="rules")
            except ModelUnavailableError:
                raise  # the thread stops resumable at its last checkpoint
            except Exception as exc:
                return self._model_error(visit, exc, turn)
            else:
                view, errors = _read_json(message, "memory_view", self.limits)
        else:
            view, errors = extract_view(evidence), []
            message = AIMessage(_dumps(view), name="rules")
        turn = visit.save(turn, [*unsaved, message])
        if view is not None:
            ids = [e["message_id"] for e in evidence]
            errors += check_view(view, ids, set(found["retrieved"]))
        if errors:
            return self._reject(visit, turn, errors, _RETRY)
        output = {
            "response": _summary(view, evidence),
            "profile": {},
            "data": {"memory_view": view, "evidence": evidence},
            "control": {"action": "finish"},
        }
        return self.accept_output(visit, turn, output)


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
