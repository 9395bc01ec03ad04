"""The service's side of traces (on when tracing is, see :mod:`skilldeck._internal.tracing`):
a request's W3C ``traceparent`` becomes the parent of the runs it starts, and the response
names the run's span in its own ``traceparent`` header, so a client finds the run's trace.

It is ASGI middleware, not a route's code: the routes that start runs (``/runs``, ``/resume``,
``/continue``, ``/agui``) check and start them in a worker thread that Starlette runs in a copy
of the request's context, where the deck reads the current trace context as the run's parent
and records the run's span (:func:`~skilldeck._internal.tracing.runs_started`).
"""

from __future__ import annotations

from opentelemetry import context, propagate, trace
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from skilldeck._internal import tracing

__all__ = ["TraceContext"]


class TraceContext:
    """Takes an incoming ``traceparent`` (and ``tracestate``) as the request's trace context,
    unless a server span is current already; answers with the ``traceparent`` of the run the
    request started, if it started one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # A server span already current (FastAPI's own telemetry, or an instrumentation) took
        # the request's traceparent: the runs go under it. Else the traceparent is taken here.
        token = None
        if not trace.get_current_span().get_span_context().is_valid:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            token = context.attach(propagate.extract(headers))
        try:
            with tracing.runs_started() as started:

                async def sending(message: Message) -> None:
                    if message["type"] == "http.response.start" and started:
                        carrier: dict[str, str] = {}
                        propagate.inject(carrier, context=started[-1])
                        added = [
                            (k.encode("latin-1"), v.encode("latin-1")) for k, v in carrier.items()
                        ]
                        message = {**message, "headers": [*message.get("headers", ()), *added]}
                    await send(message)

                await self.app(scope, receive, sending)
        finally:
            if token is not None:
                context.detach(token)
