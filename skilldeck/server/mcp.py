"""A deck as an MCP server (``skilldeck mcp``): its skills are tools, its cards elicitations.

Served with the official ``mcp`` SDK (1.x, the version ``langchain-mcp-adapters`` allows; it
speaks the revisions up to 2025-11-25) over stdio or streamable HTTP:

- each skill is a tool (its name, its description, its ``assets/input_schema.json``, else
  ``{request: string}``, plus ``matter_id`` and ``thread_id``); calling it starts a run with
  that skill as ``next_skill``. ``run`` starts one routed by description (context ``auto``);
  ``resume`` answers a thread's pending card. A result is the run's ``response`` as text and
  its status, profile, data and pending card as structured content (:data:`OUTPUT_SCHEMA`).
- A run that stops on a card asks the client with ``elicitation/create`` during the tool
  call: the card's questions as MCP's flat form schema (:func:`elicitation_form`). The answers
  go to the deck as every resume does (``deck.stream(Resume(...))``), so they are checked by
  the same code: refused answers are asked again, the errors in the message. A client that
  cannot elicit, declines, cancels or does not answer in time, and a card the form cannot
  express (``file_ids``), leave the card pending in the checkpoints: the result names the
  thread and the interrupt, for ``resume`` (or the HTTP service, or the console) later, from
  any process.
- Identity: over HTTP the caller's API key (``Authorization: Bearer``), the keys of
  ``skilldeck serve``; over stdio the local user the process runs as (``--user``, else the
  login name). The service's per-user limits, thread quota and matter policy hold as over HTTP
  (:class:`~skilldeck.server.threads.Threads`, :class:`~skilldeck.server.runs.RunStreams`).
- Each step of a run is a progress notification (when the call has a progress token), each
  of its skills' tool calls an MCP log message.

A run is driven by a worker thread, as in the HTTP service: a client that goes away stops
listening, not the run, which goes on to its card or its end.
"""

from __future__ import annotations

import getpass
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, get_args
from weakref import WeakKeyDictionary

import anyio
from mcp import types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import McpError
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from skilldeck._internal.ids import ID_MAX_LENGTH, ID_PATTERN, check_id
from skilldeck._internal.redact import log_error, safe_reason
from skilldeck.deck import SkillDeck
from skilldeck.errors import InvalidAnswersError, NoPendingCardError, SkillDeckError
from skilldeck.errors import StaleInterruptError as StaleInterrupt
from skilldeck.nodes import AUTO_CONTEXT
from skilldeck.server.errors import NotFound, TooManyRequests
from skilldeck.server.keys import ApiKeys
from skilldeck.server.limits import BodyLimit, KeyRequired
from skilldeck.server.runlog import SKILLDECK_EVENTS, Protocol, RunLog
from skilldeck.server.runs import RunStreams
from skilldeck.server.service import Service, service_version
from skilldeck.server.threads import Threads
from skilldeck.skills.bundle import SkillBundle
from skilldeck.skills.contract import Validator, compile_schema, format_errors
from skilldeck.types import CardQuestion, Resume, ThreadStatus

__all__ = [
    "ELICIT_ROUNDS",
    "OUTPUT_SCHEMA",
    "SESSIONS_PER_USER",
    "DeckServer",
    "PendingReason",
    "elicitation_form",
    "http_app",
    "local_user",
    "serve_stdio",
]

log = logging.getLogger("skilldeck.server.mcp")

#: A run's events as the MCP server reads them from the run log: each event's JSON.
MCP_EVENTS = Protocol(
    lambda event, _id: json.dumps(event.to_dict(), ensure_ascii=False).encode(),
    SKILLDECK_EVENTS.error,
)
RUN_TOOL, RESUME_TOOL = "run", "resume"
#: How many times a card whose answers were refused is asked again in one tool call (then the
#: card stays pending, with the errors): a client that keeps answering wrong cannot loop.
ELICIT_ROUNDS = 5
#: How many streamable HTTP sessions one user may hold open at once.
SESSIONS_PER_USER = 16
#: The MCP revision from which a form may ask for several of a list (multi_select).
_MULTI_SELECT_SINCE = "2025-11-25"

#: Why a card was left pending: ``unsupported`` (the client declared no form elicitation),
#: ``not_flat`` (a question MCP's form cannot ask, e.g. ``file_ids``), ``declined``,
#: ``cancelled``, ``unanswered`` (no answer in time, or the connection dropped), ``invalid``
#: (refused answers :data:`ELICIT_ROUNDS` times), ``not_asked`` (``resume`` was told not to).
PendingReason = Literal[
    "unsupported", "not_flat", "declined", "cancelled", "unanswered", "invalid", "not_asked"
]

_ID = {"type": "string", "minLength": 1, "maxLength": ID_MAX_LENGTH, "pattern": ID_PATTERN}
#: The arguments that name an id: each is held to the one id rule (``check_id``) first.
_ID_ARGS = ("thread_id", "interrupt_id", "matter_id")
_START_ARGS: dict[str, Any] = {
    "matter_id": {
        **_ID,
        "description": "The matter the run works in (skills whose tools work in a matter's "
        "files need one); you must own it or be granted it.",
    },
    "thread_id": {
        **_ID,
        "description": "A thread of yours to run a new turn on (default: a new thread).",
    },
}
_REQUEST = {"type": "string", "minLength": 1, "description": "What you ask, in words."}

#: The structured content of every tool result.
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"enum": list(get_args(ThreadStatus))},
        "thread_id": {"type": "string"},
        "response": {"type": ["string", "null"], "description": "The last skill's response."},
        "profile": {"type": "object", "description": "The run's profile so far."},
        "data": {"type": "object", "description": "The data fields the run's skills wrote."},
        "card": {
            "type": ["object", "null"],
            "description": "The pending card (status interrupted): its interrupt_id, "
            "questions, answers_schema and the errors of refused answers. Answer it with the "
            "resume tool.",
        },
        "pending": {
            "enum": [*get_args(PendingReason), None],
            "description": "Why the card was not answered in this call.",
        },
        "error": {"type": ["object", "null"], "description": "Why the run failed."},
    },
    "required": ["status", "thread_id", "profile", "data"],
}


def local_user() -> str:
    """The user a stdio server acts as when ``--user`` is not given: the login name of the
    process (``getpass.getuser()``: ``LOGNAME``, ``USER``, ... or the password database).

    Raises:
        SkillDeckError: the process has no login name (a container's user without a
            password entry, and no ``USER``): pass ``--user``.
    """
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        raise SkillDeckError(
            "this process has no login name to act as (no USER or LOGNAME, and no password "
            "entry for its uid): start the stdio server with --user NAME"
        ) from None


@dataclass(frozen=True, slots=True)
class _Form:
    """A card as an elicitation form: the requested schema, and for each choice question the
    option value of each enum string the client may send back."""

    schema: dict[str, Any]
    choices: Mapping[str, Mapping[str, Any]]

    def answers(self, content: Mapping[str, Any] | None) -> dict[str, Any]:
        """The card answers of a form's ``content``: enum strings back to option values,
        unanswered (``None``) fields left out. Anything else goes to the deck as it came:
        the deck's check of the answers says what is wrong with it."""
        answers: dict[str, Any] = {}
        for key, value in (content or {}).items():
            if value is None:
                continue
            choices = self.choices.get(key)
            if choices is not None and isinstance(value, str):
                value = choices.get(value, value)
            elif choices is not None and isinstance(value, list):
                value = [choices.get(v, v) if isinstance(v, str) else v for v in value]
            answers[key] = value
        return answers


def elicitation_form(
    questions: Sequence[CardQuestion], protocol_version: str | None = None
) -> _Form | None:
    """The card's questions as MCP's flat form schema, one property per ``field_key``:
    ``text`` a string, ``number``/``integer`` with their bounds, ``boolean``, ``select`` an
    enum of the options (``enumNames`` their labels), ``multi_select`` an array of that enum
    from revision 2025-11-25 on. ``None``: a question the form cannot ask (``file_ids``; a
    ``multi_select`` before 2025-11-25; options whose values are not distinct as strings)."""
    properties: dict[str, Any] = {}
    choices: dict[str, dict[str, Any]] = {}
    for question in questions:
        kind, key = question["input_type"], question["field_key"]
        field: dict[str, Any] = {"title": question["question"]}
        if kind == "text":
            field["type"] = "string"
        elif kind == "boolean":
            field["type"] = "boolean"
        elif kind in ("number", "integer"):
            field["type"] = kind
            field.update({b: question[b] for b in ("minimum", "maximum") if b in question})  # type: ignore[literal-required]
        elif kind in ("select", "multi_select"):
            options = question.get("options") or []
            values = {_enum_key(o["value"]): o["value"] for o in options}
            if len(values) != len(options):
                return None
            enum = {"type": "string", "enum": list(values)}
            if kind == "select":
                field.update(enum, enumNames=[o["label"] for o in options])
            elif (protocol_version or "") >= _MULTI_SELECT_SINCE:
                field.update(type="array", items=enum)
            else:
                return None
            choices[key] = values
        else:
            return None
        properties[key] = field
    required = [q["field_key"] for q in questions if q["required"]]
    return _Form({"type": "object", "properties": properties, "required": required}, choices)


def _enum_key(value: Any) -> str:
    """The string an option value is offered as (a form's enums are strings)."""
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(slots=True)
class _Call:
    """One tool call: its caller, and the steps its runs have taken (its progress goes on
    rising across the runs of its cards' answers)."""

    user: str
    steps: int = 0


class _Refused(Exception):
    """A tool call refused before or while it ran: its error result's code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class DeckServer:
    """The MCP server of a deck: its tools and what calling them does.

    Args:
        service: the deck, its keys, thread ownership and runs, as the HTTP service has them.
        user: the user every call acts as (stdio); ``None``: the user of each HTTP request's
            API key (set by :class:`~skilldeck.server.limits.KeyRequired`).
        elicit_timeout_s: how long a card's elicitation waits for the client's answer before
            the card is left pending.
        max_arguments_bytes: larger tool arguments (as JSON) are refused, as the HTTP service
            refuses larger bodies: over stdio nothing else bounds them.
    """

    def __init__(
        self,
        service: Service,
        *,
        user: str | None = None,
        elicit_timeout_s: float = 600.0,
        max_arguments_bytes: int = 1_000_000,
    ) -> None:
        self.service, self.user, self.elicit_timeout_s = service, user, elicit_timeout_s
        self.max_arguments_bytes = max_arguments_bytes
        deck = service.deck
        taken = sorted({b.name for b in deck.bundles} & {RUN_TOOL, RESUME_TOOL})
        if taken:
            raise SkillDeckError(
                f"skill {taken[0]!r} has the name of one of the MCP server's own tools "
                f"({RUN_TOOL}, {RESUME_TOOL}): rename its folder to serve it over MCP"
            )
        self._bundles = {b.name: b for b in deck.bundles}
        tools = [*(self._skill_tool(b) for b in self._bundles.values()), *_own_tools()]
        self._tools = tools
        self._validators = {t.name: compile_schema(t.inputSchema) for t in tools}
        self._data_keys = sorted({k for b in deck.bundles for k in b.data_keys})
        self._levels: WeakKeyDictionary[ServerSession, types.LoggingLevel] = WeakKeyDictionary()
        self.server: Server[Any, Any] = Server(
            "skilldeck",
            version=service_version(),
            instructions="Each skill is a tool; a run that needs a person's answers asks "
            "them by elicitation. A card left unanswered stays pending: answer it later with "
            "the resume tool (thread_id, interrupt_id).",
        )
        # The SDK's decorators for these two have no annotations. The arguments are checked
        # by _check_arguments, which says where each problem is (the SDK's check does not).
        self.server.list_tools()(self._list_tools)  # type: ignore[no-untyped-call]
        self.server.call_tool(validate_input=False)(self._call_tool)
        self.server.set_logging_level()(self._set_level)  # type: ignore[no-untyped-call]

    def initialization_options(self) -> Any:
        """What the server tells a client at ``initialize`` (tools, logging)."""
        return self.server.create_initialization_options(NotificationOptions())

    # -- tools ----------------------------------------------------------------------------
    async def _list_tools(self) -> list[types.Tool]:
        return self._tools

    def _skill_tool(self, bundle: SkillBundle) -> types.Tool:
        schema = dict(bundle.input_schema or {})
        if not schema:
            schema = {
                "type": "object",
                "properties": {"request": _REQUEST},
                "required": ["request"],
            }
        schema.pop("$schema", None)
        schema["properties"] = {**schema.get("properties", {}), **_START_ARGS}
        return types.Tool(
            name=bundle.name,
            description=bundle.description,
            inputSchema=schema,
            outputSchema=OUTPUT_SCHEMA,
        )

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            call = _Call(self._caller())
            await self._log("info", {"tool": name, "user_id": call.user})
            self._check_arguments(name, arguments)
            if name == RESUME_TOOL:
                return await self._resume(call, arguments)
            if name == RUN_TOOL:
                request = {"request": arguments["request"]}
                return await self._start(call, request, AUTO_CONTEXT, None, arguments)
            bundle = self._bundles[name]
            run_input = {k: v for k, v in arguments.items() if k not in _START_ARGS}
            context = bundle.contexts[0] if bundle.contexts else AUTO_CONTEXT
            return await self._start(call, run_input, context, bundle.name, arguments)
        except _Refused as exc:
            return _error(exc.code, exc.message)
        except SkillDeckError as exc:
            return _error(exc.code.value, str(safe_reason(exc)))
        except (NotFound, TooManyRequests) as exc:
            return _error(exc.code, exc.message)
        except Exception as exc:  # the SDK would send the exception's own text
            frame = "internal error ({}); the details are in the server log"
            reason = log_error(log, f"MCP tool call {name!r} failed", exc, frame=frame)
            return _error("INTERNAL_ERROR", str(reason))

    def _check_arguments(self, name: str, arguments: Mapping[str, Any]) -> None:
        """Refuse, before anything is stored, a call of an unknown tool and arguments that do
        not fit its input schema: ids by the one id rule, the rest with each JSON path.

        Raises:
            SkillDeckError: ``INVALID_INPUT``, saying what is wrong where.
        """
        validator: Validator | None = self._validators.get(name)
        if validator is None:
            raise _Refused("UNKNOWN_TOOL", f"no tool {name!r}: list the tools (tools/list)")
        size = len(json.dumps(arguments, ensure_ascii=False).encode(errors="surrogatepass"))
        if size > self.max_arguments_bytes:
            raise SkillDeckError(
                f"the arguments of tool {name!r} are {size:,} bytes of JSON, over the server's "
                f"limit of {self.max_arguments_bytes:,} (--max-body-bytes): send less, or keep "
                "long documents in files the skill reads"
            )
        for key in _ID_ARGS:
            if key in arguments:
                check_id(key, arguments[key])
        errors = format_errors(validator, arguments, plain=True)
        if errors:
            detail = "; ".join(f"{e['path']}: {e['message']}" for e in errors)
            raise SkillDeckError(f"the arguments of tool {name!r} do not fit its schema: {detail}")

    def _caller(self) -> str:
        if self.user is not None:
            return self.user
        request = self.server.request_context.request
        user = getattr(getattr(request, "state", None), "user_id", None)
        if not isinstance(user, str):  # KeyRequired refuses such requests before they come
            raise McpError(types.ErrorData(code=types.INVALID_REQUEST, message="no API key"))
        return user

    async def _start(
        self,
        call: _Call,
        run_input: dict[str, Any],
        context: str,
        skill: str | None,
        arguments: Mapping[str, Any],
    ) -> types.CallToolResult:
        threads, deck, user = self.service.threads, self.service.deck, call.user
        matter_id, thread_id = arguments.get("matter_id"), arguments.get("thread_id")
        await run_in_threadpool(threads.check_matter, user, matter_id)
        created = thread_id is None
        if thread_id is None:
            thread_id = (await run_in_threadpool(threads.create, user)).thread_id
        else:
            await run_in_threadpool(threads.owned, thread_id, user)
        try:
            run_log = await self.service.runs.start(
                thread_id,
                user,
                lambda: deck.stream(
                    run_input,
                    context=context,
                    thread_id=thread_id,
                    user_id=user,
                    matter_id=matter_id,
                    next_skill=skill,
                ),
                MCP_EVENTS,
            )
        except BaseException:
            if created:  # the run was refused: the thread made for it is not kept
                await run_in_threadpool(threads.abandon, thread_id)
            raise
        outcome = await self._follow(call, thread_id, run_log)
        return await self._settle(call, thread_id, outcome)

    async def _resume(self, call: _Call, arguments: Mapping[str, Any]) -> types.CallToolResult:
        thread_id, interrupt_id = arguments["thread_id"], arguments.get("interrupt_id")
        thread = await run_in_threadpool(self.service.threads.authorize, thread_id, call.user)
        if thread is None or thread.card is None:
            raise NoPendingCardError(thread_id, "new" if thread is None else thread.status)
        card: dict[str, Any] = dict(thread.card)
        if interrupt_id is not None and interrupt_id != card["interrupt_id"]:
            raise StaleInterrupt(thread_id, interrupt_id, card["interrupt_id"])
        answers = arguments.get("answers")
        if answers is None:
            if not arguments.get("elicit", True):
                return await self._result(call, thread_id, card, "not_asked")
            return await self._settle(call, thread_id, card)
        try:
            outcome = await self._answer(call, thread_id, card, answers)
        except InvalidAnswersError as exc:
            if not arguments.get("elicit", True) or self._cannot_elicit(exc.card) is not None:
                raise
            outcome = exc.card
        return await self._settle(call, thread_id, outcome, rounds=1)

    # -- runs and cards ---------------------------------------------------------------------
    async def _follow(self, call: _Call, thread_id: str, run_log: RunLog) -> dict[str, Any]:
        """Follow a run's events to the last one (``card``, ``done`` or ``error``): each step
        a progress notification, each tool call of a skill a log message."""
        context = self.server.request_context
        token = context.meta.progressToken if context.meta is not None else None
        event: dict[str, Any] = {}
        async for message in run_log.follow():
            event = json.loads(message)
            kind = event["event"]
            if kind == "step" and token is not None:
                call.steps += 1
                steps, where = call.steps, event.get("skill") or event["node"]
                await context.session.send_progress_notification(
                    token,
                    steps,
                    message=f"step {steps}: {where}",
                    related_request_id=str(context.request_id),
                )
            elif kind == "tool_call":
                fields = ("skill", "name", "status", "ms")
                await self._log(
                    "info", {"thread_id": thread_id, **{k: event.get(k) for k in fields}}
                )
        return event

    async def _answer(
        self, call: _Call, thread_id: str, card: Mapping[str, Any], answers: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Resume the card with ``answers`` as any resume does (the caller must still be
        allowed the thread's matter); the run's last event.

        Raises:
            InvalidAnswersError: the deck refused the answers; nothing changed.
        """
        deck = self.service.deck
        await run_in_threadpool(self.service.threads.authorize, thread_id, call.user)
        resume = Resume(thread_id, dict(answers), interrupt_id=card["interrupt_id"])
        run_log = await self.service.runs.start(
            thread_id, call.user, lambda: deck.stream(resume), MCP_EVENTS
        )
        return await self._follow(call, thread_id, run_log)

    async def _settle(
        self, call: _Call, thread_id: str, outcome: dict[str, Any], rounds: int = 0
    ) -> types.CallToolResult:
        """Ask each card the run stops on, one at a time and in order, until the run ends or
        a card stays pending; the result of where the thread then stands."""
        while outcome.get("event") == "card":
            reason = self._cannot_elicit(outcome)
            if reason is not None:
                return await self._result(call, thread_id, outcome, reason)
            form = self._form(outcome)
            assert form is not None  # _cannot_elicit checked it
            try:
                reply = await self._elicit(outcome, form)
                if isinstance(reply, str):
                    return await self._result(call, thread_id, outcome, reply)
                outcome = await self._answer(call, thread_id, outcome, reply)
            except InvalidAnswersError as exc:
                rounds += 1
                if rounds >= ELICIT_ROUNDS:
                    return await self._result(call, thread_id, exc.card, "invalid")
                outcome = exc.card
        if outcome.get("event") == "error":
            return await self._result(call, thread_id, None, None, error=outcome)
        return await self._result(call, thread_id, None, None)

    def _form(self, card: Mapping[str, Any]) -> _Form | None:
        params = self.server.request_context.session.client_params
        version = str(params.protocolVersion) if params is not None else None
        return elicitation_form(card["questions"], version)

    def _cannot_elicit(self, card: Mapping[str, Any]) -> PendingReason | None:
        """Why the card cannot be asked of this client now (``None``: it can)."""
        params = self.server.request_context.session.client_params
        elicitation = params.capabilities.elicitation if params is not None else None
        # An empty elicitation capability is the form mode (revisions before 2025-11-25).
        if elicitation is None or (elicitation.form is None and elicitation.url is not None):
            return "unsupported"
        return "not_flat" if self._form(card) is None else None

    async def _elicit(self, card: Mapping[str, Any], form: _Form) -> dict[str, Any] | PendingReason:
        """The card asked of the client: its answers, or why there are none.

        Raises:
            InvalidAnswersError: the reply is not an elicitation result (an answer that is an
                object, an unknown action): refused as answers the deck refuses are.
        """
        context = self.server.request_context
        message = (
            f"{card['skill']} asks ({card['review_type']}) on thread {card['thread_id']}, "
            f"card {card['interrupt_id']}."
        )
        if card.get("errors"):
            refused = "; ".join(f"{e['field_key']}: {e['message']}" for e in card["errors"])
            message += f" Your last answers were refused: {refused}. Please answer again."
        reply: types.ElicitResult | None = None
        with anyio.move_on_after(self.elicit_timeout_s):
            try:
                reply = await context.session.elicit_form(
                    message, form.schema, related_request_id=context.request_id
                )
            except (McpError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                log.info("elicitation of card %s got no answer: %s", card["interrupt_id"], exc)
            except ValidationError:
                raise InvalidAnswersError(dict(card), [_NOT_A_RESULT]) from None
        if reply is None:
            return "unanswered"
        if reply.action == "decline":
            return "declined"
        if reply.action == "cancel":
            return "cancelled"
        return form.answers(reply.content)

    async def _result(
        self,
        call: _Call,
        thread_id: str,
        card: Mapping[str, Any] | None,
        pending: PendingReason | None,
        error: Mapping[str, Any] | None = None,
    ) -> types.CallToolResult:
        """The tool result of where the thread stands: its response as text; its status,
        profile, data, pending card (and why it is pending) as structured content."""
        thread = await run_in_threadpool(self.service.threads.owned, thread_id, call.user)
        state = thread.state if thread is not None else {}
        status: str = thread.status if thread is not None else "new"
        # The card as the checkpoint holds it, with the refusals of the last answers if any.
        shown = dict(thread.card) if thread is not None and thread.card is not None else None
        if shown is not None and card is not None and card.get("errors"):
            shown["errors"] = card["errors"]
        response = state.get("response")
        body: dict[str, Any] = {
            "status": status,
            "thread_id": thread_id,
            "response": response,
            "profile": state.get("profile") or {},
            "data": {k: state[k] for k in self._data_keys if state.get(k) is not None},
            "card": shown,
            "pending": pending if shown is not None else None,
            "error": dict(error) if error is not None else None,
        }
        lines = [response] if response else []
        if shown is not None:
            lines.append(_pending_text(thread_id, shown, pending))
        if error is not None:
            lines.append(f"error [{error.get('code')}]: {error.get('message')}")
        text = "\n\n".join(lines) or f"thread {thread_id}: {status}"
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structuredContent=body,
            isError=error is not None,
        )

    # -- logging --------------------------------------------------------------------------
    async def _set_level(self, level: types.LoggingLevel) -> None:
        self._levels[self.server.request_context.session] = level

    async def _log(self, level: types.LoggingLevel, data: Mapping[str, Any]) -> None:
        """An MCP log message to the calling client, unless it asked for a higher level."""
        context = self.server.request_context
        wanted = self._levels.get(context.session, "info")
        if _LEVELS.index(level) < _LEVELS.index(wanted):
            return
        await context.session.send_log_message(
            level, dict(data), logger="skilldeck", related_request_id=context.request_id
        )


#: The refusal of a reply that is not an elicitation result.
_NOT_A_RESULT = {
    "field_key": "$",
    "message": "the reply is not an elicitation result: action accept, decline or cancel; "
    "each answer a string, a number, a boolean or a list of strings",
}
_LEVELS: tuple[types.LoggingLevel, ...] = get_args(types.LoggingLevel)


def _own_tools() -> list[types.Tool]:
    run = types.Tool(
        name=RUN_TOOL,
        description="Run the deck on a request in words: the skill whose description fits "
        "it best starts (routing by description, context auto).",
        inputSchema={
            "type": "object",
            "properties": {"request": _REQUEST, **_START_ARGS},
            "required": ["request"],
            "additionalProperties": False,
        },
        outputSchema=OUTPUT_SCHEMA,
    )
    resume = types.Tool(
        name=RESUME_TOOL,
        description="Answer a thread's pending card. With answers ({field_key: value}), "
        "they are checked and applied; without, the card is asked of you by elicitation. "
        "The interrupt_id makes sure the answers go to the card you saw.",
        inputSchema={
            "type": "object",
            "properties": {
                "thread_id": _ID,
                "interrupt_id": {**_ID, "description": "The card being answered."},
                "answers": {"type": "object", "description": "{field_key: value}"},
                "elicit": {
                    "type": "boolean",
                    "default": True,
                    "description": "Ask the card (again) by elicitation when there are no "
                    "answers or they are refused (default true).",
                },
            },
            "required": ["thread_id"],
            "additionalProperties": False,
        },
        outputSchema=OUTPUT_SCHEMA,
    )
    return [run, resume]


def _pending_text(thread_id: str, card: Mapping[str, Any], pending: PendingReason | None) -> str:
    why = {
        "unsupported": "this client does not support elicitation",
        "not_flat": "its questions need more than an MCP form can ask",
        "declined": "you declined it",
        "cancelled": "you cancelled it",
        "unanswered": "no answer came",
        "invalid": "the answers were refused",
        "not_asked": "it was not asked",
        None: "it waits for answers",
    }[pending]
    questions = "; ".join(f"{q['field_key']} ({q['input_type']})" for q in card["questions"])
    return (
        f"A card of {card.get('skill')} is pending ({why}): thread_id {thread_id}, "
        f"interrupt_id {card['interrupt_id']}. Questions: {questions}. Answer it with the "
        "resume tool (thread_id, interrupt_id, answers {field_key: value}), the HTTP service "
        "(POST /threads/{id}/resume) or the card console."
    )


def _error(code: str, message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"error [{code}]: {message}")],
        isError=True,
    )


# -- transports -----------------------------------------------------------------------------
def _service(deck: SkillDeck, keys: ApiKeys, workers: int) -> Service:
    return Service(
        deck=deck, keys=keys, threads=Threads(deck), runs=RunStreams(workers, deck.settings)
    )


async def serve_stdio(
    deck: SkillDeck,
    *,
    user: str,
    elicit_timeout_s: float = 600.0,
    workers: int = 8,
    max_body_bytes: int = 1_000_000,
) -> None:
    """Serve ``deck`` over stdio as ``user`` until the client closes stdin; then wait for the
    runs going on to reach their card or end. Tool arguments over ``max_body_bytes`` (as
    JSON) are refused."""
    from mcp.server.stdio import stdio_server

    service = _service(deck, ApiKeys({}), workers)
    server = DeckServer(
        service, user=user, elicit_timeout_s=elicit_timeout_s, max_arguments_bytes=max_body_bytes
    )
    try:
        async with stdio_server() as (read, write):
            await server.server.run(read, write, server.initialization_options())
    finally:
        await _drain(service)


def http_app(
    deck: SkillDeck,
    keys: ApiKeys,
    *,
    elicit_timeout_s: float = 600.0,
    workers: int = 32,
    max_body_bytes: int = 1_000_000,
    sessions_per_user: int = SESSIONS_PER_USER,
) -> Any:
    """The streamable HTTP endpoint of ``deck``'s MCP server at ``/mcp`` (and ``GET /health``,
    without a key), as an ASGI app: every request to ``/mcp`` carries a key of ``keys``
    (``Authorization: Bearer``, else 401), and its body is held to the service's limits. A
    session is its opener's: a request naming it with another user's key is answered 404, as
    an unknown session is. A user holds at most ``sessions_per_user`` sessions (then 429)."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    service = _service(deck, keys, workers)
    server = DeckServer(
        service, elicit_timeout_s=elicit_timeout_s, max_arguments_bytes=max_body_bytes
    )
    manager = StreamableHTTPSessionManager(app=server.server, max_request_body_size=max_body_bytes)
    opening: Counter[str] = Counter()  # each user's requests opening a session, in flight

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        user: str = scope["state"]["user_id"]  # KeyRequired let only known keys through
        # The SDK binds a session to the principal of the request that opened it and answers
        # a request naming the session with another principal 404, as an unknown session.
        scope["user"] = _principal(user)
        if any(name == b"mcp-session-id" for name, _ in scope["headers"]):
            await manager.handle_request(scope, receive, send)
            return
        # A request without a session opens one. The SDK caps the sessions of all users
        # together (one user could take them all), so each user's are capped here; the
        # SDK's record of who opened each live session is the count (it drops a session
        # when it ends: DELETE, idle timeout, crash).
        owners = manager._session_owners.values()
        held = sum(1 for owner in owners if owner["subject"] == user) + opening[user]
        if held >= sessions_per_user:
            message = (
                f"this API key's user has {held} MCP sessions open, the most allowed: end one "
                "(DELETE /mcp with its Mcp-Session-Id) or let one go idle"
            )
            refusal = JSONResponse(
                {"error": {"code": "TOO_MANY_SESSIONS", "message": message}},
                status_code=429,
                headers={"Retry-After": "60"},
            )
            await refusal(scope, receive, send)
            return
        opening[user] += 1
        try:
            await manager.handle_request(scope, receive, send)
        finally:
            opening[user] -= 1
            if not opening[user]:
                del opening[user]

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "version": service_version()})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield
        await _drain(service)

    app = Starlette(
        routes=[Route("/mcp", endpoint=_Asgi(endpoint)), Route("/health", endpoint=health)],
        lifespan=lifespan,
    )
    limited = BodyLimit(app, max_body_bytes, keys, deck.settings.body_timeout_s)
    return KeyRequired(limited, keys, open_paths=frozenset({"/health"}))


def _principal(user_id: str) -> AuthenticatedUser:
    """A user as the SDK's session manager compares who sends a session's requests."""
    return AuthenticatedUser(AccessToken(token="", client_id=user_id, subject=user_id, scopes=[]))


class _Asgi:
    """An ASGI callable as a Starlette route's endpoint (a class instance is called as an
    ASGI app, not as a request handler)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


async def _drain(service: Service) -> None:
    """As the HTTP service ends: each run stops after its step, at its checkpoint, within
    ``SKILLDECK_DRAIN_TIMEOUT_S``; then the run workers go."""
    await service.runs.drain(service.deck.settings.drain_timeout_s)
    await run_in_threadpool(service.runs.close)
