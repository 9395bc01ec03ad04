"""The grader registry: ``@grader("name")`` classes built from a task's ``{name, config}``.

A grader is a small frozen dataclass with one method, ``evaluate(ctx) -> GradeResult``. Its
config is read through :class:`ConfigReader` when the task is loaded, so a typo or a wrong type
fails before anything runs, with a message that names the grader and the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Self, TypeVar

from skilldeck._internal.registry import Registry
from skilldeck.errors import EvalConfigError
from skilldeck.evals._paths import check_path

if TYPE_CHECKING:
    from skilldeck.evals.judge import Judge
    from skilldeck.evals.outcome import Outcome
    from skilldeck.evals.tasks import Task

__all__ = [
    "NO_JUDGE",
    "ConfigReader",
    "GradeContext",
    "GradeResult",
    "Grader",
    "build_grader",
    "grader",
    "judged",
    "registered_graders",
]


NO_JUDGE = "not scored: no judge model configured (use --judge-model)"


@dataclass(frozen=True, slots=True)
class GradeResult:
    """One grader's verdict: ``score`` in [0, 1] (``None``: not scored), ``passed``, why."""

    score: float | None
    passed: bool | None
    rationale: str

    def __post_init__(self) -> None:
        if self.score is None:
            if self.passed is not None:
                raise ValueError("a result that is not scored cannot pass or fail")
        elif not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score {self.score} is outside [0, 1]")
        elif self.passed is None:
            raise ValueError("a scored result must say whether it passed")

    @classmethod
    def of(cls, score: float, rationale: str, *, threshold: float = 1.0) -> GradeResult:
        """A scored result that passes when ``score >= threshold``."""
        score = round(float(score), 6)
        return cls(score, score >= threshold, rationale)

    @classmethod
    def check(cls, ok: bool, rationale: str) -> GradeResult:
        """An all-or-nothing result."""
        return cls(1.0 if ok else 0.0, ok, rationale)

    @classmethod
    def not_scored(cls, rationale: str) -> GradeResult:
        """Reported as 'not scored': counted neither as passed nor as failed."""
        return cls(None, None, rationale)

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "passed": self.passed, "rationale": self.rationale}


@dataclass(frozen=True, slots=True)
class GradeContext:
    """What a grader sees: the task, the trial's outcome, the judge (if any) and ``index``, the
    grader's position among the task's judge graders (it keys the judge's model call, so a
    cassette replays it)."""

    task: Task
    outcome: Outcome
    judge: Judge | None = None
    index: int = 0


class Grader:
    """Base of every grader; subclasses are frozen dataclasses registered with :func:`grader`."""

    name: ClassVar[str] = ""
    #: Whether the grader asks the judge model (its calls are numbered per task).
    uses_judge: ClassVar[bool] = False

    @classmethod
    def from_config(cls, config: ConfigReader) -> Self:
        """Build the grader from its task config (read every key through ``config``)."""
        return cls()

    def evaluate(self, ctx: GradeContext) -> GradeResult:
        raise NotImplementedError


def judged(
    ctx: GradeContext,
    subject: Callable[[], tuple[str, str] | GradeResult],
    *,
    rubric: str,
    threshold: float,
) -> GradeResult:
    """The judge model's score of what ``subject()`` gives: ``(subject, context)``, or the
    result itself when there is nothing to judge. Without a judge nothing is looked at."""
    if ctx.judge is None:
        return GradeResult.not_scored(NO_JUDGE)
    found = subject()
    if isinstance(found, GradeResult):
        return found
    text, context = found
    return ctx.judge.grade(
        rubric=rubric,
        subject=text,
        context=context,
        case=ctx.task.id,
        index=ctx.index,
        epoch=ctx.outcome.epoch,
        threshold=threshold,
    )


G = TypeVar("G", bound=type[Grader])
_REGISTRY: Registry[type[Grader]] = Registry("grader", '@grader("name")')


def grader(name: str) -> Callable[[G], G]:
    """Register a grader class under ``name`` (the name tasks use); a plugin's module does
    it for the graders it adds (see :mod:`skilldeck.plugins`).

    Raises:
        PluginError: another class holds ``name``.
    """

    def register(cls: G) -> G:
        _REGISTRY.add(name, cls)
        cls.name = name
        return cls

    return register


def registered_graders() -> list[str]:
    """Names of every registered grader (the installed plugins' included)."""
    return sorted(_REGISTRY.names())


def build_grader(name: str, config: Mapping[str, Any] | None) -> Grader:
    """The grader ``name`` with ``config``; raise :class:`EvalConfigError` if either is wrong."""
    cls = _REGISTRY.get(name)
    if cls is None:
        raise EvalConfigError(
            f"unknown grader {name!r}; registered graders: {', '.join(registered_graders())} "
            "(add one with @grader(name) in a plugin: see docs/plugins.md)"
        )
    reader = ConfigReader(name, config)
    built = cls.from_config(reader)
    reader.finish()
    return built


class ConfigReader:
    """Typed access to one grader's config; every problem raises :class:`EvalConfigError`."""

    def __init__(self, grader: str, config: Mapping[str, Any] | None) -> None:
        if config is None:
            config = {}
        if not isinstance(config, Mapping):
            raise EvalConfigError(
                f"grader {grader!r}: config must be a mapping, got {type(config).__name__}"
            )
        self.grader = grader
        self.config = config
        self._read: set[str] = set()

    def fail(self, key: str, message: str) -> NoReturn:
        got = self.config.get(key, "<missing>")
        raise EvalConfigError(f"grader {self.grader!r}: config.{key}: {message} (got {got!r})")

    def has(self, key: str) -> bool:
        self._read.add(key)
        return key in self.config

    def value(self, key: str, *, required: bool = True, default: Any = None) -> Any:
        if not self.has(key):
            if required:
                self.fail(key, "is required")
            return default
        return self.config[key]

    def string(self, key: str, default: str | None = None) -> str:
        value = self.value(key, required=default is None, default=default)
        if not isinstance(value, str) or not value:
            self.fail(key, "must be a non-empty string")
        return value

    def optional_string(self, key: str) -> str | None:
        return self.string(key) if self.has(key) and self.config[key] is not None else None

    def strings(self, key: str, *, required: bool = True) -> tuple[str, ...]:
        value = self.value(key, required=required, default=[])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(key, "must be a list of non-empty strings")
        if required and not value:
            self.fail(key, "must list at least one string")
        return tuple(value)

    def number(self, key: str, default: float, *, low: float = 0.0, high: float = 1.0) -> float:
        value = self.value(key, required=False, default=default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(key, "must be a number")
        if not low <= value <= high:
            self.fail(key, f"must be between {low} and {high}")
        return float(value)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.string(key, default)
        if value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}")
        return value

    def path(self, key: str, default: str | None = None) -> str:
        value = self.string(key, default)
        try:
            return check_path(value)
        except EvalConfigError as exc:
            self.fail(key, str(exc))

    def finish(self) -> None:
        """Refuse keys no one read: a typo should not silently change what is graded."""
        unknown = sorted(set(self.config) - self._read)
        if unknown:
            known = ", ".join(sorted(self._read)) or "none"
            raise EvalConfigError(
                f"grader {self.grader!r}: unknown config key(s) {', '.join(unknown)}; "
                f"it reads: {known}"
            )
