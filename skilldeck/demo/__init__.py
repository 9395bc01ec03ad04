"""The litigation-intake demo: a scripted model, a matter's files and the answers to its card.

``skilldeck demo`` runs it; tests, benchmarks and notebooks reuse these constants.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["ANSWERS", "CONTEXT", "FILES", "INPUT", "MATTER_ID", "SCRIPT"]

HERE = Path(__file__).parent
SCRIPT = HERE / "litigation-intake.yaml"
#: The files root of the demo: litigation-intake's eval fixtures (one matter, ``demo-matter``).
FILES = Path(str(files("skilldeck.skills"))) / "litigation-intake" / "fixtures"
CONTEXT = "matter"
MATTER_ID = "demo-matter"
INPUT = {"documents": ["complaint.txt"]}
ANSWERS = {
    "profile.defendant.name": "Acme Logistics Ltd.",
    "profile.defendant.type": "organisation",
}
