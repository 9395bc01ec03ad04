"""The state schema: small, JSON-native, and free of growing lists.

The state holds the run's ``context`` and ``input``, the identity the run was started with,
``profile``, every skill's ``data`` fields at the top level (seed 004), and the engine's own
records (:mod:`skilldeck.graph.records`): the last skill attempt, the in-flight turn, the
pending card, the error and the loop guard, each kept JSON-native and read through
:class:`RunView`. Conversations and tool results live in the store and are referred to by id;
the checkpoint history is the log of what each step did. So each checkpoint stays about the
same size however long a thread runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Annotated, Any, Literal, TypedDict, get_type_hints

from skilldeck._internal.paths import deep_merge
from skilldeck.graph.records import Attempt, Guard, Interrupt, Record, RunError, Turn
from skilldeck.skills.bundle import SkillBundle

__all__ = [
    "RESERVED_KEYS",
    "RunStatus",
    "RunView",
    "SkillDeckState",
    "build_state_schema",
    "data_view",
    "merge_profile",
]

RunStatus = Literal["running", "interrupted", "finished", "failed", "no_skill", "resumable"]


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


def dumped(record: Record | None) -> dict[str, Any] | None:
    """A record as the state holds it (``None`` stays ``None``)."""
    return None if record is None else record.dump()


class RunView:
    """A state read by attribute: the engine's records parsed (each on first use), the run's
    fields as they are. Nodes, the driver and the service read a state through it."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values

    @cached_property
    def turn(self) -> Turn | None:
        found = self.values.get("turn")
        return None if not found else Turn.load(found)

    @cached_property
    def attempt(self) -> Attempt | None:
        found = self.values.get("attempt")
        return None if not found else Attempt.load(found)

    @cached_property
    def card(self) -> Interrupt | None:
        found = self.values.get("card")
        return None if not found else Interrupt.load(found)

    @cached_property
    def error(self) -> RunError | None:
        found = self.values.get("error")
        return None if not found else RunError.load(found)

    @cached_property
    def guard(self) -> Guard | None:
        found = self.values.get("guard")
        return None if not found else Guard.load(found)

    @property
    def status(self) -> str | None:
        found = self.values.get("status")
        return None if found is None else str(found)

    @property
    def context(self) -> str | None:
        found = self.values.get("context")
        return None if found is None else str(found)

    @property
    def input(self) -> Mapping[str, Any]:
        return self.values.get("input") or {}

    @property
    def user_id(self) -> str | None:
        return self.values.get("user_id")

    @property
    def matter_id(self) -> str | None:
        return self.values.get("matter_id")

    @property
    def next_skill(self) -> str | None:
        return self.values.get("next_skill")

    @property
    def response(self) -> str | None:
        return self.values.get("response")

    @property
    def profile(self) -> Mapping[str, Any]:
        return self.values.get("profile") or {}

    @property
    def calls(self) -> dict[str, int]:
        """Model calls so far, by skill (a copy: a step writes the whole map back)."""
        return dict(self.values.get("calls") or {})
