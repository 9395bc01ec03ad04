"""Versioned resume: what going on with a thread does when its skill changed since it paused.

A turn records the fingerprint of the skill's bundle it runs (:attr:`Turn.fingerprint`), a
card the fingerprint of the bundle that asked it, and every attempt record the one it ran, so
the checkpoint history says which version of each skill each turn ran. When a deck resumes
(or continues) a thread whose pending card or turn was made by a version of its skill other
than the one the deck loads, the skill's policy decides (``on_change`` in its
skill.meta.json, else the deck's ``changed_skill`` setting):

- ``refuse`` (the default): :class:`~skilldeck.errors.SkillChangedError`; nothing is written.
- ``latest``: the new version goes on with the old state.
- ``migrate``: the bundle's ``scripts/migrate.py`` (``migrate(state, old_fingerprint)``, run
  only for a trusted bundle) returns an update of the state, applied before the run goes on.

Either way the card or turn is moved to the new version and an :class:`Upgrade` record goes
on the attempt record, so the history shows who changed what; no new code runs on an old state
silently. A card or turn without a fingerprint (paused before versions were recorded) goes on
as before.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Set
from typing import Any

from skilldeck._internal.redact import log_error
from skilldeck.errors import SkillChangedError
from skilldeck.graph.records import Upgrade, UpgradePolicy
from skilldeck.graph.state import RunView
from skilldeck.skills.bundle import SCRIPTS, SkillBundle
from skilldeck.skills.loader import load_script

__all__ = ["upgrade_update"]

log = logging.getLogger("skilldeck")

#: The keys a migration may write besides the skills' data fields: the engine's own records,
#: the run's identity and its context are the engine's to keep.
_MIGRATABLE = frozenset({"profile", "input"})


def upgrade_update(
    thread_id: str,
    state: Mapping[str, Any],
    bundles: Mapping[str, SkillBundle],
    default: UpgradePolicy,
    data_keys: Set[str],
) -> dict[str, Any]:
    """The state update that moves ``thread_id``'s pending card or turn to the version of
    its skill in ``bundles`` (empty when it is that version already).

    Raises:
        SkillChangedError: the skill changed and its policy refuses, asks for a migration the
            bundle does not have, or the migration failed or returned a bad update.
        UntrustedScriptsError: the policy is ``migrate`` and the deck does not trust the
            bundle; nothing ran.
    """
    view = RunView(state)
    held = view.card or view.turn
    if held is None or held.fingerprint is None:
        return {}
    bundle = bundles[held.skill]
    old, new = held.fingerprint, bundle.fingerprint
    if old == new:
        return {}
    policy = bundle.meta.on_change or default
    if policy == "refuse":
        source = "its skill.meta.json" if bundle.meta.on_change else "SKILLDECK_CHANGED_SKILL"
        raise SkillChangedError(
            thread_id, bundle.name, old, new, f"the policy is 'refuse' ({source})"
        )
    update = _migrated(thread_id, bundle, state, old, data_keys) if policy == "migrate" else {}
    upgrade = Upgrade(skill=bundle.name, policy=policy, old=old, new=new)
    if view.card is not None:
        update["card"] = view.card.model_copy(update={"fingerprint": new}).dump()
        if view.attempt is not None:
            update["attempt"] = view.attempt.model_copy(update={"upgrade": upgrade}).dump()
    if view.turn is not None:
        moved = {"fingerprint": new, "upgrade": upgrade}
        update["turn"] = view.turn.model_copy(update=moved).dump()
    return update


def _migrated(
    thread_id: str,
    bundle: SkillBundle,
    state: Mapping[str, Any],
    old: str,
    data_keys: Set[str],
) -> dict[str, Any]:
    """What the bundle's ``scripts/migrate.py`` makes of ``state`` (a copy: the script cannot
    change the thread's own), checked: a JSON object of the skills' fields."""
    script = SCRIPTS["migrate"]
    if "migrate" not in bundle.scripts:
        reason = f"the policy is 'migrate' and the bundle has no {script}"
        raise SkillChangedError(thread_id, bundle.name, old, bundle.fingerprint, reason)
    migrate = load_script(bundle, "migrate")  # UntrustedScriptsError before anything runs
    try:
        update = migrate(copy.deepcopy(dict(state)), old)
    except Exception as exc:
        said = log_error(log, f"{script} of skill {bundle.name} failed", exc, level=logging.WARNING)
        raise SkillChangedError(
            thread_id, bundle.name, old, bundle.fingerprint, f"its {script} failed ({said})"
        ) from None
    problem = _update_problem(update, data_keys | _MIGRATABLE)
    if problem:
        reason = f"its {script} returned {problem}"
        raise SkillChangedError(thread_id, bundle.name, old, bundle.fingerprint, reason)
    return dict(update)


def _update_problem(update: Any, allowed: Set[str]) -> str | None:
    """Why ``update`` is not a state update a migration may make, or ``None``."""
    if not isinstance(update, Mapping):
        return f"{type(update).__name__}, not a dict of state keys"
    foreign = sorted(str(k) for k in update if k not in allowed)
    if foreign:
        return (
            f"keys it may not write ({', '.join(foreign)}): a migration writes profile, input "
            "and the skills' data fields"
        )
    try:
        json.dumps(update, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"a value that is not JSON ({exc})"
    return None
