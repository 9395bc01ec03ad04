"""Whether runs are traced, and the few places the engine asks: the gate of OpenTelemetry.

Tracing is on when the application set an OpenTelemetry SDK tracer provider of its own, or when
the standard variables name an exporter: ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``;
``none`` turns it off), or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), which means ``otlp``. Then skilldeck sets up the SDK
itself (the ``otel`` extra): a batch processor per exporter, ``OTEL_SERVICE_NAME`` (default
``skilldeck``) and ``OTEL_RESOURCE_ATTRIBUTES`` as the resource; the exporters read their own
``OTEL_EXPORTER_OTLP_*`` settings.

A deck asks :func:`tracer` once, when it opens. With tracing off it gets ``None``: a run then
builds no span, no attribute and no handler (the module that builds them is not even
imported). With it on, each run gets a :class:`~skilldeck._internal.spans.RunTrace` among its
LangChain callbacks.

The other places that ask are the two that carry a run's trace context out of the process, the
W3C ``traceparent``: the model client's HTTP requests (:func:`http_clients`) and MCP tool calls
(:func:`trace_meta`). Both read the current OpenTelemetry context, which the run's handler sets
for the duration of each model and tool call.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from skilldeck._internal.driver import request_kind
from skilldeck.errors import MissingExtraError, SkillDeckError
from skilldeck.types import Resume

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer

    from skilldeck._internal.driver import Prepared
    from skilldeck._internal.spans import RunTrace

__all__ = [
    "CONTENT_ENV",
    "content_opted_in",
    "http_clients",
    "run_trace",
    "runs_started",
    "trace_meta",
    "traced",
    "tracer",
]

log = logging.getLogger("skilldeck")

#: Set to ``1`` to record what runs say in their spans: prompts and replies, tool arguments and
#: results, card questions and answers. Off by default: traces leave the process.
CONTENT_ENV = "SKILLDECK_TRACE_CONTENT"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
#: The exporters ``OTEL_TRACES_EXPORTER`` may name, and the package of each.
_EXPORTERS = {
    "otlp": "opentelemetry-exporter-otlp-proto-http",
    "console": "opentelemetry-sdk",
    "none": "",
}
_configured = False


def tracer() -> Tracer | None:
    """The tracer a deck's runs report to, or ``None`` when tracing is off (see the module
    docstring). The variables are read once per process: the first call sets the SDK up."""
    global _configured
    if not _configured:
        _configured = True
        _configure(os.environ)
    if "opentelemetry.trace" not in sys.modules:  # no provider could have been set
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider.get_tracer("skilldeck")


def _exporter_names(env: Mapping[str, str]) -> list[str]:
    """The exporters ``env`` configures (none: tracing stays off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = env.get("OTEL_TRACES_EXPORTER")
    if named is None:
        return ["otlp"] if any(env.get(k) for k in _ENDPOINTS) else []
    names = [n.strip().lower() for n in named.split(",") if n.strip()]
    unknown = sorted(set(names) - set(_EXPORTERS))
    if unknown:
        raise SkillDeckError(
            f"OTEL_TRACES_EXPORTER names {', '.join(map(repr, unknown))}: skilldeck exports "
            "traces with otlp (OTLP over HTTP) or console, or none; fix the variable"
        )
    return [n for n in names if n != "none"]


def _configure(env: Mapping[str, str]) -> None:
    """Set up the SDK's tracer provider with the exporters ``env`` names, unless the
    application set a provider of its own or names none."""
    names = _exporter_names(env)
    if not names:
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning(
            "traces are configured but not exported: %s",
            MissingExtraError("opentelemetry-sdk", "otel"),
        )
        return
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # the application's own provider, exporters and all
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "skilldeck"}))
    provider = TracerProvider(resource=resource)
    for name in names:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
            continue
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
        )
        if protocol != "http/protobuf":
            raise SkillDeckError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: skilldeck exports traces over "
                "http/protobuf (the OTLP/HTTP port, 4318 by default); unset the variable or set "
                "it to http/protobuf"
            )
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning(
                "traces are configured but not exported: %s",
                MissingExtraError(_EXPORTERS["otlp"], "otel"),
            )
            return
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


#: The runs started in this context, while a caller collects them (:func:`runs_started`).
_started: contextvars.ContextVar[list[Context] | None] = contextvars.ContextVar(
    "skilldeck_runs_started", default=None
)


def traced(tracer: Tracer, prepared: Prepared, request: Any, skills: frozenset[str]) -> Prepared:
    """``prepared`` with a :class:`~skilldeck._internal.spans.RunTrace` among its callbacks:
    the run's span starts now, as a child of the current context."""
    from skilldeck._internal.spans import RunTrace

    kind = request_kind(request)
    payload = prepared.payload
    context = payload.get("context") if isinstance(payload, Mapping) else None
    trace = RunTrace(
        tracer,
        kind=kind,
        thread_id=prepared.thread_id,
        skills=skills,
        content=content_opted_in(),
        answers=request.answers if isinstance(request, Resume) else None,
        context=str(context) if context is not None else None,
    )
    started = _started.get()
    if started is not None:
        started.append(trace.span_context)
    config = dict(prepared.config)
    # run_config makes the callbacks a list (or leaves them out).
    config["callbacks"] = [*cast("list[Any]", config.get("callbacks") or []), trace]
    return replace(prepared, config=config)  # type: ignore[arg-type]


def run_trace(config: Mapping[str, Any]) -> RunTrace | None:
    """The run's trace among the callbacks of its ``config``, if it has one."""
    from skilldeck._internal.spans import RunTrace

    handlers = cast("list[Any]", config.get("callbacks") or [])
    found = (h for h in handlers if isinstance(h, RunTrace))
    return next(found, None)


@contextmanager
def runs_started() -> Iterator[list[Context]]:
    """Collect the runs started in this context (and the threads it is copied to, as
    Starlette's thread pool does): a context of each run's span, for a response's
    ``traceparent``."""
    started: list[Context] = []
    token = _started.set(started)
    try:
        yield started
    finally:
        _started.reset(token)


def content_opted_in() -> bool:
    """Whether the operator opted in to recording what runs say (:data:`CONTENT_ENV`)."""
    return os.environ.get(CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")


def trace_meta() -> dict[str, str]:
    """The current trace context as an MCP request's ``_meta`` carries it (``traceparent``,
    ``tracestate``), as the MCP trace-context proposal does; ``{}`` when there is none."""
    if "opentelemetry.propagate" not in sys.modules:
        return {}
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def _inject(request: Any) -> None:
    """Add the current trace context to an outgoing HTTP request's headers."""
    from opentelemetry import propagate

    propagate.inject(request.headers)


async def _ainject(request: Any) -> None:
    _inject(request)


def http_clients() -> dict[str, Any]:
    """``ChatOpenAI``'s HTTP clients when tracing is on: each request carries the model call's
    ``traceparent``. ``{}`` (the SDK's own clients) when it is off."""
    return {} if tracer() is None else _traced_clients()


@functools.cache
def _traced_clients() -> dict[str, Any]:
    """One pair for the process (the clients pool their connections, as the SDK's own do)."""
    import openai

    return {
        "http_client": openai.DefaultHttpxClient(event_hooks={"request": [_inject]}),
        "http_async_client": openai.DefaultAsyncHttpxClient(event_hooks={"request": [_ainject]}),
    }
