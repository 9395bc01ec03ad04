"""Where skilldeck keeps its state when no setting says otherwise: one folder, found the same
way from any working directory.

1. ``$SKILLDECK_HOME``, when set;
2. a project-local ``.skilldeck/`` in the current directory, when one exists (an earlier
   version kept its state there, and a project may want its runs beside it);
3. the per-user data folder (``~/.local/share/skilldeck`` on Linux, the platform's own
   elsewhere).

This module imports nothing heavy: the CLI's fast commands resolve it before anything else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HOME_ENV", "StateHome", "state_home"]

HOME_ENV = "SKILLDECK_HOME"


@dataclass(frozen=True, slots=True)
class StateHome:
    """The state folder and why it was chosen (``env``, ``project`` or ``user``)."""

    path: Path
    source: str

    def describe(self) -> str:
        """One line for people: the folder and where it came from."""
        why = {
            "env": f"${HOME_ENV}",
            "project": ".skilldeck/ in the current directory",
            "user": f"the per-user data folder; set ${HOME_ENV} to move it",
        }[self.source]
        return f"{self.path} ({why})"

    def sqlite_url(self, name: str) -> str:
        """``sqlite:///`` URL of a database file in the folder."""
        return f"sqlite:///{self.path / name}"


def state_home() -> StateHome:
    """The state folder for the current environment and working directory."""
    env = os.environ.get(HOME_ENV, "").strip()
    if env:
        return StateHome(Path(env).expanduser().resolve(), "env")
    local = Path.cwd() / ".skilldeck"
    if local.is_dir():
        return StateHome(local.resolve(), "project")
    from platformdirs import user_data_path

    return StateHome(user_data_path("skilldeck", appauthor=False), "user")
