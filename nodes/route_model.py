"""Routing by description with a model: it sees only the skills' names and descriptions (tier 1
of the Agent Skills standard's progressive disclosure) and answers with strict JSON, a skill's
name or ``none`` and a reason. An answer that is not one of those is an error the router falls
back from (to the lexical ranker), never a guess.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from skilldeck._internal.redact import PublicReason, log_error
from skilldeck.errors import SkillDeckError
from skilldeck.nodes.output_modes import find_output_mode
from skilldeck.scripted import CALL_INDEX_KEY, SKILL_KEY
from skilldeck.skills.bundle import SkillBundle

__all__ = ["ROUTER_KEY", "ModelRouter", "RouteModelError", "route_prompt", "route_schema"]

log = logging.getLogger("skilldeck")

#: The name routing calls go by (a scripted cassette lists their turns under it).
ROUTER_KEY = "router"

_SYSTEM = """\
You route a user's request to the one skill that should handle it.
Answer with one JSON object: {{"skill": NAME, "reason": WHY}}. NAME is exactly one of the skill
names below, or "none" when no skill fits the request; WHY is one short sentence.

## Skills
{skills}"""


class RouteModelError(Exception):
    """The routing model failed, or its answer could not be used: ``reason`` says why in
    words a client may read (the provider's own text is in the server log only)."""

    def __init__(self, reason: PublicReason) -> None:
        if not isinstance(reason, PublicReason):
            raise TypeError("RouteModelError takes a PublicReason (redact.safe_reason)")
        super().__init__(reason.text)
        self.reason = reason


def route_schema(names: Sequence[str]) -> dict[str, Any]:
    """The JSON Schema of a routing answer over ``names``."""
    return {
        "type": "object",
        "properties": {
            "skill": {"enum": [*names, "none"]},
            "reason": {"type": "string"},
        },
        "required": ["skill", "reason"],
        "additionalProperties": False,
    }


def route_prompt(bundles: Sequence[SkillBundle], request: str) -> list[Any]:
    """The messages of a routing call: the tier-1 list, then the request."""
    skills = "\n".join(f"- {b.name}: {' '.join(b.description.split())}" for b in bundles)
    return [SystemMessage(_SYSTEM.format(skills=skills)), HumanMessage(request)]


@dataclass(frozen=True)
class ModelRouter:
    """Asks ``model()`` (built on first use) to choose among skills; ``mode()`` is its output
    mode (``schema`` holds the answer to :func:`route_schema` by grammar)."""

    model: Callable[[], BaseChatModel]
    mode: Callable[[], str]
    label: str
    timeout_s: float

    def choose(
        self, request: str, bundles: Sequence[SkillBundle], index: int
    ) -> tuple[str | None, str]:
        """The chosen skill (``None``: no skill fits) and the model's reason.

        Raises:
            RouteModelError: the call failed or its answer is not a routing answer (the full
                error is logged, redacted).
        """
        schema = route_schema([b.name for b in bundles])
        meta = {SKILL_KEY: ROUTER_KEY, CALL_INDEX_KEY: index}
        try:
            mode = find_output_mode(self.mode())
            bound: Any = mode.bind_step(self.model(), "route", schema).bind(timeout=self.timeout_s)
            reply = bound.invoke(route_prompt(bundles, request), config={"metadata": meta})
            answer = json.loads(str(reply.content))
            problems = [e.message for e in Draft202012Validator(schema).iter_errors(answer)]
            if problems:
                raise SkillDeckError(f"its answer is not a routing answer: {problems[0]}")
        except Exception as exc:
            what = f"the routing model {self.label} failed; the lexical ranker routes instead"
            raise RouteModelError(log_error(log, what, exc, level=logging.WARNING)) from None
        skill = str(answer["skill"])
        return (None if skill == "none" else skill), str(answer["reason"])
