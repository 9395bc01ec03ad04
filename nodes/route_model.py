"""Routing by description with a model: it sees only the skills' names and descriptions (tier 1
of the Agent Skills standard's progressive disclosure) and answers with strict JSON, a skill's
name or ``none`` and a reason. An answer that is not one of those is an error the router falls
back from (to the lexical ranker), never a guess.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from skilldeck.nodes.model_call import response_format
from skilldeck.scripted import CALL_INDEX_KEY, SKILL_KEY
from skilldeck.skills.bundle import SkillBundle

__all__ = ["ROUTER_KEY", "ModelRouter", "RouteModelError", "route_prompt", "route_schema"]

#: The name routing calls go by (a scripted cassette lists their turns under it).
ROUTER_KEY = "router"

_SYSTEM = """\
You route a user's request to the one skill that should handle it.
Answer with one JSON object: {{"skill": NAME, "reason": WHY}}. NAME is exactly one of the skill
names below, or "none" when no skill fits the request; WHY is one short sentence.

## Skills
{skills}"""


class RouteModelError(Exception):
    """The routing model's answer could not be used (the reason says why)."""


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
            RouteModelError: the call failed or its answer is not a routing answer.
        """
        schema = route_schema([b.name for b in bundles])
        meta = {SKILL_KEY: ROUTER_KEY, CALL_INDEX_KEY: index}
        try:
            fmt = response_format(self.mode(), "route", schema)
            bound: Any = self.model().bind(response_format=fmt, timeout=self.timeout_s)
            reply = bound.invoke(route_prompt(bundles, request), config={"metadata": meta})
            answer = json.loads(str(reply.content))
        except Exception as exc:
            raise RouteModelError(f"{type(exc).__name__}: {exc}") from None
        problems = [e.message for e in Draft202012Validator(schema).iter_errors(answer)]
        if problems:
            raise RouteModelError(f"the answer {answer!r} is not a routing answer: {problems[0]}")
        skill = str(answer["skill"])
        return (None if skill == "none" else skill), str(answer["reason"])
