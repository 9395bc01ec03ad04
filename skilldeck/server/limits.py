"""Request body limits, checked before the app reads a body: a request that sends a body must
carry a known API key first (else 401, its body never read); a body larger than the limit is
answered 413, one that does not arrive within the deadline 408; a JSON body that parses only
by Python's leniency (``NaN``, ``Infinity``, lone UTF-16 surrogates) or nests deeper than the
host accepts is answered 422, so nothing of it reaches a run (where it would fail late, or be
stored as ``null`` or ``?``).

:func:`server_options` gives ``skilldeck serve``'s uvicorn its connection limit and timeouts:
keep-alive, and a deadline on each request's headers (uvicorn has none of its own)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skilldeck.server.auth import MISSING_KEY, UNKNOWN_KEY, header_key
from skilldeck.server.keys import ApiKeys
from skilldeck.skills.contract import OutputLimits

if TYPE_CHECKING:
    from skilldeck.settings import Settings

__all__ = ["BodyLimit", "KeyRequired", "header_deadline", "server_options"]


class BodyLimit:
    """ASGI middleware refusing bodies of unknown callers, over ``max_bytes`` (by header, or
    while reading) or slower than ``timeout_s``.

    Bodies are small JSON objects, so the body is read here and handed on in one piece; later
    ``receive`` calls (a client disconnecting from a stream) go through untouched. A client
    without a key cannot hold a connection open by sending a body slowly: its key is checked
    on the headers, before any of the body is read.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        keys: ApiKeys,
        timeout_s: float = 30.0,
        max_depth: int = 32,
    ) -> None:
        self.app = app
        self.max_bytes, self.keys, self.timeout_s = max_bytes, keys, timeout_s
        self.limits = OutputLimits(max_bytes=max_bytes, max_depth=max_depth)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _sends_body(scope):
            await self.app(scope, receive, send)  # no body: nothing to read here
            return
        refusal = self._refuse_by_headers(scope)
        body = await self._read_checked(receive) if refusal is None else refusal
        if isinstance(body, _Refusal):
            await _answer(send, body)
            return
        pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    def _refuse_by_headers(self, scope: Scope) -> _Refusal | None:
        """Refuse, before reading any of the body, a caller without a known API key (401)
        and a body whose declared length is over the limit (413)."""
        refusal = _key_refusal(scope, self.keys)
        if refusal is not None:
            return refusal
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return self._too_large()
        return None

    async def _read_checked(self, receive: Receive) -> bytes | _Refusal:
        """The body, if it arrives within the deadline (else 408), within the limit (else
        413), and is JSON a run may take (else 422; a body that is not JSON at all is left
        to the app's own answer)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                body = await self._read(receive)
        except TimeoutError:
            message = (
                f"the request body did not arrive within {self.timeout_s:g} s "
                "(SKILLDECK_BODY_TIMEOUT_S); send it at once"
            )
            return _Refusal(408, "REQUEST_TIMEOUT", message)
        if body is None:
            return self._too_large()
        problem = await _json_problem(bytes(body), self.limits) if body else None
        if problem is not None:
            return _Refusal(422, "INVALID_REQUEST", f"invalid request: {problem}")
        return bytes(body)

    async def _read(self, receive: Receive) -> bytearray | None:
        """The body; ``None`` once it is larger than the limit."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return body  # the client went away before sending the body
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                return None
            if not message.get("more_body", False):
                return body

    def _too_large(self) -> _Refusal:
        message = (
            f"the request body is larger than {self.max_bytes} bytes; send smaller input "
            "(large documents belong in the matter's files)"
        )
        return _Refusal(413, "PAYLOAD_TOO_LARGE", message)


class KeyRequired:
    """ASGI middleware that answers 401 to every HTTP request without a known API key (the
    paths in ``open_paths`` excepted), and tells the app whose the key is:
    ``scope["state"]["user_id"]`` (``request.state.user_id``). The MCP server's streamable
    HTTP endpoint sits behind it: its requests without a body (``GET`` of a session's stream,
    ``DELETE``) carry the key as those with one do."""

    def __init__(self, app: ASGIApp, keys: ApiKeys, open_paths: frozenset[str] = frozenset()):
        self.app, self.keys, self.open_paths = app, keys, open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self.open_paths:
            refusal = _key_refusal(scope, self.keys)
            if refusal is not None:
                await _answer(send, refusal)
                return
            user = self.keys.user_for(header_key(scope.get("headers") or []))
            scope.setdefault("state", {})["user_id"] = user
        await self.app(scope, receive, send)


def _key_refusal(scope: Scope, keys: ApiKeys) -> _Refusal | None:
    """The 401 of a request without a known API key; ``None`` for one with a known key."""
    key = header_key(scope.get("headers") or [])
    if keys.user_for(key) is None:
        return _Refusal(401, "UNAUTHORIZED", UNKNOWN_KEY if key else MISSING_KEY)
    return None


@dataclass(frozen=True)
class _Refusal:
    """A request :class:`BodyLimit` answers itself, with the JSON error body."""

    status: int
    code: str
    message: str


def _sends_body(scope: Scope) -> bool:
    headers = dict(scope.get("headers") or [])
    return headers.get(b"content-length") not in (None, b"0") or b"transfer-encoding" in headers


async def _answer(send: Send, refusal: _Refusal) -> None:
    error = {"code": refusal.code, "message": refusal.message}
    body = json.dumps({"error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if refusal.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if refusal.status != 422:  # the body was not read (to its end): the connection cannot go on
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


#: Bodies up to this size are checked on the event loop (well under a millisecond); larger
#: ones in a worker thread, so a large body does not stall every other connection.
INLINE_CHECK_BYTES = 16_384


async def _json_problem(body: bytes, limits: OutputLimits) -> str | None:
    if len(body) <= INLINE_CHECK_BYTES:
        return json_problem(body, limits)
    return await asyncio.to_thread(json_problem, body, limits)


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


def server_options(settings: Settings) -> dict[str, Any]:
    """The options of ``uvicorn.run`` that bound connections: at most
    ``settings.max_connections`` at once (further requests get 503 at once), idle ones closed
    after ``keep_alive_s``, and headers due within ``header_timeout_s``."""
    return {
        "limit_concurrency": settings.max_connections,
        "timeout_keep_alive": settings.keep_alive_s,
        "http": header_deadline(settings.header_timeout_s),
    }


def header_deadline(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools or h11, whichever it picks) with a deadline on
    request headers: a connection that has not sent a whole request head ``timeout_s`` after
    it opened, or after its previous response, is closed (a slow-headers client would
    otherwise hold it forever)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class HeaderDeadline(base):  # type: ignore[misc]
        """See :func:`header_deadline`. A request whose head is in makes a new ``cycle``
        (uvicorn's request-response state), which is how the deadline knows it was met."""

        _deadline: asyncio.TimerHandle | None = None
        _waiting_after: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._waiting_after = self.cycle
            self._deadline = self.loop.call_later(timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.cycle is self._waiting_after and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline
