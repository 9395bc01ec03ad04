"""The loaded, validated form of a skill bundle."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skilldeck.errors import UntrustedScriptsError
from skilldeck.skills.conditions import Condition
from skilldeck.skills.contract import OutputContract, Validator, format_errors
from skilldeck.skills.examples import Examples
from skilldeck.skills.meta import MATTER_WRITE_TOOL, ExecutionConfig, SkillMeta
from skilldeck.skills.pins import AnyPin

__all__ = [
    "ENGINE_FILES",
    "INPUT_SCHEMA_FILE",
    "MATTER_WRITE_TOOL",
    "READ_FILE_TOOL",
    "SCRIPTS",
    "ExecutionConfig",
    "Reference",
    "SkillBundle",
]

#: The built-in tool a skill reads its own files with (tier 3 of progressive disclosure): the
#: deck provides it, and a skill with files to read gets it without listing it.
READ_FILE_TOOL = "skill__read_file"
#: The bundle's Python that skilldeck imports, by name: it runs in the deck's process, so only
#: in a bundle the deck trusts (see :mod:`skilldeck.skills.trust`).
SCRIPTS = {
    "preprocess": "scripts/preprocess.py",
    "validate": "scripts/validate.py",
    "eval_setup": "scripts/eval_setup.py",
    "rules": "scripts/rules.py",
    "migrate": "scripts/migrate.py",
}
#: Files the engine reads itself; they are never offered to the model.
#: A bundle's JSON Schema of its run input (optional: without it, a skill takes any object).
INPUT_SCHEMA_FILE = "assets/input_schema.json"
ENGINE_FILES = frozenset(
    {"assets/output_schema.json", INPUT_SCHEMA_FILE, "assets/examples.jsonl", *SCRIPTS.values()}
)

PreprocessFn = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]
#: ``validate(output, state, turn)``; ``turn["tool_calls"]``: the turn's successful calls
#: (``name``, ``args``) whose results stand.
ValidateFn = Callable[
    [Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], Mapping[str, Any] | str | None
]


@dataclass(frozen=True, slots=True)
class Reference:
    """One file of ``references/`` inlined in the system prompt (``"references": "inline"``),
    possibly cut to fit the token budget."""

    name: str
    text: str
    tokens: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class SkillBundle:
    """A skill bundle after load-time validation. Build it with :func:`load_skills`."""

    #: ``skill.meta.json``, parsed (for a plain Agent Skill, what its front matter says).
    meta: SkillMeta
    path: Path
    instructions: str
    #: The tools the model may call: ``meta.tools``, and :data:`READ_FILE_TOOL` when the
    #: skill has files to read (the deck adds the ``allowed-tools`` it has).
    tools: tuple[str, ...]
    output_schema: Mapping[str, Any]
    data_schema: Mapping[str, Any]
    references: tuple[Reference, ...]
    order: int
    #: Files of ``references/``, ``scripts/`` and ``assets/`` the model reads on demand with
    #: :data:`READ_FILE_TOOL` (paths relative to the bundle, with their sizes in bytes).
    files: tuple[tuple[str, int], ...] = ()
    #: ``allowed-tools`` of an Agent Skill's front matter: the deck adds those it has to
    #: ``tools`` and warns of the others.
    allowed_tools: tuple[str, ...] = ()
    preprocess: PreprocessFn | None = field(default=None, compare=False, repr=False)
    validate: ValidateFn | None = field(default=None, compare=False, repr=False)
    validator: Validator = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    #: A digest of the files the loader read: a thread records it, to tell an edited skill.
    fingerprint: str = ""
    #: Output fields pinned to state values, to the attempt's calls or to what a call
    #: returned (``x-state``, ``x-calls``, ``x-result``; see :mod:`skilldeck.skills.pins`).
    pins: tuple[AnyPin, ...] = ()
    #: Worked examples (``assets/examples.jsonl``); a turn shows those nearest its input.
    examples: Examples | None = None
    #: JSON Schema of the run input (``assets/input_schema.json``); ``None``: any object.
    input_schema: Mapping[str, Any] | None = None
    input_validator: Validator | None = field(default=None, compare=False, repr=False)
    #: Whether the deck trusts the bundle's code: only then were its scripts imported (and
    #: may ``eval_setup.py`` and ``rules.py`` be).
    trusted: bool = False
    #: The names of :data:`SCRIPTS` the bundle has, imported or not.
    scripts: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def description(self) -> str:
        return self.meta.description

    @property
    def contexts(self) -> tuple[str, ...]:
        return self.meta.triggers.contexts

    @property
    def state_conditions(self) -> tuple[Condition, ...]:
        return self.meta.triggers.state_conditions

    @property
    def requires_all(self) -> tuple[Condition, ...]:
        return self.meta.requires.all

    @property
    def requires_any(self) -> tuple[Condition, ...]:
        return self.meta.requires.any

    @property
    def provides(self) -> tuple[str, ...]:
        return self.meta.outputs.provides

    @property
    def matter_fields(self) -> tuple[str, ...]:
        """The fields of the run's matter record the skill may write with
        :data:`MATTER_WRITE_TOOL` (``outputs.matter``: dot paths under ``matter``)."""
        return self.meta.outputs.matter

    @property
    def priority(self) -> int:
        return self.meta.priority

    @property
    def execution(self) -> ExecutionConfig:
        """``execution_config``: how the skill runs."""
        return self.meta.execution_config

    def untrusted_scripts(self, *names: str) -> tuple[str, ...]:
        """The files of the scripts ``names`` (default: all) that the bundle has and may not
        run, as it is not trusted; empty when it may run them all."""
        if self.trusted:
            return ()
        return tuple(SCRIPTS[n] for n in self.scripts if not names or n in names)

    def require_trust(self, *names: str) -> None:
        """Refuse a use of the scripts ``names`` (default: all) the bundle may not run.

        Raises:
            UntrustedScriptsError: the bundle has some of them and is not trusted.
        """
        blocked = self.untrusted_scripts(*names)
        if blocked:
            raise UntrustedScriptsError(self.name, str(self.path), blocked)

    @property
    def data_keys(self) -> tuple[str, ...]:
        """Top-level ``data`` fields; each becomes a state key."""
        return tuple((self.data_schema.get("properties") or {}).keys())

    def input_errors(self, input: Any) -> list[dict[str, str]]:
        """What in a run's ``input`` does not fit the skill's input schema, as ``{"path",
        "message"}`` (JSON paths into the input); empty when it fits or the skill has none."""
        if self.input_validator is None:
            return []
        return format_errors(self.input_validator, input, plain=True)

    @property
    def contract(self) -> OutputContract:
        """The rules a final output of this skill is held to."""
        return OutputContract(self.validator, self.output_schema, self.provides)

    @property
    def cases_path(self) -> Path | None:
        path = self.path / "cases.yaml"
        return path if path.is_file() else None

    @property
    def eval_setup_path(self) -> Path | None:
        """``scripts/eval_setup.py``: the hook that prepares each eval trial of this skill
        (see :mod:`skilldeck.evals.setup`). Only the eval harness imports it, so a broken
        hook never stops the skill from loading."""
        path = self.path / SCRIPTS["eval_setup"]
        return path if path.is_file() else None

    @property
    def rank(self) -> tuple[int, int]:
        """The router's preference, as a sort key: higher ``priority`` first, then load order."""
        return (-self.priority, self.order)

    def is_candidate(self, state: Mapping[str, Any], *, any_context: bool = False) -> bool:
        """Whether the router may pick this skill for ``state`` (seed 004 triggers/requires);
        ``any_context``: whatever the context (routing by description in context ``auto``)."""
        # Loops, not all()/any() over generators: the router asks this of every skill at
        # every step.
        meta = self.meta
        if not any_context and state.get("context") not in meta.triggers.contexts:
            return False
        for condition in meta.triggers.state_conditions:
            if not condition.evaluate(state):
                return False
        return self.requires_hold(state)

    def why_not(self, state: Mapping[str, Any], *, any_context: bool = False) -> str | None:
        """Why the router may not pick this skill for ``state``, naming the trigger or the
        requirement that fails and the values it read; ``None`` if it may."""
        context = state.get("context")
        if not any_context and context not in self.contexts:
            allowed = ", ".join(repr(c) for c in self.contexts) or "none"
            return f"context {context!r} is not in triggers.contexts ({allowed})"
        for where, conditions in (
            ("triggers.state_conditions", self.state_conditions),
            ("requires.all", self.requires_all),
        ):
            for c in conditions:
                if not c.evaluate(state):
                    return f"{where}: `{c.source}` is false ({c.values(state)})"
        if self.requires_any and not any(c.evaluate(state) for c in self.requires_any):
            sources = ", ".join(f"`{c.source}`" for c in self.requires_any)
            read = "; ".join(c.values(state) for c in self.requires_any)
            return f"requires.any: none of {sources} holds ({read})"
        return None

    def requires_hold(self, state: Mapping[str, Any]) -> bool:
        requires = self.meta.requires
        for condition in requires.all:
            if not condition.evaluate(state):
                return False
        return not requires.any or any(c.evaluate(state) for c in requires.any)
