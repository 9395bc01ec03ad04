"""Worked examples a skill ships in ``assets/examples.jsonl``, checked when the bundle loads.

Each line is one example: a run's ``input`` and the ``reply`` a good model gives it, either a
tool call (``{"tool": NAME, "arguments": {...}}``) or the final output (``{"final": {...}}``).
A turn shows the model the few examples whose input is nearest to its own (see
:mod:`skilldeck.nodes.examples`): a small model copies the shape and the choices of a worked
example far better than it follows a rule, and the examples it sees match the record at hand
instead of one fixed case that pulls every answer towards itself.

The engine reads the file itself (it is never offered to the model as a file), and checks each
line here: the input has the field the examples are matched on, the tool is one of the skill's,
and a final output passes every rule a run holds the skill's outputs to
(:class:`~skilldeck.skills.contract.OutputContract`). A tool call's arguments are checked against
the tool's schema when the deck has its tools (:func:`skilldeck.graph.builder.deck_problems`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skilldeck._internal.documents import DocumentError, parse_json
from skilldeck._internal.paths import get_path
from skilldeck.skills.contract import OutputContract, OutputLimits
from skilldeck.skills.meta import ExampleSettings, SkillMeta
from skilldeck.skills.problems import Problems

__all__ = ["EXAMPLES_FILE", "Example", "Examples", "example_text", "parse_examples"]

#: Where a bundle keeps its examples, relative to the bundle folder.
EXAMPLES_FILE = "assets/examples.jsonl"


@dataclass(frozen=True, slots=True)
class Example:
    """One worked example: a run's ``input`` and the model's reply to it."""

    input: Mapping[str, Any]
    reply: Mapping[str, Any]
    #: The text the example is matched on (its input at the skill's ``match`` path).
    text: str
    #: The line of ``assets/examples.jsonl`` it came from (1-based).
    line: int

    @property
    def tool(self) -> str | None:
        """The tool the reply calls, or ``None`` for a final output."""
        tool = self.reply.get("tool")
        return tool if isinstance(tool, str) else None


@dataclass(frozen=True, slots=True)
class Examples:
    """A skill's examples and how a turn picks them."""

    items: tuple[Example, ...]
    #: How many a turn shows: the nearest to the run's input (``examples.shown``).
    shown: int
    #: The dot path under the state whose text the examples are matched on (``input`` or a
    #: field of it, e.g. ``input.content``; ``examples.match``).
    match: str


def example_text(value: Any) -> str:
    """The text of a matched value: a string as it is; an object's or a list's strings (at any
    depth) joined by newlines; anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "\n".join(filter(None, (example_text(v) for v in value.values())))
    if isinstance(value, list):
        return "\n".join(filter(None, (example_text(v) for v in value)))
    return "" if value is None else str(value)


def parse_examples(
    text: str,
    file: Path,
    problems: Problems,
    *,
    meta: SkillMeta,
    contract: OutputContract | None,
) -> Examples | None:
    """The examples in ``text`` (the file's contents), or ``None`` with a problem for each bad
    line. ``meta``: the skill's metadata (its ``tools``, ``tool_choice`` and ``examples``
    settings); ``contract``: the rules a run holds the skill's final outputs to (``None`` skips
    them)."""
    settings = meta.examples or ExampleSettings()
    match, tools, choice = settings.match, set(meta.tools), meta.execution_config.tool_choice
    items: list[Example] = []
    before = len(problems.errors)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"$[line {number}]"
        try:
            value = parse_json(line)
        except DocumentError as exc:
            problems.error(file, where, exc.reason)
            continue
        reason = _problem(value, tools, contract, match) or _against_choice(value, choice)
        if reason:
            problems.error(file, where, reason)
            continue
        shown = example_text(get_path(value, match))
        items.append(Example(value["input"], value["reply"], shown, number))
    if len(problems.errors) > before:
        return None
    if not items:
        problems.error(file, "$", "has no examples: add one JSON object per line, or delete it")
        return None
    return Examples(tuple(items), settings.shown, match)


def _against_choice(value: Mapping[str, Any], choice: str) -> str | None:
    """Why an example's reply is one ``tool_choice`` never lets a first reply be, or ``None``:
    an example teaches the model a move its grammar would forbid."""
    tool = value["reply"].get("tool")
    if choice == "required" and tool is None:
        return (
            "reply is a final output, but tool_choice 'required' makes every attempt call a "
            "tool first"
        )
    if choice not in ("auto", "required") and tool != choice:
        return f"reply must call {choice!r}: tool_choice makes every attempt start with it"
    return None


def _problem(
    value: Any,
    tools: set[str],
    contract: OutputContract | None,
    match: str,
) -> str | None:
    """What is wrong with one example line, or ``None``."""
    if not isinstance(value, dict) or set(value) != {"input", "reply"}:
        return 'an example is one object with exactly "input" and "reply"'
    if not isinstance(value["input"], dict):
        return '"input" must be an object: the run input the example answers'
    if not example_text(get_path(value, match)).strip():
        return f"the input has no text at {match!r}, which the examples are matched on"
    reply = value["reply"]
    if isinstance(reply, dict) and set(reply) == {"tool", "arguments"}:
        if reply["tool"] not in tools:
            listed = ", ".join(sorted(tools)) or "none"
            return f"reply calls {reply['tool']!r}, not one of the skill's tools ({listed})"
        if not isinstance(reply["arguments"], dict):
            return '"arguments" must be an object: the tool call\'s arguments'
        return None
    if isinstance(reply, dict) and set(reply) == {"final"}:
        if contract is None:
            return None
        # Examples load before any deck's settings: the default limits (a host may set others).
        _, errors = contract.problems(reply["final"], OutputLimits())
        if errors:
            first = errors[0]
            return f"the final output breaks the contract at {first['path']}: {first['message']}"
        return None
    return 'reply must be {"tool": NAME, "arguments": {...}} or {"final": OUTPUT}'
