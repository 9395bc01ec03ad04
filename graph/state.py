"""The state schema: small, JSON-native, and free of growing lists.

The state holds the run's ``context`` and ``input``, the identity the run was started with,
``profile``, every skill's ``data`` fields at the top level (seed 004), the last skill attempt,
the in-flight turn and the pending card. Conversations and tool results live in the store and
are referred to by id; the checkpoint history is the log of what each step did. So each
checkpoint stays about the same size however long a thread runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, TypedDict, get_type_hints

from skilldeck._internal.paths import deep_merge
from skilldeck.skills.bundle import SkillBundle

__all__ = [
    "RESERVED_KEYS",
    "RunStatus",
    "SkillDeckState",
    "build_state_schema",
    "data_view",
    "merge_profile",
]

RunStatus = Literal["running", "interrupted", "finished", "failed", "no_skill"]


def merge_profile(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    """Profile increments merge key by key into the profile (seed 004)."""
    return deep_merge(old or {}, new or {})


class SkillDeckState(TypedDict, total=False):
    """Keys every deck's state has; each skill's data fields are added beside them."""

    context: str
    input: dict[str, Any]
    user_id: str | None
    matter_id: str | None
    profile: Annotated[dict[str, Any], merge_profile]
    next_skill: str | None
    response: str | None
    status: RunStatus
    error: dict[str, Any] | None
    card: dict[str, Any] | None
    attempt: dict[str, Any] | None
    turn: dict[str, Any] | None
    calls: dict[str, int]
    guard: dict[str, Any] | None


RESERVED_KEYS = frozenset(SkillDeckState.__annotations__)


def build_state_schema(bundles: Iterable[SkillBundle]) -> type:
    """A TypedDict with the core keys plus every data field of ``bundles`` (the builder has
    refused data fields that collide with a core key)."""
    fields: dict[str, Any] = get_type_hints(SkillDeckState, include_extras=True)
    for bundle in bundles:
        fields.update(dict.fromkeys(bundle.data_keys, Any))
    schema: type = TypedDict("DeckState", fields, total=False)  # type: ignore[misc]
    return schema


def data_view(state: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The data fields among ``keys`` that ``state`` holds."""
    return {k: state[k] for k in keys if k in state}
