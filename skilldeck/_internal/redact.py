"""The one place an exception becomes text someone else reads.

A provider's error body may quote the request's ``Authorization`` header or an API key; a
database's may name its host and user; a library's may hold a file's path or a piece of its
content. So text of an exception skilldeck did not raise itself never reaches a client, a
thread's state or a model. What they get is a :class:`PublicReason`, which only
:func:`safe_reason` (and :func:`log_error`, which calls it) can build: the exception's type and
HTTP status, or, for skilldeck's own errors (whose messages are written to be shown), their
message. The full text goes to the server log, after :func:`redact`.

The builders of what clients read take a :class:`PublicReason` where an exception is concerned
(the routing model's :class:`~skilldeck.nodes.route_model.RouteModelError`, the service's
error events, a run's ``INTERNAL_ERROR``), so there is no way to hand them an exception's raw
text.
"""

from __future__ import annotations

import logging
import re
import traceback
from dataclasses import InitVar, dataclass

from skilldeck.errors import SkillDeckError

__all__ = ["PublicReason", "log_error", "redact", "safe_reason"]

#: The longest public reason: one a client or a model reads in a line, whatever it quotes.
MAX_REASON_CHARS = 500

# (pattern, replacement): what precedes a secret is kept, the secret goes.
_SECRETS = (
    # Authorization: Bearer <token>, Basic <token>
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 [redacted]"),
    # api_key=..., "x-api-key": "...", password: ...
    (
        re.compile(
            r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\"']?\s*[:=]\s*[\"']?)"
            r"[^\s\"',;}]{6,}"
        ),
        r"\1[redacted]",
    ),
    # Key shapes: sk-…, sdk_…, ghp_…, AKIA…, and long opaque tokens.
    (re.compile(r"\b(?:sk|sdk|rk|pk|ghp|gho|xox[abp])[-_][A-Za-z0-9_-]{12,}"), "[redacted]"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "[redacted]"),
    (re.compile(r"\b[A-Za-z0-9_-]{40,}\b"), "[redacted]"),
)

# Only this module holds it, so only this module builds a PublicReason.
_MINT = object()


@dataclass(frozen=True, slots=True)
class PublicReason:
    """Why something failed, in words anyone may read: built only by :func:`safe_reason`.

    ``str()`` of it is its text, so it goes into messages as it is.
    """

    text: str
    mint: InitVar[object] = None

    def __post_init__(self, mint: object) -> None:
        if mint is not _MINT:
            raise TypeError(
                "a PublicReason is built by skilldeck._internal.redact.safe_reason(exc) only: "
                "an exception's own text must not reach a client"
            )

    def __str__(self) -> str:
        return self.text


def redact(text: str) -> str:
    """``text`` with everything that looks like a credential replaced by ``[redacted]``."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def safe_reason(exc: BaseException, frame: str = "{}") -> PublicReason:
    """What may be said of ``exc`` to anyone: skilldeck's own errors say what they say
    (redacted, and at most :data:`MAX_REASON_CHARS`); any other exception, its type and the
    code it carries, if any (an HTTP status, a SQLite error name, a SQLSTATE). An exception
    group speaks for its first innermost error (a task group wraps a dead MCP server's error).

    Args:
        frame: skilldeck's own words around the reason, ``{}`` where it goes
            (``"internal error ({}); see the log"``).
    """
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, SkillDeckError):
        text = " ".join(redact(str(exc)).split())
        if len(text) > MAX_REASON_CHARS:
            text = text[: MAX_REASON_CHARS - 1] + "…"
    else:
        code = _code(exc)
        text = type(exc).__name__ + (f" ({code})" if code else "")
    return PublicReason(frame.format(text), _MINT)


def _code(exc: BaseException) -> str | None:
    """The status or error code ``exc`` carries as data, never as text: an HTTP status, a
    SQLite error name (``SQLITE_BUSY``), a PostgreSQL SQLSTATE."""
    status = getattr(exc, "status_code", None) or getattr(
        getattr(exc, "response", None), "status_code", None
    )
    if isinstance(status, int):
        return f"HTTP {status}"
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(name, str) and re.fullmatch(r"SQLITE_[A-Z_]+", name):
        return name
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str) and re.fullmatch(r"[0-9A-Z]{5}", state):
        return f"SQLSTATE {state}"
    return None


def log_error(
    log: logging.Logger,
    what: str,
    exc: BaseException,
    *,
    level: int = logging.ERROR,
    frame: str = "{}",
) -> PublicReason:
    """Log ``what`` with ``exc``'s traceback, redacted; what anyone may be told of ``exc``
    (:func:`safe_reason`, in ``frame``)."""
    log.log(level, "%s\n%s", what, redact("".join(traceback.format_exception(exc))).rstrip())
    return safe_reason(exc, frame)
