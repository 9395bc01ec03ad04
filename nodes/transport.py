"""Transport failures are not the model's mistakes.

A model call that got no reply (a timeout, a dropped connection, HTTP 429 or a 5xx) says
nothing about what the model would have written: it is retried here, with exponential backoff
and jitter, honouring the endpoint's ``Retry-After``, within the call's budget and the run's
deadline, and nothing of it reaches the skill's transcript. Only a reply that arrived is the
skill's to judge (and to re-ask with the contract's errors).

When the retries are spent, :class:`~skilldeck.errors.ModelUnavailableError` stops the run: the
thread is left ``resumable`` at its last checkpoint, and continuing it retries the turn later.

Failures are told apart by their classes (the OpenAI SDK's and httpx's), never by their names
or messages: :func:`is_transport_failure`.

Each retry is told to the run's LangChain callbacks as the custom event
:data:`TRANSPORT_RETRY_EVENT` (:func:`tell_retry`), so an application's handler (the service's
metrics, a tracer) sees it without the engine knowing the handler.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx
import httpx2
import openai
from langchain_core.callbacks import dispatch_custom_event
from langchain_core.runnables.config import var_child_runnable_config
from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception,
)

from skilldeck._internal.redact import log_error, safe_reason
from skilldeck.errors import ModelUnavailableError

__all__ = [
    "TRANSPORT_RETRY_EVENT",
    "DeadlineError",
    "TransportPolicy",
    "call_with_retries",
    "failure_kind",
    "is_transport_failure",
    "retry_after",
    "tell_retry",
]

T = TypeVar("T")
log = logging.getLogger("skilldeck")

#: Statuses that mean "not now" rather than "not this request": a timeout, a conflict the
#: server resolves by itself, too early, too many requests; and every 5xx.
_RETRY_STATUSES = frozenset({408, 409, 425, 429})
#: Failures before any status: the connection, the read or the call's own timeout. The OpenAI
#: SDK wraps its transport's errors (``httpx2`` in its recent releases, ``httpx`` before) in
#: ``APIConnectionError``; a client that calls either directly raises their own.
_TIMEOUTS = (
    TimeoutError,
    httpx.TimeoutException,
    httpx2.TimeoutException,
    openai.APITimeoutError,
)
_NO_REPLY = (
    TimeoutError,
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx2.TimeoutException,
    httpx2.NetworkError,
    httpx2.RemoteProtocolError,
    openai.APIConnectionError,  # APITimeoutError included
)


class DeadlineError(Exception):
    """The run's deadline passed before the call, or while the endpoint gave no reply: the run
    ends ``RUN_TIMEOUT`` (a longer wait would not have helped)."""


@dataclass(frozen=True, slots=True)
class TransportPolicy:
    """How a model call that got no reply is retried (a declarative policy, like LangGraph's
    ``RetryPolicy``; the settings ``transport_attempts`` and ``transport_budget_s`` make it).

    Args:
        attempts: calls in all, the first one included.
        initial_s: the wait after the first failure; each next wait is ``factor`` times longer,
            up to ``max_wait_s``, plus up to ``jitter_s`` of random jitter.
        factor: see ``initial_s``.
        max_wait_s: the longest wait between two calls (a longer ``Retry-After`` is honoured
            as long as the budget allows it).
        jitter_s: see ``initial_s``; spreads the retries of many runs hit at once.
        budget_s: seconds one call may spend in all, waits included.
    """

    attempts: int = 6
    initial_s: float = 0.5
    factor: float = 2.0
    max_wait_s: float = 30.0
    jitter_s: float = 0.5
    budget_s: float = 300.0

    def backoff(self, failures: int) -> float:
        """The wait after the ``failures``-th failure when the endpoint named none."""
        wait = min(self.initial_s * self.factor ** (failures - 1), self.max_wait_s)
        return wait + random.uniform(0, self.jitter_s)


def is_transport_failure(exc: BaseException) -> bool:
    """Whether ``exc`` means the call got no usable reply from the endpoint (retry it), as
    opposed to a reply that arrived (judge it) or a request the endpoint refused (fail)."""
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        return status in _RETRY_STATUSES or status >= 500
    return isinstance(exc, _NO_REPLY)


def failure_kind(exc: BaseException) -> str:
    """A transport failure in a word, from a small fixed set (a metric's label): ``http_<status>``
    for a status the endpoint answered, ``timeout``, else ``connection``."""
    if isinstance(exc, openai.APIStatusError):
        return f"http_{exc.status_code}"
    return "timeout" if isinstance(exc, _TIMEOUTS) else "connection"


#: The name of the LangChain custom event :func:`tell_retry` dispatches; its data is
#: ``{"skill", "reason", "wait_s"}`` (``reason``: :func:`failure_kind`).
TRANSPORT_RETRY_EVENT = "skilldeck_transport_retry"


def tell_retry(skill: str, exc: BaseException, wait_s: float) -> None:
    """Tell the run's callbacks that a model call of ``skill`` failed in transport and is
    retried after ``wait_s`` (nobody to tell outside a run, e.g. a caller used on its own)."""
    if var_child_runnable_config.get() is None:
        return
    data = {"skill": skill, "reason": failure_kind(exc), "wait_s": wait_s}
    dispatch_custom_event(TRANSPORT_RETRY_EVENT, data)


def retry_after(exc: BaseException) -> float | None:
    """The wait the endpoint asked for (``Retry-After``: seconds or an HTTP date;
    ``retry-after-ms``), or ``None``."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        when = email.utils.parsedate_to_datetime(value) if value.strip() else None
        return None if when is None else max(when.timestamp() - time.time(), 0.0)


def call_with_retries(
    call: Callable[[], T],
    policy: TransportPolicy,
    *,
    deadline: float | None = None,
    what: str = "model call",
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> T:
    """``call()``, retried per ``policy`` while it fails in transport.

    Args:
        call: the call; any failure that is not a transport failure is raised at once.
        policy: the retries' bounds.
        deadline: the run's deadline (epoch seconds), if any: no wait goes past it.
        what: what the call is, for the log and the error.
        sleep: waits (tests pass a fake one).
        clock: the time (epoch seconds) the budget and the deadline are read against.
        on_retry: told of each failure that is retried and the wait before the next call.

    Raises:
        ModelUnavailableError: the retries or the time ran out; its message is safe to show.
    """
    end = clock() + policy.budget_s
    if deadline is not None:
        end = min(end, deadline)
    try:  # most calls get their reply at once: the retry machinery is for those that did not
        return call()
    except Exception as exc:
        if not is_transport_failure(exc):
            raise
        failed = [exc]

    def again() -> T:
        """The first call's failure (already had), then ``call()`` again."""
        if failed:
            raise failed.pop()
        return call()

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after(exc) if exc is not None else None
        return asked if asked is not None else policy.backoff(state.attempt_number)

    def stop(state: RetryCallState) -> bool:
        """Out of attempts, or the next wait would end past the budget or the deadline."""
        out_of_time = clock() + (state.upcoming_sleep or 0.0) > end
        return state.attempt_number >= policy.attempts or out_of_time

    def told(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is not None:
            log.warning(
                "%s failed (%s); retrying in %.1f s", what, safe_reason(exc), state.upcoming_sleep
            )
            if on_retry is not None:
                on_retry(exc, state.upcoming_sleep)

    retrying = Retrying(
        retry=retry_if_exception(is_transport_failure),
        stop=stop,
        wait=wait,
        sleep=sleep,
        before_sleep=told,
    )
    try:
        return retrying(again)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        assert last is not None  # a RetryError follows a failed attempt
        if deadline is not None and clock() + policy.initial_s >= deadline:
            log_error(log, f"{what}: no reply before the run's deadline", last)
            raise DeadlineError(
                f"the run's deadline (run_timeout_s) passed while the endpoint gave no reply "
                f"({safe_reason(last)})"
            ) from None
        log_error(log, f"{what}: the endpoint stayed unavailable", last)
        tries = exc.last_attempt.attempt_number
        raise ModelUnavailableError(
            f"the model endpoint was unavailable ({safe_reason(last)}) after {tries} "
            f"call(s); the thread is resumable: continue it when the endpoint is back"
        ) from None
