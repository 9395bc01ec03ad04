"""Per-user limits of one service process: runs at once, runs waiting, threads made per minute.

Runs are driven by a pool of worker threads. In front of the pool, each user's runs wait in a
queue of their own, and a free worker takes the next run of the user served least recently
(round-robin) among those whose running runs are under their limit: one user's backlog of a
hundred runs never stands in front of another user's first one, which starts on the next free
worker (at once, while the backlog's user is at their limit of runs at once). A user
whose queue is full, or who made too many threads in the last minute, is answered ``429`` with
``Retry-After``, and nothing is changed.

The limits are :class:`~skilldeck.settings.Settings` (``SKILLDECK_RUNS_PER_USER``,
``SKILLDECK_QUEUED_RUNS_PER_USER``, ``SKILLDECK_THREADS_PER_MINUTE``); they hold per process,
so a deployment of N processes behind a load balancer allows N times as much.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from skilldeck.checkpoints.claims import Clock
from skilldeck.errors import ErrorCode, SkillDeckError
from skilldeck.server.errors import TooManyRequests

__all__ = ["CreationRate", "RunQueue", "Slot"]

Job = Callable[[], None]

#: What a user whose run queue is full is told to wait: a queued run starts when one of the
#: user's runs ends, which takes seconds at the least.
QUEUE_RETRY_S = 5


class RunQueue:
    """The runs of one service process (see the module docstring).

    Args:
        workers: runs that go on at once in the process, all users together.
        per_user: runs of one user that go on at once.
        queued_per_user: runs of one user that may wait for a worker beyond those.
    """

    def __init__(self, workers: int, per_user: int, queued_per_user: int) -> None:
        self.workers, self.per_user, self.queued_per_user = workers, per_user, queued_per_user
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="skilldeck-run")
        self._lock = threading.Condition()
        # Each user's runs not yet on a worker, in the order they came.
        self._waiting: dict[str, deque[Job]] = {}
        self._reserved: Counter[str] = Counter()  # accepted, their run being set up
        self._running: Counter[str] = Counter()
        # When each user with runs waiting or going on was last given a worker (a turn count).
        self._served: dict[str, int] = {}
        self._turns = 0
        self._busy = 0
        self._closing = False  # shutdown began: no run is accepted any more

    def reserve(self, user: str) -> Slot:
        """A place in ``user``'s queue for a run about to be set up (its request checked, its
        claims taken); give it back with :meth:`Slot.cancel` if the set-up fails.

        Raises:
            TooManyRequests: the user already has as many runs waiting as they may.
            SkillDeckError: ``SHUTTING_DOWN``: the process is shutting down; a run accepted
                now would hold its thread's claims with no worker left to run it.
        """
        with self._lock:
            if self._closing:
                raise SkillDeckError(
                    "this service process is shutting down; nothing was started: retry (on "
                    "another process, or once it is back)",
                    code=ErrorCode.SHUTTING_DOWN,
                )
            pending = len(self._waiting.get(user, ())) + self._reserved[user]
            free = max(0, self.per_user - self._running[user])  # would start at once
            if pending >= free + self.queued_per_user:
                raise TooManyRequests(
                    "TOO_MANY_RUNS",
                    f"{self._running[user]} runs of this API key's user are going on and "
                    f"{pending} wait for a worker, the most this service allows "
                    f"(SKILLDECK_RUNS_PER_USER={self.per_user}, SKILLDECK_QUEUED_RUNS_PER_USER="
                    f"{self.queued_per_user}); nothing was started: retry when one has ended",
                    QUEUE_RETRY_S,
                )
            self._reserved[user] += 1
        return Slot(self, user)

    def waiting(self, user: str) -> int:
        """How many runs of ``user`` wait for a worker."""
        with self._lock:
            return len(self._waiting.get(user, ()))

    def depth(self) -> tuple[int, int]:
        """How many runs wait for a worker (accepted ones being set up included), and how
        many go on, all users together."""
        with self._lock:
            waiting = sum(len(jobs) for jobs in self._waiting.values())
            return waiting + sum(self._reserved.values()), self._busy

    def _submit(self, user: str, job: Job) -> None:
        with self._lock:
            self._unreserve(user)
            self._waiting.setdefault(user, deque()).append(job)
            self._dispatch()

    def _cancel(self, user: str) -> None:
        with self._lock:
            self._unreserve(user)
            self._lock.notify_all()

    def _unreserve(self, user: str) -> None:
        self._reserved[user] -= 1
        if not self._reserved[user]:
            del self._reserved[user]

    def _dispatch(self) -> None:
        """Start waiting runs on free workers: each time the run of the user served least
        recently (never: first) among those under their limit (the caller holds the lock)."""
        while self._busy < self.workers:
            ready = [u for u in self._waiting if self._running[u] < self.per_user]
            if not ready:
                return
            user = min(ready, key=lambda u: self._served.get(u, -1))
            jobs = self._waiting[user]
            job = jobs.popleft()
            if not jobs:
                del self._waiting[user]
            self._turns += 1
            self._served[user] = self._turns
            self._running[user] += 1
            self._busy += 1
            self._executor.submit(self._run, user, job)

    def _run(self, user: str, job: Job) -> None:
        try:
            job()
        finally:
            with self._lock:
                self._running[user] -= 1
                if not self._running[user]:
                    del self._running[user]
                    if user not in self._waiting:
                        del self._served[user]  # nothing of theirs left: forget them
                self._busy -= 1
                self._dispatch()
                self._lock.notify_all()

    def close(self) -> None:
        """Refuse new runs from now on (``SHUTTING_DOWN``); accepted ones go on."""
        with self._lock:
            self._closing = True

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no accepted run waits or goes on (at most ``timeout_s``); whether none
        does."""
        with self._lock:
            return self._lock.wait_for(
                lambda: not (self._waiting or self._busy or self._reserved), timeout_s
            )

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Refuse new runs, and wait for every accepted run, waiting ones too, to reach its
        card or end, at most ``timeout_s``; whether they all did. The workers of runs that did
        not are left to the process's exit."""
        self.close()
        idle = self.wait_idle(timeout_s)
        self._executor.shutdown(wait=idle, cancel_futures=not idle)
        return idle


class Slot:
    """A run's place in its user's queue (see :meth:`RunQueue.reserve`)."""

    def __init__(self, queue: RunQueue, user: str) -> None:
        self._queue, self._user = queue, user

    def submit(self, job: Job) -> None:
        """Queue the run: a worker runs ``job`` when the user's turn comes."""
        self._queue._submit(self._user, job)

    def cancel(self) -> None:
        """The run was not set up: free its place."""
        self._queue._cancel(self._user)


class CreationRate:
    """At most ``per_minute`` new threads per user in any 60 seconds (a sliding window).

    Args:
        per_minute: threads one user may create per minute.
        clock: monotonic seconds (tests inject one).
    """

    def __init__(self, per_minute: int, clock: Clock = time.monotonic) -> None:
        self.per_minute, self.clock = per_minute, clock
        self._made: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def take(self, user: str) -> None:
        """Count one new thread of ``user``.

        Raises:
            TooManyRequests: the user made ``per_minute`` threads in the last minute.
        """
        now = self.clock()
        with self._lock:
            made = self._made.setdefault(user, deque())
            while made and made[0] <= now - 60:
                made.popleft()
            if len(made) >= self.per_minute:
                wait = max(1, math.ceil(made[0] + 60 - now))
                raise TooManyRequests(
                    "TOO_MANY_THREADS",
                    f"this API key's user made {len(made)} threads in the last minute, the "
                    f"most this service allows (SKILLDECK_THREADS_PER_MINUTE={self.per_minute}); "
                    f"nothing was created: retry in {wait} s, or run on a thread you have",
                    wait,
                )
            made.append(now)
