"""Eval setup of nomemory-recall: a case's messages become its user's memory.

For each trial the harness (``skilldeck eval run``) calls :func:`setup`, which imports, as the
messages of ``input.user_id`` into the run's own message store: first the base fixture (a
``fixtures/<name>.jsonl`` of background talk, read as ``skilldeck messages import`` reads it),
then ``input.messages`` (records ``{id, role, ts, text}``, on the thread ``case``). Imports are
idempotent: a message already stored is skipped. The run input is ``{"question": ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from skilldeck.tools.importers import read_messages_file
from skilldeck.tools.messages import Message

if TYPE_CHECKING:
    from skilldeck.evals import Task, TrialSetup

CASE_THREAD = "case"


def case_messages(task: Task, trial: TrialSetup) -> list[Message]:
    """What a case puts in its user's memory: the base fixture's messages, then its own."""
    user = task.user_id
    if not user:
        raise ValueError("input.user_id is required: the messages are that user's")
    messages = list(read_messages_file(trial.fixture, user)) if trial.fixture else []
    records = task.input.get("messages") or []
    if not isinstance(records, list):
        raise ValueError("input.messages must be a list of {id, role, ts, text}")
    for i, raw in enumerate(records):
        missing = [k for k in ("id", "role", "ts", "text") if not _text(raw, k)]
        if missing:
            raise ValueError(f"input.messages[{i}]: missing or empty {', '.join(missing)}")
        messages.append(Message(raw["id"], user, CASE_THREAD, raw["role"], raw["ts"], raw["text"]))
    return messages


def setup(task: Task, trial: TrialSetup) -> dict[str, Any]:
    """Import the case's messages; the run asks only the question."""
    trial.deck.memory.add(case_messages(task, trial))
    return {"question": task.input["question"]}


def _text(raw: Any, key: str) -> bool:
    return isinstance(raw, Mapping) and isinstance(raw.get(key), str) and bool(raw[key])
