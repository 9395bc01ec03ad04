"""Execution modes: how a skill's node produces its output (``execution_config.mode``).

A mode is a :class:`~skilldeck.nodes.skill.SkillNode` subclass registered under its name with
``@execution_mode("name")``; the graph builder makes one node of it per skill of that mode
(``cls(ctx, bundle)``). ``single`` (one model turn with tool rounds) is the engine's own;
``planner`` (seed 001) and ``retrieval`` (seed 002) register from skilldeck's built-in plugin,
as an installed plugin's modes do (see :mod:`skilldeck.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from skilldeck._internal.registry import Registry
from skilldeck.errors import ErrorCode, SkillDeckError
from skilldeck.nodes.skill import SkillNode

__all__ = ["execution_mode", "execution_modes", "find_execution_mode"]

N = TypeVar("N", bound=type[SkillNode])
_MODES: Registry[type[SkillNode]] = Registry("execution mode", '@execution_mode("name")')


def execution_mode(name: str) -> Callable[[N], N]:
    """Register a :class:`~skilldeck.nodes.skill.SkillNode` subclass as the execution mode
    ``name`` (what a skill's ``execution_config.mode`` names).

    Raises:
        PluginError: another class holds ``name``.
    """

    def register(cls: N) -> N:
        if not (isinstance(cls, type) and issubclass(cls, SkillNode)):
            raise TypeError(f"execution mode {name!r} must be a SkillNode subclass, not {cls!r}")
        _MODES.add(name, cls)
        return cls

    return register


def execution_modes() -> list[str]:
    """The registered modes' names (the installed plugins' included)."""
    return _MODES.names()


def find_execution_mode(name: str) -> type[SkillNode]:
    """The node class of the execution mode ``name``.

    Raises:
        SkillDeckError: no mode of that name is registered (``INVALID_BUNDLE``).
    """
    cls = _MODES.get(name)
    if cls is None:
        raise SkillDeckError(_MODES.unknown(name), code=ErrorCode.INVALID_BUNDLE)
    return cls


execution_mode("single")(SkillNode)
