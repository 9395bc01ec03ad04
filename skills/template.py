"""The bundle ``skilldeck new NAME`` writes: ``skills/_template/`` with its name filled in.

The template is a real bundle (a test loads, runs and evaluates it): it asks one card and
finishes, on a scripted cassette of its own, with one eval case.
"""

from __future__ import annotations

import re
from pathlib import Path

from skilldeck.errors import SkillDeckError
from skilldeck.skills.trust import record_trust

__all__ = ["NAME_PATTERN", "TEMPLATE_DIR", "write_template"]

TEMPLATE_DIR = Path(__file__).parent / "_template"
#: A skill name as the Agent Skills specification has it: lowercase letters, digits and single
#: hyphens, 1-64 characters, no hyphen at either end.
NAME_PATTERN = re.compile(r"^(?=.{1,64}$)[a-z0-9]+(-[a-z0-9]+)*$")


def write_template(name: str, into: str | Path = ".") -> Path:
    """Write the template bundle as ``into/name``; the new folder. The bundle is its author's
    own code: it is recorded as trusted (:func:`~skilldeck.skills.trust.record_trust`), so
    the scripts they add to it run.

    Raises:
        SkillDeckError: ``name`` is not a valid skill name, or the folder exists.
    """
    if not NAME_PATTERN.match(name):
        raise SkillDeckError(
            f"skill name {name!r}: use 1-64 lowercase letters, digits and single hyphens, "
            "not starting or ending with a hyphen (e.g. note-taker)"
        )
    folder = Path(into).expanduser().resolve() / name
    if folder.exists():
        raise SkillDeckError(f"{folder} already exists: pick another name or --dir")
    for source in sorted(TEMPLATE_DIR.rglob("*")):
        if not source.is_file() or "__pycache__" in source.parts:
            continue
        target = folder / source.relative_to(TEMPLATE_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.read_text("utf-8").replace("{{name}}", name), "utf-8")
    record_trust(folder)
    return folder
