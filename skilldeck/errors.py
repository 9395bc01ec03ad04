"""Errors raised by skilldeck.

Every error carries an :class:`ErrorCode` and a message that says what went wrong and how to fix
it, so callers (the CLI, the HTTP service, an embedding app) can branch on ``code`` and show
``str(err)`` to a person.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skilldeck.types import Problem

__all__ = [
    "AlreadyResumedError",
    "BundleError",
    "CardPendingError",
    "CheckpointError",
    "ErrorCode",
    "EvalConfigError",
    "InvalidAnswersError",
    "InvalidInputError",
    "MatterRequiredError",
    "MissingExtraError",
    "ModelConfigError",
    "ModelUnavailableError",
    "NoModelConfiguredError",
    "NoPendingCardError",
    "NotResumableError",
    "PluginError",
    "PromptTooLongError",
    "QuotaExceededError",
    "ScriptedModelError",
    "SkillChangedError",
    "SkillDeckError",
    "SkillNotLoadedError",
    "StaleCassetteError",
    "StaleInterruptError",
    "StaleRunError",
    "ThreadBusyError",
    "ThreadNotFoundError",
    "ToolError",
    "UntrustedScriptsError",
]


class ErrorCode(StrEnum):
    """Stable, machine-readable error codes."""

    INVALID_BUNDLE = "INVALID_BUNDLE"
    INVALID_CONDITION = "INVALID_CONDITION"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    MODEL_NOT_CONFIGURED = "MODEL_NOT_CONFIGURED"
    SCRIPTED_MODEL = "SCRIPTED_MODEL"
    THREAD_NOT_FOUND = "THREAD_NOT_FOUND"
    NO_PENDING_CARD = "NO_PENDING_CARD"
    INVALID_ANSWERS = "INVALID_ANSWERS"
    STALE_INTERRUPT = "STALE_INTERRUPT"
    ALREADY_RESUMED = "ALREADY_RESUMED"
    CARD_PENDING = "CARD_PENDING"
    THREAD_BUSY = "THREAD_BUSY"
    CHECKPOINT_UNAVAILABLE = "CHECKPOINT_UNAVAILABLE"
    TOOL_ERROR = "TOOL_ERROR"
    INVALID_INPUT = "INVALID_INPUT"
    INVALID_EVAL = "INVALID_EVAL"
    MISSING_EXTRA = "MISSING_EXTRA"
    NO_SKILL = "NO_SKILL"
    SKILL_NOT_LOADED = "SKILL_NOT_LOADED"
    SKILL_CHANGED = "SKILL_CHANGED"
    MATTER_REQUIRED = "MATTER_REQUIRED"
    PROMPT_TOO_LONG = "PROMPT_TOO_LONG"
    UNTRUSTED_SCRIPTS = "UNTRUSTED_SCRIPTS"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    RUN_LOG_FULL = "RUN_LOG_FULL"
    STALE_RUN = "STALE_RUN"
    NOT_RESUMABLE = "NOT_RESUMABLE"
    PLUGIN_ERROR = "PLUGIN_ERROR"
    MODEL_UNAVAILABLE = "MODEL_UNAVAILABLE"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    STOPPED = "STOPPED"


class SkillDeckError(Exception):
    """Base class of every error skilldeck raises on purpose."""

    code: ErrorCode = ErrorCode.INVALID_INPUT

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, Any]:
        """A JSON-native body for APIs: ``{"code", "message"}`` plus subclass details."""
        return {"code": self.code.value, "message": str(self)}


class BundleError(SkillDeckError):
    """A skill bundle is malformed. Raised at load time, never during a run.

    ``str(err)`` is one line: ``<file>: <json path>: <reason>`` of the first problem, and how
    many more there are; ``problems`` lists them all (``skilldeck check DIR`` prints them).
    """

    code = ErrorCode.INVALID_BUNDLE

    def __init__(self, file: str, json_path: str, reason: str) -> None:
        from skilldeck.types import Problem

        self.file, self.json_path, self.reason = file, json_path, reason
        self.problems: list[Problem] = [Problem(file, json_path, reason)]
        super().__init__(f"{file}: {json_path}: {reason}")

    @classmethod
    def of(cls, problems: Sequence[Problem]) -> BundleError:
        """The error of several problems (at least one), first one first."""
        first = problems[0]
        error = cls(first.file, first.json_path, first.message)
        error.problems = list(problems)
        if len(problems) > 1:
            more = len(problems) - 1
            error.args = (
                f"{first} (and {more} more problem{'s' * (more > 1)}: run skilldeck check to "
                "see them all)",
            )
        return error

    def to_dict(self) -> dict[str, Any]:
        body = {**super().to_dict(), "file": self.file, "json_path": self.json_path}
        if len(self.problems) > 1:
            body["problems"] = [p.to_dict() for p in self.problems]
        return body


class SkillNotLoadedError(SkillDeckError):
    """The thread needs skills (or holds state fields of skills) that this deck does not load:
    running it here would lose them. Nothing was written."""

    code = ErrorCode.SKILL_NOT_LOADED

    def __init__(
        self,
        thread_id: str,
        *,
        skills: Sequence[str] = (),
        fields: Sequence[str] = (),
        sources: Sequence[str] = (),
    ) -> None:
        self.thread_id, self.skills, self.fields = thread_id, list(skills), list(fields)
        what = (
            f"skill(s) {', '.join(map(repr, skills))}"
            if skills
            else f"state field(s) {', '.join(map(repr, fields))} of skills"
        )
        where = f"; it ran with the skills of: {', '.join(sources)}" if sources else ""
        super().__init__(
            f"thread {thread_id!r} needs {what} that this deck does not load{where}. Open the "
            "deck with those skills (CLI: --skills DIR); nothing was written"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "skills": self.skills, "fields": self.fields}


class SkillChangedError(SkillDeckError):
    """The thread's pending card or turn was made by another version of a skill than the one
    this deck loads, and the skill's policy for that (``on_change`` in its skill.meta.json, or
    ``SKILLDECK_CHANGED_SKILL``) does not let it go on: running the new version on the old
    state could break it. Nothing was written."""

    code = ErrorCode.SKILL_CHANGED

    def __init__(self, thread_id: str, skill: str, old: str, new: str, reason: str) -> None:
        self.thread_id, self.skill, self.old, self.new = thread_id, skill, old, new
        super().__init__(
            f"thread {thread_id!r} paused in skill {skill!r} at version {old}, and this deck "
            f"loads version {new}: {reason}. Resume it with the skill as it was, or choose a "
            'policy: "on_change" in the skill\'s skill.meta.json, or SKILLDECK_CHANGED_SKILL '
            "for the deck ('latest': run the new version on the old state; 'migrate': rewrite "
            "the state with the bundle's scripts/migrate.py first); nothing was written"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "skill": self.skill, "old": self.old, "new": self.new}


class MatterRequiredError(SkillDeckError):
    """The run names no matter, but skills that may run in its context work in one: in its
    files (their tools are jailed to the matter's folder) or its record (``matters__*``).
    Nothing was written."""

    code = ErrorCode.MATTER_REQUIRED

    def __init__(self, context: str, skills: Sequence[str]) -> None:
        self.skills = list(skills)
        super().__init__(
            f"a run in context {context!r} needs a matter_id: skill(s) {', '.join(skills)} "
            "work in a matter's files or record (pass matter_id=, CLI --matter, HTTP matter_id)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "skills": self.skills}


class UntrustedScriptsError(SkillDeckError):
    """A skill's scripts would have to run, and the deck does not trust its bundle (see
    :mod:`skilldeck.skills.trust`). Nothing ran."""

    code = ErrorCode.UNTRUSTED_SCRIPTS

    def __init__(self, skill: str, folder: str, scripts: Sequence[str]) -> None:
        self.skill, self.folder, self.scripts = skill, folder, list(scripts)
        super().__init__(
            f"skill {skill!r} needs {', '.join(scripts)}, and skilldeck runs a bundle's scripts "
            f"only when it trusts the bundle; nothing ran. Read them, then "
            f"{self.how_to_trust(folder)}"
        )

    @staticmethod
    def how_to_trust(folder: str) -> str:
        """How to trust the bundle in ``folder``, in words for its author or operator."""
        quoted = shlex.quote(folder)
        return (
            f"trust it: `skilldeck trust {quoted}` (kept in SKILLDECK_HOME), `--trust {quoted}` "
            "for one command, trust=[...] in Python, or SKILLDECK_TRUSTED_SKILLS"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "skill": self.skill, "scripts": self.scripts}


class ModelConfigError(SkillDeckError):
    code = ErrorCode.MODEL_NOT_CONFIGURED


class NoModelConfiguredError(ModelConfigError):
    """No model is set for a skill; modes with a rule-based fallback use it instead."""


class ScriptedModelError(SkillDeckError):
    code = ErrorCode.SCRIPTED_MODEL


class PromptTooLongError(SkillDeckError):
    """A prompt cannot fit the endpoint's context (``model_context_tokens``), even trimmed."""

    code = ErrorCode.PROMPT_TOO_LONG


class StaleCassetteError(ScriptedModelError):
    """A recorded cassette's turn was asked by a request other than the one it answered."""


class ThreadNotFoundError(SkillDeckError):
    """No thread has this id (or id prefix) in the checkpoint database ``where``."""

    code = ErrorCode.THREAD_NOT_FOUND

    def __init__(self, thread_id: str, *, where: str | None = None) -> None:
        self.thread_id, self.where = thread_id, where
        looked = f" in {where}" if where else ""
        super().__init__(
            f"thread {thread_id!r} not found{looked}: check the id (`skilldeck threads` lists "
            "them) and the checkpoint database (SKILLDECK_HOME, SKILLDECK_CHECKPOINT_URL or "
            "--checkpoint), or start a thread with run()"
        )


class NoPendingCardError(SkillDeckError):
    code = ErrorCode.NO_PENDING_CARD

    def __init__(self, thread_id: str, status: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id!r} has no pending card to answer (its status is {status!r}); "
            "resume only threads whose status is 'interrupted'"
        )


class StaleInterruptError(SkillDeckError):
    code = ErrorCode.STALE_INTERRUPT

    def __init__(self, thread_id: str, given: str, pending: str) -> None:
        super().__init__(
            f"interrupt {given!r} of thread {thread_id!r} was already answered; "
            f"the pending card is {pending!r}: fetch the thread again and answer that card"
        )


class AlreadyResumedError(SkillDeckError):
    """Another resume of the same card won the race; its answers are the ones applied."""

    code = ErrorCode.ALREADY_RESUMED

    def __init__(self, thread_id: str, interrupt_id: str) -> None:
        self.thread_id, self.interrupt_id = thread_id, interrupt_id
        super().__init__(
            f"card {interrupt_id!r} of thread {thread_id!r} is already being answered by another "
            "request; fetch the thread again to see the outcome"
        )


class CardPendingError(SkillDeckError):
    """A new run was asked of a thread that waits for answers to a card."""

    code = ErrorCode.CARD_PENDING

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id!r} is waiting for answers to a card; answer it with resume() "
            "(HTTP: POST /threads/{id}/resume) before starting a new run"
        )


class ThreadBusyError(SkillDeckError):
    """A run of the thread is in progress, in this process or another one sharing the
    checkpoint database (it holds the thread's run lease)."""

    code = ErrorCode.THREAD_BUSY

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"a run of thread {thread_id!r} is in progress; wait for its stream to end "
            "(or, if its process died, about 10 s), then fetch the thread"
        )


class StaleRunError(SkillDeckError):
    """A run or resume waited to start (queued for a worker) past its lease, and meanwhile
    another request took the thread over or moved it on: it gave up having run nothing."""

    code = ErrorCode.STALE_RUN

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"the request on thread {thread_id!r} waited to start past its lease, and the "
            "thread moved on meanwhile (another request ran it); nothing was run or written: "
            "fetch the thread and decide again"
        )


class NotResumableError(SkillDeckError):
    """Only a thread whose run stopped before its end (status ``resumable``) can be
    continued."""

    code = ErrorCode.NOT_RESUMABLE

    def __init__(self, thread_id: str, status: str) -> None:
        self.thread_id, self.status = thread_id, status
        what = {
            "interrupted": "answer its card (resume)",
            "new": "start a run",
        }.get(status, "start a new run")
        super().__init__(
            f"thread {thread_id!r} is {status!r}, not 'resumable': only a thread whose run "
            f"stopped before its end can be continued; {what} instead"
        )


class InvalidAnswersError(SkillDeckError):
    """Card answers failed validation; nothing was written.

    ``card`` is the pending card with ``errors`` filled in, ready to be shown again.
    """

    code = ErrorCode.INVALID_ANSWERS

    def __init__(self, card: dict[str, Any], errors: list[dict[str, str]]) -> None:
        self.card = {**card, "errors": errors}
        self.errors = errors
        detail = "; ".join(f"{e['field_key']}: {e['message']}" for e in errors)
        super().__init__(f"invalid card answers: {detail}")

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "errors": self.errors, "card": self.card}


class InvalidInputError(SkillDeckError):
    """A run's input does not fit the input schema (``assets/input_schema.json``) of the
    skill the run starts with; nothing was written. ``errors`` lists each problem as
    ``{"path": "$.documents[0]", "message": ...}`` (JSON paths into the input)."""

    code = ErrorCode.INVALID_INPUT

    def __init__(self, skill: str, errors: list[dict[str, str]]) -> None:
        self.skill, self.errors = skill, errors
        detail = "; ".join(f"{e['path']}: {e['message']}" for e in errors)
        super().__init__(
            f"the input does not fit the input schema of skill {skill!r} "
            f"(assets/input_schema.json): {detail}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "skill": self.skill, "errors": self.errors}


class QuotaExceededError(SkillDeckError):
    """A user already holds as many stored rows of a kind (threads, matters) as the host
    allows; nothing was written."""

    code = ErrorCode.QUOTA_EXCEEDED

    def __init__(self, what: str, user_id: str, limit: int, setting: str) -> None:
        self.what, self.limit = what, limit
        super().__init__(
            f"user {user_id!r} already has {limit:,} {what}, the most allowed "
            f"({setting}); nothing was created: ask the operator to raise the limit"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "quota": self.what, "limit": self.limit}


class CheckpointError(SkillDeckError):
    code = ErrorCode.CHECKPOINT_UNAVAILABLE


class ToolError(SkillDeckError):
    """A tool refused its arguments or failed; the message is fed back to the model."""

    code = ErrorCode.TOOL_ERROR


class EvalConfigError(SkillDeckError):
    """An eval task, suite, grader config, cassette or report is malformed; nothing ran."""

    code = ErrorCode.INVALID_EVAL


class PluginError(SkillDeckError):
    """A plugin failed to load, or registered a name another plugin holds (see
    :mod:`skilldeck.plugins`)."""

    code = ErrorCode.PLUGIN_ERROR


class MissingExtraError(SkillDeckError):
    """An optional dependency (a Python package or a program) is not installed."""

    code = ErrorCode.MISSING_EXTRA

    def __init__(self, package: str, extra: str | None = None, *, hint: str | None = None) -> None:
        self.package = package
        how = hint or f"pip install 'skilldeck[{extra}]'"
        super().__init__(f"{package} is not installed: {how}")


class ModelUnavailableError(SkillDeckError):
    """A skill's model endpoint stayed unavailable (timeouts, refused connections, HTTP 429 or
    5xx) through every transport retry. Nothing of the failed calls reached the transcript; the
    thread stops ``resumable`` at its last checkpoint, and continuing it retries the turn.
    The message names the failure's type and HTTP status only (a provider's error text goes to
    the log, redacted)."""

    code = ErrorCode.MODEL_UNAVAILABLE
