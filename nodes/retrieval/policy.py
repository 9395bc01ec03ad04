"""The retrieval policy as code: sources in order, one call at a time, until the evidence
suffices; ``rag_retrieve`` expands along ``top_k`` 30 -> 50 -> 100."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from skilldeck.nodes.retrieval.evidence import Evidence, parse_result
from skilldeck.nodes.retrieval.plan import LOCAL, RAG, STANDARD, TABLE, TOP_K, Plan
from skilldeck.nodes.retrieval.sufficiency import EXPANDABLE, judge
from skilldeck.tools.registry import ToolResult

__all__ = ["Invoke", "PolicyRun", "run_policy", "source_order"]

Invoke = Callable[[str, dict[str, Any]], ToolResult]
_MAX_ROWS = 20  # table rows and local lines shown per call, the tools' defaults


def source_order(
    tools: Sequence[str], resolve: Callable[[str], str | None], table_first: bool
) -> list[str]:
    """Sources in policy order: skill-enabled tools (meta order), the two RAG tools, files."""
    enabled = [c for c in dict.fromkeys(map(resolve, tools)) if c and c not in STANDARD]
    pair = [TABLE, RAG] if table_first else [RAG, TABLE]
    return [*enabled, *pair, LOCAL]


@dataclass
class PolicyRun:
    """What the policy did: its steps, all evidence gathered, the usable part, who answered."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    gathered: list[Evidence] = field(default_factory=list)
    usable: list[Evidence] = field(default_factory=list)
    answered_by: str | None = None


def _attempts(tool: str, plan: Plan) -> list[dict[str, Any]]:
    """The argument sets a source may be called with, in order (only RAG expands)."""
    if tool == RAG:
        steps = [k for k in TOP_K if k >= plan.top_k]
        last = len(plan.variants) - 1
        return [{"query": plan.variants[min(i, last)], "top_k": k} for i, k in enumerate(steps)]
    if tool == TABLE:
        return [{"query": plan.variants[0], "max_rows": _MAX_ROWS}]
    if tool == LOCAL:
        return [{"query": plan.variants[0], "max_results": _MAX_ROWS}]
    return [{"query": plan.variants[0]}]


def run_policy(plan: Plan, sources: Sequence[str], allowed: Set[str], invoke: Invoke) -> PolicyRun:
    """Try ``sources`` in order, one call at a time, until the evidence suffices.

    A source not in ``allowed`` is refused and recorded, never called. Each step records its
    tool, args, a result summary and the verdict; ``rag_retrieve`` moves to the next ``top_k``
    only when its results filled ``top_k`` and fell short for a reason more results can fix.
    """
    run = PolicyRun()
    seen: set[str] = set()
    for tool in sources:
        if tool not in allowed:
            why = "refused: not among the skill's tools"
            run.steps.append({"tool": tool, "args": {}, "refused": True, "why": why})
            continue
        attempts = _attempts(tool, plan)
        for i, args in enumerate(attempts):
            started = time.perf_counter()
            result = invoke(tool, args)
            ms = round((time.perf_counter() - started) * 1000, 1)
            parsed = parse_result(tool, result.content, len(run.steps))
            top_k = args.get("top_k") if tool == RAG else None
            verdict = judge(
                plan, parsed, ok=result.ok, content=result.content, before=run.usable, top_k=top_k
            )
            run.gathered += parsed.items
            fresh = [e for e in verdict.usable if e.citation not in seen]
            seen.update(e.citation for e in fresh)
            run.usable += fresh
            step: dict[str, Any] = {
                "tool": tool,
                "args": args,
                "ok": result.ok,
                "summary": parsed.summary if result.ok else result.content[:200],
                "usable": len(verdict.usable),
                "sufficient": verdict.sufficient,
                "why": verdict.why,
                "ms": ms,
            }
            run.steps.append(step)
            if verdict.sufficient:
                run.answered_by = tool
                return run
            more = i + 1 < len(attempts) and top_k is not None and parsed.returned >= top_k
            if not (more and verdict.code in EXPANDABLE):
                break
            step["next"] = f"top_k {top_k} -> {attempts[i + 1]['top_k']}"
    return run
