"""The service's authentication: the caller's user_id from their API key (a FastAPI
dependency, and :func:`header_key` for the ASGI layer, which checks the key of a request with a
body before reading the body). Keys and their file are in :mod:`skilldeck.server.keys`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fastapi import Depends
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from skilldeck.server.keys import ApiKeys

__all__ = ["MISSING_KEY", "UNKNOWN_KEY", "Unauthorized", "current_user", "header_key"]

MISSING_KEY = "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
UNKNOWN_KEY = "unknown API key: check the key, or ask for a new one"


class Unauthorized(Exception):
    """No API key, or an unknown one (HTTP 401)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def current_user(keys: ApiKeys) -> Callable[..., str]:
    """A FastAPI dependency giving the caller's user_id (declares both key schemes)."""
    bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
    header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The API key.")

    def user(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008
        api_key: str | None = Depends(header),
    ) -> str:
        key = credentials.credentials if credentials is not None else api_key
        if not key:
            raise Unauthorized(MISSING_KEY)
        found = keys.user_for(key)
        if found is None:
            raise Unauthorized(UNKNOWN_KEY)
        return found

    return user


def header_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The API key an ASGI request's headers carry, as :func:`current_user` reads it: a
    ``Bearer`` credential of ``Authorization``, else ``X-API-Key``."""
    found = dict(headers)
    scheme, _, credential = found.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() == "bearer" and credential:
        return credential
    return found.get(b"x-api-key", b"").decode("latin-1") or None
