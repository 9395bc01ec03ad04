"""The ``retrieval`` execution mode: seed 002's retrieval policy run as graph logic.

One node call runs the whole policy, bounded: skill-enabled tools (those the meta lists besides
the three standard ones), then ``table_rag_retrieve`` and ``rag_retrieve`` (table first unless
the question is clearly pure text), then local files, strictly one after another. After each
step the sufficiency rules judge the evidence so far; the first sufficient step ends the
search. ``rag_retrieve`` starts at ``top_k`` 30, 50 or 100 by the question's breadth and
expands along 30 -> 50 -> 100 while its results fill ``top_k`` but fall short; every other
source runs once. No source stands in for another: the other RAG tool and the local files are
tried whatever the first one found, and "no relevant information" is said only after all.

With a model, the model rewrites the question (JSON) and writes the answer from the evidence
(paragraphs, each with the citations it uses, chosen from the evidence shown); without one, the
rules (:mod:`skilldeck.nodes.retrieval_rules`) do both. Either answer must pass the citation
contract (:func:`~skilldeck.nodes.retrieval.answer.check_answer`); a failing answer goes back
through the re-ask path with the errors. The trajectory (rewrite, plan, every step with its
tool, args, result summary and verdict) is kept in the attempt record, the tool calls and
model turns in the transcript, and the evidence in the store for a re-ask.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from langgraph.types import Command

import skilldeck.nodes.transcript as transcript
from skilldeck.errors import ModelUnavailableError
from skilldeck.graph.records import ToolCall, Turn
from skilldeck.nodes.context import NodeContext
from skilldeck.nodes.model_call import RetryableModelError
from skilldeck.nodes.modes import execution_mode
from skilldeck.nodes.retrieval.answer import check_answer, compose_answer, select_evidence
from skilldeck.nodes.retrieval.evidence import Evidence, citations_in
from skilldeck.nodes.retrieval.plan import LOCAL, RAG, TABLE, Plan, make_plan
from skilldeck.nodes.retrieval.policy import Invoke, run_policy, source_order
from skilldeck.nodes.retrieval.rewrite import INTENTS, REWRITE_SCHEMA, Rewrite, rewrite_question
from skilldeck.nodes.skill import SkillNode, Visit, parse_output
from skilldeck.skills.bundle import SkillBundle
from skilldeck.skills.contract import compile_schema, format_errors
from skilldeck.tools.registry import ToolResult, run_identity

__all__ = ["RetrievalSkillNode", "answer_schema", "compose_paragraphs"]

_REWRITE_VALIDATOR = compile_schema(REWRITE_SCHEMA)
# What the model writes after the evidence: its paragraphs, each with the citations of the
# evidence it uses, which can only be citations of the evidence shown (a grammar-constrained
# model cannot make one up or garble one). The runtime writes each paragraph's tags after it.
_MAX_CITES = 2


def answer_schema(shown: Sequence[Evidence]) -> dict[str, Any]:
    """The JSON Schema of the model's answer to the evidence ``shown``."""
    citations = list(dict.fromkeys(e.citation for e in shown))
    cite = {"type": "array", "items": {"enum": citations}, "maxItems": _MAX_CITES}
    paragraph = {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 1}, "cite": cite},
        "required": ["text", "cite"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"paragraphs": {"type": "array", "items": paragraph, "minItems": 1}},
        "required": ["paragraphs"],
        "additionalProperties": False,
    }


def compose_paragraphs(paragraphs: Sequence[Mapping[str, Any]]) -> str:
    """The answer text: each paragraph followed by its citation tags, blank lines between."""
    blocks = (" ".join([str(p["text"]).strip(), *p["cite"]]) for p in paragraphs)
    return "\n\n".join(blocks)


_ALIASES = {RAG: "rag_retrieve", TABLE: "table_rag_retrieve", LOCAL: "local_file_search"}
# SKILL.md already says that the runtime executes the policy; this says what the model does.
_MODE_NOTE = """\
## Your part
You are asked twice: to rewrite the question for retrieval, then to answer from the evidence
the runtime gathered. Reply to each with the one JSON object it asks for, nothing else."""
_REWRITE_ASK = """\
## Rewrite the question for retrieval
Question: {question}

Reply with one JSON object: {{"entity": [...], "time_scope": [...], "attributes": [...],
"intent": "...", "variants": ["...", ...]}}
- entity: the core entities, as the question writes them.
- time_scope: the years, dates or periods the question is limited to; [] if none.
- attributes: what the question asks about them; [] if nothing specific.
- intent: one of {intents}. Use a text intent (the first five) only for a pure concept,
  definition, workflow, policy or explanation question; "mixed" for data plus explanation;
  "unclear" when unsure.
- variants: 1 to 3 search queries, the main one first, by Query Preparation above."""
_ANSWER_ASK = """\
## Answer the question from the evidence
Question: {question}
Sources tried, in order: {sources}
Coverage: {coverage}

## Evidence
{evidence}

## Reply
One JSON object: {{"paragraphs": [{{"text": "...", "cite": ["<CITATION .../>"]}}, ...]}}. Use
only the evidence above. Write one paragraph per point; its "cite" lists the "cite as" tag(s)
of the evidence it uses (1-2), or [] when it uses none. If you use a truncated table result,
state its total matches (N+M), the displayed count (N) and the omitted count (M). If the
coverage is partial, say so."""
_RETRY = (
    'Reply with {"paragraphs": [{"text": "...", "cite": [...]}]} only: every paragraph that '
    'uses the evidence lists its "cite as" tag(s) in "cite".'
)


# -- the node ----------------------------------------------------------------------------------
def _question(state: Mapping[str, Any]) -> str | None:
    """``input.question``, whitespace-normalised; None when missing or blank."""
    given = state.get("input")
    value = given.get("question") if isinstance(given, Mapping) else None
    return " ".join(value.split()) if isinstance(value, str) and value.strip() else None


def _evidence_block(index: int, item: Evidence) -> str:
    where = f"{_ALIASES.get(item.source, item.source)} · {item.ref}"
    if item.heading:
        where += f" · {item.heading}"
    if item.counts:
        t, s, o = item.counts
        where += f" · truncated: {t} rows matched (N+M), {s} shown (N), {o} omitted (M)"
    body = item.text
    if item.kind == "table":
        body = "\n".join([" | ".join(item.header), *(" | ".join(r) for r in item.rows)])
    return f"[{index}] {where}\n{body}\ncite as: {item.citation}"


def _evidence_key(turn_id: str) -> tuple[str, ...]:
    """Where a turn's evidence is kept: the turn's own (a fork that carries the turn finds it)."""
    return transcript.turn_namespace(turn_id, "evidence")


def _tried(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    names = [str(s["tool"]) for s in steps if not s.get("refused")]
    return [_ALIASES.get(n, n) for n in dict.fromkeys(names)]


@execution_mode("retrieval")
class RetrievalSkillNode(SkillNode):
    """Runs a skill with ``execution_config.mode: retrieval``; see the module docstring."""

    rules_fallback = True

    def __init__(self, ctx: NodeContext, bundle: SkillBundle) -> None:
        super().__init__(ctx, bundle)
        parts = [f"# Skill: {bundle.name}\n{bundle.description}", bundle.instructions, _MODE_NOTE]
        self._message = SystemMessage("\n\n".join(p for p in parts if p))

    def system(self) -> SystemMessage:
        """The mode's own system message: the policy runs the tools, the model only writes JSON
        steps."""
        return self._message

    def __call__(
        self, state: dict[str, Any], config: RunnableConfig, store: BaseStore
    ) -> Command[str]:
        visit = Visit.of(state, config, store)
        turn = visit.view.turn
        if turn is not None and turn.skill == self.name:
            return self._answer_again(visit, turn)
        question = _question(state)
        if question is None:
            message = "input.question is missing: pass the question to answer"
            return self._fail(visit, "INVALID_INPUT", message, None)
        turn, new = self.open_turn(visit)
        try:
            rewrite, note, turn = self._rewrite(question, new, visit.calls, turn)
        except ModelUnavailableError:
            raise  # the thread stops resumable at its last checkpoint
        except Exception as exc:
            return self._model_error(visit, exc, turn)
        # The model sees the rewrite exchange again when it answers; tool calls it does not.
        conversation = list(new)
        plan = make_plan(question, rewrite)
        # Identity is the run's (deck.run binds it into the config), never the input's.
        identity = run_identity(config.get("configurable", {}))
        made: list[ToolCall] = []
        invoke = self._invoker(turn, new, made, identity)
        run = run_policy(plan, self._sources(plan), self._allowed(), invoke)
        shown = select_evidence(plan, run.usable)
        known = {e.citation: e.counts for e in run.gathered}
        trajectory: dict[str, Any] = {
            "question": question,
            "rewrite": {**rewrite.to_dict(), **({"model_error": note} if note else {})},
            "plan": plan.summary(),
            "steps": run.steps,
            "answered_by": run.answered_by,
            "complete": run.answered_by is not None,
            "answer_by": "model" if self.ctx.has_model(self.name) and shown else "rules",
        }
        turn = turn.model_copy(update={"trajectory": trajectory})
        visit.refer(turn)  # the evidence is the turn's: deleting the thread deletes it
        store.put(
            _evidence_key(turn.id),
            "evidence",
            {"shown": [e.to_dict() for e in shown], "known": known},
        )
        if trajectory["answer_by"] == "model":
            ask = HumanMessage(self._answer_ask(plan, run.steps, shown, run.answered_by))
            try:
                schema = answer_schema(shown)
                reply, turn = self.ask_json(
                    [*conversation, ask], visit.calls, turn, "answer", schema
                )
            except RetryableModelError as exc:  # the rules write the answer instead
                trajectory = {**trajectory, "answer_by": "rules", "model_error": exc.reason}
                turn = turn.model_copy(update={"trajectory": trajectory})
                answer = self._rules_answer(plan, trajectory, shown)
                new.append(AIMessage(json.dumps({"answer": answer}, ensure_ascii=False)))
                return self._finish(visit, visit.save(turn, new, made), answer, shown, known)
            except ModelUnavailableError:
                raise  # the thread stops resumable at its last checkpoint
            except Exception as exc:
                return self._model_error(visit, exc, visit.save(turn, new, made))
            saved = visit.save(turn, [*new, ask, reply], made)
            return self._finish(visit, saved, reply, shown, known)
        answer = self._rules_answer(plan, trajectory, shown)
        new.append(AIMessage(json.dumps({"answer": answer}, ensure_ascii=False)))
        return self._finish(visit, visit.save(turn, new, made), answer, shown, known)

    # -- steps ----------------------------------------------------------------------------
    def _rewrite(
        self, question: str, new: list[BaseMessage], calls: dict[str, int], turn: Turn
    ) -> tuple[Rewrite, str | None, Turn]:
        """The model's rewrite (JSON) when there is a model, else the rules'; and ``turn``
        with the call's tokens.

        Invalid model output does not stop the policy, which still needs queries: the rules
        rewrite stands in, and why is kept in the trajectory.
        """
        if not self.ctx.has_model(self.name):
            return rewrite_question(question), None, turn
        intents = ", ".join(map(repr, INTENTS))
        ask = HumanMessage(_REWRITE_ASK.format(question=question, intents=intents))
        try:
            reply, turn = self.ask_json([*new, ask], calls, turn, "rewrite", REWRITE_SCHEMA)
        except RetryableModelError as exc:  # the rules stand in for the model
            return rewrite_question(question), exc.reason, turn
        new += [ask, reply]
        value, errors = parse_output(reply, self.limits)
        errors = errors or format_errors(_REWRITE_VALIDATOR, value)
        if value is not None and not errors:
            return Rewrite.from_model(value, question), None, turn
        reason = "; ".join(f"{e['path']}: {e['message']}" for e in errors)
        return rewrite_question(question), reason, turn

    def _allowed(self) -> set[str]:
        """Canonical names of the tools the meta lists: the only ones the policy may call."""
        return {c for c in map(self.ctx.registry.resolve, self.bundle.tools) if c}

    def _sources(self, plan: Plan) -> list[str]:
        return source_order(self.bundle.tools, self.ctx.registry.resolve, plan.table_first)

    def _invoker(
        self,
        turn: Turn,
        new: list[BaseMessage],
        made: list[ToolCall],
        identity: Mapping[str, Any],
    ) -> Invoke:
        """Tool calls through the registry, bound to the run's identity, into the transcript
        (``new``) and the records of the turn's calls (``made``, saved with ``new``)."""
        registry = self.ctx.registry

        def invoke(name: str, args: dict[str, Any]) -> ToolResult:
            call_id = f"{turn.id[:12]}-{len(made)}"
            started = time.perf_counter()
            result = registry.invoke(name, args, identity)
            call = {"name": name, "args": args, "id": call_id, "type": "tool_call"}
            new.append(AIMessage(content="", tool_calls=[call]))
            status = "success" if result.ok else "error"
            new.append(ToolMessage(result.content, tool_call_id=call_id, name=name, status=status))
            made.append(
                ToolCall(
                    id=call_id,
                    name=name,
                    status="ok" if result.ok else "error",
                    ms=round((time.perf_counter() - started) * 1000, 2),
                    ref=f"{turn.id}/{turn.length + len(new) - 1:06d}",
                )
            )
            return result

        return invoke

    def _answer_ask(
        self,
        plan: Plan,
        steps: Sequence[Mapping[str, Any]],
        shown: Sequence[Evidence],
        answered_by: str | None,
    ) -> str:
        sources = ", ".join(
            f"{_ALIASES.get(str(s['tool']), s['tool'])} "
            f"({'sufficient' if s.get('sufficient') else 'insufficient'})"
            for s in steps
            if not s.get("refused")
        )
        coverage = (
            "complete"
            if answered_by
            else "partial: every source was tried and none covered the whole request"
        )
        evidence = "\n\n".join(_evidence_block(i, e) for i, e in enumerate(shown, start=1))
        return _ANSWER_ASK.format(
            question=plan.question, sources=sources, coverage=coverage, evidence=evidence
        )

    def _rules_answer(
        self, plan: Plan, trajectory: Mapping[str, Any], shown: Sequence[Evidence]
    ) -> str:
        complete = bool(trajectory["complete"])
        return compose_answer(plan, shown, complete=complete, sources=_tried(trajectory["steps"]))

    def _answer_again(self, visit: Visit, turn: Turn) -> Command[str]:
        """After a rejected answer: answer again from the stored evidence (no new retrieval)."""
        trajectory: Mapping[str, Any] = turn.trajectory if isinstance(turn.trajectory, dict) else {}
        item = visit.store.get(_evidence_key(turn.id), "evidence")
        question = _question(visit.state)
        if item is None or question is None or not trajectory:
            message = "the retrieval turn's evidence is gone from the store; start a new run"
            return self._fail(visit, "SCRIPT_ERROR", message, turn)
        shown = [Evidence.from_dict(e) for e in item.value["shown"]]
        known = {k: (tuple(v) if v else None) for k, v in item.value["known"].items()}
        plan = make_plan(question, Rewrite.from_dict(trajectory["rewrite"]))
        if trajectory.get("answer_by") != "model":
            answer = self._rules_answer(plan, trajectory, shown)
            return self._finish(visit, turn, answer, shown, known)
        conversation = [
            m
            for m in visit.conversation(turn)
            if not isinstance(m, ToolMessage) and not (isinstance(m, AIMessage) and m.tool_calls)
        ]
        try:
            schema = answer_schema(shown)
            reply, turn = self.ask_json(conversation, visit.calls, turn, "answer", schema)
        except RetryableModelError as exc:
            return self._reject(visit, turn, [{"path": "$", "message": exc.reason}], _RETRY)
        except ModelUnavailableError:
            raise  # the thread stops resumable at its last checkpoint
        except Exception as exc:
            return self._model_error(visit, exc, turn)
        return self._finish(visit, visit.save(turn, [reply]), reply, shown, known)

    def _finish(
        self,
        visit: Visit,
        turn: Turn,
        answer: AIMessage | str,
        shown: Sequence[Evidence],
        known: Mapping[str, Any],
    ) -> Command[str]:
        """Check the citation contract, then hand the four-part output to ``accept_output``."""
        if isinstance(answer, AIMessage):
            value, errors = parse_output(answer, self.limits)
            if value is not None and not errors:
                errors = format_errors(compile_schema(answer_schema(shown)), value)
            if errors or value is None:
                return self._reject(visit, turn, errors, _RETRY)
            answer = compose_paragraphs(value["paragraphs"])
        trajectory: dict[str, Any] = turn.trajectory  # type: ignore[assignment]
        question = str(trajectory["question"])
        errors = check_answer(answer, question=question, shown=shown, known=known)
        if errors:
            return self._reject(visit, turn, errors, _RETRY)
        citations = citations_in(answer)
        output = {
            "response": answer,
            "profile": {},
            "data": {
                "answer": answer,
                "citations": citations,
                "sources_tried": trajectory["steps"],
                "found": bool(citations),
            },
            "control": {"action": "finish"},
        }
        return self.accept_output(visit, turn, output)
