"""Open checkpointers and stores from URLs; read runs back from their checkpoints.

The names are imported on first use (see :mod:`skilldeck._internal.lazy`): the thread index
(:mod:`skilldeck.checkpoints.threads`) is read by fast CLI commands without LangGraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skilldeck._internal.lazy import exports

if TYPE_CHECKING:
    from skilldeck.checkpoints.claims import InterruptClaims
    from skilldeck.checkpoints.open import (
        AsyncPersistence,
        Persistence,
        open_async_persistence,
        open_checkpointer,
        open_persistence,
        strict_serde,
    )

__all__ = [
    "AsyncPersistence",
    "InterruptClaims",
    "Persistence",
    "open_async_persistence",
    "open_checkpointer",
    "open_persistence",
    "strict_serde",
]

__getattr__, __dir__ = exports(
    __name__,
    globals(),
    {
        "InterruptClaims": "skilldeck.checkpoints.claims",
        **dict.fromkeys(
            (
                "AsyncPersistence",
                "Persistence",
                "open_async_persistence",
                "open_checkpointer",
                "open_persistence",
                "strict_serde",
            ),
            "skilldeck.checkpoints.open",
        ),
    },
)
