"""``skill.meta.json``: one pydantic model parses it, once, and is the only statement of its
format.

The loader reads a bundle's file with :meth:`SkillMeta.parse` (every problem of the file at
once, as :class:`~skilldeck.types.Problem` s with JSON paths) and then holds the fields to each
other with :meth:`SkillMeta.conflicts`; the bundle keeps the model (``SkillBundle.meta``). The
JSON Schema shipped for editors (``skill.meta.schema.json``) and the field reference of
docs/skills.md are generated from this module (:mod:`skilldeck.skills.meta_schema`): a field is
described once, in its ``Field(description=...)``.

The models' docstrings and descriptions are the schema's, shown in editors and the docs: they
quote code as Markdown does, in single backticks.

Execution modes and output modes are open sets (a plugin may add one), so ``mode`` and
``output_mode`` are any name here; the deck holds them to the modes it has when it is built
(:func:`skilldeck.graph.builder.deck_problems`).
"""

# No `from __future__ import annotations`: pydantic would compile every field's annotation
# from its text when the models are built, on every start.
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PrivateAttr,
    Strict,
    ValidationError,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from skilldeck.skills.conditions import Condition, ConditionError, parse_condition
from skilldeck.skills.problems import Problems, shown

__all__ = [
    "MATTER_WRITE_TOOL",
    "SINGLE_MODE",
    "ExampleSettings",
    "ExecutionConfig",
    "Outputs",
    "Requires",
    "SkillMeta",
    "Triggers",
]

#: The built-in tool that writes the run's matter record: only the fields a skill declares in
#: ``outputs.matter``.
MATTER_WRITE_TOOL = "matters__update"
#: The execution mode in which the skill's model calls its tools itself (the default).
SINGLE_MODE = "single"
#: Keys of an author's (or a plugin's) own, which skilldeck does not read.
_OWN_KEY = "x-"


class _Matches:
    """A string held to ``pattern``; the error says ``hint``, in words, instead of the regex.

    The markers are plain classes, not dataclasses: a dataclass compiles its methods when the
    module is imported, and every load of a skill imports this one.
    """

    __slots__ = ("hint", "pattern")

    def __init__(self, pattern: str, hint: str) -> None:
        self.pattern, self.hint = pattern, hint

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        compiled = re.compile(self.pattern)

        def check(value: str) -> str:
            if compiled.search(value) is None:
                raise PydanticCustomError(
                    "pattern", "{value}: {hint}", {"value": shown(value), "hint": self.hint}
                )
            return value

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        # patternErrorMessage: the message editors (VS Code's JSON support) show instead.
        out.update(pattern=self.pattern, patternErrorMessage=self.hint)
        return out


class _Unique:
    """A list whose items are distinct (JSON Schema's ``uniqueItems``)."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        def check(value: tuple[Any, ...]) -> tuple[Any, ...]:
            for i, item in enumerate(value):
                if item in value[:i]:
                    raise PydanticCustomError(
                        "unique", "lists {value} more than once", {"value": shown(item)}
                    )
            return value

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        out["uniqueItems"] = True
        return out


def _condition(value: Any) -> Condition:
    """A condition's text, parsed now: a condition that does not parse is the file's problem,
    at its own JSON path."""
    if isinstance(value, Condition):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "must be a string")
    try:
        return parse_condition(value)
    except ConditionError as exc:
        raise PydanticCustomError("condition", "{reason}", {"reason": str(exc)}) from None


class _Parsed:
    """A condition: its text in the file, a :class:`Condition` in the model."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        # Not handler(source): a schema of Condition's own fields would cost a third of the
        # models' build, for nothing.
        text = core_schema.plain_serializer_function_ser_schema(
            _source, return_schema=core_schema.str_schema()
        )
        return core_schema.no_info_plain_validator_function(_condition, serialization=text)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "minLength": 1, "title": "condition"}


def _source(condition: Condition) -> str:
    return condition.source


Text = Annotated[str, Strict(), Field(min_length=1)]
Name = Annotated[
    str,
    Strict(),
    _Matches(
        r"^[a-z0-9][a-z0-9_-]*$",
        "a skill name is lowercase letters, digits, '-' and '_', and starts with a letter or "
        "digit (it is also the folder's name)",
    ),
]
ToolName = Annotated[
    str,
    Strict(),
    _Matches(
        r"^([A-Za-z_][A-Za-z0-9_]*|mcp:[A-Za-z0-9_.-]+/[^/\s]+)$",
        "a tool name is letters, digits and '_', e.g. file__parse, or an MCP server's tool, "
        "mcp:SERVER/TOOL (wildcards allowed: mcp:SERVER/*)",
    ),
    Field(title="tool name"),
]
ProfilePath = Annotated[
    str,
    Strict(),
    _Matches(
        r"^profile(\.[A-Za-z_][A-Za-z0-9_]*)+$",
        "a provided field is a dot path under profile, e.g. profile.summary",
    ),
    Field(title="`profile.…` path"),
]
MatterPath = Annotated[
    str,
    Strict(),
    _Matches(
        r"^matter(\.[A-Za-z_][A-Za-z0-9_]*)+$",
        "a matter field is a dot path under matter, e.g. matter.status",
    ),
    Field(title="`matter.…` path"),
]
InputPath = Annotated[
    str,
    Strict(),
    _Matches(
        r"^input(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        "match is input or a field of it, e.g. input.content",
    ),
    Field(title="`input` or `input.FIELD`"),
]
ConditionText = Annotated[Condition, _Parsed()]
Conditions = tuple[ConditionText, ...]
Tools = Annotated[tuple[ToolName, ...], _Unique()]


class _Closed(BaseModel):
    """An object of ``skill.meta.json``: frozen, and a key it does not know is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class _Open(_Closed):
    """An object that also takes keys of the author's own, ``x-…``: kept in
    :attr:`extensions`, never read by skilldeck (a plugin may read its own)."""

    model_config = ConfigDict(json_schema_extra={"patternProperties": {f"^{_OWN_KEY}": {}}})

    _extensions: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _own_keys(cls, data: Any, handler: Callable[[Any], Any]) -> Any:
        if not isinstance(data, Mapping):
            return handler(data)  # a model already made keeps its own
        own = {k: v for k, v in data.items() if isinstance(k, str) and k.startswith(_OWN_KEY)}
        parsed = handler({k: v for k, v in data.items() if k not in own})
        parsed._extensions = own
        return parsed

    @property
    def extensions(self) -> Mapping[str, Any]:
        """The ``x-…`` keys of this object, as written."""
        return self._extensions


class Triggers(_Closed):
    """When the router may pick the skill."""

    contexts: Annotated[tuple[Annotated[Text, Field(title="context")], ...], _Unique()] = Field(
        default=(), description="The run contexts (`--context`) the skill answers to."
    )
    state_conditions: Conditions = Field(
        default=(), description="Conditions on the state that must all hold for the skill to run."
    )


class Requires(_Closed):
    """What the state must hold for the skill to run."""

    all: Conditions = Field(default=(), description="Conditions that must all hold.")
    any: Conditions = Field(
        default=(), description="Conditions of which at least one must hold (when any are given)."
    )


class ExampleSettings(_Closed):
    """How a turn picks from `assets/examples.jsonl`: the `shown` examples nearest to the run's
    text at `match`."""

    shown: Annotated[int, Strict(), Field(ge=1, le=8)] = Field(
        default=2,
        description=(
            "How many of the worked examples of `assets/examples.jsonl` (see Worked examples) a "
            "turn shows: those nearest to the run's input. Only with that file."
        ),
    )
    match: InputPath = Field(
        default="input", description="The input text the examples are matched on."
    )


class Outputs(_Closed):
    """What the skill may write besides its data."""

    provides: Annotated[tuple[ProfilePath, ...], _Unique()] = Field(
        default=(), description="The only profile fields the skill may write."
    )
    matter: Annotated[tuple[MatterPath, ...], _Unique()] = Field(
        default=(),
        description=(
            "The only fields of the run's matter record (see The matters record) the skill may "
            f"write with `{MATTER_WRITE_TOOL}`, and everything below each. It needs "
            f"`{MATTER_WRITE_TOOL}` in `tools`, and `{MATTER_WRITE_TOOL}` needs it (single "
            "mode)."
        ),
    )


class ExecutionConfig(_Open):
    """How the skill runs; a setting left unset is the host's."""

    provider: Text | None = Field(
        default=None,
        description=(
            "Who serves the model: `openai`, `openrouter`, `compatible`, `scripted` or `rules`. "
            "Unset: the host's setting (`openai`)."
        ),
    )
    model: Text | None = Field(
        default=None,
        description=(
            "The model's name; for `scripted`, a cassette's path relative to the bundle. Unset: "
            "the host's setting."
        ),
    )
    temperature: Annotated[float, Strict(), Field(ge=0, le=2)] | None = Field(
        default=None, description="The sampling temperature. Unset: the host's setting (`0.2`)."
    )
    max_tokens: Annotated[int, Strict(), Field(ge=1)] | None = Field(
        default=None, description="A cap on each reply's tokens. Unset: no cap."
    )
    base_url: Text | None = Field(
        default=None,
        description="An OpenAI-compatible endpoint. Unset: the host's setting, or the provider's.",
    )
    mode: Text = Field(
        default=SINGLE_MODE,
        description=(
            "How the skill runs: `single`, one model turn with tool rounds; `planner`, seed "
            "001's {stop, tool, args} loop; `retrieval`, seed 002's ordered retrieval policy; or "
            "a mode a plugin registers (the deck refuses a mode it does not have)."
        ),
    )
    max_tool_rounds: Annotated[int, Strict(), Field(ge=0)] | None = Field(
        default=None,
        description="Model/tool round trips per attempt. Unset: the host's setting (4).",
    )
    output_mode: Text | None = Field(
        default=None,
        description=(
            "How replies are constrained: `schema` forces each reply to an allowed tool call or "
            "the exact output contract (a strict JSON Schema the endpoint enforces); `tool` and "
            "`json` as the README's output modes say; `auto` uses `schema` where the endpoint "
            "can; or a mode a plugin registers. Unset: the host's setting (`auto`)."
        ),
    )
    tool_choice: Text = Field(
        default="auto",
        description=(
            "`auto`: the model calls tools or answers. `required`: until one of the attempt's "
            "tool calls has worked, the model may only call tools (`schema` mode leaves the "
            "output out of the grammar, `tool` mode sends `tool_choice: required`, `json` mode "
            "refuses an early output); for a skill whose job is a tool's effect, like saving a "
            "card. One of `tools`: until a call of that tool has worked, it is the only one "
            "offered (`tool` mode sends it as the endpoint's `tool_choice`). Single mode."
        ),
    )
    tool_limits: dict[str, Annotated[int, Strict(), Field(ge=1)]] = Field(
        default_factory=dict,
        description=(
            "The most calls of a tool, or of a group's tools together, that may work in one "
            "attempt: a tool at its own or its group's limit is no longer offered (`schema` "
            "mode's grammar and `tool` mode's binding leave it out; a call made anyway is "
            "refused with the reason). A failed call uses no limit: it changed nothing, and the "
            "model may correct it. A small model repeats its last kind of call, or calls each "
            "tool it is offered in turn; a limit moves it on to the next step. Single mode."
        ),
    )
    tool_groups: dict[str, Annotated[tuple[ToolName, ...], Field(min_length=2), _Unique()]] = Field(
        default_factory=dict,
        description=(
            "Named sets of the skill's tools that `tool_limits` may cap together, e.g. "
            '`{"writing": ["pkm__append", "pkm__create", "pkm__write"]}` with `"writing": 1` '
            "for one write of any kind per attempt. Single mode."
        ),
    )
    tool_after: dict[str, Annotated[tuple[ToolName, ...], Field(min_length=1), _Unique()]] = Field(
        default_factory=dict,
        description=(
            "A tool (or each tool of a group of `tool_groups`) is offered only after a call "
            "of one of the listed tools has worked in the attempt: "
            '`{"pkm__append": ["pkm__read"]}` holds "read before you edit" in the grammar '
            "instead of in a sentence a small model skips. Single mode."
        ),
    )

    @property
    def single(self) -> bool:
        """Whether the skill's model calls its tools itself (in the other modes the runtime
        calls them)."""
        return self.mode == SINGLE_MODE

    def members(self, name: str) -> tuple[str, ...]:
        """The tools ``name`` stands for in ``tool_limits`` and ``tool_after``: a group's
        tools, or the tool itself."""
        return tuple(self.tool_groups.get(name, (name,)))

    @property
    def first_tool(self) -> str | None:
        """The tool an attempt starts with (``tool_choice`` names it), or ``None``."""
        return None if self.tool_choice in ("auto", "required") else self.tool_choice


class SkillMeta(_Open):
    """A skill bundle's metadata (seed 004, section 2): when the router may pick the skill,
    what it may call and write, and how it runs."""

    model_config = ConfigDict(title="skill.meta.json")

    name: Name = Field(
        description=(
            "The skill's name: lowercase letters, digits, `-` and `_`, starting with a letter or "
            "digit; it must equal the folder's name."
        )
    )
    description: Text = Field(description="What the skill does and when to use it.")
    version: Annotated[str, Strict()] | None = Field(
        default=None, description="Yours to keep: recorded, never interpreted."
    )
    priority: Annotated[int, Strict()] = Field(
        default=0,
        description="When several skills may run, the higher runs first (ties: load order).",
    )
    triggers: Triggers = Field(default_factory=Triggers)
    requires: Requires = Field(default_factory=Requires)
    examples: ExampleSettings | None = Field(
        default=None,
        description=(
            "How a turn shows the worked examples of `assets/examples.jsonl`; only with that file."
        ),
    )
    references: Literal["on_demand", "inline"] = Field(
        default="on_demand",
        description=(
            "`on_demand`: the prompt lists the bundle's files and the model reads one with "
            "`skill__read_file` when it needs it; `inline`: `references/` goes into the system "
            "prompt, cut to the host's reference token budget."
        ),
    )
    on_change: Literal["refuse", "latest", "migrate"] | None = Field(
        default=None,
        description=(
            "What resuming a thread paused in an earlier version of this skill does (its "
            "fingerprint changed): `refuse` (SKILL_CHANGED), `latest` (run this version on the "
            "old state), `migrate` (`scripts/migrate.py`'s `migrate(state, old_fingerprint)` "
            "returns an update of the state first; a trusted bundle only). Default: the "
            "deck's `SKILLDECK_CHANGED_SKILL`."
        ),
    )
    tools: Tools = Field(
        default=(),
        description=(
            "The only tools the model may call (`skilldeck check` lists the registered ones); "
            "an MCP server's as `mcp:SERVER/TOOL` or `mcp:SERVER/*` (see Tools from MCP "
            "servers)."
        ),
    )
    outputs: Outputs = Field(default_factory=Outputs)
    execution_config: ExecutionConfig = Field(default_factory=ExecutionConfig)
    schema_uri: Annotated[str, Strict()] | None = Field(
        default=None,
        alias="$schema",
        description=(
            "The JSON Schema of this file, for your editor "
            "(`python -m skilldeck.skills.meta_schema` prints it); skilldeck ignores it."
        ),
    )

    @classmethod
    def parse(cls, value: Any, file: str | Path, problems: Problems) -> "SkillMeta | None":
        """The model of ``value`` (the file's JSON), or ``None`` with a problem for each thing
        wrong in it, at its JSON path."""
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            problems.validation_errors(file, exc, cls)
            return None

    def conflicts(self) -> Iterator[tuple[str, str]]:
        """What the fields allow one by one but not together, as ``(JSON path, reason)``: the
        tool settings name the skill's own tools (a limit or an order may name a group), in the
        mode where the model calls them, and ``outputs.matter`` comes with
        :data:`MATTER_WRITE_TOOL`."""
        yield from _tool_conflicts(self.tools, self.execution_config)
        yield from _matter_conflicts(self.tools, self.outputs.matter, self.execution_config)


def _tool_conflicts(
    tools: tuple[str, ...], execution: ExecutionConfig
) -> Iterator[tuple[str, str]]:
    choice, single = execution.tool_choice, execution.single
    if choice != "auto":
        if not single:
            why = "in the planner and retrieval modes the runtime calls the tools"
        elif not tools:
            why = "the skill lists no tools to call"
        elif choice != "required" and choice not in tools:
            why = f"{choice!r} is not one of the skill's tools ({', '.join(tools)})"
        else:
            why = None
        if why:
            yield (
                "$.execution_config.tool_choice",
                f"tool_choice {choice!r} cannot hold: {why}; drop it (default 'auto') or name "
                "one of the skill's tools",
            )
    groups = execution.tool_groups
    for group, members in groups.items():
        where = f"$.execution_config.tool_groups.{group}"
        if group in tools:
            yield where, f"{group!r} is a tool's name: name the group otherwise"
        for member in members:
            if member not in tools or not single:
                yield (
                    where,
                    f"tool_groups puts {member!r} in {group!r}, which the model cannot call "
                    "here: list it in tools (single mode only)",
                )
    for key, named in (
        ("tool_limits", execution.tool_limits),
        ("tool_after", execution.tool_after),
    ):
        for name in named:
            if (name not in tools and name not in groups) or not single:
                yield (
                    f"$.execution_config.{key}.{name}",
                    f"{key} names {name!r}, which the model cannot call here: list it in "
                    "tools, or name a group of tool_groups (single mode only)",
                )
    for name, before in execution.tool_after.items():
        for tool in before:
            if tool not in tools:
                yield (
                    f"$.execution_config.tool_after.{name}",
                    f"tool_after offers {name!r} after {tool!r}, which is not one of the "
                    "skill's tools: list it in tools",
                )


def _matter_conflicts(
    tools: tuple[str, ...], declared: tuple[str, ...], execution: ExecutionConfig
) -> Iterator[tuple[str, str]]:
    """Fields a skill declares are written with :data:`MATTER_WRITE_TOOL`, and the tool writes
    only declared fields, from the model of a single-mode skill (the runtime binds the calling
    skill there)."""
    if declared and MATTER_WRITE_TOOL not in tools:
        yield (
            "$.outputs.matter",
            f"declares matter fields, but the skill cannot write them: add {MATTER_WRITE_TOOL!r} "
            "to tools (or drop outputs.matter)",
        )
    elif declared and not execution.single:
        yield (
            "$.outputs.matter",
            f"matter fields are written by the model's {MATTER_WRITE_TOOL} calls in single mode "
            "only; in the planner and retrieval modes the runtime calls the tools",
        )
    if MATTER_WRITE_TOOL in tools and not declared:
        yield (
            f"$.tools[{tools.index(MATTER_WRITE_TOOL)}]",
            f"{MATTER_WRITE_TOOL} writes only the matter fields the skill declares, and it "
            'declares none: list them in outputs.matter, e.g. "matter": ["matter.status"]',
        )
