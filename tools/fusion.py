"""Reciprocal rank fusion: how hybrid retrieval combines a lexical and a dense ranking."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RRF_K", "rrf"]

RRF_K = 60


def rrf(
    *rankings: Sequence[str], k: int = RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Fuse rankings by ``score = sum weight / (k + rank)``, ranks from 1; best first, ties by id.

    An item near the top of both rankings beats one at the top of only one, and no score
    calibration between BM25 and cosine similarity is needed. ``weights`` (default all 1) let a
    stronger ranker count more.
    """
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, item_id in enumerate(ranking, start=1):
            scores[item_id] = scores.get(item_id, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
