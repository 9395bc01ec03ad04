"""An OpenAI-compatible chat endpoint on 127.0.0.1 that answers from a list: the model boundary
of tests that check what skilldeck sends (requests are kept) and how it reads what comes back."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from skilldeck import Settings


@dataclass(frozen=True)
class Answer:
    """One answer: ``message`` with ``finish_reason``, or an HTTP ``status`` with an error
    body (whose message is ``error``, as a provider's may echo what it was sent), after
    ``delay`` seconds."""

    message: Mapping[str, Any] | None = None
    finish_reason: str = "stop"
    status: int = 200
    delay: float = 0.0
    error: str | None = None
    #: Headers of the answer (``Retry-After`` on a 429, say).
    headers: Mapping[str, str] = field(default_factory=dict)


#: What the endpoint does for one request: a reply message (answered with HTTP 200), an
#: ``Answer`` for anything else, or a function of the request body returning either.
Step = Mapping[str, Any] | Answer | Callable[[dict[str, Any]], Any]


@dataclass
class Endpoint:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: Each request's ``Authorization`` header (``""`` when it had none).
    authorizations: list[str] = field(default_factory=list)
    #: Each request's body as it came, byte for byte.
    raw: list[bytes] = field(default_factory=list)
    #: Each request's headers (names in lower case).
    headers: list[dict[str, str]] = field(default_factory=list)


def text(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def call(name: str, args: Mapping[str, Any], call_id: str) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def completion(message: Mapping[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": 0,
        "model": "local-model",
        "choices": [{"index": 0, "message": dict(message), "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


@contextmanager
def serve(steps: list[Step]) -> Iterator[Endpoint]:
    """Serve ``steps`` in order, one per request. A request past the last is refused (HTTP
    400): a run that goes on after a test's steps fails at once, where a 5xx would be retried
    for the transport's whole budget."""
    endpoint = Endpoint("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers["Content-Length"]))
            body = json.loads(data)
            endpoint.raw.append(data)
            endpoint.authorizations.append(self.headers.get("Authorization", ""))
            endpoint.headers.append({k.lower(): v for k, v in self.headers.items()})
            endpoint.requests.append(body)
            index = len(endpoint.requests) - 1
            past = Answer(status=400, error="test endpoint: no step left for this request")
            step: Any = steps[index] if index < len(steps) else past
            if callable(step):
                step = step(body)
            answer = step if isinstance(step, Answer) else Answer(message=step)
            time.sleep(answer.delay)
            if answer.status == 200 and answer.message is not None:
                payload: Any = completion(answer.message, answer.finish_reason)
            else:
                said = answer.error or f"test endpoint: HTTP {answer.status}"
                payload = {"error": {"message": said, "type": "invalid_request_error"}}
            self._send(answer.status, payload, answer.headers)

        def _send(self, status: int, payload: Any, headers: Mapping[str, str]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll: shutdown() waits for the next one, and every test that serves pays it.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()


def settings_for(endpoint: Endpoint, **kw: Any) -> Settings:
    """Settings whose model is ``endpoint`` (``output_mode``, ``files_root`` and the rest in
    ``kw``), and nothing from the environment or a ``.env`` file."""
    kw.setdefault("model", "compatible:local-model")
    kw.setdefault("api_key", "local")
    return Settings(_env_file=None, base_url=endpoint.url, **kw)  # type: ignore[call-arg]
