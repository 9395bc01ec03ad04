"""Skill bundles: the loader/validator, and the built-in bundles (one folder each)."""

from skilldeck.skills.bundle import ExecutionConfig, Reference, SkillBundle
from skilldeck.skills.loader import builtin_skills_dir, load_bundle, load_skills
from skilldeck.skills.meta import SkillMeta

__all__ = [
    "ExecutionConfig",
    "Reference",
    "SkillBundle",
    "SkillMeta",
    "builtin_skills_dir",
    "load_bundle",
    "load_skills",
]
