"""The HTTP service: ``create_app(deck)`` (FastAPI) and its API keys.

Example:
    >>> from skilldeck import SkillDeck
    >>> from skilldeck.server import create_app, hash_key
    >>> deck = SkillDeck(checkpointer="sqlite:///runs.sqlite")
    >>> app = create_app(deck, api_keys={hash_key("secret-key"): "alice"})
    >>> # uvicorn.run(app) — or mount it: parent.mount("/skilldeck", app)

``create_app`` needs the service extra (``pip install 'skilldeck[service]'``); the key helpers
do not, and the names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skilldeck._internal.lazy import exports

if TYPE_CHECKING:
    from skilldeck.server.app import create_app
    from skilldeck.server.keys import API_KEYS_ENV, ApiKeys, hash_key, new_key
    from skilldeck.server.sse import format_event, format_sse

__all__ = [
    "API_KEYS_ENV",
    "ApiKeys",
    "create_app",
    "format_event",
    "format_sse",
    "hash_key",
    "new_key",
]

__getattr__, __dir__ = exports(
    __name__,
    globals(),
    {
        "create_app": "skilldeck.server.app",
        **dict.fromkeys(
            ("API_KEYS_ENV", "ApiKeys", "hash_key", "new_key"), "skilldeck.server.keys"
        ),
        **dict.fromkeys(("format_event", "format_sse"), "skilldeck.server.sse"),
    },
)
