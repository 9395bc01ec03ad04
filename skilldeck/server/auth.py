"""The service's authentication: the caller's user_id from their API key (the FastAPI
dependency :func:`current_user`, and :func:`header_key` for the ASGI layer, which checks the key
of a request with a body before reading the body). Keys and their file are in
:mod:`skilldeck.server.keys`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from fastapi import Depends
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from skilldeck.server.errors import Unauthorized
from skilldeck.server.service import CurrentService

__all__ = ["MISSING_KEY", "UNKNOWN_KEY", "current_user", "header_key"]

MISSING_KEY = "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
UNKNOWN_KEY = "unknown API key: check the key, or ask for a new one"

# The two ways to send a key, each declared in the OpenAPI document; neither refuses by itself
# (a missing key is answered with the error body every other error has).
_BEARER = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_API_KEY_HEADER = APIKeyHeader(name="X-API-Key", auto_error=False, description="The API key.")


def current_user(
    service: CurrentService,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    api_key: Annotated[str | None, Depends(_API_KEY_HEADER)],
) -> str:
    """The caller's user_id (a FastAPI dependency): the user of the ``Bearer`` key, else of
    ``X-API-Key``, among the app's keys.

    Raises:
        Unauthorized: no key, or an unknown one.
    """
    key = credentials.credentials if credentials is not None else api_key
    if not key:
        raise Unauthorized(MISSING_KEY)
    found = service.keys.user_for(key)
    if found is None:
        raise Unauthorized(UNKNOWN_KEY)
    return found


def header_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The API key an ASGI request's headers carry, as :func:`current_user` reads it: a
    ``Bearer`` credential of ``Authorization``, else ``X-API-Key``."""
    found = dict(headers)
    scheme, _, credential = found.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() == "bearer" and credential:
        return credential
    return found.get(b"x-api-key", b"").decode("latin-1") or None
