"""Snapshots of in-process search indexes, kept in the message store so that a cold start (a
new process, or a user evicted from the index cache) loads an index instead of rebuilding it.

A snapshot is one ``.npz`` blob: numpy arrays, with each list of strings stored as one
NUL-joined UTF-8 array (:func:`joined`), so loading one never unpickles anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

__all__ = ["SNAPSHOT_MIN", "SnapshotKind", "SnapshotStore", "joined", "split"]

#: Indexes of fewer items rebuild faster than a snapshot round trip pays back; a snapshot is
#: rewritten once half as many items again came after it.
SNAPSHOT_MIN = 500

#: The lexicon of a user's messages (BM25), or the copy of the user's vectors.
SnapshotKind = Literal["lexicon", "vectors"]


class SnapshotStore(Protocol):
    """Where snapshots are kept: one per user and kind (:class:`~skilldeck.tools.messages.
    MessageStore` on SQLite or PostgreSQL)."""

    def save_snapshot(
        self,
        user_id: str,
        *,
        upto: int,
        count: int,
        version: str,
        data: bytes,
        kind: SnapshotKind = "lexicon",
    ) -> None: ...

    def load_snapshot(
        self, user_id: str, kind: SnapshotKind = "lexicon"
    ) -> tuple[int, int, str, bytes] | None: ...


def joined(strings: Sequence[str]) -> np.ndarray:
    """``strings`` as one uint8 array, NUL-separated (a string holding NUL is escaped)."""
    text = "\0".join(s.replace("\\", "\\\\").replace("\0", "\\0") for s in strings)
    return np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)


def split(data: np.ndarray, count: int) -> list[str]:
    """The ``count`` strings :func:`joined` joined."""
    if count == 0:
        return []
    text = data.tobytes().decode("utf-8", "surrogatepass")
    parts = text.split("\0")
    if "\\" not in text:
        return parts
    return [re.sub(r"\\(.)", lambda m: "\0" if m.group(1) == "0" else m.group(1), p) for p in parts]
