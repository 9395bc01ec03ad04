"""Compare two reports bucket by bucket, with the seed's merge rule.

A change fails (``ok`` is false, the CLI exits 1) when

- a regression bucket drops at all (``tolerance`` does not apply to regression buckets);
- it improves one bucket while another drops (a prompt that trades one failure bucket for
  another should not be merged);
- it drops a capability bucket by more than ``tolerance`` and improves nothing.

Capability buckets are noisy by nature, so their changes within ``tolerance`` count as none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from skilldeck.errors import EvalConfigError

__all__ = ["BucketDelta", "Comparison", "compare_reports"]

Metric = Literal["mean_score", "pass_rate"]
Change = Literal["improved", "dropped", "same", "added", "removed", "not scored"]


@dataclass(frozen=True, slots=True)
class BucketDelta:
    bucket: str
    kind: str
    base: float | None
    new: float | None
    delta: float | None
    change: Change

    def to_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "kind": self.kind,
            "base": self.base,
            "new": self.new,
            "delta": self.delta,
            "change": self.change,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Per-bucket deltas and the reasons the change fails (none: it may be merged)."""

    metric: str
    rows: tuple[BucketDelta, ...]
    reasons: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "ok": self.ok,
            "reasons": list(self.reasons),
            "buckets": [r.to_dict() for r in self.rows],
        }


def _row(
    key: str, base: Mapping[str, Any] | None, new: Mapping[str, Any] | None, metric: str, tol: float
) -> BucketDelta:
    kinds = {b.get("kind") for b in (base, new) if b is not None}
    kind = "regression" if "regression" in kinds else "capability"
    tol = 0.0 if kind == "regression" else tol
    old = base.get(metric) if base else None
    now = new.get(metric) if new else None
    if base is None or new is None:
        return BucketDelta(key, kind, old, now, None, "added" if base is None else "removed")
    if old is None or now is None:
        return BucketDelta(key, kind, old, now, None, "not scored")
    delta = round(now - old, 6)
    change: Change = "improved" if delta > tol else "dropped" if delta < -tol else "same"
    return BucketDelta(key, kind, old, now, delta, change)


def compare_reports(
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    metric: Metric = "mean_score",
    tolerance: float = 0.0,
) -> Comparison:
    """Compare two reports (as :func:`~skilldeck.evals.report.load_report` reads them)."""
    if metric not in ("mean_score", "pass_rate"):
        raise EvalConfigError(f"metric {metric!r}: use mean_score or pass_rate")
    if tolerance < 0:
        raise EvalConfigError("tolerance must be >= 0")
    old, now = base["buckets"], new["buckets"]
    rows = tuple(
        _row(key, old.get(key), now.get(key), metric, tolerance)
        for key in sorted(set(old) | set(now))
    )
    reasons = [
        f"regression bucket {r.bucket} dropped {r.base:.3f} -> {r.new:.3f}"
        for r in rows
        if r.change == "dropped"
        and r.kind == "regression"
        and r.base is not None
        and r.new is not None
    ]
    up = [r.bucket for r in rows if r.change == "improved"]
    down = [r.bucket for r in rows if r.change == "dropped"]
    if up and down:
        reasons.append(
            f"mixed change: improves {', '.join(up)} but drops {', '.join(down)} "
            "(keep a change only if no bucket gets worse)"
        )
    elif down and not reasons:
        reasons.append(f"the change only drops buckets: {', '.join(down)}")
    return Comparison(metric, rows, tuple(reasons))
