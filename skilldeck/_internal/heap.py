"""Give the C heap's free memory back to the operating system after a large transient load.

glibc keeps freed memory in its heap for reuse, and cannot shrink a heap whose top is still in
use; buffers of tens of MB freed among long-lived allocations then stay in the process's RSS.
Copying a user's 100,000 vectors out of a Chroma server this way left about 0.7 GB that nothing
used (`bench/scale.py` part D). ``malloc_trim(0)`` returns the free pages anywhere in the heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

__all__ = ["release_free_memory"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS, Windows)
        return None
    return trim


def release_free_memory() -> bool:
    """Return the C heap's free pages to the OS where the C library can (glibc); ``True`` if
    it could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
