"""Staged workspace writes: a skill's file changes stand only if its attempt's output is accepted.

While the tools node runs a turn's calls, every file a tool writes (through
:func:`write_text_atomic`) is first recorded in the turn's undo log, in
the LangGraph store: the file's text before the attempt's first change to it, or that it did
not exist (and which folders the write created). The skill node then either keeps the changes
(:func:`commit`: the output was accepted) or restores every recorded file (:func:`rollback`:
the output was rejected, or the run failed), so "nothing merged" holds for the workspace as for
the state.

The log is in the store, not in memory, so a run resumed in another process after a crash can
still undo an attempt's writes; and a tool call that runs again (LangGraph re-runs a node
whose checkpoint was not written) finds its file already logged and keeps the original.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from langgraph.store.base import BaseStore

from skilldeck._internal.store_keys import thread_namespace

__all__ = ["commit", "record_write", "rollback", "staged", "write_text_atomic", "written_by"]

_LIMIT = 10_000  # files one attempt may change (a bound for the store search)


@dataclass(frozen=True, slots=True)
class _Log:
    store: BaseStore
    namespace: tuple[str, ...]
    call_id: str


_active: ContextVar[_Log | None] = ContextVar("skilldeck_undo_log", default=None)


def _namespace(thread_id: str, turn_id: str) -> tuple[str, ...]:
    return thread_namespace("undo", thread_id, turn_id)


@contextlib.contextmanager
def staged(store: BaseStore, thread_id: str, turn_id: str, call_id: str) -> Iterator[None]:
    """Record, in the turn's undo log, every file written inside the block (one tool call)."""
    token = _active.set(_Log(store, _namespace(thread_id, turn_id), call_id))
    try:
        yield
    finally:
        _active.reset(token)


def record_write(path: Path) -> None:
    """Called before ``path`` is written: log what it holds now, once per attempt. Outside a
    staged block (a tool used directly, not by a skill's turn) it does nothing."""
    log = _active.get()
    if log is None:
        return
    key = hashlib.sha256(str(path).encode()).hexdigest()
    if log.store.get(log.namespace, key) is not None:
        return  # changed before in this attempt: the original is logged already
    created = []
    parent = path.parent
    while not parent.exists():
        created.append(str(parent))
        parent = parent.parent
    text = path.read_text("utf-8") if path.is_file() else None
    value = {"path": str(path), "text": text, "folders": created, "call": log.call_id}
    log.store.put(log.namespace, key, value)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` all at once: a crash leaves the old file or the new one.

    The file keeps its mode; a new file gets 0644 (``mkstemp`` alone would make it 0600).
    Inside a skill's turn the write is staged (:func:`record_write`).
    """
    record_write(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same folder as the target, so the rename is atomic and never crosses file systems.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def written_by(store: BaseStore, thread_id: str, turn_id: str) -> dict[str, list[str]]:
    """The files each call of the current attempt changed, by call id."""
    out: dict[str, list[str]] = {}
    for item in store.search(_namespace(thread_id, turn_id), limit=_LIMIT):
        out.setdefault(item.value["call"], []).append(item.value["path"])
    return out


def commit(store: BaseStore, thread_id: str, turn_id: str) -> None:
    """Keep the attempt's changes: forget its undo log."""
    namespace = _namespace(thread_id, turn_id)
    for item in store.search(namespace, limit=_LIMIT):
        store.delete(namespace, item.key)


def rollback(store: BaseStore, thread_id: str, turn_id: str) -> list[str]:
    """Restore every file the attempt changed; returns their paths. Idempotent."""
    namespace = _namespace(thread_id, turn_id)
    restored = []
    for item in store.search(namespace, limit=_LIMIT):
        path, text = Path(item.value["path"]), item.value["text"]
        if text is None:
            path.unlink(missing_ok=True)
            for folder in item.value["folders"]:  # deepest first, only if left empty
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
        else:
            write_text_atomic(path, text)
        store.delete(namespace, item.key)
        restored.append(str(path))
    return sorted(restored)
