"""A registry of named extensions, one per extension point (tool families, execution modes,
output modes, graders, eval environments): the private half of their public decorators.

A name is registered once; registering an equal entry again is a no-op (the same class, or
the same function with the same options), another one under a taken name is a
:class:`~skilldeck.errors.PluginError`. Every lookup loads the plugins first
(:func:`skilldeck.plugins.load_plugins`), so what an installed plugin adds is there whoever
looks first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Generic, TypeVar

from skilldeck.errors import PluginError
from skilldeck.plugins import load_plugins

__all__ = ["Registry"]

T = TypeVar("T")

_NAME = re.compile(r"[a-z][a-z0-9_.-]*\Z")


class Registry(Generic[T]):
    """Extensions of one kind by name, in the order they were registered.

    Args:
        kind: what an entry is, for messages (``"execution mode"``).
        decorator: how a plugin adds one (``"@execution_mode(name)"``).
    """

    def __init__(self, kind: str, decorator: str) -> None:
        self.kind = kind
        self.decorator = decorator
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}

    def add(self, name: str, item: T, *, origin: object = None) -> T:
        """Register ``item`` as ``name``; ``origin`` is the class or function messages name
        as its definition (default: ``item``).

        Raises:
            PluginError: the name is not a lowercase identifier, or another object holds it.
        """
        if not isinstance(name, str) or not _NAME.match(name):
            raise PluginError(
                f"{self.kind} name {name!r} is not allowed: use lowercase letters, digits, "
                "'_', '-' and '.', starting with a letter"
            )
        held = self._items.get(name)
        where = _origin(item if origin is None else origin)
        if held is not None and held != item:
            raise PluginError(
                f"{self.kind} {name!r} is already registered by {self._origins[name]}; "
                f"{where} must use another name"
            )
        self._items[name] = item
        self._origins[name] = where
        return item

    def get(self, name: str) -> T | None:
        """The entry ``name``, or ``None``."""
        load_plugins()
        return self._items.get(name)

    def names(self) -> list[str]:
        """Every name, in registration order."""
        load_plugins()
        return list(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        """Every ``(name, entry)``, in registration order."""
        load_plugins()
        return iter(list(self._items.items()))

    def unknown(self, name: str) -> str:
        """What to say of a lookup of ``name`` that found nothing."""
        return (
            f"no {self.kind} named {name!r}; available: {', '.join(self.names()) or 'none'} "
            f"(a plugin adds one with {self.decorator}: see docs/plugins.md)"
        )


def _origin(item: object) -> str:
    """Where ``item`` was defined, as ``module.QualifiedName``."""
    target = item if hasattr(item, "__qualname__") else type(item)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
