"""The ``scripted`` model provider: replays model turns from a YAML/JSON file.

For tests and the offline demo. Turns are listed per skill and picked by the skill's call index,
which the runner keeps in the checkpointed state, so a replay gives the same turn after a resume
in a new process. Every message it produces is labelled ``scripted:<file>``.

Script format::

    skills:
      litigation-intake:
        - tool_calls: [{name: file__parse, args: {file_id: complaint.txt}}]
        - output: {response: "...", profile: {...}, data: {...}, control: {action: finish}}
        - text: "raw model text, e.g. to test invalid output"
          invalid: true         # this turn is meant to be rejected (the re-ask gets the next)
          latency_s: 2          # optional: the turn takes this long, its text streamed over it
    cases:                      # optional: per-case turns, e.g. an eval cassette
      card_event_meeting:       # picked by the run's metadata {"skilldeck_case": ...}
        skills:
          card-agent: [...]

A run whose ``skilldeck_case`` names a case uses that case's turns; other runs use ``skills``.

Turns are written once, as native tool calls and outputs, and replayed in whatever output mode
the skill asks in: bound with a ``response_format`` (``schema`` and ``json`` modes), a turn's
tool call comes back as the text ``{"tool": NAME, "arguments": {...}}`` and, where the format's
schema is the reply envelope, its output as ``{"final": OUTPUT}``; so one cassette exercises
every mode's reading of replies.

A script never hides a contract error: a turn that the skill's contract rejects fails the run at
once as ``CONTRACT_VIOLATION``, naming the turn, unless the turn says ``invalid: true`` (a test
of the re-ask). So a broken cassette is never papered over by the turn after it.

A cassette recorded from a real model (``eval run --record``) says so in a ``recorded`` header
(model, output mode, date), and each of its turns holds ``request``: the digest of the request
it answered (:func:`request_digest`). Its turns replay what the model said, rejected replies
included; and a turn asked by a request that differs from the recorded one (a prompt or schema
changed since) raises :class:`~skilldeck.errors.StaleCassetteError` naming the case, skill and
call, so a stale recording is never silently reused.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import openai
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.tracers._streaming import _StreamingCallbackHandler
from langchain_core.utils.utils import LC_ID_PREFIX
from pydantic import Field

from skilldeck._internal.documents import DocumentError, parse_yaml
from skilldeck.errors import ModelConfigError, ScriptedModelError, StaleCassetteError

__all__ = [
    "CALL_INDEX_KEY",
    "CASE_KEY",
    "INVALID_KEY",
    "SKILL_KEY",
    "TURN_KEY",
    "Script",
    "ScriptedChatModel",
    "TurnModel",
    "load_script",
    "request_digest",
    "turn_message",
]

SKILL_KEY = "skilldeck_skill"
CALL_INDEX_KEY = "skilldeck_call"
CASE_KEY = "skilldeck_case"

#: Turns by skill name.
Turns = dict[str, list[dict[str, Any]]]
_TURN_KINDS = ("output", "text", "tool_calls", "error")
#: What a recorded call that failed replays as (``error: KIND``): the same failure, so the run
#: takes the same path (a re-ask) as it did live.
ERROR_KINDS = ("length", "timeout", "unavailable")
_TURN_KEYS = frozenset((*_TURN_KINDS, "invalid", "request", "latency_s", "status", "received"))
#: ``response_metadata`` of a scripted message: where its turn is, and if it is meant invalid.
TURN_KEY = "scripted_turn"
INVALID_KEY = "scripted_invalid"


def load_script(source: str | Path | Mapping[str, Any]) -> Script:
    """Read and check a script (see the module docstring)."""
    if isinstance(source, Mapping):
        label, raw = "inline", source
    else:
        path = Path(source)
        if not path.is_file():
            raise ModelConfigError(f"scripted model file {str(path)!r} does not exist")
        label = str(path)
        try:
            raw = parse_yaml(path.read_text("utf-8"))
        except DocumentError as exc:
            raise ModelConfigError(f"{label}: {exc.reason}") from None
    if not isinstance(raw, Mapping) or not ({"skills", "cases"} & set(raw)):
        raise ModelConfigError(f"{label}: $.skills: must map skill names to lists of turns")
    cases = raw.get("cases") or {}
    if not isinstance(cases, Mapping):
        raise ModelConfigError(f"{label}: $.cases: must map case keys to {{skills: ...}}")
    recorded = raw.get("recorded") or {}
    if not isinstance(recorded, Mapping):
        raise ModelConfigError(f"{label}: $.recorded: must map model, output_mode and date")
    return Script(
        label=label,
        recorded=dict(recorded),
        skills=_turns(label, "$.skills", raw.get("skills") or {}),
        cases={
            str(key): _turns(
                label,
                f"$.cases.{key}.skills",
                case.get("skills") if isinstance(case, Mapping) else None,
            )
            for key, case in cases.items()
        },
    )


def _turns(label: str, where: str, skills: Any) -> Turns:
    if not isinstance(skills, Mapping):
        raise ModelConfigError(f"{label}: {where}: must map skill names to lists of turns")
    for skill, turns in skills.items():
        if not isinstance(turns, list):
            raise ModelConfigError(f"{label}: {where}.{skill}: must be a list of turns")
        for i, turn in enumerate(turns):
            kinds = [k for k in _TURN_KINDS if isinstance(turn, Mapping) and k in turn]
            if len(kinds) != 1:
                raise ModelConfigError(
                    f"{label}: {where}.{skill}[{i}]: a turn has exactly one of "
                    f"{', '.join(_TURN_KINDS)}"
                )
            at = f"{label}: {where}.{skill}[{i}]"
            unknown = sorted(set(turn) - _TURN_KEYS)
            if unknown:
                raise ModelConfigError(
                    f"{at}: unknown key(s) {', '.join(unknown)}; a turn has one of "
                    f"{', '.join(_TURN_KINDS)} and may say invalid: true and latency_s: SECONDS"
                )
            if not isinstance(turn.get("invalid", False), bool):
                raise ModelConfigError(f"{at}.invalid: must be true or false")
            latency = turn.get("latency_s", 0)
            if isinstance(latency, bool) or not isinstance(latency, int | float) or latency < 0:
                raise ModelConfigError(f"{at}.latency_s: must be a number of seconds, 0 or more")
            status = turn.get("status")
            if status is not None and (
                turn.get("error") != "unavailable"
                or isinstance(status, bool)
                or not isinstance(status, int)
                or not 500 <= status <= 599
            ):
                raise ModelConfigError(
                    f"{at}.status: only an 'error: unavailable' turn has one, an HTTP status "
                    f"500-599, not {status!r}"
                )
            received = turn.get("received")
            if received is not None and (
                turn.get("error") != "length" or not isinstance(received, str)
            ):
                raise ModelConfigError(
                    f"{at}.received: only an 'error: length' turn has one, the text the model "
                    f"wrote before it was cut off, not {received!r:.60}"
                )
    return {str(k): list(v) for k, v in skills.items()}


@dataclass(frozen=True, slots=True)
class Script:
    """A loaded script: default turns by skill, and per-case turns by case key."""

    label: str
    skills: Turns
    cases: dict[str, Turns] = field(default_factory=dict)
    recorded: dict[str, Any] = field(default_factory=dict)


class TurnModel(BaseChatModel):
    """A chat model whose turns say themselves which tools they call (a cassette, a skill's
    rules): binding tools changes nothing, and the runner checks the allowlist."""

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self


class ScriptedChatModel(TurnModel):
    """A chat model that replays a script; see the module docstring for the format."""

    label: str
    turns: Turns
    cases: dict[str, Turns] = Field(default_factory=dict)
    recorded: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_source(cls, source: str | Path | Mapping[str, Any]) -> ScriptedChatModel:
        script = load_script(source)
        return cls(
            label=script.label, turns=script.skills, cases=script.cases, recorded=script.recorded
        )

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def model_name(self) -> str:
        return f"scripted:{self.label}"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        meta = run_manager.metadata if run_manager else {}
        skill, index = meta.get(SKILL_KEY), meta.get(CALL_INDEX_KEY)
        if skill is None or index is None:
            raise ScriptedModelError(
                f"{self.model_name}: called without {SKILL_KEY}/{CALL_INDEX_KEY} metadata; "
                "the scripted provider only runs inside a SkillDeck"
            )
        case = meta.get(CASE_KEY)
        if case is not None and case in self.cases:
            turns, where = self.cases[case].get(skill, []), f"cases.{case}.skills.{skill}"
        else:
            turns, where = self.turns.get(skill, []), f"skills.{skill}"
        if index >= len(turns):
            raise ScriptedModelError(
                f"{self.model_name}: no turn {index} for skill {skill!r} (the script has "
                f"{len(turns)}); add turns under {where}"
            )
        turn = turns[index]
        recorded = turn.get("request")
        if recorded is not None and recorded != request_digest(messages, kwargs):
            raise StaleCassetteError(
                f"{self.model_name}: stale recording: case {case!r}, skill {skill!r}, call "
                f"{index} ({where}[{index}]) answered another request than this run sends (the "
                "prompt, the state it shows or the output schema changed); record the suite "
                "again with `skilldeck eval run ... --record`"
            )
        if "error" in turn:
            _fail_as_recorded(turn, where, index)
        message = turn_message(turn, skill, index, kwargs.get("response_format"))
        message.response_metadata = {
            "model_name": self.model_name,
            "scripted": True,
            TURN_KEY: f"{self.label}: {where}[{index}]",
            # A recorded model's rejected replies are real: they take the re-ask path.
            INVALID_KEY: bool(turn.get("invalid", False)) or bool(self.recorded),
            **({"finish_reason": "length"} if turn.get("error") == "length" else {}),
        }
        if run_manager is not None:
            # The id a streaming chat model gives its reply and every chunk of it: LangGraph's
            # ``messages`` stream then knows the reply as streamed already, and does not send
            # its whole text again after the chunks.
            message.id = f"{LC_ID_PREFIX}-{run_manager.run_id}"
        _emit_tokens(message, run_manager, float(turn.get("latency_s", 0)))
        return ChatResult(generations=[ChatGeneration(message=message)])


def _emit_tokens(
    message: AIMessage, run_manager: CallbackManagerForLLMRun | None, latency_s: float
) -> None:
    """Report the reply's text in pieces as a streaming model does, so a stream that asks for
    the text as it is generated (``stream_deltas``) gets deltas from a cassette too. A turn's
    ``latency_s`` is spread over its pieces, so a demo or a test can watch a run move."""
    text = message.content
    pieces = re.findall(r"\S+\s*|\s+", text) if isinstance(text, str) else []
    if not pieces or not _streamed(run_manager):
        if latency_s:  # sleep(0) would give the CPU away on a busy machine
            time.sleep(latency_s)
        return
    for piece in pieces:
        if latency_s:
            time.sleep(latency_s / len(pieces))
        if run_manager is not None:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message.id))
            run_manager.on_llm_new_token(piece, chunk=chunk)


def _streamed(run_manager: CallbackManagerForLLMRun | None) -> bool:
    """Whether anyone listens for the text as it is generated: a streaming handler (LangGraph's
    ``messages`` stream mode, which ``stream_deltas`` uses), as LangChain asks before it streams
    a real model. Reporting pieces to no listener made a quarter of a scripted run's time."""
    handlers = run_manager.handlers if run_manager is not None else []
    return any(isinstance(h, _StreamingCallbackHandler) for h in handlers)


def _fail_as_recorded(turn: Mapping[str, Any], where: str, index: int) -> None:
    """Raise what a failed call raises live: the OpenAI SDK's own errors, so the engine meets a
    scripted failure as it meets a real one (a timeout or a 5xx is the transport's to retry; a
    cut-off returns, see ``_generate``)."""
    kind = str(turn["error"])
    request = httpx2.Request("POST", f"scripted://{where}[{index}]")
    if kind == "timeout":
        raise openai.APITimeoutError(request=request)
    if kind == "unavailable":
        status = int(turn.get("status", 503))
        response = httpx2.Response(status, request=request)
        message = f"recorded endpoint failure ({where}[{index}])"
        raise openai.InternalServerError(message, response=response, body=None)
    if kind != "length":
        raise ScriptedModelError(
            f"{where}[{index}]: error must be one of {', '.join(ERROR_KINDS)}, not {kind!r}"
        )


def request_digest(messages: Sequence[BaseMessage], params: Mapping[str, Any]) -> str:
    """A digest of one chat request: its messages and its ``response_format`` (the schema a
    ``schema``-mode turn is held to). Tools bound natively are left out: providers rewrite
    them differently, and the schema mode that recordings use carries them in the format."""
    said = [
        [m.type, m.content, [[c["name"], c["args"]] for c in getattr(m, "tool_calls", None) or []]]
        for m in messages
    ]
    request = {"messages": said, "response_format": params.get("response_format")}
    text = json.dumps(request, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def turn_message(
    turn: Mapping[str, Any], skill: str, index: int, response_format: Any = None
) -> AIMessage:
    """The turn as a reply; with a ``response_format``, in the text form that format asks for."""
    if "text" in turn:
        return AIMessage(content=str(turn["text"]))
    if "error" in turn:  # a reply cut off at the token limit: what it wrote before the cut
        return AIMessage(content=str(turn.get("received", "")))
    if "output" in turn:
        output = turn["output"]
        if _asks_envelope(response_format):
            output = {"final": output}
        return AIMessage(content=json.dumps(output, ensure_ascii=False))
    calls = [
        {"name": call["name"], "args": call.get("args", {}), "id": f"call_{skill}_{index}_{i}"}
        for i, call in enumerate(turn["tool_calls"])
    ]
    if response_format is None:
        return AIMessage(content="", tool_calls=calls)
    written = [{"tool": c["name"], "arguments": c["args"]} for c in calls]
    return AIMessage(content=json.dumps(written[0] if len(written) == 1 else written))


def _asks_envelope(response_format: Any) -> bool:
    """Whether ``response_format`` holds a reply envelope's schema (the final output under
    ``final``, alone or as one branch of an ``anyOf``)."""
    if not isinstance(response_format, Mapping):
        return False
    schema = (response_format.get("json_schema") or {}).get("schema") or {}
    branches = [schema, *(schema.get("anyOf") or [])]
    return any("final" in (b.get("properties") or {}) for b in branches)
