"""Blobs of numpy arrays for the indexes kept in the message store, and the snapshots of a
user's vector copy, so that a cold start (a new process, or a user evicted from the index
cache) loads an index instead of rebuilding it.

A blob is :func:`pack`'s layout, with each list of strings stored as one NUL-joined UTF-8 array
(:func:`joined`), so loading one never unpickles anything, and :func:`unpack` reads its arrays in
place (``numpy.frombuffer``): copying large arrays out of a zip costs more than the rest of a
load. The lexicon's segments (:mod:`skilldeck.tools.memory`) use it; they are written with the
messages, not as snapshots.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import numpy as np

__all__ = [
    "SNAPSHOT_MAX_BYTES",
    "SNAPSHOT_MIN",
    "SnapshotKind",
    "SnapshotStore",
    "joined",
    "pack",
    "split",
    "unpack",
]

#: Indexes of fewer items rebuild faster than a snapshot round trip pays back; a snapshot is
#: rewritten once half as many items again came after it.
SNAPSHOT_MIN = 500

#: A snapshot larger than this is not saved, and such a user's cold start copies from Chroma:
#: PostgreSQL's ``bytea`` holds 1 GB at most, and rows of hundreds of MB strain a shared
#: database (a vector copy of about 130,000 messages is 256 MB, or 250,000 at half width).
SNAPSHOT_MAX_BYTES = 256 * 2**20

#: What a snapshot holds: the copy of a user's vectors (the lexicon is kept as segments).
SnapshotKind = Literal["vectors"]


class SnapshotStore(Protocol):
    """Where snapshots are kept: one per user and kind (:class:`~skilldeck.tools.messages.
    MessageStore` on SQLite or PostgreSQL)."""

    @property
    def remote(self) -> bool: ...

    def save_snapshot(
        self,
        user_id: str,
        *,
        upto: int,
        count: int,
        version: str,
        data: bytes,
        kind: SnapshotKind = "vectors",
    ) -> None: ...

    def load_snapshot(
        self, user_id: str, kind: SnapshotKind = "vectors"
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


_MAGIC = b"skilldeck-arrays-1\n"
_ALIGN = 64


def pack(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` as one blob: a magic line, the length of a JSON header (name, dtype, shape and
    offset of each array), the header, then each array's bytes at an aligned offset."""
    entries: list[dict[str, Any]] = []
    offset = 0
    for name, array in arrays.items():
        offset = -(-offset // _ALIGN) * _ALIGN
        entries.append({"name": name, "dtype": array.dtype.str, "shape": array.shape,
                        "offset": offset})  # fmt: skip
        offset += array.nbytes
    header = json.dumps(entries).encode()
    start = -(-(len(_MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    out = bytearray(start + offset)
    out[: len(_MAGIC)] = _MAGIC
    out[len(_MAGIC) : len(_MAGIC) + 8] = len(header).to_bytes(8, "little")
    out[len(_MAGIC) + 8 : len(_MAGIC) + 8 + len(header)] = header
    for entry, array in zip(entries, arrays.values(), strict=True):
        at = start + int(entry["offset"])
        out[at : at + array.nbytes] = np.ascontiguousarray(array).tobytes()
    return bytes(out)


def unpack(data: bytes) -> dict[str, np.ndarray]:
    """The arrays :func:`pack` packed, as read-only views of ``data`` (no copy).

    Raises:
        ValueError: ``data`` is not such a blob.
    """
    if not data.startswith(_MAGIC):
        raise ValueError("not a packed array snapshot")
    length = int.from_bytes(data[len(_MAGIC) : len(_MAGIC) + 8], "little")
    header = json.loads(data[len(_MAGIC) + 8 : len(_MAGIC) + 8 + length])
    start = -(-(len(_MAGIC) + 8 + length) // _ALIGN) * _ALIGN
    out = {}
    for entry in header:
        dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        array = np.frombuffer(data, dtype=dtype, count=count, offset=start + entry["offset"])
        out[entry["name"]] = array.reshape(shape)
    return out
