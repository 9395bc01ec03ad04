"""The service's Prometheus metrics (``SKILLDECK_METRICS=1``): what an operator watches.

Each app keeps its metrics in a registry of its own (not ``prometheus_client``'s global one),
so several apps in one process never share or clash. ``docs/operations.md`` lists every metric.

Where each figure comes from, and why there:

- runs started and ended, and tool calls: the run's own events, as the service drives them
  (:meth:`Metrics.watch`). The event stream is the engine's public record of a run (its
  ``tool_call`` events carry each call's tool and status, its last event the outcome), so the
  engine needs no hook of its own, and a run is counted once however its client reads it
  (skilldeck's events or AG-UI's);
- model calls (latency, tokens) and transport retries: a LangChain callback handler the service
  puts in each run's config (:class:`ModelCallMetrics`). Callbacks are LangChain's seam for
  observing model calls (tracers use it too): every call of every node sees the run's handlers
  with the skill in its metadata, and the transport's retries reach them as a custom event
  (:data:`~skilldeck.nodes.transport.TRANSPORT_RETRY_EVENT`). The engine imports nothing of this
  module or of ``prometheus_client``;
- the run queue and the cards waiting for answers: read when scraped (:class:`_Now`). The
  queue is this process's; the cards are read from the thread index, so every process sharing
  the database reports the same figures, right across restarts (a count kept in memory would
  miss the cards other processes asked, or resumed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from skilldeck._internal.redact import log_error
from skilldeck._internal.usage import reply_tokens
from skilldeck.checkpoints.threads import ThreadIndex
from skilldeck.errors import SkillDeckError
from skilldeck.nodes.transport import TRANSPORT_RETRY_EVENT
from skilldeck.scripted import SKILL_KEY
from skilldeck.server.fairness import RunQueue
from skilldeck.types import CardEvent, DoneEvent, ErrorEvent, Event, ToolCallEvent

__all__ = ["CONTENT_TYPE", "Metrics", "ModelCallMetrics"]

log = logging.getLogger("skilldeck.server")

#: The media type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Seconds a model call may take, as histogram buckets: local models answer in well under a
#: second, hosted ones in seconds, a long generation in a minute or two.
MODEL_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
#: How long cards have waited for answers, as histogram buckets: a minute up to a week.
CARD_WAIT_SECONDS = (60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)
#: The label of a value the metadata did not give.
UNKNOWN = "unknown"


class Metrics:
    """The metrics of one app.

    Args:
        queue: the app's run queue (its depth is read when scraped).
        index: the thread index (the cards waiting for answers are read from it when scraped).
    """

    def __init__(self, queue: RunQueue, index: ThreadIndex) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.runs_started = Counter(
            "skilldeck_runs_started",
            "Runs this process started driving, by kind: run (a new input), resume (a card's "
            "answers) or continue (a run that stopped mid-way).",
            ["kind"],
            registry=registry,
        )
        self.runs_ended = Counter(
            "skilldeck_runs_ended",
            "Runs this process drove that ended, by how: interrupted (a card waits), the "
            "thread's status when the run ended without a card, or error with its code.",
            ["status", "code"],
            registry=registry,
        )
        self.tool_calls = Counter(
            "skilldeck_tool_calls",
            "Tool calls the runs of this process made, by tool and status (ok, error, refused).",
            ["tool", "status"],
            registry=registry,
        )
        self.model_seconds = Histogram(
            "skilldeck_model_call_duration_seconds",
            "Seconds one model call took (each transport attempt counts), by skill and model.",
            ["skill", "model"],
            buckets=MODEL_SECONDS,
            registry=registry,
        )
        self.model_calls = Counter(
            "skilldeck_model_calls",
            "Model calls (each transport attempt counts), by skill, model and outcome (ok, error).",
            ["skill", "model", "outcome"],
            registry=registry,
        )
        self.model_tokens = Counter(
            "skilldeck_model_tokens",
            "Tokens of the model calls as the endpoint reported them, by skill, model and "
            "direction (input, output).",
            ["skill", "model", "direction"],
            registry=registry,
        )
        self.transport_retries = Counter(
            "skilldeck_transport_retries",
            "Model calls retried because the endpoint gave no reply, by skill and reason "
            "(http_<status>, timeout, connection).",
            ["skill", "reason"],
            registry=registry,
        )
        registry.register(_Now(queue, index))
        #: The handler each run's config carries (one for the app: it keeps no run's state).
        self.model_calls_handler = ModelCallMetrics(self)

    def watch(self, events: Iterator[Event], kind: str) -> Iterator[Event]:
        """``events`` (a run's, from the deck), counted: the run's start when it is first read,
        its tool calls, and how it ended (also when it raised)."""
        self.runs_started.labels(kind).inc()
        ended = False
        try:
            for event in events:
                if isinstance(event, ToolCallEvent):
                    self.tool_calls.labels(event.name, event.status).inc()
                elif isinstance(event, CardEvent | DoneEvent | ErrorEvent):
                    self._ended(event)
                    ended = True
                yield event
        except SkillDeckError as exc:  # refused when it started (a stale run, a database down)
            self.runs_ended.labels("error", exc.code.value).inc()
            ended = True
            raise
        except Exception:
            self.runs_ended.labels("error", "INTERNAL_ERROR").inc()
            ended = True
            raise
        finally:
            if not ended:  # closed before its end (the service stopped reading it)
                self.runs_ended.labels("abandoned", "").inc()

    def _ended(self, event: CardEvent | DoneEvent | ErrorEvent) -> None:
        if isinstance(event, CardEvent):
            self.runs_ended.labels("interrupted", "").inc()
        elif isinstance(event, DoneEvent):
            self.runs_ended.labels(event.status, "").inc()
        else:
            self.runs_ended.labels("error", event.code).inc()

    def exposition(self) -> bytes:
        """Every metric in Prometheus' text format."""
        return generate_latest(self.registry)


class ModelCallMetrics(BaseCallbackHandler):
    """Counts model calls, their latency and tokens, and transport retries (see the module
    docstring); safe to share between runs and threads."""

    #: Called in the thread of the call: it only counts.
    run_inline = True

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._lock = threading.Lock()
        # Each call under way: when it started, its skill and model. A call always ends with
        # on_llm_end or on_llm_error (LangChain reports cancellations as errors too).
        self._calls: dict[UUID, tuple[float, str, str]] = {}

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        meta = metadata or {}
        skill = str(meta.get(SKILL_KEY) or UNKNOWN)
        model = str(meta.get("ls_model_name") or UNKNOWN)
        with self._lock:
            self._calls[run_id] = (time.perf_counter(), skill, model)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._done(run_id, "ok")
        if call is None:
            return
        for direction, tokens in reply_tokens(response).items():
            self.metrics.model_tokens.labels(*call, direction).inc(tokens)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._done(run_id, "error")

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if name == TRANSPORT_RETRY_EVENT and isinstance(data, Mapping):
            skill = str(data.get("skill") or UNKNOWN)
            self.metrics.transport_retries.labels(skill, str(data.get("reason"))).inc()

    def _done(self, run_id: UUID, outcome: str) -> tuple[str, str] | None:
        """Count the end of call ``run_id``; its ``(skill, model)``."""
        with self._lock:
            found = self._calls.pop(run_id, None)
        if found is None:  # not a chat model's call (a plain LLM's): not counted
            return None
        started, skill, model = found
        self.metrics.model_seconds.labels(skill, model).observe(time.perf_counter() - started)
        self.metrics.model_calls.labels(skill, model, outcome).inc()
        return skill, model


class _Now(Collector):
    """The figures read when scraped: the run queue's depth and the cards waiting."""

    def __init__(self, queue: RunQueue, index: ThreadIndex) -> None:
        self.queue, self.index = queue, index

    def collect(self) -> Iterable[Metric]:
        waiting, running = self.queue.depth()
        yield GaugeMetricFamily(
            "skilldeck_run_queue_depth",
            "Runs accepted by this process and waiting for a worker.",
            value=waiting,
        )
        yield GaugeMetricFamily(
            "skilldeck_runs_running", "Runs this process is driving now.", value=running
        )
        try:
            cards = self.index.pending_cards(CARD_WAIT_SECONDS)
        except Exception as exc:  # the database is away: the rest is still worth reporting
            log_error(log, "metrics: the thread index is unavailable", exc, level=logging.WARNING)
            return
        yield GaugeMetricFamily(
            "skilldeck_interrupts_pending",
            "Threads whose card waits for answers (all processes sharing the database).",
            value=cards.count,
        )
        yield GaugeMetricFamily(
            "skilldeck_interrupt_oldest_age_seconds",
            "How long the card waiting longest has waited (0 when none waits).",
            value=cards.oldest_s or 0.0,
        )
        ages = HistogramMetricFamily(
            "skilldeck_interrupt_age_seconds",
            "How long the cards waiting for answers have waited, read from the thread index "
            "when scraped (no _sum: the index is not asked for one).",
        )
        within = zip(CARD_WAIT_SECONDS, cards.within, strict=True)
        buckets = [(str(float(bound)), float(n)) for bound, n in within]  # as le="60.0"
        ages.add_metric([], [*buckets, ("+Inf", float(cards.count))], sum_value=None)
        yield ages
