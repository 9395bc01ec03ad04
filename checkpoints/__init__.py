"""Open checkpointers and stores from URLs; read runs back from their checkpoints."""

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
