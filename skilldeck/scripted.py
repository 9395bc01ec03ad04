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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from skilldeck.errors import ModelConfigError, ScriptedModelError

__all__ = ["CALL_INDEX_KEY", "SKILL_KEY", "ScriptedChatModel", "load_script"]

SKILL_KEY = "skilldeck_skill"
CALL_INDEX_KEY = "skilldeck_call"
_TURN_KINDS = ("output", "text", "tool_calls")


def load_script(
    source: str | Path | Mapping[str, Any],
) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    """Read and check a script; returns ``(label, turns by skill)``."""
    if isinstance(source, Mapping):
        label, raw = "inline", source
    else:
        path = Path(source)
        if not path.is_file():
            raise ModelConfigError(f"scripted model file {str(path)!r} does not exist")
        label = str(path)
        try:
            raw = yaml.safe_load(path.read_text("utf-8"))
        except yaml.YAMLError as exc:
            raise ModelConfigError(f"{label}: invalid YAML/JSON: {exc}") from None
    skills = raw.get("skills") if isinstance(raw, Mapping) else None
    if not isinstance(skills, Mapping):
        raise ModelConfigError(f"{label}: $.skills: must map skill names to lists of turns")
    for skill, turns in skills.items():
        if not isinstance(turns, list):
            raise ModelConfigError(f"{label}: $.skills.{skill}: must be a list of turns")
        for i, turn in enumerate(turns):
            kinds = [k for k in _TURN_KINDS if isinstance(turn, Mapping) and k in turn]
            if len(kinds) != 1:
                raise ModelConfigError(
                    f"{label}: $.skills.{skill}[{i}]: a turn has exactly one of "
                    f"{', '.join(_TURN_KINDS)}"
                )
    return label, {str(k): list(v) for k, v in skills.items()}


class ScriptedChatModel(BaseChatModel):
    """A chat model that replays a script; see the module docstring for the format."""

    label: str
    turns: dict[str, list[dict[str, Any]]]

    @classmethod
    def from_source(cls, source: str | Path | Mapping[str, Any]) -> ScriptedChatModel:
        label, turns = load_script(source)
        return cls(label=label, turns=turns)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def model_name(self) -> str:
        return f"scripted:{self.label}"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        # The script already says which tools it calls; the runner checks the allowlist.
        return self

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
        turns = self.turns.get(skill, [])
        if index >= len(turns):
            raise ScriptedModelError(
                f"{self.model_name}: no turn {index} for skill {skill!r} (the script has "
                f"{len(turns)}); add turns under skills.{skill}"
            )
        message = _message(turns[index], skill, index)
        message.response_metadata = {"model_name": self.model_name, "scripted": True}
        return ChatResult(generations=[ChatGeneration(message=message)])


def _message(turn: Mapping[str, Any], skill: str, index: int) -> AIMessage:
    if "output" in turn:
        return AIMessage(content=json.dumps(turn["output"], ensure_ascii=False))
    if "text" in turn:
        return AIMessage(content=str(turn["text"]))
    calls = [
        {"name": call["name"], "args": call.get("args", {}), "id": f"call_{skill}_{index}_{i}"}
        for i, call in enumerate(turn["tool_calls"])
    ]
    return AIMessage(content="", tool_calls=calls)
