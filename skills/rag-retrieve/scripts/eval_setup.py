"""Eval setup of rag-retrieve: index the case's knowledge folder, ask only the question.

``input.knowledge`` names a fixture folder (``fixtures/<name>/``) that the harness
(``skilldeck eval run``) indexes into the run's own knowledge base, as ``skilldeck knowledge
index`` does; the local files that ``local_file_search`` searches are the trial's workspace,
copied from ``input.base_fixture``. A deck has one knowledge base and indexing mirrors a folder,
so every case of a run must name the same knowledge folder; it is indexed once per run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from skilldeck.evals import Task, TrialSetup


def setup(task: Task, trial: TrialSetup) -> dict[str, Any]:
    """Index ``input.knowledge`` (once per run); the run input is ``{"question": ...}``."""
    name = task.input.get("knowledge")
    if not isinstance(name, str) or not name:
        raise ValueError("input.knowledge must name a fixture folder to index")
    folder = trial.find_fixture(name)
    if not folder.is_dir():
        raise ValueError(f"input.knowledge {name!r} is {folder}, not a folder")

    def index() -> Path:
        trial.deck.knowledge.index(folder)
        return folder

    indexed = trial.once("knowledge", index)
    if indexed != folder:
        raise ValueError(
            f"input.knowledge is {folder}, but this run's knowledge base holds {indexed}: "
            "a run has one knowledge base, so its cases must share one knowledge folder"
        )
    return {"question": task.input["question"]}
