"""Open checkpointers and stores from URLs; read runs back from their checkpoints."""

from skilldeck.checkpoints.open import (
    Persistence,
    open_checkpointer,
    open_persistence,
    strict_serde,
)

__all__ = ["Persistence", "open_checkpointer", "open_persistence", "strict_serde"]
