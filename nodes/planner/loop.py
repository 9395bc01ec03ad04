"""What a planner's rounds retrieved: hits, their fused ranking, the anchors' neighbors, and
the evidence the runtime selects from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skilldeck.nodes.planner_rules import LoopView
from skilldeck.tools.fusion import rrf
from skilldeck.tools.memory import HYBRID_WEIGHTS
from skilldeck.tools.messages import parse_ts

__all__ = ["ANCHORS", "SESSION_GAP_S", "SHOWN", "Loop"]

#: Fused hits that enter the evidence before neighbors fill the remaining slots.
ANCHORS = 5
#: Silence that separates two conversations: neighbors across it are not an anchor's context.
SESSION_GAP_S = 6 * 3600
#: Anchors shown per observation (seed 001: top 1-3); their context is what neighbors fetch.
SHOWN = 3
_WEIGHTS = {"lexical_search": HYBRID_WEIGHTS[0], "semantic_search": HYBRID_WEIGHTS[1]}


@dataclass
class Loop:
    """Hits, rankings and neighbors of the rounds so far, and the trajectory."""

    session_gap_s: float = SESSION_GAP_S
    hits: dict[str, dict[str, Any]] = field(default_factory=dict)
    rankings: list[tuple[str, list[str]]] = field(default_factory=list)  # (tool, ids)
    searches: list[dict[str, Any]] = field(default_factory=list)  # every search run, even failed
    expansions: list[tuple[str, list[str]]] = field(default_factory=list)
    tried: set[str] = field(default_factory=set)  # anchors whose neighbors call failed
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def fused(self) -> list[str]:
        """Every search hit, ranked by weighted reciprocal-rank fusion of the rounds' rankings:
        lexical rounds weigh as in ``Memory.hybrid_search``, the others as its dense side."""
        weights = [_WEIGHTS.get(tool, HYBRID_WEIGHTS[1]) for tool, _ in self.rankings]
        ranked = rrf(*(ids for _, ids in self.rankings), weights=weights)
        return [message_id for message_id, _ in ranked]

    def pending(self) -> list[str]:
        """Top anchors whose neighbors have not been fetched: their context is missing."""
        expanded = {anchor for anchor, _ in self.expansions}
        return [a for a in self.fused()[:SHOWN] if a not in expanded]

    def view(self) -> LoopView:
        expanded = frozenset(anchor for anchor, _ in self.expansions) | self.tried
        return LoopView(self.searches, self.fused(), expanded)

    def fail(self, tool: str, args: Mapping[str, Any]) -> None:
        """Record a call that failed, so that a planner does not repeat it."""
        if tool == "neighbors":
            self.tried.add(str(args.get("message_id")))
        else:
            self.searches.append({"tool": tool, "args": dict(args), "hits": 0, "ok": False})

    def add(
        self, tool: str, args: Mapping[str, Any], result: Mapping[str, Any]
    ) -> tuple[int, list[str]]:
        """Record a tool result; returns its hit count and its message ids, best first (for
        neighbors: the anchor's session, nearest first)."""
        hits = [h for h in result.get("hits") or [] if isinstance(h, Mapping)]
        for hit in hits:
            self.hits.setdefault(str(hit["message_id"]), dict(hit))
        ids = [str(h["message_id"]) for h in hits]
        if tool == "neighbors":
            anchor = str(args["message_id"])
            ids = _nearest_first(_session(hits, anchor, self.session_gap_s), anchor)
            self.expansions.append((anchor, ids))
            return len(hits), ids
        if tool == "messages_list":
            ids.reverse()  # time order; the newest of a listing rank first
        self.rankings.append((tool, ids))
        count = int(result.get("total", len(ids)))
        self.searches.append({"tool": tool, "args": dict(args), "hits": count, "ok": True})
        return count, ids

    def evidence(self, limit: int, anchors: int) -> list[str]:
        """Anchors first by fused rank, then neighbors nearest first, then further hits."""
        fused = self.fused()
        chosen = fused[: min(anchors, limit)]
        extra = [i for _, ids in self.expansions for i in ids] + fused[anchors:]
        for message_id in extra:
            if len(chosen) >= limit:
                break
            if message_id not in chosen:
                chosen.append(message_id)
        return chosen


def _session(hits: Sequence[Mapping[str, Any]], anchor: str, gap: float) -> list[str]:
    """The ids of ``hits`` (in time order) in the anchor's session: the run of turns around it
    with no silence longer than ``gap`` seconds. Turns of an earlier conversation are not the
    anchor's context."""
    ids = [str(h["message_id"]) for h in hits]
    if anchor not in ids:
        return ids
    at = ids.index(anchor)
    times = [parse_ts(str(h["ts"])).timestamp() for h in hits]
    lo = at
    while lo > 0 and times[lo] - times[lo - 1] <= gap:
        lo -= 1
    hi = at
    while hi + 1 < len(ids) and times[hi + 1] - times[hi] <= gap:
        hi += 1
    return ids[lo : hi + 1]


def _nearest_first(ids: list[str], anchor: str) -> list[str]:
    """The neighbors of ``anchor`` by distance; at equal distance the earlier turn first, as
    the indexes read a turn after the one before it."""
    if anchor not in ids:
        return ids
    at = ids.index(anchor)
    order: list[str] = []
    for distance in range(1, len(ids)):
        order += [ids[i] for i in (at - distance, at + distance) if 0 <= i < len(ids)]
    return order
