"""skilldeck: run folder-defined agent skills as a durable LangGraph workflow.

>>> from skilldeck import SkillDeck
>>> deck = SkillDeck("skills/")

The public names are imported on first use (PEP 562), so ``import skilldeck.cli`` or any other
submodule does not pay for LangGraph, LangChain and the tools until a command needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skilldeck._internal.lazy import exports

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
        NoPendingCardError,
        SkillDeckError,
        StaleInterruptError,
        ThreadBusyError,
        ThreadNotFoundError,
    )
    from skilldeck.scripted import ScriptedChatModel
    from skilldeck.settings import Settings
    from skilldeck.skills import SkillBundle, load_skills
    from skilldeck.types import (
        Card,
        CardEvent,
        CardQuestion,
        DoneEvent,
        ErrorEvent,
        Event,
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
            "NoPendingCardError",
            "SkillDeckError",
            "StaleInterruptError",
            "ThreadBusyError",
            "ThreadNotFoundError",
        ),
        "skilldeck.errors",
    ),
    **dict.fromkeys(
        (
            "Card",
            "CardEvent",
            "CardQuestion",
            "DoneEvent",
            "ErrorEvent",
            "Event",
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
    "DoneEvent",
    "ErrorCode",
    "ErrorEvent",
    "Event",
    "InvalidAnswersError",
    "InvalidInputError",
    "ModelConfigError",
    "NoPendingCardError",
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
