"""Context building: ``state + SKILL.md + references`` into the messages a skill's model sees."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from skilldeck.skills.bundle import SkillBundle
from skilldeck.skills.contract import REVIEW_TYPES

__all__ = [
    "SUBMIT_TOOL",
    "render_feedback",
    "render_prompt",
    "render_system",
    "render_user",
    "state_view",
]

SUBMIT_TOOL = "submit_output"

_CONTRACT = """\
## Output contract
Finish with exactly one JSON object with exactly four keys: "response", "profile", "data" and
"control". {how}
- "response": the reply for the user, in natural language.
- "profile": profile increments; only these fields are allowed: {provides}.
- "data": business data increments; they must follow the schema below.
- "control": {{"action": "continue" | "retry" | "ask_user" | "finish", ...}}. With "ask_user"
  add "review_type" ({review_types}) and "questions", each {{"question", "field_key" (a dot path
  such as profile.plaintiff.name), "input_type" (text | select | multi_select | boolean |
  file_ids), "required", and "options" [{{"label", "value"}}] for select types}}.
Output that does not follow the contract is rejected; it is never repaired.

JSON Schema of the whole output:
{schema}"""

_HOW = {
    "json": "Reply with the JSON object only, no prose and no code fence.",
    "tool": f'Return it by calling the "{SUBMIT_TOOL}" tool with the object as its arguments, '
    "or reply with the JSON object only.",
}


def state_view(state: Mapping[str, Any], data_keys: tuple[str, ...]) -> dict[str, Any]:
    """The part of the state a skill may read: context, input, identity, profile and data."""
    view = {k: state.get(k) for k in ("context", "input", "matter_id", "profile")}
    view["data"] = {k: state[k] for k in data_keys if state.get(k) is not None}
    return {k: v for k, v in view.items() if v not in (None, {}, [])}


def render_system(bundle: SkillBundle, *, output_mode: str) -> SystemMessage:
    """The system message of a skill: the same for every turn, so runners render it once."""
    parts = [f"# Skill: {bundle.name}\n{bundle.description}", bundle.instructions]
    if bundle.references:
        refs = "\n\n".join(f"### {r.name}\n{r.text.strip()}" for r in bundle.references)
        parts.append(f"## References\n{refs}")
    parts.append(
        _CONTRACT.format(
            how=_HOW[output_mode],
            provides=", ".join(bundle.provides) or "none",
            review_types=" | ".join(REVIEW_TYPES),
            schema=json.dumps(bundle.output_schema, ensure_ascii=False, indent=1),
        )
    )
    return SystemMessage("\n\n".join(parts))


def render_user(
    state: Mapping[str, Any],
    data_keys: tuple[str, ...],
    prepared: Mapping[str, Any] | None = None,
) -> HumanMessage:
    """The user message that opens a turn: the state view and any prepared context."""
    user = ["## State", _dump(state_view(state, data_keys))]
    if prepared:
        user += ["## Prepared context", _dump(prepared)]
    return HumanMessage("\n".join(user))


def render_prompt(
    bundle: SkillBundle,
    state: Mapping[str, Any],
    data_keys: tuple[str, ...],
    *,
    output_mode: str,
    prepared: Mapping[str, Any] | None = None,
) -> list[BaseMessage]:
    """The system and user messages that open a skill's turn."""
    return [render_system(bundle, output_mode=output_mode), render_user(state, data_keys, prepared)]


def render_feedback(errors: list[dict[str, str]], retry_prompt: str | None) -> HumanMessage:
    """The message that re-asks the model after a rejected output."""
    lines = ["Your output was rejected:"]
    lines += [f"- {e['path']}: {e['message']}" for e in errors]
    if retry_prompt:
        lines.append(retry_prompt)
    lines.append("Reply again with one JSON object that follows the output contract.")
    return HumanMessage("\n".join(lines))


def _dump(value: Any) -> str:
    # Compact separators keep json on its C encoder: this runs on every turn.
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
