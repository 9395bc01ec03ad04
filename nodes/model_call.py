"""One skill's calls of its model: bound by its output mode, shown the conversation the mode
shows (see :mod:`skilldeck.nodes.output_modes`), limited in time and length.

A call that got no reply (a timeout, a dropped connection, HTTP 429 or 5xx) is retried by the
transport policy (:mod:`skilldeck.nodes.transport`), never shown to the model; when the
endpoint stays away, :class:`~skilldeck.errors.ModelUnavailableError` stops the run
``resumable``. A reply cut off at ``max_output_tokens`` raises :class:`RetryableModelError`:
the skill records it as a rejected attempt and asks again (or, in modes that have them, falls
back to its rules). Other errors (a bad key, an unknown model) end the run as ``MODEL_ERROR``.

With ``model_context_tokens`` set, a prompt that would not fit the endpoint's context with
``max_output_tokens`` to spare is trimmed before the call: the tool results and replies between
the task and the latest message lose their text, oldest first (the model can call the tool
again). If the system prompt, the task and the latest message alone do not fit, the call is not
made: :class:`~skilldeck.errors.PromptTooLongError` ends the run as ``PROMPT_TOO_LONG``.
Tokens are estimated without a tokenizer (none may be downloaded): one per three characters,
an overestimate for English and code.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import openai
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from skilldeck.errors import PromptTooLongError
from skilldeck.nodes.output_modes import Offer, OutputMode, find_output_mode
from skilldeck.nodes.transport import (
    DeadlineError,
    TransportPolicy,
    call_with_retries,
    tell_retry,
)
from skilldeck.scripted import CALL_INDEX_KEY, SKILL_KEY
from skilldeck.skills.bundle import SkillBundle
from skilldeck.skills.pins import MadeCall

if TYPE_CHECKING:  # the context imports the routing model, which imports this
    from skilldeck.nodes.context import NodeContext

__all__ = [
    "ATTEMPT_KEY",
    "DEADLINE_KEY",
    "RUN_TIMEOUT_KEY",
    "ModelCaller",
    "RetryableModelError",
    "cut_off_reply",
    "cut_off_text",
]

#: Config key of a run's deadline (epoch seconds), set by the deck from ``run_timeout_s``.
DEADLINE_KEY = "skilldeck_deadline"
#: Model call metadata: the attempt of the skill's turn the call belongs to (stream deltas).
ATTEMPT_KEY = "skilldeck_attempt"
#: Run metadata: seconds this run may take, if shorter than ``run_timeout_s``.
RUN_TIMEOUT_KEY = "skilldeck_run_timeout_s"


class RetryableModelError(Exception):
    """A model call that may succeed if asked again: ``reason`` says what happened."""

    def __init__(self, reason: str, received: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        #: What the model wrote before the call ended (a reply cut off at the token limit).
        self.received = received


_CUT_OFF = "the reply was cut off at the output token limit"


class ModelCaller:
    """Calls of ``bundle``'s model; bindings are made once per model, mode and use."""

    def __init__(self, ctx: NodeContext, bundle: SkillBundle) -> None:
        self.ctx = ctx
        self.bundle = bundle
        self.name = bundle.name
        # Bindings by (mode, use); JSON steps' keys carry their schema's digest. A deck has a
        # handful of skills, uses and schemas (a view's schema lists its evidence: one each).
        self._binds: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._has_choices: bool | None = None

    @property
    def mode(self) -> str:
        """The output mode of the skill's calls (``auto`` resolved)."""
        return self.ctx.output_mode(self.name)

    @property
    def output(self) -> OutputMode:
        """The object of :attr:`mode`: it binds the model and reads the replies."""
        return find_output_mode(self.mode)

    def tool_schemas(
        self, names: Sequence[str] | None = None, *, grammar: bool = False
    ) -> dict[str, dict[str, Any]]:
        """The arguments schema of each of ``names`` (default: every tool the skill lists), by
        the name it lists; with ``grammar``, a tool's stricter schema for grammars if it has
        one."""
        registry = self.ctx.registry
        return {
            name: registry.arguments_schema(name, grammar=grammar)
            for name in (self.bundle.tools if names is None else names)
        }

    def _live(self) -> bool:
        """Whether a tool of the skill says which values its arguments can take now."""
        if self._has_choices is None:
            self._has_choices = any(self.ctx.registry.has_choices(t) for t in self.bundle.tools)
        return self._has_choices

    def _tools_now(
        self, names: Sequence[str], identity: Mapping[str, Any], made: Sequence[MadeCall]
    ) -> dict[str, dict[str, Any]]:
        """The tools' schemas with the values their arguments can take now as ``enum``s; a
        tool with an argument that can take none is not offered (unless none would be).

        A tool of one argument loses the values its calls in ``made`` (the attempt's calls
        that worked) took: their results are in the conversation, and a small model that
        repeats its last call (reading the same note again) is steered to the next step by
        the grammar instead of losing its tools for the turn."""
        schemas, offered = self.tool_schemas(names, grammar=True), {}
        now = self.ctx.registry.choices(schemas, identity)
        for name, schema in schemas.items():
            props = dict(schema.get("properties") or {})
            choices = dict(now.get(name, {}))
            if len(props) == 1 and set(choices) == set(props):
                ((arg, values),) = choices.items()
                spent = [c.args.get(arg) for c in made if c.name == name]
                choices[arg] = [v for v in values if v not in spent]
            if any(not values for values in choices.values()):
                continue
            for arg, values in choices.items():
                if arg in props:
                    props[arg] = {**props[arg], "enum": values}
            offered[name] = {**schema, "properties": props}
        return offered or schemas

    def _bound(
        self,
        use: str,
        schema: Mapping[str, Any] | None = None,
        pins: Mapping[tuple[str, ...], Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        made: Sequence[MadeCall] = (),
        tools: Sequence[str] | None = None,
    ) -> Any:
        """The model bound for ``use``: ``tools`` (its tools, or their envelope), ``final``
        (the output only), ``calls`` (its tools only) or ``json:NAME`` (a JSON step of its own
        ``schema``); ``tools`` are those offered now (default: all the skill's).

        Bound once per model: binding converts every tool's schema (about 15 µs a tool), which
        a step would otherwise pay on each call. A grammar with pinned values, or with the
        values tools' arguments can take now (for the run of ``identity``), is bound per call
        and never kept: its values are one run's, at one moment.
        """
        model: Any = self.ctx.model_for(self.name)
        mode = self.output
        # Only the output's grammar holds pins (the calls-only reply has no output); only a
        # reply that may call a tool holds its arguments' current values.
        pinned_output = bool(pins) and use in ("tools", "final")
        live_tools = identity is not None and self._live() and use in ("tools", "calls")
        own = mode.holds_values and (pinned_output or live_tools)
        names = tuple(self.bundle.tools if tools is None else tools)
        key = use if names == self.bundle.tools else f"{use}:{','.join(names)}"
        if schema is not None:  # a JSON step's schema may change per call (cited evidence)
            key += ":" + hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()
        cached = None if own else self._binds.get((mode.name, key))
        if cached is not None and cached[0] is model:
            return cached[1]
        if use.startswith("json:"):
            bound = mode.bind_step(model, use.split(":")[1], schema)
        else:
            offer = Offer(
                use=cast("Literal['tools', 'final', 'calls']", use),
                tools=names,
                registry=self.ctx.registry,
                output_schema=self.bundle.output_schema,
                pins=pins if pinned_output else None,
                first_tool=self.bundle.execution.first_tool,
                grammar_tools=lambda: (
                    self._tools_now(names, identity, made)
                    if live_tools and identity
                    else self.tool_schemas(names, grammar=True)
                ),
            )
            bound = mode.bind(model, offer)
        if not own:
            self._binds[(mode.name, key)] = (model, bound)
        return bound

    def call(
        self,
        conversation: Sequence[BaseMessage],
        index: int,
        *,
        offer: Literal["tools", "final", "calls"],
        pins: Mapping[tuple[str, ...], Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        made: Sequence[MadeCall] = (),
        tools: Sequence[str] | None = None,
        deadline: float | None = None,
        attempt: int = 1,
    ) -> AIMessage:
        """One reply: a tool call or the output (``offer`` ``tools``), the output only
        (``final``), or a tool call only (``calls``). ``pins`` are the output fields whose
        values the run fixes, ``identity`` the run's, for the values tools' arguments can
        take now, and ``made`` the calls that worked, whose results are above (``schema``
        mode's grammar holds all three); ``tools``: the tools offered now (default: all)."""
        bound = self._bound(offer, pins=pins, identity=identity, made=made, tools=tools)
        return self._invoke(bound, conversation, index, deadline, attempt)

    def ask_json(
        self,
        conversation: Sequence[BaseMessage],
        index: int,
        name: str,
        schema: Mapping[str, Any],
        deadline: float | None = None,
        attempt: int = 1,
    ) -> AIMessage:
        """One JSON step (a plan, a rewrite, a view): held to ``schema`` in ``schema`` mode,
        JSON mode otherwise."""
        bound = self._bound(f"json:{name}", schema)
        return self._invoke(bound, conversation, index, deadline, attempt)

    def _invoke(
        self,
        bound: Any,
        conversation: Sequence[BaseMessage],
        index: int,
        deadline: float | None,
        attempt: int,
    ) -> AIMessage:
        if deadline is not None:
            left = deadline - time.time()
            if left <= 0:
                raise DeadlineError("the run's deadline (run_timeout_s) has passed")
            if left < self.ctx.settings.model_timeout_s:
                bound = bound.bind(timeout=left)
        # The call index lets the scripted provider replay the same turn after a resume.
        meta = {SKILL_KEY: self.name, CALL_INDEX_KEY: index, ATTEMPT_KEY: attempt}
        wire = self.output.wire(conversation)
        window = self.ctx.settings.model_context_tokens
        if window is not None:
            wire = fit_context(wire, window - self.ctx.settings.max_output_tokens)
        settings = self.ctx.settings
        policy = TransportPolicy(
            attempts=settings.transport_attempts, budget_s=settings.transport_budget_s
        )
        try:
            result = call_with_retries(
                lambda: bound.invoke(wire, config={"metadata": meta}),
                policy,
                deadline=deadline,
                what=f"model call of skill {self.name}",
                on_retry=lambda exc, wait_s: tell_retry(self.name, exc, wait_s),
            )
        except openai.LengthFinishReasonError as exc:
            received = cut_off_text(exc)
            if _whole_json(received):
                return AIMessage(content=received, response_metadata={"finish_reason": "length"})
            raise RetryableModelError(_CUT_OFF, received) from exc
        if not isinstance(result, AIMessage):
            raise TypeError(f"model returned {type(result).__name__}, not an AIMessage")
        if result.response_metadata.get("finish_reason") == "length" and not result.tool_calls:
            received = result.content if isinstance(result.content, str) else ""
            if not _whole_json(received):
                raise RetryableModelError(_CUT_OFF, received)
        return result


def _whole_json(text: str) -> bool:
    """Whether ``text`` is one complete JSON object. A reply cut off at the token limit after
    its object closed lost nothing of it (a constrained model can spend the rest of its budget
    on what follows the object, which the server drops), so it is the reply, not a cut-off."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def cut_off_reply(received: str, head: int = 600, tail: int = 200) -> AIMessage:
    """A cut-off reply as the conversation keeps it: its start and its end (where a model
    that repeats itself shows it), so the re-ask and the transcript show what went wrong
    without carrying a whole runaway reply."""
    if len(received) > head + tail:
        left = len(received) - head - tail
        received = f"{received[:head]} … ({left} characters) … {received[-tail:]}"
    return AIMessage(content=received)


def cut_off_text(exc: BaseException) -> str:
    """The text of a reply that ``exc`` reports cut off at the token limit (OpenAI's
    ``LengthFinishReasonError`` carries the completion), else ``""``."""
    completion = getattr(exc, "completion", None)
    choices = getattr(completion, "choices", None) or []
    content = getattr(getattr(choices[0], "message", None), "content", None) if choices else None
    return content if isinstance(content, str) else ""


def estimate_tokens(messages: Sequence[BaseMessage]) -> int:
    """An upper estimate of the prompt tokens of ``messages`` (see the module docstring)."""
    return sum(len(str(m.content)) // 3 + 8 for m in messages)


def fit_context(messages: Sequence[BaseMessage], budget: int) -> list[BaseMessage]:
    """``messages`` trimmed to ``budget`` estimated tokens, middle messages first.

    Raises:
        PromptTooLongError: the system prompt, the task and the latest message exceed it.
    """
    fitted = list(messages)
    need = estimate_tokens(fitted)
    middle = range(2, len(fitted) - 1)  # after the system prompt and the task, before the last
    for i in middle:
        if need <= budget:
            break
        text = str(fitted[i].content)
        stub = f"(trimmed to fit the model's context: {len(text)} characters)"
        if len(text) <= len(stub):
            continue
        need -= (len(text) - len(stub)) // 3
        kind = AIMessage if isinstance(fitted[i], AIMessage) else HumanMessage
        fitted[i] = kind(content=stub)
    if need > budget:
        raise PromptTooLongError(
            f"the prompt needs about {need} tokens but {budget} are left for it "
            "(model_context_tokens minus max_output_tokens); shorten the skill's SKILL.md or "
            "its input, lower max_output_tokens, or raise model_context_tokens if the endpoint's "
            "context is larger"
        )
    return fitted
