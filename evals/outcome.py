"""What a trial leaves behind: final state, environment state, workspace diff and transcript.

The transcript is read back from the checkpoints, not captured on the side: the turn ids the
thread's checkpoints recorded, then each turn's messages from the deck's store. So it shows
exactly what the production graph persisted.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

import skilldeck.nodes.transcript as transcript
from skilldeck.graph.records import Turn
from skilldeck.graph.state import RunView
from skilldeck.nodes.prompt import SUBMIT_TOOL

if TYPE_CHECKING:
    from skilldeck.deck import SkillDeck

__all__ = [
    "FileChange",
    "Outcome",
    "ToolCall",
    "diff_files",
    "read_transcript",
    "snapshot",
]

ChangeKind = Literal["added", "changed", "removed"]
_MAX_DIFF = 20_000


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of the trial, in order: canonical ``name``, arguments and result."""

    name: str
    args: dict[str, Any]
    ok: bool | None
    result: str | None
    skill: str | None = None
    called_as: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "called_as": self.called_as or self.name,
            "args": self.args,
            "ok": self.ok,
            "result": self.result,
            "skill": self.skill,
        }


@dataclass(frozen=True, slots=True)
class FileChange:
    """A file the trial added, changed or removed in its workspace, with a unified diff."""

    path: str
    change: ChangeKind
    diff: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "change": self.change, "diff": self.diff}


@dataclass(frozen=True)
class Outcome:
    """Everything graders look at after one trial.

    ``view()`` is the JSON object path-based graders read: ``state.*`` (with ``status``),
    ``status``, ``card`` (the pending card), ``error``, ``environment``, ``response``.
    """

    trial_id: str
    task_id: str
    skill: str
    epoch: int
    thread_id: str
    status: str
    state: dict[str, Any]
    workspace: Path
    card: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    changes: tuple[FileChange, ...] = ()
    transcript: tuple[dict[str, Any], ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    fixture: Mapping[str, bytes] = field(default_factory=dict)
    elapsed_s: float = 0.0
    resolve: Callable[[str], str | None] | None = field(default=None, repr=False, compare=False)

    def canonical(self, tool: str) -> str:
        """A tool's canonical name (aliases such as ``lexical_search`` resolved)."""
        return (self.resolve(tool) if self.resolve else None) or tool

    def tools_used(self) -> list[str]:
        """Canonical names of the tools called, in order.

        Modes whose steps are plans rather than tool calls (the planner) record their tools in
        the attempt's trajectory; that list stands in when the transcript has no tool calls.
        """
        if self.tool_calls:
            return [c.name for c in self.tool_calls]
        rounds = (self.state.get("attempt") or {}).get("trajectory")
        if not isinstance(rounds, list):
            return []
        return [
            self.canonical(str(r["tool"]))
            for r in rounds
            if isinstance(r, Mapping) and r.get("tool")
        ]

    def view(self) -> dict[str, Any]:
        return {
            "state": {**self.state, "status": self.status},
            "status": self.status,
            "card": self.card,
            "error": self.error,
            "environment": self.environment,
            "response": self.state.get("response"),
        }

    def read(self, relative: str) -> str | None:
        """The workspace file's text now, or ``None`` when it is missing or not UTF-8."""
        path = self.workspace / relative
        try:
            return path.read_text("utf-8") if path.is_file() else None
        except UnicodeDecodeError:
            return None

    def fixture_text(self, relative: str) -> str | None:
        raw = self.fixture.get(relative)
        return _decode(raw) if raw is not None else None

    def changed(self, *kinds: ChangeKind) -> list[str]:
        """Paths of the changes of ``kinds`` (all kinds when none are given)."""
        return [c.path for c in self.changes if not kinds or c.change in kinds]

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "thread_id": self.thread_id,
            "status": self.status,
            "error": self.error,
            "environment": self.environment,
            "diff": [c.to_dict() for c in self.changes],
            "transcript": list(self.transcript),
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "elapsed_s": round(self.elapsed_s, 3),
        }


# -- workspace --------------------------------------------------------------------------------
def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by POSIX relative path."""
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def diff_files(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> tuple[FileChange, ...]:
    """Added, changed and removed files between two snapshots, sorted by path."""
    changes: list[FileChange] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        kind: ChangeKind = "added" if old is None else "removed" if new is None else "changed"
        changes.append(FileChange(path, kind, _unified(path, old, new)))
    return tuple(changes)


def _decode(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _unified(path: str, old: bytes | None, new: bytes | None) -> str:
    old_text = "" if old is None else _decode(old)
    new_text = "" if new is None else _decode(new)
    if old_text is None or new_text is None:
        return f"binary file ({len(old or b'')} -> {len(new or b'')} bytes)"
    lines = difflib.unified_diff(
        old_text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        fromfile="/dev/null" if old is None else f"a/{path}",
        tofile="/dev/null" if new is None else f"b/{path}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text if len(text) <= _MAX_DIFF else text[:_MAX_DIFF] + "\n... (diff cut)\n"


# -- transcript -------------------------------------------------------------------------------
def turn_ids(deck: SkillDeck, thread_id: str) -> list[tuple[str, str, str | None]]:
    """``(skill, turn id, head)`` of every turn the thread's checkpoints recorded, oldest
    first, with the farthest transcript head any checkpoint saw of it (the whole turn)."""
    config: Any = {"configurable": {"thread_id": thread_id}}
    seen: dict[str, tuple[str, str | None]] = {}
    for snap in reversed(list(deck.graph.get_state_history(config))):
        view = RunView(snap.values)
        for record in (view.turn, view.attempt):
            if record is None:
                continue
            turn_id = record.id if isinstance(record, Turn) else record.turn
            if record.head is not None or turn_id not in seen:
                seen[turn_id] = (record.skill, record.head)
    return [(skill, turn, head) for turn, (skill, head) in seen.items()]


def read_transcript(
    deck: SkillDeck, thread_id: str
) -> tuple[tuple[dict[str, Any], ...], tuple[ToolCall, ...]]:
    """Every model turn and tool result in order, and the tool calls with their results.

    System prompts are left out (they are the same for every trial of a skill).
    """
    entries: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for skill, turn, head in turn_ids(deck, thread_id):
        messages = transcript.read(deck.store, turn, head)
        results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
        for message in messages:
            entry = _entry(message, skill, turn)
            if entry is not None:
                entries.append(entry)
            if isinstance(message, AIMessage):
                calls.extend(_calls(deck, message, results, skill))
    return tuple(entries), tuple(calls)


def _entry(message: BaseMessage, skill: str, turn: str) -> dict[str, Any] | None:
    if isinstance(message, SystemMessage):
        return None
    content = message.content if isinstance(message.content, str) else str(message.content)
    entry: dict[str, Any] = {"skill": skill, "turn": turn, "content": content}
    if isinstance(message, HumanMessage):
        entry["role"] = "user"
    elif isinstance(message, ToolMessage):
        entry.update(role="tool", name=message.name, status=message.status)
    elif isinstance(message, AIMessage):
        entry["role"] = "model"
        if message.name:
            entry["name"] = message.name
        if message.tool_calls:
            entry["tool_calls"] = [
                {"name": c["name"], "args": c["args"]} for c in message.tool_calls
            ]
    else:
        entry["role"] = message.type
    return entry


def _calls(
    deck: SkillDeck, message: AIMessage, results: Mapping[str, ToolMessage], skill: str
) -> list[ToolCall]:
    calls = []
    for call in message.tool_calls:
        if call["name"] == SUBMIT_TOOL:
            continue
        result = results.get(call.get("id") or "")
        calls.append(
            ToolCall(
                name=deck.tools.resolve(call["name"]) or call["name"],
                args=dict(call["args"]),
                ok=None if result is None else result.status != "error",
                result=None if result is None else str(result.content),
                skill=skill,
                called_as=call["name"],
            )
        )
    return calls
