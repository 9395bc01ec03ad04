"""Reciprocal rank fusion, the one way hybrid retrieval combines rankings."""

from __future__ import annotations

import pytest

from skilldeck.tools.fusion import rrf

pytestmark = pytest.mark.L2


def test_rrf_rewards_agreement_and_breaks_ties_by_id() -> None:
    fused = rrf(["a", "b", "c"], ["b", "d"])
    assert [item for item, _ in fused] == ["b", "a", "d", "c"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
    assert [item for item, _ in rrf(["y"], ["x"])] == ["x", "y"]  # equal scores: by id


def test_weights_let_the_stronger_ranker_lead() -> None:
    lexical, dense = ["a", "b"], ["b", "a"]
    assert rrf(lexical, dense, weights=(4, 1))[0][0] == "a"
    assert rrf(lexical, dense, weights=(1, 4))[0][0] == "b"
    with pytest.raises(ValueError, match="2 weights for 1 rankings"):
        rrf(lexical, weights=(1, 2))
