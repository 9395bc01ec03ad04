"""Which of a skill's tools its model may call at this point of an attempt.

``execution_config.tool_choice`` and ``tool_limits`` narrow the skill's tools as the attempt
goes: a named ``tool_choice`` offers that tool alone until one of its calls has worked,
``required`` offers no output until any call has, and a tool whose calls have worked its
limit's number of times is not offered again. A limit may name a group (``tool_groups``): the
calls of all its tools count together, so a skill can allow one write of any kind. Failed calls
count for no limit: they changed nothing, and the model may correct one. ``tool_after`` offers
a tool (or a group's tools) only once a call of another has worked: an edit after a read.

The skill node offers the model these tools (``schema`` mode's grammar and ``tool`` mode's
binding hold them); the tools node refuses a call outside them, which a model in ``json`` mode,
or one that ignores its binding, can still make.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from skilldeck.skills.bundle import ExecutionConfig, SkillBundle

__all__ = ["Offer", "offered"]


@dataclass(frozen=True, slots=True)
class Offer:
    """The tools the model may call now, and whether it may only call them."""

    tools: tuple[str, ...]
    calls_only: bool
    #: Why each of the skill's other tools is not offered, for a call that names one anyway.
    withheld: Mapping[str, str]


def offered(bundle: SkillBundle, worked: Mapping[str, int], standing: Iterable[str] = ()) -> Offer:
    """What ``bundle``'s model may call once the attempt's calls of each tool have worked
    ``worked[tool]`` times; ``standing``: the tools whose calls of earlier attempts stand,
    which meet a ``tool_choice`` as well (a re-ask need not repeat them), but use no limit of
    this one."""
    execution = bundle.execution
    first = execution.first_tool
    done = {name for name, count in worked.items() if count} | set(standing)
    if first is not None and first not in done:
        why = f"call {first} first: this skill starts with it (tool_choice)"
        return Offer((first,), True, {t: why for t in bundle.tools if t != first})
    withheld = _at_limit(execution, worked)
    for name, before in execution.tool_after.items():
        if set(before) & done:
            continue
        for member in execution.members(name):
            withheld.setdefault(
                member,
                f"{member} is offered only after a call of {', '.join(before)} has worked in "
                f"this attempt (tool_after); call {before[0]} first",
            )
    tools = tuple(t for t in bundle.tools if t not in withheld)
    return Offer(tools, execution.tool_choice == "required" and not done, withheld)


def _at_limit(execution: ExecutionConfig, worked: Mapping[str, int]) -> dict[str, str]:
    """Why each tool at its own or its group's limit (``tool_limits``) is not offered."""
    withheld: dict[str, str] = {}
    for name, limit in execution.tool_limits.items():
        members = execution.members(name)
        if sum(worked.get(m, 0) for m in members) < limit:
            continue
        counted = name if members == (name,) else f"{name} ({', '.join(members)})"
        for member in members:
            withheld.setdefault(
                member,
                f"{member} is not offered: calls of {counted} have worked {limit} time(s) in "
                "this attempt, the limit (tool_limits); use the results above or call another "
                "tool",
            )
    return withheld
