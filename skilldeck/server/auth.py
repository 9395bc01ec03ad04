"""The service's authentication: the caller's user_id from their API key (a FastAPI
dependency). Keys and their file are in :mod:`skilldeck.server.keys`."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Depends
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from skilldeck.server.keys import ApiKeys

__all__ = ["Unauthorized", "current_user"]


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
            raise Unauthorized(
                "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
            )
        found = keys.user_for(key)
        if found is None:
            raise Unauthorized("unknown API key: check the key, or ask for a new one")
        return found

    return user
