"""Record model turns to a cassette; replay it with the scripted provider.

A cassette is a scripted-model file whose turns sit under ``cases``, keyed by task id, then
skill, in call-index order (the judge's calls are the skill ``judge``)::

    skills: {}
    cases:
      card_event_meeting_with_time:
        skills:
          card-agent: [{tool_calls: [...]}, {output: {...}}]
          judge: [{output: {score: 1, rationale: ...}}]

:class:`CassetteRecorder` is a LangChain callback handler: every chat-model call inside a
SkillDeck carries ``skilldeck_case``/``skilldeck_skill``/``skilldeck_call`` metadata, which is
the key. Replay is ``--model scripted:CASSETTE`` (and ``--judge-model scripted:CASSETTE``):
no network, the same turns, the same scores. Only epoch 0 of each task is recorded, so a
replay of several epochs repeats that one trajectory.

Each turn keeps the digest of the request it answered (``request``) and the cassette a
``recorded`` header (models, output modes, date, each task's verdict): a replay whose requests
differ from the recorded ones fails as stale instead of replaying answers to questions no
longer asked. A reply to a request with a ``response_format`` is kept as its raw text, as the
model wrote it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

import openai
import yaml
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from skilldeck.nodes.model_call import cut_off_text
from skilldeck.nodes.prompt import SUBMIT_TOOL
from skilldeck.scripted import CALL_INDEX_KEY, CASE_KEY, SKILL_KEY, request_digest

__all__ = ["EPOCH_KEY", "CassetteRecorder", "to_turn"]

EPOCH_KEY = "skilldeck_epoch"
Key = tuple[str, str, int]
#: What a call's start says of it: its digest, and whether it asked for a response format.
Asked = tuple[str, bool]


def to_turn(message: AIMessage) -> dict[str, Any]:
    """A model message as a scripted turn (``output``, ``tool_calls`` or ``text``)."""
    calls = message.tool_calls
    if len(calls) == 1 and calls[0]["name"] == SUBMIT_TOOL:
        return {"output": dict(calls[0]["args"])}
    if calls:
        return {"tool_calls": [{"name": c["name"], "args": dict(c["args"])} for c in calls]}
    text = message.content if isinstance(message.content, str) else str(message.content)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"text": text}
    return {"output": value} if isinstance(value, dict) else {"text": text}


class CassetteRecorder(BaseCallbackHandler):
    """Collects every SkillDeck model turn; :meth:`write` saves them as a cassette."""

    run_inline = True  # record in the calling thread, in call order

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._pending: dict[UUID, tuple[Key, Asked]] = {}
        self._turns: dict[Key, dict[str, Any]] = {}

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        meta = metadata or {}
        case, skill, index = meta.get(CASE_KEY), meta.get(SKILL_KEY), meta.get(CALL_INDEX_KEY)
        if case is None or skill is None or not isinstance(index, int):
            return
        if meta.get(EPOCH_KEY, 0) != 0 or not messages:
            return
        params = kwargs.get("invocation_params") or {}
        asked = (request_digest(messages[0], params), params.get("response_format") is not None)
        with self._lock:
            self._pending[run_id] = ((str(case), str(skill), index), asked)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            pending = self._pending.pop(run_id, None)
        if pending is None or not response.generations or not response.generations[0]:
            return
        (key, (digest, formatted)) = pending
        generation = response.generations[0][0]
        if not isinstance(generation, ChatGeneration) or not isinstance(
            generation.message, AIMessage
        ):
            return
        message = generation.message
        text = message.content if isinstance(message.content, str) else ""
        if message.response_metadata.get("finish_reason") == "length" and not message.tool_calls:
            turn: dict[str, Any] = {"error": "length", **({"received": text} if text else {})}
        elif formatted and not message.tool_calls and isinstance(message.content, str):
            turn = {"text": message.content}
        else:
            turn = to_turn(message)
        with self._lock:
            self._turns.setdefault(key, {**turn, "request": digest})

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A reply cut off at the token limit is a turn too (``error: length``): replayed, it
        fails the same way, so the run re-asks as it did live and the later requests still
        match. A call that got no reply (the transport's to retry) is not the model's turn:
        the call that followed it is."""
        with self._lock:
            pending = self._pending.pop(run_id, None)
        if pending is None or not isinstance(error, openai.LengthFinishReasonError):
            return
        key, (digest, _) = pending
        turn: dict[str, Any] = {"error": "length"}
        received = cut_off_text(error)
        if received:
            turn["received"] = received
        with self._lock:
            self._turns.setdefault(key, {**turn, "request": digest})

    def cassette(self, recorded: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The recorded turns in the scripted format, in call-index order, under the
        ``recorded`` header (model, output mode, date) when given."""
        cases: dict[str, dict[str, list[dict[str, Any]]]] = {}
        with self._lock:
            turns: Mapping[Key, dict[str, Any]] = dict(self._turns)
        for case, skill, index in sorted(turns):
            listed = cases.setdefault(case, {}).setdefault(skill, [])
            while len(listed) < index:  # a call index no trial reached: replays never ask
                listed.append({"text": f"(no call {len(listed)} was recorded)"})
            listed.append(turns[(case, skill, index)])
        header = {"recorded": dict(recorded)} if recorded else {}
        by_case = {c: {"skills": s} for c, s in sorted(cases.items())}
        return {**header, "skills": {}, "cases": by_case}

    def write(self, path: Path, recorded: Mapping[str, Any] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        cassette = self.cassette(recorded)
        text = yaml.safe_dump(cassette, sort_keys=False, allow_unicode=True, width=100)
        path.write_text(text, "utf-8")
