"""pkm-agent's eval environment and graders (seed 003): completion, routing,
read-before-write, no overwrite, and two LLM-judge graders (insight quality, append coherence).

The environment is ``status``, ``action``, ``files_changed`` (relative to ``PKM/``) and
``insight``. Registered by skilldeck's built-in plugin (:mod:`skilldeck.builtins`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from skilldeck.evals.environment import environment
from skilldeck.evals.graders.base import (
    ConfigReader,
    GradeContext,
    Grader,
    GradeResult,
    grader,
    judged,
)
from skilldeck.evals.graders.card import fact_id_of, saved_card
from skilldeck.evals.outcome import Outcome
from skilldeck.tools.pkm import PARA_FOLDERS, PKM_DIR

__all__ = [
    "APPEND_RUBRIC",
    "INSIGHT_RUBRIC",
    "PARA_FOLDERS",
    "PKM_ROOT",
    "PkmAppendCoherence",
    "PkmCompletion",
    "PkmInsightQuality",
    "PkmNoOverwrite",
    "PkmReadBeforeWrite",
    "PkmRoutedCorrectly",
    "pkm_path",
    "pkm_written",
]

# -- environment ------------------------------------------------------------------------------
#: Workspace paths of PKM notes start with this (the pkm tools' root folder).
PKM_ROOT = f"{PKM_DIR}/"


def pkm_path(path: str) -> str:
    """A path relative to ``PKM/`` as the pkm tools take it (``./`` and ``PKM/`` dropped)."""
    path = path.strip().replace("\\", "/").lstrip("/")
    while path.startswith("./"):
        path = path[2:]
    return path.removeprefix(PKM_ROOT)


def pkm_written(outcome: Outcome) -> list[str]:
    """PKM files the trial added or changed, relative to ``PKM/``."""
    return [
        p.removeprefix(PKM_ROOT)
        for p in outcome.changed("added", "changed")
        if p.startswith(PKM_ROOT)
    ]


@environment("pkm-agent")
def _pkm_environment(outcome: Outcome, task_input: Mapping[str, Any]) -> dict[str, Any]:
    raw = outcome.state.get("pkm")
    pkm: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    insight = pkm.get("insight")
    if not insight:
        insight = saved_card(outcome, fact_id_of(task_input)).get("insight")
    changed = [p.removeprefix(PKM_ROOT) for p in outcome.changed() if p.startswith(PKM_ROOT)]
    return {
        "status": outcome.status,
        "action": pkm.get("action"),
        "files_changed": changed,
        "insight": insight,
        "files": list(pkm.get("files") or []),
        "reason": pkm.get("reason"),
    }


# -- graders ----------------------------------------------------------------------------------
SEED_MARKER = re.compile(r"<!--\s*seed:[^>]*?-->")
EDIT_TOOLS = ("pkm__append", "pkm__write")
INSIGHT_RUBRIC = """The SUBJECT is the insight written on a timeline card for the record in
CONTEXT. Check three criteria:
1. grounded: every claim follows from the record (no invented facts);
2. non-redundant: it adds a connection or implication, not a restatement of the record;
3. concise: one or two plain sentences, not a list of evidence.
score = the share of criteria met (0, 0.33, 0.67 or 1)."""
APPEND_RUBRIC = """The SUBJECT is text a PKM agent added to existing markdown notes; CONTEXT has
the record and each note as it was. Check three criteria:
1. grounded: the addition only states what the record says;
2. non-redundant: it does not repeat what the note already holds;
3. concise and coherent: it follows the note's own structure, language and tone (headings,
   bullets, dates) and is no longer than needed.
score = the share of criteria met (0, 0.33, 0.67 or 1)."""


def _pkm(ctx: GradeContext) -> Mapping[str, Any]:
    value = ctx.outcome.state.get("pkm")
    return value if isinstance(value, Mapping) else {}


def _fixture_pkm(ctx: GradeContext) -> list[str]:
    return [p.removeprefix(PKM_ROOT) for p in ctx.outcome.fixture if p.startswith(PKM_ROOT)]


@grader("pkm_completion")
@dataclass(frozen=True, slots=True)
class PkmCompletion(Grader):
    """A finished run that either wrote valid PKM notes or skipped cleanly.

    Valid write: ``pkm.action`` is ``saved``, markdown files under a PARA folder changed, and
    every file ``pkm.files`` lists exists. Clean skip: ``skipped`` and no PKM file changed.
    ``expect: saved|skipped`` accepts only that path.
    """

    expect: str = "any"

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        return cls(config.choice("expect", ("any", "saved", "skipped"), "any"))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        outcome, pkm = ctx.outcome, _pkm(ctx)
        action = pkm.get("action")
        changed = [p for p in outcome.changed() if p.startswith(PKM_ROOT)]
        if outcome.status != "finished":
            return GradeResult.check(False, f"run {outcome.status}, not finished")
        if self.expect != "any" and action != self.expect:
            return GradeResult.check(False, f"pkm.action is {action!r}, expected {self.expect!r}")
        if action == "skipped":
            ok = not changed
            return GradeResult.check(ok, "clean skip" if ok else f"skipped but changed {changed}")
        if action != "saved":
            return GradeResult.check(False, f"pkm.action is {action!r}, not saved or skipped")
        problems = [] if changed else ["no PKM file changed"]
        for path in pkm_written(outcome):
            if not path.endswith(".md") or path.split("/", 1)[0] not in PARA_FOLDERS:
                problems.append(f"{path} is not a markdown note under {'/'.join(PARA_FOLDERS)}")
        listed = [pkm_path(str(p)) for p in pkm.get("files") or []]
        problems += [
            f"{p} is listed but missing" for p in listed if outcome.read(PKM_ROOT + p) is None
        ]
        why = (
            "valid write: " + ", ".join(pkm_written(outcome))
            if not problems
            else "; ".join(problems)
        )
        return GradeResult.check(not problems, why)


@grader("pkm_routed_correctly")
@dataclass(frozen=True, slots=True)
class PkmRoutedCorrectly(Grader):
    """1 when an expected file was written, 0.5 when a write stayed in an expected PARA bucket,
    0 otherwise (the best written file counts)."""

    expected_files: tuple[str, ...] = ()
    expected_buckets: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        files = tuple(pkm_path(p) for p in config.strings("expected_files", required=False))
        buckets = config.strings("expected_buckets", required=False)
        if not files and not buckets:
            config.fail("expected_files", "give expected_files and/or expected_buckets")
        return cls(files, tuple(pkm_path(b).rstrip("/") + "/" for b in buckets))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        written = pkm_written(ctx.outcome)
        if not written:
            return GradeResult.of(0.0, "nothing was written under PKM/")
        exact = [p for p in written if p in self.expected_files]
        if exact:
            return GradeResult.of(1.0, f"wrote the expected file {exact[0]}")
        near = [p for p in written if any(p.startswith(b) for b in self.expected_buckets)]
        if near:
            return GradeResult.of(0.5, f"{near[0]} is in the right bucket, not an expected file")
        return GradeResult.of(
            0.0,
            f"wrote {written}; expected {list(self.expected_files)} "
            f"or a file under {list(self.expected_buckets)}",
        )


@grader("pkm_read_before_write")
@dataclass(frozen=True, slots=True)
class PkmReadBeforeWrite(Grader):
    """Every existing note the trial edited was read (``pkm__read``) before its first edit;
    partial credit per edited note. No edit of an existing note passes."""

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        existing = set(_fixture_pkm(ctx))
        first_edit: dict[str, int] = {}
        reads: dict[str, int] = {}
        for i, call in enumerate(ctx.outcome.tool_calls):
            path = pkm_path(str(call.args.get("path", "")))
            if call.name == "pkm__read" and call.ok is not False:
                reads.setdefault(path, i)
            elif call.name in EDIT_TOOLS and path in existing and call.ok is not False:
                first_edit.setdefault(path, i)
        end = len(ctx.outcome.tool_calls)
        for path in pkm_written(
            ctx.outcome
        ):  # edited by any other means: a read must precede the end
            if path in existing:
                first_edit.setdefault(path, end)
        if not first_edit:
            return GradeResult.of(1.0, "no existing note was edited")
        blind = sorted(p for p, i in first_edit.items() if reads.get(p, end + 1) >= i)
        score = 1 - len(blind) / len(first_edit)
        why = (
            f"edited without reading first: {blind}" if blind else "read every note before editing"
        )
        return GradeResult.of(score, why)


@grader("pkm_no_overwrite")
@dataclass(frozen=True, slots=True)
class PkmNoOverwrite(Grader):
    """Every ``<!-- seed:... -->`` marker of the fixture is still in the workspace (in any
    file: merging notes is allowed, destroying content is not). All or nothing: one destroyed
    note is a destructive edit however many others survive.

    ``seed_marker`` (Memex's suites) names the marker text instead: every occurrence of it in
    the fixture must survive, so the workspace holds it at least as often as the fixture did.
    """

    seed_marker: str | None = None

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        return cls(config.optional_string("seed_marker"))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        if self.seed_marker is not None:
            return self._occurrences(ctx, self.seed_marker)
        outcome = ctx.outcome
        markers = sorted(
            {m for p in outcome.fixture for m in SEED_MARKER.findall(outcome.fixture_text(p) or "")}
        )
        if not markers:
            return GradeResult.of(1.0, "the fixture has no seed markers")
        now = "\n".join(_workspace_texts(ctx))
        lost = [m for m in markers if m not in now]
        if lost:
            return GradeResult.check(
                False, f"lost {len(lost)} of {len(markers)} seed markers: {lost}"
            )
        return GradeResult.check(True, f"all {len(markers)} seed markers survive")

    @staticmethod
    def _occurrences(ctx: GradeContext, marker: str) -> GradeResult:
        outcome = ctx.outcome
        before = {p: (outcome.fixture_text(p) or "").count(marker) for p in outcome.fixture}
        before = {p: n for p, n in before.items() if n}
        total = sum(before.values())
        if not total:
            return GradeResult.of(1.0, f"the fixture has no seed marker {marker!r}")
        now = sum(text.count(marker) for text in _workspace_texts(ctx))
        if now >= total:
            return GradeResult.check(True, f"all {total} occurrences of {marker!r} survive")
        # Merged notes carry theirs elsewhere: the files that hold fewer say where to look.
        fewer = sorted(p for p, n in before.items() if (outcome.read(p) or "").count(marker) < n)
        return GradeResult.check(
            False,
            f"lost {total - now} of {total} occurrences of seed marker {marker!r} "
            f"(fewer than before in {', '.join(fewer)})",
        )


def _workspace_texts(ctx: GradeContext) -> list[str]:
    outcome = ctx.outcome
    return [t for p in _workspace_files(ctx) if (t := outcome.read(p)) is not None]


def _workspace_files(ctx: GradeContext) -> list[str]:
    root = ctx.outcome.workspace
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]


def _record(ctx: GradeContext) -> str:
    content = ctx.task.input.get("content")
    return f"RECORD:\n{content if isinstance(content, str) else ctx.task.input}"


@dataclass(frozen=True, slots=True)
class _Judged(Grader):
    """A grader the judge model scores against ``rubric``; without a judge it is not scored."""

    uses_judge = True
    rubric: ClassVar[str] = ""

    threshold: float = 0.7

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        return cls(config.number("threshold", 0.7))

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        return judged(ctx, lambda: self.subject(ctx), rubric=self.rubric, threshold=self.threshold)

    def subject(self, ctx: GradeContext) -> tuple[str, str] | GradeResult:
        """``(subject, context)`` for the judge, or the result when there is nothing to judge."""
        raise NotImplementedError


@grader("pkm_insight_quality")
@dataclass(frozen=True, slots=True)
class PkmInsightQuality(_Judged):
    """The judge scores the insight: grounded, non-redundant, concise. After a clean skip it
    is not scored."""

    rubric = INSIGHT_RUBRIC

    def subject(self, ctx: GradeContext) -> tuple[str, str] | GradeResult:
        insight = _pkm(ctx).get("insight")
        if not insight:
            card = saved_card(ctx.outcome, fact_id_of(ctx.task.input))
            insight = card["insight"]
        if insight:
            return str(insight), _record(ctx)
        if _pkm(ctx).get("action") == "skipped":
            return GradeResult.not_scored("not scored: a clean skip has no insight")
        return GradeResult.of(0.0, "no insight was written")


@grader("pkm_append_coherence")
@dataclass(frozen=True, slots=True)
class PkmAppendCoherence(_Judged):
    """The judge scores what was added to existing notes against each note's own style. When
    no existing note changed it is not scored."""

    rubric = APPEND_RUBRIC

    def subject(self, ctx: GradeContext) -> tuple[str, str] | GradeResult:
        outcome = ctx.outcome
        edited = [
            c for c in outcome.changes if c.change == "changed" and c.path.startswith(PKM_ROOT)
        ]
        if not edited:
            return GradeResult.not_scored("not scored: no existing note was changed")
        notes = [f"NOTE {c.path} (before):\n{outcome.fixture_text(c.path) or ''}" for c in edited]
        added = [
            f"ADDED to {c.path}:\n"
            + "\n".join(
                line[1:]
                for line in c.diff.splitlines()
                if line.startswith("+") and not line.startswith("+++")
            )
            for c in edited
        ]
        return "\n\n".join(added), "\n\n".join([_record(ctx), *notes])
