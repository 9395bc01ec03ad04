"""skilldeck: run folder-defined agent skills as a durable LangGraph workflow.

>>> from skilldeck import SkillDeck
>>> deck = SkillDeck("skills/")
"""

from skilldeck.deck import SkillDeck
from skilldeck.errors import (
    AlreadyResumedError,
    BundleError,
    CardPendingError,
    CheckpointError,
    ErrorCode,
    InvalidAnswersError,
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
