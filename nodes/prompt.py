"""Context building: ``state + SKILL.md + references`` into the messages a skill's model sees.

Progressive disclosure (Agent Skills): a skill's own files are listed by path and size, and the
model reads the one it needs with ``skill__read_file``; ``"references": "inline"`` puts
``references/`` in the prompt instead.

The system message comes first and depends only on the skill and the output mode, so it is
byte-identical across turns, threads and users and an endpoint's prefix cache holds it. The
contract's schema is sent once: as the grammar in ``schema`` mode, as ``submit_output``'s
parameters in ``tool`` mode, and (compact) in the prompt only in ``json`` mode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from skilldeck.nodes.output_modes import SUBMIT_TOOL, find_output_mode
from skilldeck.skills.bundle import MATTER_WRITE_TOOL, READ_FILE_TOOL, SkillBundle
from skilldeck.skills.contract import REVIEW_TYPES
from skilldeck.skills.examples import Example

__all__ = [
    "SUBMIT_TOOL",
    "ToolInfo",
    "render_feedback",
    "render_prompt",
    "render_system",
    "render_user",
    "state_view",
]

#: What the prompt says of a tool: its name, description and arguments schema.
ToolInfo = tuple[str, str, Mapping[str, Any]]

_CONTRACT = """\
## Output
Your final answer is one JSON object with exactly four keys. {how}
- "response": the reply for the user, in natural language.
- "profile": profile increments; only these fields are allowed: {provides}.
- "data": business data increments.{data}
- "control": {{"action": "continue" | "retry" | "ask_user" | "finish"}}. With "ask_user" add
  "review_type" ({review_types}) and "questions", each {{"question", "field_key" (a dot path
  such as profile.plaintiff.name), "input_type" (text | select | multi_select | boolean |
  file_ids), "required", and "options" [{{"label", "value"}}] for select types}}.
Output that does not follow the contract is rejected; it is never repaired."""


def state_view(state: Mapping[str, Any], data_keys: Sequence[str]) -> dict[str, Any]:
    """The part of the state a skill may read: context, input, matter, profile and its own
    data fields (``data_keys``)."""
    view = {k: state.get(k) for k in ("context", "input", "matter_id", "profile")}
    view["data"] = {k: state[k] for k in data_keys if state.get(k) is not None}
    return {k: v for k, v in view.items() if v not in (None, {}, [])}


def _arguments(schema: Mapping[str, Any]) -> str:
    """A tool's arguments in one line: ``name (type): description``, required ones marked."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parts = []
    for name, prop in props.items():
        kind = prop.get("type") or ("object" if "$ref" in prop else "any")
        mark = "" if name in required else ", optional"
        about = f": {prop['description']}" if prop.get("description") else ""
        parts.append(f"{name} ({kind}{mark}){about}")
    return "; ".join(parts) or "none"


#: Files listed in a prompt; a skill with more names the rest by count.
MAX_LISTED_FILES = 40


def _files_section(files: Sequence[tuple[str, int]]) -> str:
    lines = [
        f"## Files\nThis skill's own files: read one with {READ_FILE_TOOL} when the "
        "instructions call for it (paths are relative to the skill's folder)."
    ]
    lines += [f"- {path} ({_size(size)})" for path, size in files[:MAX_LISTED_FILES]]
    if len(files) > MAX_LISTED_FILES:
        lines.append(f"- … and {len(files) - MAX_LISTED_FILES} more")
    return "\n".join(lines)


def _size(size: int) -> str:
    return f"{size} bytes" if size < 1000 else f"{size / 1000:.1f} kB"


def _tools_section(tools: Sequence[ToolInfo]) -> str:
    lines = ["## Tools"]
    lines += [f"- {name}: {about} Arguments: {_arguments(args)}." for name, about, args in tools]
    return "\n".join(lines)


def render_system(
    bundle: SkillBundle, *, output_mode: str, tools: Sequence[ToolInfo] = ()
) -> SystemMessage:
    """The system message of a skill in ``output_mode`` (``tools`` are described in the text
    where the mode has no native tools): the same for every turn, so runners render it once."""
    mode = find_output_mode(output_mode)
    parts = [f"# Skill: {bundle.name}\n{bundle.description}", bundle.instructions]
    if bundle.references:
        refs = "\n\n".join(f"### {r.name}\n{r.text.strip()}" for r in bundle.references)
        parts.append(f"## References\n{refs}")
    if bundle.files:
        parts.append(_files_section(bundle.files))
    if tools and not mode.native_tools:
        parts.append(_tools_section(tools))
    if bundle.matter_fields:
        parts.append(
            f"## Matter\nThe run's matter has a record. {MATTER_WRITE_TOOL} may write these "
            f"fields of it, and anything below them: {', '.join(bundle.matter_fields)}. Pass "
            'them as an object under the record, e.g. {"fields": {"status": ...}} for '
            "matter.status."
        )
    data = ""
    if mode.schema_in_prompt:
        data = f" JSON Schema of the whole output: {_compact(bundle.output_schema)}"
    parts.append(
        _CONTRACT.format(
            how=mode.how,
            provides=", ".join(bundle.provides) or "none",
            data=data,
            review_types=" | ".join(REVIEW_TYPES),
        )
    )
    return SystemMessage("\n\n".join(parts))


def render_user(
    state: Mapping[str, Any],
    data_keys: Sequence[str],
    prepared: Mapping[str, Any] | None = None,
    *,
    examples: Sequence[Example] = (),
    output_mode: str = "schema",
) -> HumanMessage:
    """The user message that opens a turn: the worked ``examples`` (in the reply format of
    ``output_mode``), the state view and any prepared context."""
    user = []
    if examples:
        user.append("## Examples\nInputs like this one, and a good reply to each:")
        user += [_example(e, output_mode) for e in examples]
    user += ["## State", _dump(state_view(state, data_keys))]
    if prepared:
        user += ["## Prepared context", _dump(prepared)]
    return HumanMessage("\n".join(user))


def _example(example: Example, output_mode: str) -> str:
    """One worked example, its reply as the mode has the model write it: a small model copies
    an example's first characters, so ``schema`` mode shows the envelope its grammar holds,
    ``{"final": ...}`` included. In ``tool`` mode a call is described, not written as JSON,
    because a model that sees calls written as content starts writing its own calls that way."""
    lead, value = find_output_mode(output_mode).example_reply(example.tool, example.reply)
    return f"- input {_compact(example.input)}\n  reply: {lead}{_compact(value)}"


def render_prompt(
    bundle: SkillBundle,
    state: Mapping[str, Any],
    data_keys: Sequence[str],
    *,
    output_mode: str,
    tools: Sequence[ToolInfo] = (),
    prepared: Mapping[str, Any] | None = None,
) -> list[BaseMessage]:
    """The system and user messages that open a skill's turn."""
    return [
        render_system(bundle, output_mode=output_mode, tools=tools),
        render_user(state, data_keys, prepared),
    ]


def render_feedback(
    errors: list[dict[str, str]],
    retry_prompt: str | None,
    *,
    example: Any = None,
    repeated: bool = False,
    undone: Sequence[str] = (),
) -> HumanMessage:
    """The message that re-asks the model after a rejected output: the errors, a minimal valid
    ``example`` of the output to copy the shape of, and, when the reply repeated the one
    rejected before (``repeated``), a plain request for a different one. ``undone``: the files
    the rejected attempt changed, restored to what they were."""
    lines = ["Your output was rejected:"]
    lines += [f"- {e['path']}: {e['message']}" for e in errors]
    if retry_prompt:
        lines.append(retry_prompt)
    if repeated:
        lines.append(
            "Your reply was the same as the one rejected before: change what the errors "
            "point at; do not send it again."
        )
    if undone:
        lines.append(
            f"The files your calls changed were restored ({', '.join(undone)}): call the "
            "tools again if you still need those changes."
        )
    if example is not None:
        lines.append(
            f"A minimal output of the right shape (fill in real values): {_compact(example)}"
        )
    lines.append("Reply again with one JSON object that follows the output contract.")
    return HumanMessage("\n".join(lines))


def _dump(value: Any) -> str:
    # Compact separators keep json on its C encoder: this runs on every turn.
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
