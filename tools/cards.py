"""``card__*`` tools: save timeline cards as YAML files in a matter's workspace.

A card is the visual reading of one raw record (seed 003's Card Agent). It lives in
``<files_root>/<matter_id>/Cards/<slug>.yaml``, where the slug is the record's ``fact_id`` with
every character outside ``[A-Za-z0-9_-]`` replaced by ``_``. Files are written atomically (a
temporary file, then a rename), so a reader never sees half a card. A bad card is refused with a
:class:`ToolError` that says what to fix, and nothing is written.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel, ConfigDict, Field

from skilldeck.errors import ToolError
from skilldeck.tools.files import jailed_path, matter_folder
from skilldeck.tools.registry import GRAMMAR, ToolHost, tool_family
from skilldeck.tools.workspace import write_text_atomic

__all__ = [
    "CARDS_DIR",
    "CARD_KEYS",
    "MAX_FIELD_CHARS",
    "MAX_INSIGHT_CHARS",
    "MAX_LIST_ITEMS",
    "MAX_TEMPLATES",
    "TEMPLATES",
    "TEMPLATE_IDS",
    "CardTemplate",
    "card_relpath",
    "card_slug",
    "card_tools",
    "read_card",
    "save_card",
    "update_insight",
]

CARDS_DIR = "Cards"
#: The keys of a saved card file, in file order.
CARD_KEYS = (
    "fact_id",
    "title",
    "status",
    "template_ids",
    "tags",
    "ui_config",
    "content",
    "insight",
)
#: What the model may pass in ``card``; ``status`` is the tool's to set.
_INPUT_KEYS = ("fact_id", "title", "template_ids", "tags", "ui_config", "content", "insight")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# Most file systems cap a name at 255 bytes; keep room for ".yaml" and the temp-file suffix.
_MAX_SLUG = 200
_NO_FOLD = 1 << 30


@dataclass(frozen=True, slots=True)
class CardTemplate:
    """A card template: what it is for and the ``ui_config`` fields it renders, each with
    its JSON type (``string``, ``number``, ``list`` of strings, ``object``)."""

    id: str
    description: str
    shape: tuple[tuple[str, str], ...]

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.shape)


def _t(id: str, description: str, **shape: str) -> CardTemplate:
    return CardTemplate(id, description, tuple(shape.items()))


# The single source of the template set (Memex's 22 template ids; the fields are skilldeck's):
# the tools, the skill's references and its tests use it.
TEMPLATES: dict[str, CardTemplate] = {
    t.id: t
    for t in (
        _t("link", "A web page or resource saved by its URL.", url="string", site="string",
           summary="string"),
        _t("person", "Someone met or a contact: who they are, how to reach them.",
           name="string", relation="string", contact="string", notes="string"),
        _t("place", "A location visited or to visit: restaurant, shop, city, address.",
           name="string", address="string", city="string", visited_at="string"),
        _t("spec_sheet", "The specifications of a thing: a device, a product, a model.",
           subject="string", specs="object", source="string"),
        _t("transaction", "Money paid or received: a purchase, a bill, a transfer.",
           item="string", amount="number", currency="string", counterparty="string",
           date="string"),
        _t("metric", "A measured quantity with a unit: weight, sleep hours, steps, a price.",
           name="string", value="number", unit="string", measured_at="string"),
        _t("rating", "A verdict or score given to something (stars, x/10).", subject="string",
           score="number", scale="string", comment="string"),
        _t("mood", "How the person feels, and why.", feeling="string", intensity="string",
           cause="string"),
        _t("progress", "Progress toward a goal: pages read, km run, a share done.",
           goal="string", current="number", target="number", unit="string"),
        _t("event", "Something scheduled at an explicit time that has not happened yet.",
           start="string", end="string", location="string", medium="string",
           attendees="list", url="string"),
        _t("duration", "How long something took or lasted.", activity="string",
           start="string", end="string", length="string"),
        _t("task", "A task or reminder to act on, with an optional due date.", task="string",
           due="string", priority="string"),
        _t("routine", "A habit or recurring activity.", activity="string",
           frequency="string", time="string"),
        _t("procedure", "Steps to do something: a recipe, a how-to.", title="string",
           steps="list"),
        _t("compact", "A short plain thought or observation.", text="string"),
        _t("snippet", "A piece of code or text to keep as written.", text="string",
           language="string"),
        _t("article", "A longer piece of writing: a post, notes, a summary.", title="string",
           body="string", source="string"),
        _t("conversation", "What was said between people: a call, a chat, minutes.",
           participants="list", summary="string", quotes="list"),
        _t("quote", "Words quoted from a person, book or talk, kept verbatim.", text="string",
           author="string", source="string"),
        _t("snapshot", "The state of something at a moment: a status, a reading.",
           subject="string", state="string", observed_at="string"),
        _t("gallery", "Photos or images.", images="list", caption="string"),
        _t("video", "A video to watch or watched.", url="string", title="string",
           creator="string", length="string"),
    )
}  # fmt: skip
TEMPLATE_IDS = tuple(TEMPLATES)


#: A card's templates: the primary one and at most two secondary ones.
MAX_TEMPLATES = 3
#: The longest text of a ui_config field, and the most items of a list field: a field holds a
#: fact copied from the record (``content`` keeps the record whole), and a grammar that bounds
#: it ends a small model's repetition loop at the field instead of at the token limit.
MAX_FIELD_CHARS = 500
#: The longest insight: one or two sentences.
MAX_INSIGHT_CHARS = 400
MAX_LIST_ITEMS = 20
# The JSON Schema of each field type, as the checks below accept it (null leaves a field empty).
_TYPE_SCHEMAS: dict[str, dict[str, Any]] = {
    "string": {"type": ["string", "null"]},
    "number": {"type": ["number", "string", "null"]},
    "list": {"type": ["array", "null"], "items": {"type": ["string", "number"]}},
    "object": {"type": ["object", "null"]},
}


def _ui_config_schema() -> dict[str, Any]:
    """Every template's fields, so that a grammar-constrained model can only write a field
    some template has; which fields fit the card's own templates is checked on save."""
    fields = {name: kind for t in TEMPLATES.values() for name, kind in t.shape}
    return {
        "type": "object",
        "properties": {name: _TYPE_SCHEMAS[kind] for name, kind in fields.items()},
        "additionalProperties": False,
    }


def _field(description: str, schema: dict[str, Any]) -> Any:
    # Typed Any so that every check is ours (a ToolError that says what to fix); the JSON
    # schema the model sees still says what each field is.
    return Field(None, description=description, json_schema_extra=schema)


class _Card(BaseModel):
    """The card a model passes to ``card__save``."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "required": ["fact_id", "title", "template_ids", "ui_config", "content"],
            "additionalProperties": False,
        },
    )

    fact_id: Any = _field("The record's fact_id, unchanged.", {"type": "string"})
    title: Any = _field("A short title for the timeline.", {"type": "string"})
    template_ids: Any = _field(
        "Template ids, the primary template first, then at most two secondary ones.",
        {
            "type": "array",
            "items": {"enum": list(TEMPLATE_IDS)},
            "minItems": 1,
            "maxItems": MAX_TEMPLATES,
        },
    )
    tags: Any = _field("Short lowercase tags.", {"type": "array", "items": {"type": "string"}})
    ui_config: Any = _field(
        "The primary template's fields; keep times, places, URLs, names, amounts, quotes.",
        _ui_config_schema(),
    )
    content: Any = _field("The raw record text, unchanged.", {"type": "string"})
    insight: Any = _field("Leave null; the PKM agent writes it.", {"type": ["string", "null"]})


def _bounded(kind: str) -> dict[str, Any]:
    """A field type's schema with the sizes the tool accepts (for grammars)."""
    schema = dict(_TYPE_SCHEMAS[kind])
    if kind == "list":
        schema["items"] = {**schema["items"], "maxLength": MAX_FIELD_CHARS}
        schema["maxItems"] = MAX_LIST_ITEMS
    elif kind != "object":
        schema["maxLength"] = MAX_FIELD_CHARS
    return schema


@functools.cache  # built from constants; every registry (one per deck) shares it, unchanged
def _grammar_schema() -> dict[str, Any]:
    """``card__save``'s arguments as ``schema`` mode's grammar holds them: one branch per
    template, whose ``ui_config`` has that template's fields only, and whose card has that
    template only. A small model shown cards of several kinds mixes their fields (an event's
    ``start`` on a rating card) and is refused until its tool rounds run out; here it cannot.
    ``ui_config`` comes before ``template_ids``: the facts a model copies from the record
    decide the template, not the other way round. Secondary templates, which the tool accepts,
    are left to the other output modes: a grammar cannot tie fields to an item of a list."""
    card = _Card.model_json_schema()
    props = {k: v for k, v in card["properties"].items() if k not in ("template_ids", "ui_config")}
    branches = []
    for template in TEMPLATES.values():
        own = {
            "type": "object",
            "properties": {name: _bounded(kind) for name, kind in template.shape},
            "additionalProperties": False,
        }
        one = {"type": "array", "items": {"enum": [template.id]}, "minItems": 1, "maxItems": 1}
        ordered = {
            "fact_id": props["fact_id"],
            "title": props["title"],
            "ui_config": own,
            "template_ids": one,
            **{k: v for k, v in props.items() if k not in ("fact_id", "title")},
        }
        branches.append({**card, "properties": ordered})
    return {
        "type": "object",
        "properties": {"card": {"anyOf": branches}},
        "required": ["card"],
        "additionalProperties": False,
    }


class _SaveArgs(BaseModel):
    card: _Card = Field(description="The timeline card of the record.")
    matter_id: Annotated[str | None, InjectedToolArg] = None


class _InsightArgs(BaseModel):
    fact_id: str = Field(description="The fact_id of the card.")
    # Bounded in the schema, so a grammar ends a small model's repetition loop here instead of
    # at the output token limit.
    insight: str = Field(
        max_length=MAX_INSIGHT_CHARS,
        description="One or two grounded sentences about the record.",
    )
    matter_id: Annotated[str | None, InjectedToolArg] = None


def card_slug(fact_id: str) -> str:
    """The file stem of a card: ``fact_id`` with every char outside ``[A-Za-z0-9_-]`` as ``_``."""
    return _UNSAFE.sub("_", fact_id)


def card_relpath(fact_id: str) -> str:
    """The card's path relative to the workspace, e.g. ``Cards/2026_05_25_md_ts_1.yaml``."""
    return f"{CARDS_DIR}/{card_slug(fact_id)}.yaml"


def _check_fact_id(fact_id: Any) -> str:
    if not isinstance(fact_id, str) or not fact_id.strip():
        raise ToolError("fact_id is required: pass the record's fact_id as a non-empty string")
    if len(card_slug(fact_id)) > _MAX_SLUG:
        raise ToolError(f"fact_id is too long ({len(fact_id)} chars); at most {_MAX_SLUG}")
    return fact_id


def _check_card(card: Any) -> dict[str, Any]:
    """The card as it will be saved (without status), or a :class:`ToolError`."""
    if not isinstance(card, Mapping):
        raise ToolError(f"card must be an object with keys {', '.join(_INPUT_KEYS)}")
    unknown = sorted(set(card) - set(_INPUT_KEYS))
    if unknown:
        hint = " (status is set by the tool)" if "status" in unknown else ""
        raise ToolError(
            f"card has unknown key(s) {', '.join(unknown)}{hint}; allowed: {', '.join(_INPUT_KEYS)}"
        )
    fact_id = _check_fact_id(card.get("fact_id"))
    title = card.get("title")
    if not isinstance(title, str) or not title.strip():
        raise ToolError("card.title is required: a short non-empty title for the timeline")
    templates = card.get("template_ids")
    if not isinstance(templates, list) or not templates:
        raise ToolError("card.template_ids must be a non-empty list, the primary template first")
    unknown_ids = [t for t in templates if t not in TEMPLATES]
    if unknown_ids:
        raise ToolError(
            f"card.template_ids has unknown template(s) {unknown_ids!r}; "
            f"known templates: {', '.join(TEMPLATE_IDS)}"
        )
    if len(set(templates)) != len(templates):
        raise ToolError("card.template_ids lists a template twice; list each once")
    if len(templates) > MAX_TEMPLATES:
        raise ToolError(
            f"card.template_ids lists {len(templates)} templates; at most {MAX_TEMPLATES}: "
            "the primary template and up to two secondary ones that the record clearly has"
        )
    tags = card.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ToolError("card.tags must be a list of strings")
    ui_config = card.get("ui_config")
    if not isinstance(ui_config, Mapping):
        raise ToolError(
            "card.ui_config must be an object of the primary template's fields, e.g. "
            '{"start": "Thursday 10:30", "medium": "Zoom"}'
        )
    _check_shape(templates, ui_config)
    content = card.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ToolError("card.content is required: the raw record text, unchanged")
    insight = card.get("insight")
    if insight is not None and not isinstance(insight, str):
        raise ToolError("card.insight must be a string or null")
    return {
        "fact_id": fact_id,
        "title": title.strip(),
        "template_ids": list(templates),
        "tags": list(tags),
        "ui_config": dict(ui_config),
        "content": content,
        "insight": insight,
    }


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float, str),  # "8/10" and "€12.50" are values as the record gives them
    "list": (list,),
    "object": (dict,),
}


def _check_shape(templates: list[str], ui_config: Mapping[str, Any]) -> None:
    """``ui_config`` holds only fields of the card's templates, each of its type and size."""
    shape = {name: kind for t in templates for name, kind in TEMPLATES[t].shape}
    unknown = sorted(set(ui_config) - set(shape))
    if unknown:
        raise ToolError(
            f"card.ui_config has field(s) {', '.join(unknown)} that no template of the card "
            f"has; the fields of {', '.join(templates)}: {', '.join(shape)}"
        )
    for name, value in ui_config.items():
        kind = shape[name]
        if value is not None and not isinstance(value, _JSON_TYPES[kind]):
            raise ToolError(f"card.ui_config.{name} must be a {kind}, not {type(value).__name__}")
        if (
            kind == "list"
            and isinstance(value, list)
            and not all(isinstance(v, str | int | float) for v in value)
        ):
            raise ToolError(f"card.ui_config.{name} must be a list of plain values")
        values = value if isinstance(value, list) else [value]
        if len(values) > MAX_LIST_ITEMS or any(
            isinstance(v, str) and len(v) > MAX_FIELD_CHARS for v in values
        ):
            raise ToolError(
                f"card.ui_config.{name} is too long: at most {MAX_LIST_ITEMS} items of "
                f"{MAX_FIELD_CHARS} characters; copy the key facts (content keeps the record)"
            )


def read_card(workspace: Path, fact_id: str) -> dict[str, Any] | None:
    """The saved card of ``fact_id`` in ``workspace``, or ``None`` if there is none."""
    path = jailed_path(workspace, card_relpath(_check_fact_id(fact_id)))
    if not path.is_file():
        return None
    try:
        value = yaml.safe_load(path.read_text("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ToolError(
            f"{card_relpath(fact_id)} is not valid YAML ({type(exc).__name__})"
        ) from None
    if not isinstance(value, dict):
        raise ToolError(f"{card_relpath(fact_id)} does not hold a card (a YAML mapping)")
    if value.get("fact_id") not in (None, fact_id):
        # Slugs are not one-to-one ("a/b" and "a_b" share one): never overwrite another's card.
        raise ToolError(
            f"{card_relpath(fact_id)} holds the card of fact_id {value['fact_id']!r}, which "
            f"maps to the same file as {fact_id!r}; this card cannot be saved beside it"
        )
    return value


def _write_card(path: Path, value: Mapping[str, Any]) -> None:
    # No line folding: a grader's substring scan of the file must see each value whole.
    text = yaml.safe_dump(dict(value), sort_keys=False, allow_unicode=True, width=_NO_FOLD)
    write_text_atomic(path, text)


def save_card(workspace: Path, card: Any) -> dict[str, Any]:
    """Check ``card`` and write it to ``workspace/Cards/<slug>.yaml`` with status completed.

    An insight already on file (the PKM agent may write it first) is kept unless ``card`` has
    one. Raises :class:`ToolError` for a bad card; nothing is written then.
    """
    checked = _check_card(card)
    relpath = card_relpath(checked["fact_id"])
    path = jailed_path(workspace, relpath)
    on_file = read_card(workspace, checked["fact_id"])  # refuses another fact_id's file
    if checked["insight"] is None and on_file is not None:
        checked["insight"] = on_file.get("insight")
    saved = {key: checked.get(key) for key in CARD_KEYS}
    saved["status"] = "completed"
    _write_card(path, saved)
    # The saved fact_id comes first: a caller's output names the card by it, and a small
    # model left with only the path tends to make a fact_id of the file name. The card's
    # fields follow as saved (the title trimmed), for an output that reports the card.
    return {
        "ok": True,
        "fact_id": checked["fact_id"],
        "path": relpath,
        "status": "completed",
        **{key: saved[key] for key in ("title", "template_ids", "tags", "ui_config")},
    }


def update_insight(workspace: Path, fact_id: Any, insight: Any) -> dict[str, Any]:
    """Set the card's ``insight``; a card not saved yet is started as a draft."""
    fact_id = _check_fact_id(fact_id)
    if not isinstance(insight, str) or not insight.strip():
        raise ToolError("insight is required: one or two grounded sentences as a string")
    if len(insight.strip()) > MAX_INSIGHT_CHARS:
        raise ToolError(
            f"insight is {len(insight.strip()):,} characters; write at most "
            f"{MAX_INSIGHT_CHARS} (one or two sentences)"
        )
    card = read_card(workspace, fact_id)
    if card is None:
        card = {"fact_id": fact_id, "status": "draft"}
    card["insight"] = insight.strip()
    relpath = card_relpath(fact_id)
    _write_card(jailed_path(workspace, relpath), card)
    return {
        "ok": True,
        "fact_id": fact_id,
        "path": relpath,
        "status": card.get("status"),
        "insight": card["insight"],
    }


def card_tools(root: str | Path | None) -> list[BaseTool]:
    """``card__save`` and ``card__update_insight``, writing under ``root/<matter_id>``."""
    base = Path(root) if root is not None else None

    def save(card: _Card, matter_id: str | None = None) -> dict[str, Any]:
        return save_card(matter_folder(base, matter_id), card.model_dump(exclude_unset=True))

    def set_insight(fact_id: str, insight: str, matter_id: str | None = None) -> dict[str, Any]:
        return update_insight(matter_folder(base, matter_id), fact_id, insight)

    return [
        StructuredTool.from_function(
            save,
            name="card__save",
            description=(
                "Save the timeline card of one record as Cards/<fact_id>.yaml (status completed); "
                "ui_config holds the fields of the card's templates."
            ),
            args_schema=_SaveArgs,
            metadata={GRAMMAR: _grammar_schema()},
        ),
        StructuredTool.from_function(
            set_insight,
            name="card__update_insight",
            description="Set the insight of a record's timeline card (starts a draft if none).",
            args_schema=_InsightArgs,
        ),
    ]


@tool_family("card")
def _card_family(host: ToolHost) -> list[BaseTool]:
    return card_tools(host.files_root)
