"""The skill runner: one node per skill.

A turn opens with the rendered prompt (``scripts/preprocess.py`` first, if the bundle has one),
then calls the skill's model with only the tools its meta lists. Tool calls go to the tools node
and come back here, up to ``max_tool_rounds``. The final output must pass the four-part
contract, the data schema, the provides rule, the card rules and ``scripts/validate.py``;
otherwise the model is re-asked with the errors, up to ``max_retries``, and then the run fails
with nothing merged. Output is never repaired.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END
from langgraph.store.base import BaseStore
from langgraph.types import Command

import skilldeck.nodes.transcript as transcript
from skilldeck._internal.paths import deep_merge
from skilldeck._internal.redact import log_error
from skilldeck.errors import ModelUnavailableError, PromptTooLongError, SkillDeckError
from skilldeck.graph.records import (
    Attempt,
    AttemptAction,
    Interrupt,
    Record,
    RunError,
    Tokens,
    ToolCall,
    Turn,
    issues,
)
from skilldeck.graph.state import RunView
from skilldeck.nodes.context import CARD_NODE, TOOLS_NODE, NodeContext
from skilldeck.nodes.examples import ExampleMatcher
from skilldeck.nodes.model_call import DEADLINE_KEY, ModelCaller, RetryableModelError, cut_off_reply
from skilldeck.nodes.offer import offered
from skilldeck.nodes.output_modes import SUBMIT_TOOL
from skilldeck.nodes.prompt import render_feedback, render_system, render_user
from skilldeck.nodes.router import route
from skilldeck.nodes.transport import DeadlineError
from skilldeck.scripted import INVALID_KEY, TURN_KEY
from skilldeck.skills.bundle import SkillBundle
from skilldeck.skills.contract import (
    CARD_SCHEMA,
    Errors,
    OutputLimits,
    compile_schema,
    format_errors,
    output_skeleton,
)
from skilldeck.skills.pins import pin_errors, pin_values
from skilldeck.tools.registry import runtime_values
from skilldeck.tools.workspace import commit, rollback

__all__ = ["SkillNode", "Visit", "parse_output"]

log = logging.getLogger("skilldeck")
_CARD_VALIDATOR = compile_schema(CARD_SCHEMA)
_LIMITS = OutputLimits()


def parse_output(
    message: AIMessage, limits: OutputLimits = _LIMITS
) -> tuple[dict[str, Any] | None, Errors]:
    """The output object of a final model message, or why there is none.

    Accepted forms: a ``submit_output`` call, or content that is one JSON object (a single
    surrounding code fence is allowed, as models add one). Nothing else is salvaged, and
    nothing past the host's ``limits`` (size, depth, numbers) is accepted.
    """
    submits = [c for c in message.tool_calls if c["name"] == SUBMIT_TOOL]
    if submits:
        if len(message.tool_calls) > 1:
            return None, [{"path": "$", "message": f"call {SUBMIT_TOOL} alone, once"}]
        value: Any = dict(submits[0]["args"])
        return (None, errors) if (errors := limits.problems(value)) else (value, [])
    text = message.content if isinstance(message.content, str) else ""
    text = text.strip()
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        return None, [{"path": "$", "message": f"output is over {limits.max_bytes:,} bytes"}]
    if text.startswith("```") and text.endswith("```"):
        text = text.split("\n", 1)[1].rsplit("```", 1)[0] if "\n" in text else ""
    try:
        value = json.loads(text, parse_constant=_not_json_number)
    except json.JSONDecodeError as exc:
        return None, [{"path": "$", "message": f"output is not JSON: {exc.msg} at char {exc.pos}"}]
    except RecursionError:
        return None, [{"path": "$", "message": f"nested deeper than {limits.max_depth} levels"}]
    except ValueError as exc:  # a NaN, or an integer longer than Python parses
        return None, [{"path": "$", "message": f"output is not usable JSON: {exc}"}]
    if not isinstance(value, dict):
        return None, [{"path": "$", "message": "output must be a JSON object"}]
    if errors := limits.problems(value):
        return None, errors
    return value, []


def _not_json_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _command(state: Mapping[str, Any], goto: str, update: dict[str, Any]) -> Command[str]:
    """``Command`` with only the keys that change: each written key costs a checkpoint write.

    A step that goes on clears the error the thread last stopped with (a ``resumable`` stop:
    the endpoint was away), unless it sets one itself.
    """
    if "error" not in update and state.get("error"):
        update = {**update, "error": None}
    changes = {
        k: v
        for k, v in update.items()
        if (v if k == "profile" else k not in state or state[k] != v)
    }
    return Command(goto=goto, update=changes)


def _iso(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Visit:
    """One call of a skill node: the state it was given and where its transcript goes.

    ``calls`` (model calls per skill: the scripted provider replays by this index) is counted
    up as the node calls its model, and written back with the step's update. The transcripts
    the visit reads or writes are kept for its length (``read``, by turn), so a node that
    reads a turn's transcript, replies and ends the attempt reads the store once. A turn the
    visit opens is referred to its thread by its first write (``opened``): a step is one
    transaction in the store.
    """

    state: dict[str, Any]
    view: RunView
    calls: dict[str, int]
    thread_id: str
    store: BaseStore
    read: dict[str, transcript.History] = field(default_factory=dict)
    opened: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, state: dict[str, Any], config: RunnableConfig, store: BaseStore) -> Visit:
        view = RunView(state)
        return cls(state, view, view.calls, str(config["configurable"]["thread_id"]), store)

    def open(self, turn: Turn) -> None:
        """``turn`` starts in this visit: its first write records that the thread reaches it."""
        self.opened.add(turn.id)

    def refer(self, turn: Turn) -> None:
        """Record now that the thread reaches ``turn`` (before writing the turn's own data
        when its transcript may not have a row yet)."""
        if turn.id in self.opened:
            transcript.refer(self.store, self.thread_id, [turn.id])
            self.opened.discard(turn.id)

    def save(
        self, turn: Turn, messages: Sequence[BaseMessage], calls: Sequence[ToolCall] = ()
    ) -> Turn:
        """``turn`` with ``messages`` appended to its transcript (one row, one write);
        ``calls``: the records of the tool calls ``messages`` hold the results of."""
        if not messages:
            return turn
        reaches = self.thread_id if turn.id in self.opened else None
        head = transcript.append(
            self.store, turn.id, turn.head, messages, calls, turn.attempt, reaches=reaches
        )
        self.opened.discard(turn.id)
        known = self._known(turn)
        if known is not None:
            self.read[turn.id] = known.then(head, messages, calls, turn.attempt)
        return turn.model_copy(update={"head": head, "length": turn.length + len(messages)})

    def history(self, turn: Turn) -> transcript.History:
        """The transcript of ``turn`` as this checkpoint has it: messages and call records."""
        known = self._known(turn)
        if known is None:
            known = self.read[turn.id] = transcript.history(self.store, turn.id, turn.head)
        return known

    def conversation(self, turn: Turn) -> list[BaseMessage]:
        """The messages of ``turn``'s transcript as this checkpoint has it."""
        return list(self.history(turn).messages)

    def made(self, turn: Turn) -> tuple[ToolCall, ...]:
        """The calls whose results ``turn``'s attempt may report (pins, ``validate.py``)."""
        return self.history(turn).made(turn.attempt)

    def _known(self, turn: Turn) -> transcript.History | None:
        if turn.head is None:
            return transcript.History(None)
        found = self.read.get(turn.id)
        return found if found is not None and found.head == turn.head else None

    def command(self, goto: str, update: dict[str, Any]) -> Command[str]:
        """The step's ``Command``: ``update`` (records dumped) with the model calls counted."""
        written = {k: v.dump() if isinstance(v, Record) else v for k, v in update.items()}
        return _command(self.state, goto, {**written, "calls": self.calls})


class SkillNode:
    """Runs one skill; see the module docstring.

    Other execution modes subclass it and produce their output differently; all of them end in
    :meth:`accept_output`. ``rules_fallback`` says whether the mode can run without a model.
    """

    rules_fallback = False

    def __init__(self, ctx: NodeContext, bundle: SkillBundle) -> None:
        self.ctx = ctx
        self.bundle = bundle
        self.name = bundle.name
        self.caller = ModelCaller(ctx, bundle)
        self.limits = OutputLimits(ctx.settings.max_output_bytes, ctx.settings.max_output_depth)
        self._systems: dict[str, SystemMessage] = {}
        examples = bundle.examples
        self.examples = (
            ExampleMatcher(examples, ctx.embed, key=f"{bundle.fingerprint}:{ctx.embed_name}")
            if examples
            else None
        )

    # -- the node -------------------------------------------------------------------------
    def __call__(
        self, state: dict[str, Any], config: RunnableConfig, store: BaseStore
    ) -> Command[str]:
        visit = Visit.of(state, config, store)
        turn = visit.view.turn
        opening: list[BaseMessage] = []
        if turn is not None and turn.skill == self.name:
            conversation = visit.conversation(turn)
        else:
            try:
                turn, opening = self.open_turn(visit)
            except Exception as exc:
                return self._fail(visit, "SCRIPT_ERROR", _describe("preprocess.py", exc), None)
            conversation = list(opening)
        calls = visit.calls
        index = calls.get(self.name, 0)
        rounds_left = self._max_rounds() - turn.round
        now = offered(self.bundle, turn.worked, turn.standing)
        tools = now.tools
        # The output only: no tools (left), no rounds left, or the model repeated a call that
        # worked.
        final_only = rounds_left <= 0 or not tools or turn.narrow
        calls_only = now.calls_only and not final_only
        offer: Literal["tools", "final", "calls"] = (
            "final" if final_only else "calls" if calls_only else "tools"
        )
        made = visit.made(turn)
        try:
            message = self.caller.call(
                conversation,
                index,
                offer=offer,
                pins=pin_values(self.bundle.pins, state, made),
                identity=runtime_values(
                    config.get("configurable", {}), self.name, self.bundle.matter_fields
                ),
                made=made,
                tools=tools,
                deadline=config["configurable"].get(DEADLINE_KEY),
                attempt=turn.attempt,
            )
        except RetryableModelError as exc:
            calls[self.name] = index + 1
            # A cut-off reply is kept (shortened): the re-ask and the transcript show it.
            cut = cut_off_reply(exc.received) if exc.received else None
            turn = visit.save(turn, [*opening, *([cut] if cut else [])])
            return self._reject(visit, turn, [{"path": "$", "message": exc.reason}], None, cut)
        except DeadlineError as exc:
            return self._fail(visit, "RUN_TIMEOUT", str(exc), turn)
        except ModelUnavailableError:
            # The endpoint stayed away: the thread stops at its last checkpoint, resumable;
            # the turn's opening (not stored yet) is written again when it is continued.
            raise
        except Exception as exc:
            return self._model_error(visit, exc, turn)
        calls[self.name] = index + 1
        # A call of a tool that is listed but not offered now is still read as a call: the tools
        # node refuses it and says why, which an output error would not.
        allowed = () if final_only else self.bundle.tools
        reply = self.caller.output.read(message, allowed, f"call_{self.name}_{index}")
        message = reply.message
        # The turn's new messages go to the store in one transaction.
        turn = visit.save(turn, [*opening, message])
        turn = turn.model_copy(update={"tokens": _add_tokens(turn.tokens, message)})
        if reply.calls and final_only:  # a model that calls tools when it may only answer
            if rounds_left <= 0 or not self.bundle.tools:
                why = f"tool round limit ({self._max_rounds()}) reached"
            elif not tools:
                why = "every tool has reached its limit (tool_limits)"
            else:
                why = "the results of those calls are above already"
            errors = [{"path": "$", "message": f"{why}; reply with the final JSON output now"}]
            return self._reject(visit, turn, errors, None, message)
        if reply.calls:
            return self._tool_calls(visit, turn, reply.calls, message)
        if reply.errors:
            return self._reject(visit, turn, reply.errors, None, message)
        if calls_only:  # the grammar or tool_choice holds this; JSON mode is told after
            choice = self.bundle.execution.tool_choice
            errors = [
                {
                    "path": "$",
                    "message": "this skill answers only after one of its tool calls has worked "
                    f"(tool_choice: {choice}): call one of {', '.join(tools)} first",
                }
            ]
            return self._reject(visit, turn, errors, None, message)
        if reply.output is not None:
            return self.accept_output(visit, turn, reply.output, message)
        return self._finish_attempt(visit, turn, message)

    def _tool_calls(
        self,
        visit: Visit,
        turn: Turn,
        pending: list[dict[str, Any]],
        message: AIMessage,
    ) -> Command[str]:
        """Send the calls to the tools node; or narrow the turn to the output when they
        repeat calls that worked (the model gets their results again, not a second run)."""
        too_big = [e for c in pending for e in self.limits.problems(c["args"], f"$.{c['name']}")]
        if too_big:  # the arguments would be checkpointed with the turn: refuse them here
            return self._reject(visit, turn, too_big, None, message)
        ran = visit.history(turn).of_attempt(turn.attempt)
        done = {(c.name, _canonical(c.args)) for c in ran if c.worked}
        if all((c["name"], _canonical(c["args"])) in done for c in pending):
            names = ", ".join(sorted({c["name"] for c in pending}))
            note = HumanMessage(
                f"You already called {names} with these arguments, and the results are above. "
                "Give the final output now."
            )
            repeat = visit.save(turn, [note]).model_copy(update={"narrow": True})
            return visit.command(self.name, {"turn": repeat})
        asked = tuple(ToolCall(id=c["id"], name=c["name"], args=c["args"]) for c in pending)
        turn = turn.model_copy(update={"round": turn.round + 1, "pending": asked, "ran": ()})
        return visit.command(TOOLS_NODE, {"turn": turn})

    # -- steps ----------------------------------------------------------------------------
    def open_turn(self, visit: Visit) -> tuple[Turn, list[BaseMessage]]:
        """A new turn and its opening messages (not yet stored: the first write of the turn
        records that the thread reaches its transcript, see :meth:`Visit.open`)."""
        state = visit.state
        prepared = self.bundle.preprocess(dict(state)) if self.bundle.preprocess else None
        shown = self.examples.pick(state) if self.examples else ()
        # Only examples depend on the mode; a rules-only skill has no model to ask it of.
        mode = self.caller.mode if shown else "schema"
        user = render_user(state, self.bundle.data_keys, prepared, examples=shown, output_mode=mode)
        guard = visit.view.guard
        turn = Turn(
            id=uuid.uuid4().hex,
            skill=self.name,
            fingerprint=self.bundle.fingerprint,
            started=time.time(),
            # How the router chose this skill, for the attempt record.
            route=guard.route if guard is not None else None,
        )
        visit.open(turn)
        return turn, [self.system(), user]

    def system(self) -> SystemMessage:
        """The skill's system message in its output mode (rendered once per mode)."""
        mode = self.caller.mode
        if mode not in self._systems:
            tools = [
                (name, self.ctx.registry.get(name).description, schema)
                for name, schema in self.caller.tool_schemas().items()
            ]
            self._systems[mode] = render_system(self.bundle, output_mode=mode, tools=tools)
        return self._systems[mode]

    def _max_rounds(self) -> int:
        own = self.bundle.execution.max_tool_rounds
        return int(self.ctx.settings.max_tool_rounds if own is None else own)

    def ask_json(
        self,
        conversation: list[BaseMessage],
        calls: dict[str, int],
        turn: Turn,
        name: str,
        schema: Mapping[str, Any],
    ) -> tuple[AIMessage, Turn]:
        """One model call of a JSON step (a plan, a rewrite, a view; held to ``schema`` in
        schema mode): the reply, and ``turn`` with its tokens; counts the call in ``calls``."""
        index = calls.get(self.name, 0)
        calls[self.name] = index + 1
        message = self.caller.ask_json(conversation, index, name, schema, attempt=turn.attempt)
        return message, turn.model_copy(update={"tokens": _add_tokens(turn.tokens, message)})

    def _finish_attempt(self, visit: Visit, turn: Turn, message: AIMessage) -> Command[str]:
        output, errors = parse_output(message, self.limits)
        if output is None:
            return self._reject(visit, turn, errors, None, message)
        return self.accept_output(visit, turn, output, message, within_limits=True)

    def accept_output(
        self,
        visit: Visit,
        turn: Turn,
        output: dict[str, Any],
        source: AIMessage | None = None,
        *,
        within_limits: bool = False,
    ) -> Command[str]:
        """Validate a candidate output and merge it, ask, retry or fail: the one path every
        execution mode ends in. ``source`` is the model message the output came from;
        ``within_limits``: :func:`parse_output` checked it against the host's limits."""
        state = visit.state
        made = visit.made(turn)
        # Limits first: what is past them must not reach the validator, the merge or a
        # checkpoint (deep nesting, numbers msgpack cannot store).
        fields, errors = self.bundle.contract.problems(
            output,
            None if within_limits else self.limits,
            lambda: pin_errors(self.bundle.pins, output, state, made),
        )
        control: dict[str, Any] = (
            output["control"] if isinstance(output.get("control"), dict) else {}
        )
        if errors:
            return self._reject(visit, turn, errors, control.get("retry_prompt"), source)
        if control["action"] == "retry":
            errors = [{"path": "$.control.action", "message": "the skill asked to retry"}]
            return self._reject(visit, turn, errors, control.get("retry_prompt"))

        merged = {
            **state,
            **output["data"],
            "profile": deep_merge(state.get("profile") or {}, output["profile"]),
        }
        verdict = self._run_validate(output, merged, made)
        if verdict["action"] == "error":
            return self._fail(visit, "SCRIPT_ERROR", verdict["message"], turn)
        if verdict["action"] == "retry":
            return self._reject(visit, turn, verdict["errors"], verdict.get("retry_prompt"), source)
        action: AttemptAction = "ask_user" if verdict["action"] == "ask_user" else control["action"]
        if any(c.wrote for c in visit.history(turn).of_attempt(turn.attempt)):
            commit(visit.store, visit.thread_id, turn.id)  # the attempt's file changes stand
        update: dict[str, Any] = {
            **output["data"],
            "profile": output["profile"],
            "response": output["response"],
            "attempt": self._record(visit, turn, action, []),
            "turn": None,
        }
        if action == "finish":
            return visit.command(END, {**update, "status": "finished"})
        if action == "ask_user":
            asked = verdict if verdict["action"] == "ask_user" else control
            update["card"] = Interrupt(
                id=uuid.uuid4().hex,
                skill=self.name,
                fingerprint=turn.fingerprint,
                review_type=asked["review_type"],
                questions=asked["questions"],
                # Answers are checked against the fields they write, as well as their types.
                fields=verdict.get("fields", fields),
            )
            return visit.command(CARD_NODE, {**update, "status": "interrupted"})
        goto, routed = route(self.ctx, merged)
        return visit.command(goto, {**update, **routed})

    def _run_validate(
        self, output: dict[str, Any], merged: dict[str, Any], made: Sequence[ToolCall]
    ) -> dict[str, Any]:
        """Normalise ``scripts/validate.py``'s verdict: continue, retry, ask_user or error."""
        if self.bundle.validate is None:
            return {"action": "continue"}
        try:
            # validate.py reads the calls as plain JSON: its API, not the engine's records.
            turn = {"tool_calls": [_made_call(c) for c in made]}
            raw = self.bundle.validate(output, merged, turn)
        except Exception as exc:
            return {"action": "error", "message": _describe("validate.py", exc)}
        verdict: dict[str, Any] = (
            {"action": raw} if isinstance(raw, str) else dict(raw or {"action": "continue"})
        )
        action = verdict.get("action")
        if action == "continue":
            return verdict
        if action == "retry":
            reasons = verdict.get("errors") or ["validate.py asked for a retry"]
            verdict["errors"] = [{"path": "validate.py", "message": str(r)} for r in reasons]
            return verdict
        if action == "ask_user":
            problems = format_errors(_CARD_VALIDATOR, verdict)
            if not problems:
                verdict["fields"], problems = self.bundle.contract.card(
                    verdict["questions"], "$.questions"
                )
            if problems:
                detail = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
                return {
                    "action": "error",
                    "message": f"validate.py returned an invalid card: {detail}",
                }
            return verdict
        return {
            "action": "error",
            "message": f"validate.py returned {raw!r}; expected continue, retry or ask_user",
        }

    def _reject(
        self,
        visit: Visit,
        turn: Turn,
        errors: Errors,
        retry_prompt: str | None,
        source: AIMessage | None = None,
    ) -> Command[str]:
        """Re-ask the model with the errors, or fail the run when retries are used up.

        A scripted turn that is rejected without saying ``invalid: true`` fails at once: a
        broken cassette must not be papered over by the turn after it.
        """
        record = self._record(visit, turn, "rejected", errors)
        # Calls of this attempt that stand (they changed no file) meet a tool_choice later.
        stood = [c.name for c in visit.history(turn).standing(turn.attempt + 1)]
        # Nothing of a rejected attempt stands: its file changes are undone too.
        undone = rollback(visit.store, visit.thread_id, turn.id)
        said = source.response_metadata if source is not None else {}
        scripted = said.get(TURN_KEY)
        mistake = scripted is not None and not said.get(INVALID_KEY)
        if mistake or turn.attempt > self.ctx.settings.max_retries:
            message = (
                f"scripted turn {scripted} is not a valid output of skill {self.name!r} (if the "
                "turn is meant to be rejected, add invalid: true to it); nothing was merged"
                if mistake
                else f"skill {self.name!r} produced no valid output in {turn.attempt} "
                "attempt(s); nothing was merged"
            )
            error = RunError(
                code="CONTRACT_VIOLATION", skill=self.name, message=message, errors=issues(errors)
            )
            update = {"status": "failed", "error": error, "attempt": record, "turn": None}
            return visit.command(END, update)
        digest = _digest(source) if source is not None else None
        feedback = render_feedback(
            errors,
            retry_prompt,
            example=output_skeleton(self.bundle.output_schema),
            repeated=digest is not None and digest == turn.rejected,
            undone=[self._shown_path(p) for p in undone],
        )
        next_turn = visit.save(turn, [feedback]).model_copy(
            update={
                "attempt": turn.attempt + 1,
                "round": 0,
                "pending": (),
                "ran": (),
                "worked": {},
                "standing": tuple(dict.fromkeys(stood)),
                "tokens": None,
                "narrow": False,
                "rejected": digest,
                "started": time.time(),
            }
        )
        return visit.command(self.name, {"turn": next_turn, "attempt": record})

    def _shown_path(self, path: str) -> str:
        """A restored file as the model and the state name it: relative to the files root."""
        root = self.ctx.settings.files_root
        if root and Path(path).is_relative_to(Path(root).resolve()):
            return Path(path).relative_to(Path(root).resolve()).as_posix()
        return Path(path).name

    def _fail(self, visit: Visit, code: str, message: str, turn: Turn | None) -> Command[str]:
        """End the run failed; the turn's file changes are undone, as its output never
        merges."""
        update: dict[str, Any] = {
            "status": "failed",
            "error": RunError(code=code, skill=self.name, message=message),
            "turn": None,
        }
        if turn is not None:
            rollback(visit.store, visit.thread_id, turn.id)
            update["attempt"] = self._record(visit, turn, "failed", [])
        return visit.command(END, update)

    def _model_error(self, visit: Visit, exc: Exception, turn: Turn | None) -> Command[str]:
        """Fail the run on a model call that raised (endpoint down, bad key, timeout).

        A provider's error text may echo credentials: the state (which API clients read) gets
        its public reason (:func:`~skilldeck._internal.redact.safe_reason`: its type and
        status, or a skilldeck error's own message); the log gets the text, redacted.
        """
        reason = log_error(
            log, f"model call of skill {self.name} failed", exc, level=logging.WARNING
        )
        if isinstance(exc, PromptTooLongError):
            return self._fail(visit, exc.code.value, str(reason), turn)
        if isinstance(exc, SkillDeckError):
            message = f"{type(exc).__name__}: {reason}"
        else:
            message = f"the model call failed: {reason}; the details are in the log"
        return self._fail(visit, "MODEL_ERROR", message, turn)

    def _record(self, visit: Visit, turn: Turn, action: AttemptAction, errors: Errors) -> Attempt:
        """The attempt record kept in the state (the checkpoint history keeps them all), with
        the calls the attempt ran (from its transcript: the turn keeps none)."""
        return Attempt(
            skill=self.name,
            turn=turn.id,
            attempt=turn.attempt,
            fingerprint=turn.fingerprint,
            upgrade=turn.upgrade,
            head=turn.head,
            model=self.ctx.model_label(self.name),
            output_mode=self.caller.mode if self.ctx.has_model(self.name) else None,
            tool_calls=visit.history(turn).of_attempt(turn.attempt),
            validation_errors=issues(errors),
            action=action,
            route=turn.route,
            tokens=turn.tokens,
            trajectory=turn.trajectory,
            started_at=_iso(turn.started),
            duration_ms=round((time.time() - turn.started) * 1000, 1),
        )


def _add_tokens(total: Tokens | None, message: AIMessage) -> Tokens | None:
    usage = message.usage_metadata
    if not usage:
        return total
    return (total or Tokens()).plus(dict(usage))


def _made_call(call: ToolCall) -> dict[str, Any]:
    """A call as ``scripts/validate.py`` reads it: its name, arguments and any result fields
    an output is pinned to."""
    made: dict[str, Any] = {"name": call.name, "args": call.args}
    return made | {"returned": call.returned} if call.returned is not None else made


def _digest(message: AIMessage) -> str:
    """What a reply said, as a short digest: two equal replies have equal digests."""
    said = [message.content, [(c["name"], c["args"]) for c in message.tool_calls]]
    # A reply may hold lone surrogates (rejected as such): digest them rather than fail.
    return hashlib.sha256(_canonical(said).encode(errors="surrogatepass")).hexdigest()[:16]


def _canonical(args: Any) -> str:
    """Arguments as one comparable string (key order does not matter)."""
    return json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)


def _describe(script: str, exc: Exception) -> str:
    """What a run's error says of a bundle script that raised: its public reason and line (the
    exception's text, which may quote files or data, goes to the log)."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    reason = log_error(log, f"{script} raised (line {frame.lineno})", exc, level=logging.WARNING)
    return f"{script} raised {reason} (line {frame.lineno}); the details are in the log"
