"""API keys: each maps to one user_id; only their SHA-256 hashes are stored.

This module needs nothing of the service extra: ``skilldeck keys`` uses it on any install.

The key file (``--keys FILE``) or the ``SKILLDECK_API_KEYS`` variable (inline JSON, or the path
of the file) is one JSON object ``{"<sha256 hex of the key>": "<user_id>"}``. Make a key with
``skilldeck keys new --user alice`` (prints the key once and its entry) or hash one you have
with ``skilldeck keys hash KEY``. Clients send the key as ``Authorization: Bearer <key>`` or
``X-API-Key: <key>``. Keys are long random secrets, so a plain hash is enough: nobody can guess
a key from its hash, and the file gives away no key.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skilldeck.errors import SkillDeckError

__all__ = ["API_KEYS_ENV", "ApiKeys", "hash_key", "new_key"]

API_KEYS_ENV = "SKILLDECK_API_KEYS"
_HASH = re.compile(r"^[0-9a-f]{64}$")


def hash_key(key: str) -> str:
    """The SHA-256 hex digest a key is stored as."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A new random API key (256 bits)."""
    return "sdk_" + secrets.token_urlsafe(32)


class ApiKeys:
    """Hashed API keys and the user each belongs to.

    Args:
        hashes: ``{sha256 hex: user_id}``.

    Raises:
        SkillDeckError: an entry is not a 64-character lower-case hex hash and a user id.
    """

    def __init__(self, hashes: Mapping[str, str]) -> None:
        for digest, user in hashes.items():
            if not isinstance(digest, str) or not _HASH.match(digest):
                raise SkillDeckError(
                    f"API key entry {str(digest)[:16]!r}... is not a SHA-256 hex digest: store "
                    "hashes, not keys (make one with: skilldeck keys hash KEY)"
                )
            if not isinstance(user, str) or not user.strip():
                raise SkillDeckError(f"API key {digest[:12]}...: the user_id must be a string")
        self._users = dict(hashes)

    @classmethod
    def load(cls, source: str | Path | Mapping[str, str] | None = None) -> ApiKeys:
        """Keys from a mapping, a JSON file, inline JSON, or (``None``) ``SKILLDECK_API_KEYS``.

        Raises:
            SkillDeckError: no keys are configured, or the file or JSON is malformed.
        """
        if isinstance(source, Mapping):
            return cls(source)
        text = str(source) if source is not None else os.environ.get(API_KEYS_ENV, "")
        if not text.strip():
            raise SkillDeckError(
                f"no API keys configured: pass --keys FILE or set {API_KEYS_ENV} to a JSON "
                'object {"<sha256 of key>": "<user_id>"} (see: skilldeck keys new --user NAME)'
            )
        if text.lstrip().startswith("{"):
            return cls(_parse(text, f"${API_KEYS_ENV}"))
        path = Path(text)
        if not path.is_file():
            raise SkillDeckError(f"API key file {str(path)!r} does not exist")
        return cls(_parse(path.read_text("utf-8"), str(path)))

    def __len__(self) -> int:
        return len(self._users)

    def hashes(self) -> dict[str, str]:
        """``{sha256 hex: user_id}``, as the key file stores them."""
        return dict(self._users)

    def user_for(self, key: str | None) -> str | None:
        """The user of ``key``, or ``None`` for a missing or unknown key."""
        if not key:
            return None
        return self._users.get(hash_key(key))


def _parse(text: str, label: str) -> dict[str, str]:
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SkillDeckError(f"{label}: API keys are not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise SkillDeckError(f'{label}: API keys must be a JSON object {{"<sha256>": "<user>"}}')
    return value
