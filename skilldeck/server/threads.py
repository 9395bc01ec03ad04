"""Who may see and act on which thread: a thread is its creator's, and a run on a matter needs
the matter's grant.

Another user's thread or a refused matter is answered like an unknown one (404), so ids of
other users' threads and matters cannot be probed. Every request that goes on with a thread's
run (resume, continue; AG-UI's resume) asks :meth:`Threads.authorize` at that moment, so
revoking a grant stops even a card that was already pending.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from uuid import uuid4

from skilldeck.checkpoints.threads import ThreadIndex, ThreadRecord
from skilldeck.deck import SkillDeck
from skilldeck.errors import ThreadNotFoundError
from skilldeck.server.errors import NotFound
from skilldeck.server.fairness import CreationRate
from skilldeck.server.schemas import CreatedThread
from skilldeck.types import RunResult

__all__ = ["MatterCheck", "MatterPolicy", "Threads", "unknown_thread"]

#: ``(user_id, matter_id) -> bool``: may the user run on the matter.
MatterCheck = Callable[[str, str], bool]


@dataclass(frozen=True)
class MatterPolicy:
    """The deck's own :data:`MatterCheck`, by ``settings.matter_policy``: with ``"granted"`` a
    user may name only the matters an operator made for them or granted them; with ``"claim"``
    (one tenant), also a matter nobody owns yet, which becomes theirs (at most ``limit``)."""

    index: ThreadIndex
    claim: bool
    limit: int

    @classmethod
    def of(cls, deck: SkillDeck) -> MatterPolicy:
        settings = deck.settings
        return cls(deck.index, settings.matter_policy == "claim", settings.max_matters_per_user)

    def __call__(self, user_id: str, matter_id: str) -> bool:
        return self.index.may_use_matter(user_id, matter_id, claim=self.claim, limit=self.limit)


def unknown_thread(thread_id: str) -> NotFound:
    """The answer to a thread that is unknown, or not the caller's."""
    return NotFound(
        "THREAD_NOT_FOUND",
        f"thread {thread_id!r} not found for this API key: create one with POST /threads",
    )


class Threads:
    """Thread ownership for one app. Its methods block: call them in a worker thread.

    Args:
        deck: the deck whose thread index records the owners.
        matter_check: which matters a user may run on (``None``: the deck's
            :class:`MatterPolicy`).
    """

    def __init__(self, deck: SkillDeck, matter_check: MatterCheck | None = None) -> None:
        self.deck = deck
        self.matter_check = matter_check or MatterPolicy.of(deck)
        self.created = CreationRate(deck.settings.threads_per_minute)

    def create(self, user_id: str) -> CreatedThread:
        """A new thread of ``user_id``, within their thread rate and quota."""
        self.created.take(user_id)
        record = self._new(uuid4().hex, user_id)
        return CreatedThread(thread_id=record.thread_id, created_at=record.created_at)

    def _new(self, thread_id: str, user_id: str) -> ThreadRecord:
        """Store a new thread of ``user_id``, within their quota (an existing one is kept); one
        that never runs expires like any other (``SKILLDECK_THREAD_TTL``)."""
        settings = self.deck.settings
        limit, ttl = settings.max_threads_per_user, settings.thread_ttl
        return self.deck.index.create(thread_id, user_id, limit=limit, ttl_s=ttl)

    def owned(self, thread_id: str, user_id: str) -> RunResult | None:
        """The thread if ``user_id`` owns it (``None``: created, not run yet).

        Raises:
            NotFound: the thread is unknown or belongs to someone else (the same answer, so
                thread ids of other users cannot be probed).
        """
        record = self.deck.index.get(thread_id)
        if record is None or record.user_id != user_id:
            raise unknown_thread(thread_id)
        try:
            return self.deck.get_thread(thread_id)
        except ThreadNotFoundError:
            return None

    def mine_or_free(self, thread_id: str, user_id: str) -> bool:
        """Whether ``thread_id`` is a thread of ``user_id`` (``False``: nobody's yet: an
        AG-UI client names its threads).

        Raises:
            NotFound: it is another user's (the answer an unknown thread gets elsewhere).
        """
        record = self.deck.index.get(thread_id)
        if record is not None and record.user_id != user_id:
            raise unknown_thread(thread_id)
        return record is not None

    def authorize(self, thread_id: str, user_id: str) -> RunResult | None:
        """The thread, if ``user_id`` may act on its run now: owns it and may still use its
        matter. Every operation that goes on with a thread's run (resume, continue) asks this
        at the moment it is requested, so a revoked grant stops even a pending card.

        Raises:
            NotFound: the thread is not the user's (``THREAD_NOT_FOUND``), or its matter no
                longer is (``MATTER_NOT_FOUND``): the answers of unknown ones.
        """
        thread = self.owned(thread_id, user_id)
        if thread is not None:
            self.check_matter(user_id, thread.state.get("matter_id"))
        return thread

    def adopt(self, thread_id: str, user_id: str) -> None:
        """Make ``thread_id``, nobody's a moment ago, a thread of ``user_id`` (within their
        thread rate and quota); if another user's request took it meanwhile, 404."""
        self.created.take(user_id)
        self._new(thread_id, user_id)
        self.owned(thread_id, user_id)

    def abandon(self, thread_id: str) -> None:
        """Forget a thread :meth:`adopt` stored for a run that was then refused."""
        self.deck.index.discard(thread_id)

    def check_matter(self, user_id: str, matter_id: str | None) -> None:
        """Refuse a matter the user may not use, with the answer an unknown matter gets."""
        if matter_id is not None and not self.matter_check(user_id, matter_id):
            raise NotFound("MATTER_NOT_FOUND", f"matter {matter_id!r} not found for this user")
