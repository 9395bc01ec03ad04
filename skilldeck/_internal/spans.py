"""One run's span tree, built from the LangChain callbacks of its graph (only imported when
tracing is on: see :mod:`skilldeck._internal.tracing`).

The tree::

    skilldeck.run                       the request: a new turn, a card's answers, a continue
    ├── route                           the router's step (its model call, if it makes one)
    ├── skill <name>                    one skill turn (it may span many steps)
    │   └── attempt <n>                 one attempt at the contract
    │       ├── chat <model>            a model call (each transport attempt)
    │       ├── execute_tool <tool>     a tool call of the tools step
    │       └── interrupt <skill>       the card the attempt asked
    └── card <skill>                    a resume's answers, taken by the card

Attributes follow OpenTelemetry's GenAI semantic conventions (``gen_ai.operation.name``,
``gen_ai.provider.name`` and the older ``gen_ai.system``, ``gen_ai.request.model``,
``gen_ai.usage.*``, ``gen_ai.response.finish_reasons``, ``gen_ai.tool.name``) and skilldeck's own
(``skilldeck.*``: thread, skill, turn, attempt and its action, the contract's errors, the card);
``openinference.span.kind`` lets Phoenix draw each span as what it is. What runs say (prompts,
replies, tool arguments and results, card questions and answers) is recorded only when the
operator opts in (:data:`~skilldeck._internal.tracing.CONTENT_ENV`).

Where it comes from: the graph's node runs (``on_chain_start``/``end``, whose input is the
state and whose output the node's update, so the turn and attempt records say where a step
stands), the model and tool callbacks under them, LangGraph's interrupt (the card node ends with
``GraphInterrupt``) and the transport's retry event. A model or tool call is put under the span
of the nearest node run above it. The model and tool spans are made the current context while
their call runs, so the HTTP request of the model call and the MCP request of the tool call
carry their ``traceparent``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langgraph.errors import GraphInterrupt
from langgraph.types import Command
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from skilldeck._internal.redact import safe_reason
from skilldeck._internal.usage import reply_tokens
from skilldeck.nodes.context import CARD_NODE, ROUTER_NODE
from skilldeck.nodes.model_call import ATTEMPT_KEY
from skilldeck.nodes.transport import TRANSPORT_RETRY_EVENT
from skilldeck.scripted import SKILL_KEY
from skilldeck.types import CardEvent, DoneEvent, ErrorEvent, Event, RunResult

__all__ = ["RunTrace"]

#: What an attempt's action says of its turn: these end it (``ask_user`` ends it once its
#: card was asked).
_ENDS_TURN = frozenset({"finish", "continue", "failed"})
_KIND = "openinference.span.kind"


@dataclass(slots=True)
class _Open:
    """A span the run keeps open across steps (a turn or an attempt)."""

    span: Span
    key: Any


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


class RunTrace(BaseCallbackHandler):
    """The spans of one run (see the module docstring); a handler in the run's config.

    Args:
        tracer: the tracer spans are made with.
        kind: ``run``, ``resume`` or ``continue``.
        thread_id: the run's thread.
        skills: the deck's skill names (the graph's skill nodes).
        content: record what the run says (the operator opted in).
        answers: a resume's answers (recorded only with ``content``).
        context: the run's context (a start's).
    """

    run_inline = True

    def __init__(
        self,
        tracer: Tracer,
        *,
        kind: str,
        thread_id: str,
        skills: frozenset[str],
        content: bool,
        answers: Mapping[str, Any] | None = None,
        context: str | None = None,
    ) -> None:
        self.tracer = tracer
        self.thread_id = thread_id
        self.skills = skills
        self.content = content
        self._lock = threading.Lock()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "skilldeck",
            "skilldeck.thread_id": thread_id,
            "skilldeck.run.kind": kind,
            _KIND: "AGENT",
        }
        if context is not None:
            attributes["skilldeck.context"] = context
        if answers is not None:
            attributes["skilldeck.card.answers"] = len(answers)
            if content:
                attributes["skilldeck.card.answers.value"] = _dumps(answers)
        # The parent is the caller's current context: an incoming request's traceparent.
        self.run = tracer.start_span("skilldeck.run", attributes=attributes)
        self._ended = False
        self._turn: _Open | None = None  # key: (skill, turn id or None)
        self._attempt: _Open | None = None  # key: the attempt's number
        # LangChain run id -> its parent's, for every chain started; and the spans of runs.
        self._parents: dict[UUID, UUID | None] = {}
        self._spans: dict[UUID, Span] = {}
        self._root: UUID | None = None
        # Calls whose span is the current context while they run: the token to detach.
        self._current: dict[UUID, object] = {}
        self._calls: dict[UUID, Span] = {}

    # -- the run ----------------------------------------------------------------------------
    @property
    def span_context(self) -> Context:
        """A context whose current span is the run's (to link a response to the run)."""
        return trace.set_span_in_context(self.run)

    async def watch(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """``events`` (the run's), ending the run's span with the outcome of the last one."""
        last: Event | None = None
        try:
            async for event in events:
                last = event
                yield event
        except BaseException as exc:
            self.end(error=exc)
            raise
        self.end(last=last)

    def finished(self, result: RunResult) -> None:
        """End the run's span with the thread as the run left it."""
        with self._lock:
            self.run.set_attribute("skilldeck.run.status", result.status)
            if result.card is not None:
                self.run.set_attribute("skilldeck.interrupt.id", result.card["interrupt_id"])
            if result.error is not None:
                self._error(self.run, result.error.code)
        self.end()

    def end(self, last: Event | None = None, error: BaseException | None = None) -> None:
        """End the run's span (and any turn or attempt still open), once."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            if isinstance(last, CardEvent):
                self.run.set_attribute("skilldeck.run.status", "interrupted")
                self.run.set_attribute("skilldeck.interrupt.id", last.interrupt_id)
            elif isinstance(last, DoneEvent):
                self.run.set_attribute("skilldeck.run.status", last.status)
            elif isinstance(last, ErrorEvent):
                self.run.set_attribute("skilldeck.run.status", "error")
                self._error(self.run, last.code)
            if isinstance(error, GeneratorExit | asyncio.CancelledError):
                # Its reader left (the run stops after its step): not the run's failure.
                self.run.set_attribute("skilldeck.run.status", "abandoned")
            elif error is not None:
                code = getattr(getattr(error, "code", None), "value", None)
                self._error(self.run, str(code or type(error).__name__), error)
            self._close_turn()
            for span in self._calls.values():  # calls cut off with the run
                span.end()
            self._calls.clear()
            self.run.end()

    def _error(self, span: Span, code: str, error: BaseException | None = None) -> None:
        """Mark ``span`` failed with ``code``; the error's own text (which may quote a tool's
        arguments, its output or a document) is its description only with content on."""
        span.set_attribute("skilldeck.error.code", code)
        span.set_attribute("error.type", code)
        shown = str(safe_reason(error)) if error is not None and self.content else code
        span.set_status(Status(StatusCode.ERROR, shown))

    # -- turns and attempts -------------------------------------------------------------------
    def _close_attempt(self) -> None:
        if self._attempt is not None:
            self._attempt.span.end()
            self._attempt = None

    def _close_turn(self) -> None:
        self._close_attempt()
        if self._turn is not None:
            self._turn.span.end()
            self._turn = None

    def _skill_step(self, skill: str, state: Any) -> Span:
        """The attempt span a skill's step works in, opening its turn and attempt as needed."""
        turn = state.get("turn") if isinstance(state, Mapping) else None
        going_on = isinstance(turn, Mapping) and turn.get("skill") == skill
        turn_id = turn.get("id") if going_on and isinstance(turn, Mapping) else None
        number = int(turn.get("attempt", 1)) if going_on and isinstance(turn, Mapping) else 1
        open_turn = self._turn
        same = (
            open_turn is not None
            and open_turn.key[0] == skill
            and going_on
            and open_turn.key[1] in (None, turn_id)
        )
        if not same:
            self._close_turn()
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": skill,
                "skilldeck.skill": skill,
                "skilldeck.thread_id": self.thread_id,
                _KIND: "AGENT",
            }
            if turn_id is not None:
                attributes["skilldeck.turn.id"] = str(turn_id)
            parent = trace.set_span_in_context(self.run)
            span = self.tracer.start_span(f"skill {skill}", parent, attributes=attributes)
            self._turn = _Open(span, (skill, turn_id))
        assert self._turn is not None
        if self._attempt is None or self._attempt.key != number:
            self._close_attempt()
            parent = trace.set_span_in_context(self._turn.span)
            attributes = {"skilldeck.skill": skill, "skilldeck.attempt": number, _KIND: "CHAIN"}
            span = self.tracer.start_span(f"attempt {number}", parent, attributes=attributes)
            self._attempt = _Open(span, number)
        return self._attempt.span

    def _skill_done(self, update: Mapping[str, Any]) -> None:
        """Record what a skill's step wrote: the turn's id, the attempt's outcome."""
        turn = update.get("turn")
        opened = self._turn
        named = isinstance(turn, Mapping) and bool(turn.get("id"))
        if opened is not None and opened.key[1] is None and named and isinstance(turn, Mapping):
            opened.key = (opened.key[0], turn["id"])
            opened.span.set_attribute("skilldeck.turn.id", str(turn["id"]))
        record = update.get("attempt")
        if not isinstance(record, Mapping) or self._attempt is None:
            return
        action = str(record.get("action"))
        span = self._attempt.span
        span.set_attribute("skilldeck.attempt.action", action)
        if record.get("model"):
            span.set_attribute("skilldeck.model", _model_name(str(record["model"])))
        errors = [e for e in record.get("validation_errors") or () if isinstance(e, Mapping)]
        if errors:
            span.set_attribute("skilldeck.contract.errors", len(errors))
            codes = sorted({str(e.get("code") or "INVALID_OUTPUT") for e in errors})
            span.set_attribute("skilldeck.contract.error_codes", codes)
            span.set_attribute(
                "skilldeck.contract.error_paths", [str(e.get("path")) for e in errors]
            )
            if self.content:
                span.set_attribute(
                    "skilldeck.contract.error_messages", [str(e.get("message")) for e in errors]
                )
        error = update.get("error")
        if isinstance(error, Mapping) and error.get("code"):
            self._error(span, str(error["code"]))
        if self._turn is not None:
            self._turn.span.set_attribute("skilldeck.turn.action", action)
            if isinstance(error, Mapping) and error.get("code"):
                self._error(self._turn.span, str(error["code"]))
        if action in _ENDS_TURN:
            self._close_turn()
        elif action == "rejected":
            self._close_attempt()

    # -- nodes ------------------------------------------------------------------------------
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            if self._ended:
                return
            self._parents[run_id] = parent_run_id
            if parent_run_id is None:
                self._root = run_id
                return
            if parent_run_id != self._root:
                return
            node = (metadata or {}).get("langgraph_node")
            if node is None or kwargs.get("name") != node:
                return
            if node in self.skills:
                self._spans[run_id] = self._skill_step(node, inputs)
            elif node == ROUTER_NODE:
                parent = trace.set_span_in_context(self.run)
                self._spans[run_id] = self.tracer.start_span(
                    "route", parent, attributes={"skilldeck.node": node, _KIND: "CHAIN"}
                )
            elif node == CARD_NODE:
                card = inputs.get("card") if isinstance(inputs, Mapping) else None
                skill = str(card.get("skill")) if isinstance(card, Mapping) else ""
                owner = self._attempt.span if self._attempt is not None else self.run
                attributes = {
                    "skilldeck.skill": skill,
                    "skilldeck.thread_id": self.thread_id,
                    _KIND: "CHAIN",
                }
                span = self.tracer.start_span(
                    f"card {skill}", trace.set_span_in_context(owner), attributes=attributes
                )
                self._spans[run_id] = span

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
            span = self._spans.pop(run_id, None)
            if span is None or self._ended:
                return
            update = outputs.update if isinstance(outputs, Command) else outputs
            update = update if isinstance(update, Mapping) else {}
            if self._attempt is not None and span is self._attempt.span:
                self._skill_done(update)
                return
            if isinstance(outputs, Command) and isinstance(outputs.goto, str):
                span.set_attribute("skilldeck.route.next", outputs.goto)
            span.end()

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
            span = self._spans.pop(run_id, None)
            if span is None or self._ended:
                return
            if isinstance(error, GraphInterrupt):
                self._interrupted(span, error)
                return
            if self._attempt is not None and span is self._attempt.span:
                return  # the run ends with the error: the attempt ends with it
            self._error(span, type(error).__name__, error)
            span.end()

    def _interrupted(self, span: Span, interrupt: GraphInterrupt) -> None:
        """The card node asked its card: the span is the interrupt's, and the turn that asked
        it ends with it."""
        found = interrupt.args[0] if interrupt.args else ()
        for item in found if isinstance(found, Sequence) else ():
            value = getattr(item, "value", None)
            if not isinstance(value, Mapping):
                continue
            skill = str(value.get("skill", ""))
            span.update_name(f"interrupt {skill}")
            span.set_attribute("skilldeck.interrupt.id", str(getattr(item, "id", "")))
            questions = [q for q in value.get("questions") or () if isinstance(q, Mapping)]
            span.set_attribute("skilldeck.card.review_type", str(value.get("review_type", "")))
            span.set_attribute("skilldeck.card.questions", len(questions))
            span.set_attribute(
                "skilldeck.card.field_keys", [str(q.get("field_key")) for q in questions]
            )
            if self.content:
                span.set_attribute("skilldeck.card.questions.value", _dumps(questions))
        span.end()
        self._close_turn()

    # -- model calls --------------------------------------------------------------------------
    def _parent_span(self, parent_run_id: UUID | None) -> Span:
        """The span of the nearest node run above a call (the run's when none is)."""
        seen = 0
        while parent_run_id is not None and seen < 64:
            span = self._spans.get(parent_run_id)
            if span is not None:
                return span
            parent_run_id = self._parents.get(parent_run_id)
            seen += 1
        return self.run

    def _start_call(
        self, run_id: UUID, name: str, parent: Span, attributes: dict[str, Any]
    ) -> None:
        span = self.tracer.start_span(
            name, trace.set_span_in_context(parent), attributes=attributes
        )
        self._calls[run_id] = span
        # The call runs in this thread right after this callback: its HTTP or MCP request
        # reads the current context (traceparent); detached when the call ends.
        self._current[run_id] = otel_context.attach(trace.set_span_in_context(span))

    def _end_call(self, run_id: UUID) -> Span | None:
        token = self._current.pop(run_id, None)
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]
        return self._calls.pop(run_id, None)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        invocation_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        meta = metadata or {}
        params = invocation_params or kwargs.get("invocation_params") or {}
        provider = str(meta.get("ls_provider") or "unknown")
        model = _model_name(
            str(meta.get("ls_model_name") or params.get("model") or params.get("model_name") or "")
        )
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": model,
            "llm.model_name": model,
            _KIND: "LLM",
        }
        for key, name in (
            ("ls_temperature", "gen_ai.request.temperature"),
            ("ls_max_tokens", "gen_ai.request.max_tokens"),
        ):
            if meta.get(key) is not None:
                attributes[name] = meta[key]
        if meta.get(SKILL_KEY):
            attributes["skilldeck.skill"] = str(meta[SKILL_KEY])
        if meta.get(ATTEMPT_KEY) is not None:
            attributes["skilldeck.attempt"] = int(meta[ATTEMPT_KEY])
        if self.content:
            wire = [[_message(m) for m in batch] for batch in messages]
            attributes["gen_ai.input.messages"] = _dumps(wire[0] if len(wire) == 1 else wire)
        with self._lock:
            if self._ended:
                return
            self._start_call(run_id, f"chat {model}", self._parent_span(parent_run_id), attributes)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            span = self._end_call(run_id)
        if span is None:
            return
        tokens = reply_tokens(response)
        if tokens:
            span.set_attribute("gen_ai.usage.input_tokens", tokens["input"])
            span.set_attribute("gen_ai.usage.output_tokens", tokens["output"])
            span.set_attribute("llm.token_count.prompt", tokens["input"])
            span.set_attribute("llm.token_count.completion", tokens["output"])
        reasons: list[str] = []
        for generations in response.generations:
            for generation in generations:
                info = generation.generation_info or {}
                message = getattr(generation, "message", None)
                said = getattr(message, "response_metadata", None) or {}
                reason = info.get("finish_reason") or said.get("finish_reason")
                if reason is None and getattr(message, "tool_calls", None):
                    reason = "tool_calls"
                reasons.append(str(reason or "stop"))
                if said.get("model_name"):
                    span.set_attribute("gen_ai.response.model", str(said["model_name"]))
                if self.content and message is not None:
                    span.set_attribute("gen_ai.output.messages", _dumps([_message(message)]))
        span.set_attribute("gen_ai.response.finish_reasons", reasons)
        span.end()

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            span = self._end_call(run_id)
        if span is not None:
            self._error(span, type(error).__name__, error)
            span.end()

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if name != TRANSPORT_RETRY_EVENT or not isinstance(data, Mapping):
            return
        with self._lock:
            target = self._attempt.span if self._attempt is not None else self.run
            target.add_event(
                "skilldeck.transport_retry",
                {"reason": str(data.get("reason")), "wait_s": float(data.get("wait_s") or 0.0)},
            )

    # -- tool calls ---------------------------------------------------------------------------
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            if self._ended:
                return
            if parent_run_id in self._calls:  # a tool a tool wraps (an MCP tool's adapter)
                self._parents[run_id] = parent_run_id
                return
            name = str(kwargs.get("name") or (serialized or {}).get("name") or "tool")
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "skilldeck.thread_id": self.thread_id,
                _KIND: "TOOL",
            }
            if self._turn is not None:
                attributes["skilldeck.skill"] = str(self._turn.key[0])
            if self.content:
                attributes["gen_ai.tool.call.arguments"] = (
                    input_str if inputs is None else _dumps(inputs)
                )
            parent = (
                self._attempt.span
                if self._attempt is not None
                else self._parent_span(parent_run_id)
            )
            self._start_call(run_id, f"execute_tool {name}", parent, attributes)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
            span = self._end_call(run_id)
        if span is None:
            return
        span.set_attribute("skilldeck.tool.status", "ok")
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", str(getattr(output, "content", output)))
        span.end()

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._parents.pop(run_id, None)
            span = self._end_call(run_id)
        if span is None:
            return
        span.set_attribute("skilldeck.tool.status", "error")
        self._error(span, type(error).__name__, error)
        span.end()


def _model_name(label: str) -> str:
    """A model's name as spans show it: a scripted model's (or rules') file by its name only,
    not its path on this host."""
    kind, sep, source = label.partition(":")
    if sep and kind in ("scripted", "rules") and "/" in source:
        return f"{kind}:{PurePath(source).name}"
    return label or "unknown"


def _message(message: Any) -> dict[str, Any]:
    """A LangChain message as the GenAI conventions' message: its role and content."""
    role = {"human": "user", "ai": "assistant"}.get(
        getattr(message, "type", ""), getattr(message, "type", "")
    )
    out: dict[str, Any] = {"role": role, "content": getattr(message, "content", str(message))}
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [{"name": c.get("name"), "arguments": c.get("args")} for c in calls]
    return out
