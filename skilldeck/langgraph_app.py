"""The deck as LangGraph's own server serves a graph: ``langgraph.json`` names ``graph`` here,
so ``langgraph dev`` (and LangGraph Platform) serve the built-in skills, or the folders in
``SKILLDECK_SKILLS`` (separated by the path separator), with the ``SKILLDECK_*`` settings.

The server brings the checkpointer and the store; the graph routes a run's first step itself
(see :meth:`skilldeck.SkillDeck.server_graph`). Start a run with the input ``{"context": ...,
"input": {...}, "matter_id": ...}``; a card is an interrupt, answered with
``Command(resume={interrupt_id: answers})``.

``langgraph.json`` also names ``auth`` here: LangGraph's custom auth handler, which gives the
server the identity and ownership rules of ``skilldeck serve``.

- Every request carries an API key of ``SKILLDECK_API_KEYS`` (``Authorization: Bearer <key>``
  or ``X-API-Key``), which names its user; no key, an unknown key: 401.
- A thread belongs to the user who created it (its ``owner`` metadata, set by the server, never
  by the client): other users cannot see, search, run, resume or change it (404).
- A run's user is the authenticated one: the server puts it in the run's config after the
  client's ``configurable`` (``langgraph_auth_user_id``), and the graph reads the user only
  from there (:func:`skilldeck.tools.registry.run_identity`); a ``user_id`` a client sends is
  overwritten.
- A run names its matter as the input's or the ``configurable``'s ``matter_id`` (the same one
  if both), on every run and resume: it is checked as ``skilldeck serve`` checks it (the
  matter policy and grants of ``skilldeck matters``, in the database of
  ``SKILLDECK_CHECKPOINT_URL``), and a matter the user may not use answers 404. A run that
  names none runs without a matter, whatever an earlier run of the thread named.
- The store, crons and changes to assistants are not offered to clients (403).
"""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any

from langgraph_sdk import Auth
from langgraph_sdk.auth.types import StudioUser

from skilldeck._internal.ids import id_problem
from skilldeck.deck import SkillDeck
from skilldeck.errors import QuotaExceededError, SkillDeckError
from skilldeck.server.keys import API_KEYS_ENV, ApiKeys
from skilldeck.settings import Settings

__all__ = ["auth", "graph"]

#: The thread metadata key that names a thread's owner.
OWNER = "owner"

auth = Auth()


def _skills() -> list[str] | None:
    given = os.environ.get("SKILLDECK_SKILLS")
    return [p for p in given.split(os.pathsep) if p] if given else None


@functools.cache
def graph() -> Any:
    """The compiled graph the server runs (a factory: built when the server loads it, once per
    server process: LangGraph's server calls a factory for every run and copies what it
    returns, so a deck built per call cost each run its bundles' loading and was never closed).

    Raises:
        SkillDeckError: no API keys are configured, or a skill's scripts would not be trusted.
    """
    _keys()  # a server without keys would refuse every request: refuse to start instead
    deck = SkillDeck(_skills(), checkpointer="memory://", settings=Settings())
    deck.check_scripts()
    return deck.server_graph()


@functools.cache
def _keys() -> ApiKeys:
    return ApiKeys.load()


@functools.cache
def _matters() -> tuple[Any, Settings]:
    """The index that records matters (``skilldeck matters``), and the settings that say
    whether a user claims a matter nobody owns by naming it (``SKILLDECK_MATTER_POLICY``), and
    how many (``SKILLDECK_MAX_MATTERS_PER_USER``)."""
    from skilldeck.checkpoints.open import open_persistence

    settings = Settings()
    persistence = open_persistence(settings.checkpoint_url, timeout=settings.sqlite_timeout_s)
    return persistence.threads, settings


def _may_use(user: str, matter: str) -> bool:
    """Whether ``user`` may run on ``matter``, by the rules of ``skilldeck serve``.

    Raises:
        QuotaExceededError: claiming it would make ``user`` own more matters than allowed.
    """
    index, settings = _matters()
    claim = settings.matter_policy == "claim"
    limit = settings.max_matters_per_user
    return bool(index.may_use_matter(user, matter, claim=claim, limit=limit))


def _refuse(status: int, message: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=status, detail=message)


@auth.authenticate
async def authenticate(
    authorization: str | None, headers: dict[bytes, bytes]
) -> Auth.types.MinimalUserDict:
    """The user of the request's API key."""
    key = headers.get(b"x-api-key", b"").decode("latin-1")
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        key = token.strip()
    if not key:
        raise _refuse(401, "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key'")
    try:
        user = _keys().user_for(key)
    except SkillDeckError:
        message = f"the server has no API keys: its operator sets {API_KEYS_ENV}"
        raise _refuse(401, message) from None
    if user is None:
        raise _refuse(401, "unknown API key: check the key, or ask for a new one")
    return {"identity": user}


def _user(ctx: Auth.types.AuthContext) -> str:
    """The authenticated user; LangGraph Studio's local user is no user of skilldeck's."""
    if isinstance(ctx.user, StudioUser) or not ctx.user.identity:
        raise _refuse(403, "this server serves only requests with a skilldeck API key")
    return str(ctx.user.identity)


def _owned_by(value: dict[str, Any], user: str) -> None:
    """Make ``user`` the owner in the request's metadata, whatever the client sent."""
    if value.get("metadata") is None:
        value["metadata"] = {}
    value["metadata"][OWNER] = user


@auth.on.threads.create
async def _create_thread(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    user = _user(ctx)
    _owned_by(value, user)
    return {OWNER: user}


@auth.on(resources="threads", actions=["read", "search", "delete"])
async def _own_threads(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    return {OWNER: _user(ctx)}


@auth.on.threads.update
async def _update_thread(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    user = _user(ctx)
    if value.get("metadata"):  # a thread cannot be given to another user
        _owned_by(value, user)
    return {OWNER: user}


@auth.on.threads.create_run
async def _create_run(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """A run of the user's own thread, as the user, on a matter the user may use."""
    user = _user(ctx)
    _owned_by(value, user)  # the thread a run creates is the user's
    kwargs = value.setdefault("kwargs", {})
    config = kwargs.setdefault("config", {})
    configurable = config.setdefault("configurable", {})
    context = kwargs.get("context") if isinstance(kwargs.get("context"), dict) else {}
    given = kwargs.get("input")
    sources = (configurable, context, given if isinstance(given, dict) else {})
    named = {s["matter_id"] for s in sources if s.get("matter_id") is not None}
    if len(named) > 1:
        raise _refuse(422, "the input and the configurable name different matter_ids: name one")
    matter = named.pop() if named else None
    if matter is not None:
        problem = id_problem(matter)
        if problem is not None:
            raise _refuse(422, f"matter_id {problem}")
        try:
            allowed = await asyncio.to_thread(_may_use, user, matter)
        except QuotaExceededError as exc:
            raise _refuse(403, str(exc)) from None
        if not allowed:
            raise _refuse(404, f"matter {matter!r} not found for this API key")
    for values in (configurable, context):
        values.update(user_id=user, matter_id=matter)
    return {OWNER: user}


@auth.on(resources="assistants", actions=["read", "search"])
async def _read_assistants(ctx: Auth.types.AuthContext, value: Any) -> None:
    _user(ctx)


@auth.on
async def _refuse_the_rest(ctx: Auth.types.AuthContext, value: Any) -> None:
    """The store, crons and assistant changes: the deck's transcripts and config are not the
    clients' to read or change."""
    raise _refuse(403, f"{ctx.resource} {ctx.action} is not offered by this server")
