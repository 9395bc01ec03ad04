"""The deck as LangGraph's own server serves a graph: ``langgraph.json`` names ``graph`` here,
so ``langgraph dev`` (and LangGraph Platform) serve the built-in skills, or the folders in
``SKILLDECK_SKILLS`` (separated by the path separator), with the ``SKILLDECK_*`` settings.

The server brings the checkpointer and the store; the graph routes a run's first step itself
(see :meth:`skilldeck.SkillDeck.server_graph`). Start a run with the input ``{"context": ...,
"input": {...}, "matter_id": ...}`` and the identity in ``config.configurable`` (``user_id``,
``matter_id``); a card is an interrupt, answered with ``Command(resume={interrupt_id:
answers})``.
"""

from __future__ import annotations

import os
from typing import Any

from skilldeck.deck import SkillDeck
from skilldeck.settings import Settings

__all__ = ["graph"]


def _skills() -> list[str] | None:
    given = os.environ.get("SKILLDECK_SKILLS")
    return [p for p in given.split(os.pathsep) if p] if given else None


def graph() -> Any:
    """The compiled graph the server runs (a factory: built when the server loads it)."""
    deck = SkillDeck(_skills(), checkpointer="memory://", settings=Settings())
    return deck.server_graph()
