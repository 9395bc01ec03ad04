"""Cutting text a client or a model chose to a length fit to show back."""

from __future__ import annotations

__all__ = ["cut"]


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit - 1`` characters and ``…`` when it is longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
