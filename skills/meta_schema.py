"""The JSON Schema of ``skill.meta.json`` and the field reference of docs/skills.md, both made
from :class:`~skilldeck.skills.meta.SkillMeta` (describe a field there, in its
``Field(description=...)``, never in these files)::

    python -m skilldeck.skills.meta_schema           # print the JSON Schema (for an editor)
    python -m skilldeck.skills.meta_schema --write   # rewrite the shipped schema and the docs
    python -m skilldeck.skills.meta_schema --check   # exit 1 if either is out of date

``--write`` and ``--check`` work in a checkout of skilldeck (they need its docs/).
Tests fail when a committed file drifts from the model.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

from skilldeck.skills.meta import SkillMeta
from skilldeck.skills.problems import schema_at

__all__ = [
    "DOCS_FILE",
    "SCHEMA_FILE",
    "meta_json_schema",
    "meta_reference",
    "schema_text",
    "with_reference",
]

#: The schema skilldeck ships (in the package, next to the model).
SCHEMA_FILE = Path(__file__).parent / "skill.meta.schema.json"
#: The page whose reference table is generated (in a checkout).
DOCS_FILE = Path(__file__).resolve().parents[1] / "docs" / "skills.md"
SCHEMA_ID = "https://skilldeck.dev/schemas/skill.meta.json"
#: The markers around the generated table in docs/skills.md.
BEGIN = (
    "<!-- skill.meta.json reference: generated from skills/meta.py by "
    "`python -m skilldeck.skills.meta_schema --write`; edit the model, not this table -->"
)
END = "<!-- end of the generated skill.meta.json reference -->"


class _Generator(GenerateJsonSchema):
    """Pydantic's JSON Schema without a title for every field (``"title": "Max Tokens"``): the
    titles left name a value's kind (``condition``, ``tool name``) and read as the type."""

    def field_title_should_be_set(self, schema: core_schema.CoreSchemaType | Any) -> bool:
        return False


def meta_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``skill.meta.json``."""
    schema = SkillMeta.model_json_schema(schema_generator=_Generator)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def schema_text() -> str:
    """:func:`meta_json_schema` as the shipped file holds it."""
    return json.dumps(meta_json_schema(), indent=2, ensure_ascii=False) + "\n"


def meta_reference() -> str:
    """docs/skills.md's table of the fields, one row per field (an object's fields as dot
    paths), in the model's order."""
    root = meta_json_schema()
    rows = ["| field | type | default | what it does |", "|---|---|---|---|"]
    rows += [f"| {' | '.join(cells)} |" for cells in _rows(SkillMeta, root, ())]
    return "\n".join(rows)


def with_reference(doc: str) -> str:
    """``doc`` (docs/skills.md) with the table between its markers made anew.

    Raises:
        ValueError: the markers are missing.
    """
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/skills.md has no {BEGIN!r} ... {END!r} markers")
    return f"{doc[: start + len(BEGIN)]}\n{meta_reference()}\n{doc[end:]}"


def _rows(
    model: type[BaseModel], root: Mapping[str, Any], loc: tuple[str, ...]
) -> Iterator[tuple[str, str, str, str]]:
    prefix = "".join(f"{part}." for part in loc)
    for name, info in model.model_fields.items():
        key = info.alias or name
        nested = _model(info.annotation)
        if nested is not None:
            yield from _rows(nested, root, (*loc, key))
            continue
        if info.is_required():
            default = "required"
        else:
            value = info.get_default(call_default_factory=True)
            default = "unset" if value is None else f"`{_json(value)}`"
        described = (info.description or "").replace("|", "\\|")
        yield f"`{prefix}{key}`", _words(root, (*loc, key)), default, described
    if schema_at(root, loc).get("patternProperties"):
        own = "Keys of your own: skilldeck ignores them (a plugin may read its own)."
        yield f"`{prefix}x-…`", "anything", "—", own


def _model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (also when it may be null), or ``None``."""
    options = getattr(annotation, "__args__", None) or (annotation,)
    models = [o for o in options if isinstance(o, type) and issubclass(o, BaseModel)]
    return models[0] if models else None


def _json(value: Any) -> str:
    value = list(value) if isinstance(value, tuple) else value
    return value if isinstance(value, str) else json.dumps(value)


def _words(root: Mapping[str, Any], loc: tuple[Any, ...]) -> str:
    """The type of the value at ``loc`` in words: ``list of conditions``, ``integer 1–8``,
    ``{name: …}``."""
    schema = schema_at(root, loc)
    kind = schema.get("type")
    if "title" in schema:
        return str(schema["title"])
    if "enum" in schema:
        return ", ".join(f"`{v}`" for v in schema["enum"])
    if kind == "array":
        item = _words(root, (*loc, 0))
        return f"list of {item if item.endswith('s') else item + 's'}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        # A key no object has: the schema of the map's values.
        return f"{{name: {_words(root, (*loc, '*'))}}}"
    if kind in ("integer", "number"):
        low, high = (_number(schema.get(k)) for k in ("minimum", "maximum"))
        if low is not None and high is not None:
            return f"{kind} {low}–{high}"
        if low is not None:
            return f"{kind} ≥ {low}"
        return str(kind)
    return {"boolean": "true or false"}.get(str(kind), str(kind or "anything"))


def _number(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m skilldeck.skills.meta_schema",
        description="Print the JSON Schema of skill.meta.json, made from its model.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--write", action="store_true", help=f"rewrite {SCHEMA_FILE.name} and docs/skills.md"
    )
    action.add_argument("--check", action="store_true", help="exit 1 if either file is out of date")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        sys.stdout.write(schema_text())
        return 0
    if not DOCS_FILE.is_file():
        parser.error(f"{DOCS_FILE} does not exist: --write and --check work in a checkout")
    try:
        doc = with_reference(DOCS_FILE.read_text("utf-8"))
    except ValueError as exc:
        parser.error(str(exc))
    if args.check:
        drifted = [
            str(file)
            for file, text in ((SCHEMA_FILE, schema_text()), (DOCS_FILE, doc))
            if not file.is_file() or file.read_text("utf-8") != text
        ]
        for file in drifted:
            print(f"{file}: out of date; run python -m skilldeck.skills.meta_schema --write")
        return 1 if drifted else 0
    SCHEMA_FILE.write_text(schema_text(), "utf-8")
    DOCS_FILE.write_text(doc, "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
