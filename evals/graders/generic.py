"""Generic graders: substrings, JSON paths, tool calls, trajectories and an LLM judge.

Paths read the outcome view (see :meth:`Outcome.view`): ``state.profile.name``,
``card.questions[0].field_key``, ``environment.status``, ``response``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

from skilldeck.evals._paths import text_of, value_at
from skilldeck.evals.graders.base import (
    ConfigReader,
    GradeContext,
    Grader,
    GradeResult,
    grader,
    judged,
)

__all__ = [
    "JsonPathEquals",
    "LlmJudge",
    "MustContain",
    "MustNotContain",
    "ToolCalled",
    "TrajectoryMatch",
    "lcs",
]


def _subject(ctx: GradeContext, path: str | None) -> Any:
    """The value at ``path``, or, without one, everything the run produced (not its input)."""
    view = ctx.outcome.view()
    if path is not None:
        return value_at(view, path)
    view["state"] = {k: v for k, v in view["state"].items() if k != "input"}
    return view


@dataclass(frozen=True, slots=True)
class _Substrings(Grader):
    """Substrings looked up (in any case) at ``path``, or in everything the run produced."""

    substrings: tuple[str, ...]
    path: str | None = None

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        path = config.path("path") if config.has("path") else None
        return cls(config.strings("substrings"), path)

    def found(self, ctx: GradeContext) -> tuple[str, list[str], list[str]]:
        """``(where, present, missing)``."""
        text = text_of(_subject(ctx, self.path)).casefold()
        present = [s for s in self.substrings if s.casefold() in text]
        return self.path or "the outcome", present, [s for s in self.substrings if s not in present]


@grader("must_contain")
@dataclass(frozen=True, slots=True)
class MustContain(_Substrings):
    """Every substring occurs (any case) at ``path``; partial credit per substring."""

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        where, present, missing = self.found(ctx)
        why = (
            f"{where} lacks {missing}"
            if missing
            else f"{where} has all {len(present)} substring(s)"
        )
        return GradeResult.of(len(present) / len(self.substrings), why)


@grader("must_not_contain")
@dataclass(frozen=True, slots=True)
class MustNotContain(_Substrings):
    """No substring occurs (any case) at ``path``; partial credit per substring."""

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        where, present, missing = self.found(ctx)
        why = f"{where} contains {present}" if present else f"{where} has none of them"
        return GradeResult.of(len(missing) / len(self.substrings), why)


@grader("json_path_equals")
@dataclass(frozen=True, slots=True)
class JsonPathEquals(Grader):
    """The value at ``path`` equals ``value`` (``null`` also matches a missing key)."""

    path: str
    value: Any

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        return cls(config.path("path"), config.value("value"))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        got = value_at(ctx.outcome.view(), self.path)
        ok = got == self.value
        shown = json.dumps(got, ensure_ascii=False, default=str)[:200]
        return GradeResult.check(
            ok, f"{self.path} is {shown}" + ("" if ok else f", not {self.value!r}")
        )


@grader("tool_called")
@dataclass(frozen=True, slots=True)
class ToolCalled(Grader):
    """``tool`` (or an alias of it) was called at least ``times`` times."""

    tool: str
    times: int = 1

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        times = config.number("times", 1, low=1, high=1000)
        return cls(config.string("tool"), int(times))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        want = ctx.outcome.canonical(self.tool)
        used = ctx.outcome.tools_used()
        count = used.count(want)
        return GradeResult.check(
            count >= self.times, f"{want} called {count} time(s) (need {self.times}); calls: {used}"
        )


def lcs(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of ``a`` and ``b``."""
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], prev + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def _prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _match(mode: str, got: list[str], ref: list[str]) -> tuple[float, bool]:
    """``(partial credit, exact pass)`` of a trajectory against a reference."""
    longest = max(len(got), len(ref)) or 1
    if mode == "strict":
        return lcs(got, ref) / longest, got == ref
    if mode == "unordered":
        return sum((Counter(got) & Counter(ref)).values()) / longest, Counter(got) == Counter(ref)
    if mode == "subset":  # every call is one of the reference tools
        inside = sum(t in ref for t in got)
        return (inside / len(got) if got else 1.0), inside == len(got)
    if mode == "superset":  # every reference tool was called
        hit = sum(t in got for t in set(ref))
        return (hit / len(set(ref)) if ref else 1.0), hit == len(set(ref))
    if mode == "prefix":
        n = _prefix(got, ref)
        return (n / len(ref) if ref else 1.0), n == len(ref)
    n = lcs(ref, got)  # in_order: the reference is a subsequence of the calls
    return (n / len(ref) if ref else 1.0), n == len(ref)


@grader("trajectory_match")
@dataclass(frozen=True, slots=True)
class TrajectoryMatch(Grader):
    """The tool calls against ``tools``, with partial credit.

    Modes: ``strict`` (same sequence; credit = LCS / longer length), ``unordered`` (same
    multiset), ``subset`` (no tool outside the reference; credit = share of calls inside),
    ``superset`` (every reference tool called; credit = share called), ``in_order`` (the
    default: the reference is a subsequence of the calls) and ``prefix``. ``path`` + ``key``
    read the sequence from the outcome instead (``state.attempt.trajectory.steps``, key
    ``tool``); ``expected``/``order: exact|prefix`` are accepted as the older spelling.
    """

    tools: tuple[str, ...]
    mode: str = "in_order"
    path: str | None = None
    key: str | None = None

    MODES = ("strict", "unordered", "subset", "superset", "in_order", "prefix")

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        tools = config.strings("expected" if config.has("expected") else "tools", required=False)
        if not config.has("expected") and not config.has("tools"):
            config.fail("tools", "is required: the list of tool names to match")
        if config.has("order"):
            order = config.choice("order", ("exact", "prefix"), "exact")
            mode = "strict" if order == "exact" else "prefix"
        else:
            mode = config.choice("mode", cls.MODES, "in_order")
        path = config.path("path") if config.has("path") else None
        return cls(tools, mode, path, config.optional_string("key"))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        outcome = ctx.outcome
        if self.path is None:
            got = outcome.tools_used()
        else:
            items = value_at(outcome.view(), self.path) or []
            items = items if isinstance(items, list) else []
            got = [outcome.canonical(str(value_at(i, self.key) if self.key else i)) for i in items]
        ref = [outcome.canonical(t) for t in self.tools]
        score, ok = _match(self.mode, got, ref)
        return GradeResult(round(score, 6), ok, f"{self.mode}: calls {got} vs expected {ref}")


@grader("llm_judge")
@dataclass(frozen=True, slots=True)
class LlmJudge(Grader):
    """The judge model scores the value at ``path`` (default ``response``) against ``rubric``."""

    uses_judge = True

    rubric: str
    path: str = "response"
    threshold: float = 0.7

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        return cls(
            config.string("rubric"),
            config.path("path", "response"),
            config.number("threshold", 0.7),
        )

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        return judged(ctx, lambda: self._subject(ctx), rubric=self.rubric, threshold=self.threshold)

    def _subject(self, ctx: GradeContext) -> tuple[str, str] | GradeResult:
        subject = value_at(ctx.outcome.view(), self.path)
        if subject in (None, "", [], {}):
            return GradeResult.check(False, f"{self.path} is empty: nothing to judge")
        return text_of(subject), json.dumps(ctx.task.input, ensure_ascii=False, default=str)
