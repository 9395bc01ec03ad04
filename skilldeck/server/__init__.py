"""The HTTP service: ``create_app(deck)`` (FastAPI) and its API keys.

Example:
    >>> from skilldeck import SkillDeck
    >>> from skilldeck.server import create_app, hash_key
    >>> deck = SkillDeck(checkpointer="sqlite:///runs.sqlite")
    >>> app = create_app(deck, api_keys={hash_key("secret-key"): "alice"})
    >>> # uvicorn.run(app) — or mount it: parent.mount("/skilldeck", app)
"""

from skilldeck.server.app import OWNERS_NAMESPACE, create_app
from skilldeck.server.auth import API_KEYS_ENV, ApiKeys, hash_key, new_key
from skilldeck.server.sse import format_event, format_sse

__all__ = [
    "API_KEYS_ENV",
    "OWNERS_NAMESPACE",
    "ApiKeys",
    "create_app",
    "format_event",
    "format_sse",
    "hash_key",
    "new_key",
]
