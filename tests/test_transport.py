"""The transport retry policy: which failures are retried, how long it waits, when it stops."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from skilldeck.errors import ModelUnavailableError
from skilldeck.nodes.transport import (
    TransportPolicy,
    call_with_retries,
    is_transport_failure,
    retry_after,
)

pytestmark = pytest.mark.L2

SECRET = "sk-live-0123456789abcdefghij"


def status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    """The error the OpenAI SDK raises for an HTTP ``status``, with a body echoing a key."""
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, headers=headers or {}, request=request)
    body = {"error": {"message": f"bad key {SECRET}"}}
    classes: dict[int, type[openai.APIStatusError]] = {
        400: openai.BadRequestError,
        401: openai.AuthenticationError,
        429: openai.RateLimitError,
        500: openai.InternalServerError,
        503: openai.InternalServerError,
    }
    return classes.get(status, openai.APIStatusError)(
        f"Error code: {status} - {body}", response=response, body=body
    )


def connection_error() -> openai.APIConnectionError:
    return openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1/v1"))


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (status_error(429), True),
        (status_error(503), True),
        (status_error(500), True),
        (status_error(408), True),
        (status_error(400), False),
        (status_error(401), False),
        (connection_error(), True),
        (openai.APITimeoutError(request=httpx.Request("POST", "http://x")), True),
        (httpx.ReadTimeout("slow"), True),
        (httpx.ConnectError("refused"), True),
        (TimeoutError(), True),
        (ValueError("not JSON"), False),
        (RuntimeError("RateLimitError"), False),  # a name in a message is not a class
    ],
    ids=repr,
)
def test_failures_are_told_apart_by_class(exc: BaseException, retried: bool) -> None:
    assert is_transport_failure(exc) is retried


def test_retry_after_reads_seconds_milliseconds_and_dates() -> None:
    assert retry_after(status_error(429, {"retry-after": "7"})) == 7.0
    assert retry_after(status_error(429, {"retry-after-ms": "250"})) == 0.25
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    waited = retry_after(status_error(429, {"retry-after": later}))
    assert waited is not None and 25 <= waited <= 31
    assert retry_after(status_error(429)) is None
    assert retry_after(ValueError()) is None


class Flaky:
    """A call that fails with ``failures`` in turn, then answers ``"reply"``."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "reply"


class Clock:
    """A fake clock whose sleeps move it on."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def run(call: Callable[[], Any], clock: Clock, deadline: float | None = None, **policy: Any) -> Any:
    return call_with_retries(
        call,
        TransportPolicy(**{"jitter_s": 0.0, **policy}),
        deadline=deadline,
        sleep=clock.sleep,
        clock=clock.time,
    )


def test_retries_honour_retry_after_then_back_off() -> None:
    clock = Clock()
    flaky = Flaky(status_error(429, {"retry-after": "3"}), status_error(503), connection_error())
    assert run(flaky, clock, initial_s=0.5, factor=2.0) == "reply"
    assert flaky.calls == 4
    # The endpoint's wait first; then the policy's, doubling from the second failure on.
    assert clock.slept == [3.0, 1.0, 2.0]


def test_a_refused_request_is_not_retried() -> None:
    flaky = Flaky(status_error(401))
    with pytest.raises(openai.AuthenticationError):
        run(flaky, Clock())
    assert flaky.calls == 1


def test_spent_retries_are_model_unavailable_with_a_safe_message() -> None:
    clock = Clock()
    flaky = Flaky(*[status_error(503) for _ in range(10)])
    with pytest.raises(ModelUnavailableError) as raised:
        run(flaky, clock, attempts=3)
    assert flaky.calls == 3
    message = str(raised.value)
    assert "InternalServerError (HTTP 503)" in message and "3 call(s)" in message
    assert SECRET not in message and "bad key" not in message
    assert raised.value.code.value == "MODEL_UNAVAILABLE"


def test_no_wait_goes_past_the_deadline_or_the_budget() -> None:
    clock = Clock()
    flaky = Flaky(*[status_error(429, {"retry-after": "20"}) for _ in range(10)])
    with pytest.raises(ModelUnavailableError):
        run(flaky, clock, deadline=clock.now + 50, attempts=10)
    assert clock.now <= 1_050.0 and flaky.calls == 3  # 2 waits of 20 s fit, a third does not
    clock = Clock()
    flaky = Flaky(*[status_error(503) for _ in range(10)])
    with pytest.raises(ModelUnavailableError):
        run(flaky, clock, budget_s=10.0, attempts=10, initial_s=4.0, factor=1.0)
    assert clock.now <= 1_010.0 and flaky.calls == 3
