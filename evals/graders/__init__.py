"""Graders: the registry and the built-in graders (generic, card-agent, pkm-agent)."""

from skilldeck.evals.graders import card, generic, pkm
from skilldeck.evals.graders.base import (
    NO_JUDGE,
    ConfigReader,
    GradeContext,
    Grader,
    GradeResult,
    build_grader,
    grader,
    registered_graders,
)

__all__ = [
    "NO_JUDGE",
    "ConfigReader",
    "GradeContext",
    "GradeResult",
    "Grader",
    "build_grader",
    "card",
    "generic",
    "grader",
    "pkm",
    "registered_graders",
]
