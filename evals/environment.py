"""``environment_state``: what a skill left in its workspace, in its own terms.

A skill's extractor (``@environment("skill-name")``, registered by a plugin like a grader: the
card-agent's and pkm-agent's are in :mod:`skilldeck.evals.graders.card` and
:mod:`~skilldeck.evals.graders.pkm`) says it; any other skill's environment is its data fields
and the run status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from skilldeck._internal.registry import Registry
from skilldeck.evals.outcome import Outcome

__all__ = ["Extractor", "environment", "environment_state"]

#: A skill's environment extractor: ``(outcome, task input) -> state``.
Extractor = Callable[[Outcome, Mapping[str, Any]], dict[str, Any]]
_EXTRACTORS: Registry[Extractor] = Registry("eval environment", '@environment("skill-name")')


def environment(skill: str) -> Callable[[Extractor], Extractor]:
    """Register the environment extractor of ``skill``: ``(outcome, task input) -> dict``.

    Raises:
        PluginError: another extractor holds ``skill``.
    """

    def register(fn: Extractor) -> Extractor:
        return _EXTRACTORS.add(skill, fn)

    return register


def environment_state(
    outcome: Outcome, task_input: Mapping[str, Any], data_keys: Iterable[str]
) -> dict[str, Any]:
    """The environment state of ``outcome``: the skill's extractor, or its data fields."""
    extractor = _EXTRACTORS.get(outcome.skill)
    if extractor is not None:
        return extractor(outcome, task_input)
    data = {k: outcome.state[k] for k in data_keys if k in outcome.state}
    return {**data, "status": outcome.status}
