"""HTTP errors: every 4xx/5xx answers ``{"error": {"code", "message", ...}}``.

Engine errors keep their :class:`~skilldeck.errors.ErrorCode` and details (invalid answers
carry the card with its ``errors``); request errors of the HTTP layer get their own codes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fastapi.routing
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from skilldeck._internal.postgres import connection_errors
from skilldeck._internal.redact import log_error
from skilldeck._internal.text import cut
from skilldeck.errors import ErrorCode, SkillDeckError
from skilldeck.server.schemas import ErrorBody

__all__ = [
    "NotFound",
    "TooManyRequests",
    "Unauthorized",
    "error_response",
    "install_error_handlers",
    "public_validation_errors",
    "responses",
    "status_of",
]

log = logging.getLogger("skilldeck.server")

_STATUS = {
    ErrorCode.THREAD_NOT_FOUND: 404,
    ErrorCode.NO_PENDING_CARD: 409,
    ErrorCode.STALE_INTERRUPT: 409,
    ErrorCode.ALREADY_RESUMED: 409,
    ErrorCode.CARD_PENDING: 409,
    ErrorCode.THREAD_BUSY: 409,
    ErrorCode.SKILL_NOT_LOADED: 409,
    ErrorCode.SKILL_CHANGED: 409,
    ErrorCode.STALE_RUN: 409,
    ErrorCode.NOT_RESUMABLE: 409,
    ErrorCode.INVALID_ANSWERS: 422,
    ErrorCode.INVALID_INPUT: 422,
    ErrorCode.MATTER_REQUIRED: 422,
    ErrorCode.QUOTA_EXCEEDED: 403,
    ErrorCode.CHECKPOINT_UNAVAILABLE: 503,
    ErrorCode.MODEL_NOT_CONFIGURED: 503,
    # The operator's to fix (`skilldeck serve` refuses to start with such a skill).
    ErrorCode.UNTRUSTED_SCRIPTS: 503,
    ErrorCode.RUN_LOG_FULL: 503,
    ErrorCode.SHUTTING_DOWN: 503,
}

_DESCRIPTIONS = {
    401: "Missing or unknown API key.",
    403: "QUOTA_EXCEEDED: the caller already has as many threads or matters as allowed; "
    "nothing was created.",
    404: "Unknown thread, or a thread of another user (the same answer).",
    409: "No pending card, a stale interrupt_id, a card already being answered, a card "
    "waiting for answers, a run of the thread in progress, or a thread paused in a skill "
    "that changed since (SKILL_CHANGED: the skill's upgrade policy refuses it).",
    408: "The request body did not arrive in time (SKILLDECK_BODY_TIMEOUT_S).",
    413: "The request body is too large.",
    422: "Invalid request body or card answers, or a run that needs a matter; nothing was changed.",
    429: "A per-user limit was hit (TOO_MANY_RUNS, TOO_MANY_THREADS); nothing was changed: "
    "retry after Retry-After seconds.",
    500: "An internal error; the server log has the details.",
    503: "The checkpoint database or the model is unavailable, the run logs are full "
    "(RUN_LOG_FULL; retry after Retry-After), the process is shutting down (SHUTTING_DOWN; "
    "retry), or a skill's scripts are not trusted by the server.",
}

# A database that is down is usually back within seconds (a restart, a failover).
_RETRY = {"Retry-After": "1"}

# HTTP-layer codes for statuses raised by FastAPI/Starlette themselves.
_HTTP_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}


class Unauthorized(Exception):
    """No API key, or an unknown one (HTTP 401)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(Exception):
    """A resource the caller may not see: answered 404 whether it exists or not."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class TooManyRequests(Exception):
    """A per-user limit was hit: answered 429 with ``Retry-After``, nothing changed."""

    def __init__(self, code: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.code, self.message, self.retry_after_s = code, message, retry_after_s


def status_of(exc: SkillDeckError) -> int:
    """The HTTP status of an engine error."""
    return _STATUS.get(exc.code, 500)


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, **extra}}
    return JSONResponse(body, status_code=status, headers=headers)


def responses(*statuses: int, stream: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries of the error statuses a route answers.

    FastAPI documents a ``model`` under the route's own media type; a streaming route's errors
    are JSON, so they name the (shared) ``ErrorBody`` component under ``application/json``.
    """
    if not stream:
        return {s: {"model": ErrorBody, "description": _DESCRIPTIONS[s]} for s in statuses}
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {s: {"description": _DESCRIPTIONS[s], "content": content} for s in statuses}


async def _engine_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SkillDeckError)
    detail = exc.to_dict()
    status = status_of(exc)
    headers = _RETRY if status == 503 else None
    return error_response(
        status, detail.pop("code"), detail.pop("message"), headers=headers, **detail
    )


async def _database_down(request: Request, exc: Exception) -> JSONResponse:
    # Raised outside the engine's own checks (the owners store): the same answer as theirs,
    # and the database's own text (its host, its user) only in the log.
    frame = "database unavailable ({}); retry in a moment"
    reason = log_error(log, f"{request.method} {request.url.path}: database down", exc, frame=frame)
    return error_response(503, ErrorCode.CHECKPOINT_UNAVAILABLE.value, str(reason), headers=_RETRY)


async def _unauthorized(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Unauthorized)
    return error_response(401, "UNAUTHORIZED", exc.message, headers={"WWW-Authenticate": "Bearer"})


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, NotFound)
    return error_response(404, exc.code, exc.message)


async def _too_many(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TooManyRequests)
    headers = {"Retry-After": str(exc.retry_after_s)}
    return error_response(429, exc.code, exc.message, headers=headers)


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, "INVALID_REQUEST", **public_validation_errors(exc.errors()))


#: What a 422 lists of a body's validation errors: at most ``MAX_LISTED_ERRORS`` (the rest are
#: counted in ``more_errors``), each part of a ``loc`` cut to ``LOC_PART_CHARS`` characters and
#: each message to ``MESSAGE_CHARS``. A client's keys are in the ``loc``s: unbounded, a 21 KB
#: body of one long key over 200 bad values was answered with 24 MB.
MAX_LISTED_ERRORS = 20
LOC_PART_CHARS = 64
MESSAGE_CHARS = 200
_IN_MESSAGE = 3


def public_validation_errors(errors: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The public part of a 422 for pydantic's ``errors``: ``message`` (the first three, in
    words), ``errors`` (``{loc, message, type}`` each) and ``more_errors`` (how many were left
    out), within the bounds above whatever the client sent."""
    listed = [
        {
            "loc": [cut(str(part), LOC_PART_CHARS) for part in e.get("loc", ())],
            "message": cut(str(e.get("msg")), MESSAGE_CHARS),
            "type": cut(str(e.get("type")), LOC_PART_CHARS),
        }
        for e in errors[:MAX_LISTED_ERRORS]
    ]
    where = ", ".join(".".join(p["loc"]) + f": {p['message']}" for p in listed[:_IN_MESSAGE])
    more = len(errors) - len(listed)
    suffix = f" (and {len(errors) - _IN_MESSAGE} more)" if len(errors) > _IN_MESSAGE else ""
    return {
        "message": f"invalid request: {where}{suffix}",
        "errors": listed,
        "more_errors": more,
    }


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400:
        # FastAPI's answer to a body it cannot decode (not UTF-8): one status for bad bodies.
        return error_response(
            422, "INVALID_REQUEST", f"invalid request: the body is not UTF-8 JSON ({exc.detail})"
        )
    code = _HTTP_CODES.get(exc.status_code, f"HTTP_{exc.status_code}")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method of the path, not just its first route's
        headers["Allow"] = ", ".join(_allowed(request))
    return error_response(exc.status_code, code, str(exc.detail), headers=headers)


def _allowed(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in _route_table(request.app):
        allowed = getattr(route, "methods", None)  # a mount has none
        if allowed and route.matches(request.scope)[0] != Match.NONE:
            methods |= set(allowed)
    return sorted(methods)


def _route_table(app: FastAPI) -> Iterable[Any]:
    """Every route of ``app``, its included routers' too: older FastAPI copied them into
    ``app.router.routes``; newer versions keep each included router as one entry there, whose
    routes :func:`fastapi.routing.iter_route_contexts` lists."""
    iter_route_contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    routes = app.router.routes
    return routes if iter_route_contexts is None else iter_route_contexts(routes)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    # A corrupt checkpoint row, a bug: the client gets the shape every error has, and no text
    # that could carry what the server must keep (the log has it, redacted).
    frame = "internal error ({}); the details are in the server log"
    reason = log_error(log, f"{request.method} {request.url.path} failed", exc, frame=frame)
    return error_response(500, "INTERNAL_ERROR", str(reason))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error with the JSON error body."""
    app.add_exception_handler(Exception, _internal)
    app.add_exception_handler(SkillDeckError, _engine_error)
    app.add_exception_handler(Unauthorized, _unauthorized)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(TooManyRequests, _too_many)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    for error in connection_errors():
        app.add_exception_handler(error, _database_down)
