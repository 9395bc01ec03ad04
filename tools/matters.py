"""``matters__*`` tools: a skill reads and writes the record of the run's matter (seed 004).

A matter's record is a JSON object: its ``title``, its ``status``, and the fields skills write.
It lives in the deck's checkpoint database beside the matters table; the deck's thread index
is the store (:class:`MatterRecords`), so this module needs no database of its own.

The rules are the file tools': a skill calls them only if its meta lists them; the matter is the
run's (``matter_id`` is bound by the runtime, never an argument the model sees); and the run's
user must own the matter or have been granted it (with the ``claim`` policy, a matter nobody
owns yet becomes the user's, as the HTTP service does when a run names it). ``matters__update``
merges into the record as a skill's ``profile`` merges into the state (objects key by key,
other values replace), and writes only the fields the calling skill declares in
``outputs.matter``, which the runtime binds as ``matter_fields``. A refused update writes
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Protocol

from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from skilldeck._internal.paths import deep_merge
from skilldeck.errors import ToolError
from skilldeck.skills.bundle import MATTER_WRITE_TOOL
from skilldeck.tools.registry import ToolHost, tool_family

__all__ = ["MATTER_READ_TOOL", "MATTER_TOOLS", "MAX_RECORD_BYTES", "MatterRecords", "matter_tools"]

MATTER_READ_TOOL = "matters__get"
MATTER_TOOLS = (MATTER_READ_TOOL, MATTER_WRITE_TOOL)
#: The largest record, as UTF-8 JSON: a matter's record is its facts, not its documents.
MAX_RECORD_BYTES = 64 * 1024

#: A field of the record: its keys from the top (``matter.a.b`` is ``("a", "b")``).
FieldPath = tuple[str, ...]


class MatterRecords(Protocol):
    """Where matter records live: the deck's thread index
    (:class:`~skilldeck.checkpoints.threads.ThreadIndex`) is one."""

    def may_use_matter(self, user_id: str, matter_id: str, *, claim: bool = True) -> bool:
        """Whether ``user_id`` owns ``matter_id`` or was granted it (``claim``: a matter nobody
        owns becomes theirs)."""
        ...

    def matter_record(self, matter_id: str) -> dict[str, Any] | None:
        """The matter's record, or ``None`` if nobody owns the matter."""
        ...

    def update_matter_record(
        self, matter_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Replace the record with ``change(record)`` atomically; the new record."""
        ...


class _GetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: Annotated[str | None, InjectedToolArg] = None
    matter_id: Annotated[str | None, InjectedToolArg] = None


class _UpdateArgs(_GetArgs):
    # An object to the model; Any to pydantic, so the tool's own check answers a non-object
    # with a plain error instead of a validation report.
    fields: Annotated[Any, WithJsonSchema({"type": "object"})] = Field(
        description='The fields to write, as an object under the record: {"status": '
        '"intake_done"}; objects merge key by key, other values replace.'
    )
    skill: Annotated[str | None, InjectedToolArg] = None
    matter_fields: Annotated[tuple[str, ...] | None, InjectedToolArg] = None


def _split(path: str) -> FieldPath:
    return tuple(path.split(".")[1:])  # "matter.a.b" -> ("a", "b")


def _show(path: FieldPath) -> str:
    return ".".join(("matter", *path))


def _walk(
    value: Mapping[str, Any], declared: Sequence[FieldPath], at: FieldPath = ()
) -> tuple[list[FieldPath], list[FieldPath]]:
    """``(written, refused)``: the paths of ``value`` at or below a declared field, and those
    that are not. Above a declared field an object is followed down to it; any other value
    there would replace more than the skill may write."""
    written: list[FieldPath] = []
    refused: list[FieldPath] = []
    for key, item in value.items():
        here = (*at, key)
        if any(here[: len(d)] == d for d in declared):
            written.append(here)
        elif item and isinstance(item, Mapping) and any(d[: len(here)] == here for d in declared):
            ok, bad = _walk(item, declared, here)
            written += ok
            refused += bad
        else:
            refused.append(here)
    return written, refused


def matter_tools(records: Callable[[], MatterRecords], *, claim: bool = True) -> list[BaseTool]:
    """``matters__get`` and ``matters__update`` over the records ``records()`` returns (called
    at each use: the deck's index is opened after its registry is made). ``claim``: the
    ``claim`` matter policy (a matter nobody owns becomes the run's user's)."""

    def usable(user_id: str | None, matter_id: str | None) -> tuple[MatterRecords, str]:
        if not matter_id:
            raise ToolError("this tool works on the run's matter, and the run has no matter_id")
        if not user_id:
            raise ToolError(
                "matters tools need the run's user (the matter's owner, or a user it is granted "
                "to): start the run with user_id (CLI: --user)"
            )
        store = records()
        if not store.may_use_matter(user_id, matter_id, claim=claim):
            raise ToolError(f"matter {matter_id!r} not found for user {user_id!r}")
        return store, matter_id

    def get(user_id: str | None = None, matter_id: str | None = None) -> dict[str, Any]:
        store, matter = usable(user_id, matter_id)
        record = store.matter_record(matter)
        if record is None:  # the owner's matter went away between the two reads
            raise ToolError(f"matter {matter!r} not found for user {user_id!r}")
        return record

    def update(
        fields: Any,
        user_id: str | None = None,
        matter_id: str | None = None,
        skill: str | None = None,
        matter_fields: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        if not skill:
            raise ToolError(f"{MATTER_WRITE_TOOL} writes for the calling skill; no skill is bound")
        declared = [_split(p) for p in matter_fields or ()]
        if not declared:
            raise ToolError(
                f"skill {skill!r} declares no matter fields it may write: list them in its "
                'skill.meta.json, "outputs": {"matter": ["matter.status"]}'
            )
        if not isinstance(fields, Mapping) or not fields:
            raise ToolError(
                "fields must be a non-empty JSON object of the matter fields to write, such as "
                f'{{"status": "intake_done"}}; got {json.dumps(fields)[:80]}'
            )
        written, refused = _walk(fields, declared)
        if refused:
            raise ToolError(
                f"skill {skill!r} may not write {', '.join(map(_show, refused))}; it may write "
                f"{', '.join(matter_fields or ())} and below (outputs.matter). Nothing was "
                "written"
            )
        store, matter = usable(user_id, matter_id)

        def change(record: dict[str, Any]) -> dict[str, Any]:
            merged = deep_merge(record, fields)
            size = len(json.dumps(merged, ensure_ascii=False).encode("utf-8"))
            if size > MAX_RECORD_BYTES:
                raise ToolError(
                    f"the matter record would be {size:,} bytes of JSON; at most "
                    f"{MAX_RECORD_BYTES:,} are kept: write less (summaries, not documents). "
                    "Nothing was written"
                )
            return merged

        record = store.update_matter_record(matter, change)
        return {"written": [_show(p) for p in written], "record": record}

    return [
        StructuredTool.from_function(
            get,
            name=MATTER_READ_TOOL,
            description="The record of this run's matter: its title, its status and the "
            "fields skills wrote.",
            args_schema=_GetArgs,
        ),
        StructuredTool.from_function(
            update,
            name=MATTER_WRITE_TOOL,
            description="Write fields of this run's matter record (merged: objects key by key, "
            "other values replace); only the matter fields this skill declares.",
            args_schema=_UpdateArgs,
        ),
    ]


@tool_family("matters")
def _matters_family(host: ToolHost) -> list[BaseTool]:
    records = host.stores.get("matters")
    return matter_tools(records, claim=host.claim_matters) if records is not None else []
