"""The LLM judge: a chat model that scores a subject against a rubric.

The judge is any model spec the deck accepts (``openai:gpt-4o-mini``, ``compatible:NAME``,
``scripted:cassette.yaml``). Each call carries the scripted provider's metadata: skill
``judge``, call index = the grader's position among its task's judge graders (0, 1, ...), case
= the task id. So a cassette lists a task's judge verdicts in grader order, and a recorded
cassette replays them exactly like skill turns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from skilldeck.evals.cassette import EPOCH_KEY
from skilldeck.evals.graders.base import GradeResult
from skilldeck.models import build_model, resolve_model
from skilldeck.scripted import CALL_INDEX_KEY, CASE_KEY, SKILL_KEY
from skilldeck.settings import Settings
from skilldeck.skills.bundle import ExecutionConfig

__all__ = ["JUDGE_SKILL", "Judge"]

JUDGE_SKILL = "judge"
_SYSTEM = """You are a strict evaluator. Grade the SUBJECT against the RUBRIC, using only the
CONTEXT given. Reply with one JSON object and nothing else:
{"score": <number from 0 to 1>, "rationale": "<one or two sentences>"}

RUBRIC:
"""


@dataclass(frozen=True)
class Judge:
    """A judge model; :meth:`grade` returns a :class:`GradeResult` (never raises)."""

    model: BaseChatModel
    label: str
    callbacks: tuple[BaseCallbackHandler, ...] = ()

    @classmethod
    def from_spec(cls, spec: str, settings: Settings | None = None) -> Judge:
        """A judge from a model spec (``PROVIDER:MODEL`` or ``scripted:FILE``), temperature 0."""
        base = settings or Settings()
        settings = base.model_copy(update={"model": spec})
        resolved = resolve_model(ExecutionConfig(temperature=0.0), settings, base=Path.cwd())
        return cls(build_model(resolved, settings), resolved.label)

    def with_callbacks(self, callbacks: Sequence[BaseCallbackHandler]) -> Judge:
        return replace(self, callbacks=tuple(callbacks))

    def grade(
        self,
        *,
        rubric: str,
        subject: str,
        context: str,
        case: str,
        index: int,
        threshold: float,
        epoch: int = 0,
    ) -> GradeResult:
        """Score ``subject``; an unreachable judge or an unreadable reply is 'not scored'."""
        messages = [
            SystemMessage(_SYSTEM + rubric.strip()),
            HumanMessage(f"CONTEXT:\n{context}\n\nSUBJECT:\n{subject}"),
        ]
        config: Any = {
            "metadata": {
                SKILL_KEY: JUDGE_SKILL,
                CALL_INDEX_KEY: index,
                CASE_KEY: case,
                EPOCH_KEY: epoch,
            },
            "callbacks": list(self.callbacks),
        }
        try:
            model = self.model.bind(response_format={"type": "json_object"})
            reply = model.invoke(messages, config=config)
        except Exception as exc:
            return GradeResult.not_scored(f"judge {self.label} failed: {type(exc).__name__}: {exc}")
        text = reply.content if isinstance(reply.content, str) else str(reply.content)
        score, rationale = _verdict(text)
        if score is None:
            return GradeResult.not_scored(f"judge {self.label} reply is unreadable: {text[:200]!r}")
        return GradeResult.of(score, f"judge: {rationale}", threshold=threshold)


def _verdict(text: str) -> tuple[float | None, str]:
    text = text.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text.split("\n", 1)[-1].rsplit("```", 1)[0]
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None, ""
    if not isinstance(value, dict):
        return None, ""
    score = value.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        return None, ""
    return float(score), str(value.get("rationale") or "")
