"""Lazy package exports (PEP 562): a package's public names, imported on first use.

A package ``__init__`` that imported its whole API would make every submodule import pay for
LangGraph, LangChain and Chroma; the CLI's fast commands (``--help``, ``threads``) import
submodules only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(
    package: str, namespace: dict[str, Any], sources: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose public names live in
    ``sources`` (``{name: module}``); a name is imported once, then cached in ``namespace``."""

    def __getattr__(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *sources})

    return __getattr__, __dir__
