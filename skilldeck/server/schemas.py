"""Request and response bodies of the HTTP service (they make its OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    StrictBool,
    StrictStr,
    Tag,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from typing_extensions import TypeAliasType

from skilldeck._internal.durations import TTL_PATTERN, parse_ttl
from skilldeck._internal.ids import Identifier
from skilldeck.errors import SkillDeckError
from skilldeck.types import InputType

__all__ = [
    "Card",
    "CardOption",
    "CardQuestion",
    "ContinueRequest",
    "CreatedThread",
    "ErrorBody",
    "ErrorDetail",
    "FieldError",
    "Health",
    "History",
    "HistoryRow",
    "ResumeRequest",
    "RunRequest",
    "SkillList",
    "SkillRow",
    "ThreadList",
    "ThreadRow",
    "ThreadState",
    "ThreadView",
]

#: ``new``: created with ``POST /threads`` and not run yet; ``resumable``: its run stopped
#: mid-way and nothing runs it (``POST /threads/{id}/continue``); the others as in the engine.
ThreadState = Literal[
    "new", "running", "resumable", "interrupted", "finished", "failed", "no_skill"
]


def _json_type(value: Any) -> str | None:
    """The JSON type of ``value``, the branch of :data:`JsonValue` that checks it."""
    return next((name for kind, name in _JSON_TYPES.items() if isinstance(value, kind)), None)


# bool before int: a bool is an int to isinstance.
_JSON_TYPES: dict[type, str] = {
    bool: "boolean", int: "integer", float: "number", str: "string",
    list: "array", dict: "object", type(None): "null",
}  # fmt: skip


class _AnyOf:
    """Documents a tagged union as ``anyOf``: pydantic writes ``oneOf``, which a JSON integer
    (an ``integer`` and a ``number``) would fail."""

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core)
        target = handler.resolve_ref_schema(schema)
        if "oneOf" in target:
            target["anyOf"] = target.pop("oneOf")
        return schema


#: A JSON value a run can store: 64-bit integers (what a checkpoint holds) and finite numbers.
#: Integers are documented within ±2**62 and accepted from -2**63 to 2**64-1: a client that
#: checks bounds in floating point may round a value a little past the documented one. The
#: branch is chosen by the value's type, so a bad value is one error (its branch's), not one
#: per branch: a body of many bad values would otherwise answer with seven errors each.
JsonValue = TypeAliasType(  # type: ignore[misc]
    "JsonValue",
    Annotated[
        Union[  # noqa: UP007 - a recursive alias needs the Union form
            Annotated[StrictBool, Tag("boolean")],
            Annotated[
                int,
                Field(
                    ge=-(2**63),
                    le=2**64 - 1,
                    strict=True,
                    json_schema_extra={"minimum": -(2**62), "maximum": 2**62},
                ),
                Tag("integer"),
            ],
            Annotated[float, Field(ge=-9e18, le=9e18), Tag("number")],
            Annotated[StrictStr, Tag("string")],
            Annotated[list["JsonValue"], Tag("array")],  # type: ignore[misc]
            Annotated[dict[str, "JsonValue"], Tag("object")],  # type: ignore[misc]
            Annotated[None, Tag("null")],
        ],
        Discriminator(
            _json_type,
            custom_error_type="json_value",
            custom_error_message="not a JSON value",
        ),
        _AnyOf,
    ],
)


class ErrorDetail(BaseModel):
    """What went wrong: a stable ``code`` and a message that says how to fix it."""

    model_config = ConfigDict(extra="allow")
    code: str = Field(examples=["INVALID_ANSWERS"])
    message: str


class ErrorBody(BaseModel):
    """The body of every 4xx/5xx response."""

    error: ErrorDetail


class FieldError(BaseModel):
    field_key: str
    message: str


class CardOption(BaseModel):
    label: str
    value: str | int | float | bool


class CardQuestion(BaseModel):
    """One question; ``options`` only for the kinds that offer choices (responses leave it
    out otherwise)."""

    question: str
    field_key: str
    input_type: InputType
    required: bool
    options: list[CardOption] | None = None
    minimum: float | None = Field(default=None, description="The least number answer.")
    maximum: float | None = Field(default=None, description="The greatest number answer.")
    error_message: str | None = Field(
        default=None,
        description="What is said, instead of the validator's words, of an answer "
        "that is not valid.",
    )


class Card(BaseModel):
    """A pending ask_user card (seed 004 ``event=card``); answer it with ``/resume``."""

    event: Literal["card"] = "card"
    thread_id: str
    skill: str
    review_type: str
    questions: list[CardQuestion]
    interrupt_id: str
    answers_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema of the answers object: render and check the card with it.",
    )
    errors: list[FieldError] = Field(default_factory=list)


class RunRequest(BaseModel):
    """Start a run, or a new turn of a thread that is not waiting for a card."""

    model_config = ConfigDict(extra="forbid")
    input: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="The skills' input. It must not carry user_id/matter_id: the user comes "
        "from the API key, the matter from matter_id.",
    )
    context: str = Field(min_length=1, max_length=200, examples=["matter"])
    matter_id: Identifier | None = None
    next_skill: str | None = Field(default=None, max_length=200)
    stream_deltas: bool = Field(
        default=False, description="Also stream the models' text as it is generated (delta)."
    )
    ttl: (
        Annotated[float, Field(gt=0, strict=True)]
        | Annotated[StrictStr, Field(pattern=TTL_PATTERN)]
        | None
    ) = Field(
        default=None,
        description="How long the thread is kept after its last activity: seconds, a whole "
        "number with a unit (90s, 15m, 12h, 30d) or 'never'; default: the service's "
        "(SKILLDECK_THREAD_TTL).",
        examples=["30d"],
    )

    @field_validator("ttl", mode="before")
    @classmethod
    def _ttl(cls, value: object) -> object:
        """A bad value is refused (422) with the engine's own message, before the run is
        queued; the schema above says the same."""
        if value is not None:
            try:
                parse_ttl(value)
            except SkillDeckError as exc:
                raise ValueError(str(exc)) from None
        return value


class ResumeRequest(BaseModel):
    """Answers to the pending card: ``{field_key: value}`` for the questions it asked."""

    model_config = ConfigDict(extra="forbid")
    answers: dict[str, JsonValue]
    interrupt_id: Identifier | None = Field(
        default=None,
        description="The card being answered; a stale id (another card is pending) is a 409.",
    )
    stream_deltas: bool = Field(
        default=False, description="Also stream the models' text as it is generated (delta)."
    )


class ContinueRequest(BaseModel):
    """Go on with a ``resumable`` thread from its last checkpoint (no input, no answers)."""

    model_config = ConfigDict(extra="forbid")
    stream_deltas: bool = Field(
        default=False, description="Also stream the models' text as it is generated (delta)."
    )


class CreatedThread(BaseModel):
    thread_id: str
    created_at: str


class ThreadRow(BaseModel):
    """One of the caller's threads in ``GET /threads``."""

    thread_id: str
    status: ThreadState
    last_skill: str | None = None
    title: str | None = Field(
        default=None, description="The first words of the thread's input, or of its response."
    )
    matter_id: str | None = None
    steps: int
    created_at: str | None = None
    updated_at: str | None = None


class ThreadList(BaseModel):
    """The caller's threads, most recently run first."""

    threads: list[ThreadRow]


class SkillRow(BaseModel):
    """One skill of the deck in ``GET /skills``: what a client needs to start a run on it."""

    name: str
    description: str
    contexts: list[str]
    needs_matter: bool = Field(
        description="Its tools work in a matter's files or record: a run of its contexts "
        "needs matter_id."
    )
    input_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema of the input of a run that starts with this skill (its "
        "assets/input_schema.json); null: any object.",
    )


class SkillList(BaseModel):
    skills: list[SkillRow]


class ThreadView(BaseModel):
    """A thread's state, its pending card (status ``interrupted``) or its error (``failed``)."""

    thread_id: str
    status: ThreadState
    state: dict[str, Any]
    card: Card | None = None
    error: dict[str, Any] | None = None
    checkpoint_id: str | None = None


class HistoryRow(BaseModel):
    """One checkpoint of a thread (one super-step); see ``SkillDeck.history``."""

    model_config = ConfigDict(extra="allow")
    checkpoint_id: str | None
    parent_id: str | None = None
    step: int | None = None
    status: str
    skill: str | None = None
    card: Card | None = None


class History(BaseModel):
    thread_id: str
    checkpoints: list[HistoryRow]
    #: The ``before`` of the page of older checkpoints (absent: this page starts the thread).
    next_before: str | None = None


class Health(BaseModel):
    status: Literal["ok", "unavailable", "draining"]
    version: str
    detail: str | None = None
