"""skilldeck: run folder-defined agent skills as a durable LangGraph workflow.

>>> from skilldeck import SkillDeck
>>> deck = SkillDeck("skills/")
"""

from skilldeck.deck import SkillDeck
from skilldeck.errors import (
    BundleError,
    CheckpointError,
    ErrorCode,
    InvalidAnswersError,
    ModelConfigError,
    NoPendingCardError,
    SkillDeckError,
    StaleInterruptError,
    ThreadNotFoundError,
)
from skilldeck.scripted import ScriptedChatModel
from skilldeck.settings import Settings
from skilldeck.skills import SkillBundle, load_skills
from skilldeck.types import Card, CardQuestion, RunResult, ThreadStatus, ThreadSummary

__all__ = [
    "BundleError",
    "Card",
    "CardQuestion",
    "CheckpointError",
    "ErrorCode",
    "InvalidAnswersError",
    "ModelConfigError",
    "NoPendingCardError",
    "RunResult",
    "ScriptedChatModel",
    "Settings",
    "SkillBundle",
    "SkillDeck",
    "SkillDeckError",
    "StaleInterruptError",
    "ThreadNotFoundError",
    "ThreadStatus",
    "ThreadSummary",
    "load_skills",
]
