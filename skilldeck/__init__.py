"""skilldeck: run folder-defined agent skills as a durable LangGraph workflow.

>>> from skilldeck import SkillDeck
>>> deck = SkillDeck("skills/")

The public names are imported on first use (PEP 562), so ``import skilldeck.cli`` or any other
submodule does not pay for LangGraph, LangChain and the tools until a command needs them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from skilldeck._internal.lazy import exports


def _checkout_root() -> str | None:
    """The repository's root when this is its checkout, not an installed copy: there graph/,
    nodes/, skills/, tools/, checkpoints/ and evals/ sit beside this folder (pyproject's
    package-dir installs them inside it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    inside = os.path.isdir(os.path.join(here, "graph"))
    return (
        root if not inside and os.path.isfile(os.path.join(root, "graph", "__init__.py")) else None
    )


# ``python`` run in the checkout's root imports this folder before any installed copy; without
# its subpackages that would be a broken package, so the root serves them as they are.
if (_root := _checkout_root()) is not None:
    __path__.append(_root)

if TYPE_CHECKING:
    from skilldeck.deck import SkillDeck
    from skilldeck.errors import (
        AlreadyResumedError,
        BundleError,
        CardPendingError,
        CheckpointError,
        ErrorCode,
        InvalidAnswersError,
        InvalidInputError,
        ModelConfigError,
        ModelUnavailableError,
        NoPendingCardError,
        SkillDeckError,
        StaleInterruptError,
        ThreadBusyError,
        ThreadNotFoundError,
    )
    from skilldeck.graph.records import Issue, RunError
    from skilldeck.scripted import ScriptedChatModel
    from skilldeck.settings import Settings
    from skilldeck.skills import SkillBundle, load_skills
    from skilldeck.types import (
        Card,
        CardEvent,
        CardQuestion,
        Continue,
        DoneEvent,
        ErrorEvent,
        Event,
        Resume,
        RunOptions,
        RunRequest,
        RunResult,
        SkillResultEvent,
        StepEvent,
        ThreadStatus,
        ThreadSummary,
        ToolCallEvent,
    )

# Each public name and the module it lives in.
_SOURCES = {
    "SkillDeck": "skilldeck.deck",
    "ScriptedChatModel": "skilldeck.scripted",
    "Settings": "skilldeck.settings",
    "SkillBundle": "skilldeck.skills",
    "load_skills": "skilldeck.skills",
    **dict.fromkeys(
        (
            "AlreadyResumedError",
            "BundleError",
            "CardPendingError",
            "CheckpointError",
            "ErrorCode",
            "InvalidAnswersError",
            "InvalidInputError",
            "ModelConfigError",
            "ModelUnavailableError",
            "NoPendingCardError",
            "SkillDeckError",
            "StaleInterruptError",
            "ThreadBusyError",
            "ThreadNotFoundError",
        ),
        "skilldeck.errors",
    ),
    **dict.fromkeys(("Issue", "RunError"), "skilldeck.graph.records"),
    **dict.fromkeys(
        (
            "Card",
            "CardEvent",
            "CardQuestion",
            "Continue",
            "DoneEvent",
            "ErrorEvent",
            "Event",
            "Resume",
            "RunOptions",
            "RunRequest",
            "RunResult",
            "SkillResultEvent",
            "StepEvent",
            "ThreadStatus",
            "ThreadSummary",
            "ToolCallEvent",
        ),
        "skilldeck.types",
    ),
}

__all__ = [
    "AlreadyResumedError",
    "BundleError",
    "Card",
    "CardEvent",
    "CardPendingError",
    "CardQuestion",
    "CheckpointError",
    "Continue",
    "DoneEvent",
    "ErrorCode",
    "ErrorEvent",
    "Event",
    "InvalidAnswersError",
    "InvalidInputError",
    "Issue",
    "ModelConfigError",
    "ModelUnavailableError",
    "NoPendingCardError",
    "Resume",
    "RunError",
    "RunOptions",
    "RunRequest",
    "RunResult",
    "ScriptedChatModel",
    "Settings",
    "SkillBundle",
    "SkillDeck",
    "SkillDeckError",
    "SkillResultEvent",
    "StaleInterruptError",
    "StepEvent",
    "ThreadBusyError",
    "ThreadNotFoundError",
    "ThreadStatus",
    "ThreadSummary",
    "ToolCallEvent",
    "load_skills",
]


__getattr__, __dir__ = exports(__name__, globals(), _SOURCES)
