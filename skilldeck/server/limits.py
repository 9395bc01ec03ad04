"""Request body limits, checked before the app reads a body: a body larger than the limit is
answered 413; a JSON body that parses only by Python's leniency (``NaN``, ``Infinity``, lone
UTF-16 surrogates) or nests deeper than the host accepts is answered 422, so nothing of it
reaches a run (where it would fail late, or be stored as ``null`` or ``?``)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skilldeck.skills.contract import OutputLimits

__all__ = ["BodyLimit"]


class BodyLimit:
    """ASGI middleware refusing bodies over ``max_bytes`` (by header, or while reading).

    Bodies are small JSON objects, so the body is read here and handed on in one piece; later
    ``receive`` calls (a client disconnecting from a stream) go through untouched.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, max_depth: int = 32) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.limits = OutputLimits(max_bytes=max_bytes, max_depth=max_depth)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away before sending the body
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        problem = json_problem(bytes(body), self.limits) if body else None
        if problem is not None:
            await self._answer(send, 422, "INVALID_REQUEST", f"invalid request: {problem}")
            return
        pending: list[Message] = [{"type": "http.request", "body": bytes(body), "more_body": False}]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        message = (
            f"the request body is larger than {self.max_bytes} bytes; send smaller input "
            "(large documents belong in the matter's files)"
        )
        await self._answer(send, 413, "PAYLOAD_TOO_LARGE", message)

    async def _answer(self, send: Send, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def json_problem(body: bytes, limits: OutputLimits) -> str | None:
    """What makes ``body`` unacceptable JSON; ``None`` if it is fine (or not JSON at all:
    the app answers that itself)."""
    try:
        value = json.loads(body, parse_constant=_no_constant)
    except _Refused as exc:
        return str(exc)
    except RecursionError:
        return f"nested deeper than {limits.max_depth} levels"
    except ValueError:
        return None  # not JSON, or not UTF-8: FastAPI's own 422 says so
    problems = limits.problems(value, "body")
    return f"{problems[0]['path']}: {problems[0]['message']}" if problems else None


class _Refused(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not JSON (numbers must be finite)")
