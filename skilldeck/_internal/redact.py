"""Keep secrets out of what is shown: provider errors echo headers and keys back.

A provider's error body may quote the request's ``Authorization`` header or an API key. Such
text goes to the log only after :func:`redact`, and never to a client: a client gets
:func:`safe_reason`, built from the error's type and HTTP status alone.
"""

from __future__ import annotations

import logging
import re
import traceback

__all__ = ["log_error", "redact", "safe_reason"]

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


def redact(text: str) -> str:
    """``text`` with everything that looks like a credential replaced by ``[redacted]``."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def safe_reason(exc: BaseException) -> str:
    """What may be said of ``exc`` to anyone: its type, and its HTTP status if it has one."""
    status = getattr(exc, "status_code", None) or getattr(
        getattr(exc, "response", None), "status_code", None
    )
    return type(exc).__name__ + (f" (HTTP {status})" if isinstance(status, int) else "")


def log_error(log: logging.Logger, what: str, exc: BaseException) -> None:
    """Log ``what`` with ``exc``'s traceback, redacted."""
    log.error("%s\n%s", what, redact("".join(traceback.format_exception(exc))).rstrip())
