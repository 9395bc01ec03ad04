"""Traces are configured by the standard ``OTEL_*`` variables only, read when a deck opens:
none named, a run builds no span (skilldeck's span module is never imported); ``console``
prints the run's span tree; a variable skilldeck cannot honour is refused with a clear error.
Each case is a Python process of its own (the variables are read once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest

pytestmark = [pytest.mark.L2, pytest.mark.subprocess]

DEMO = """
import json, sys, tempfile
from skilldeck import Settings, SkillDeck, demo
from skilldeck.errors import SkillDeckError
from skilldeck.skills import builtin_skills_dir

files = tempfile.mkdtemp() if sys.argv[1:] == ["nofiles"] else str(demo.FILES)
settings = Settings(_env_file=None, model=f"scripted:{demo.SCRIPT}", files_root=files)
where = f"sqlite:///{tempfile.mkdtemp()}/c.sqlite"
try:
    deck = SkillDeck(
        builtin_skills_dir() / "litigation-intake", checkpointer=where, settings=settings
    )
except SkillDeckError as exc:
    print("REPORT", json.dumps({"error": exc.code.value, "message": str(exc)}))
    sys.exit(0)
with deck:
    if sys.argv[1:] == ["leave"]:  # read the stream's first event, then leave it
        events = deck.stream(demo.INPUT, context=demo.CONTEXT, matter_id=demo.MATTER_ID)
        next(events)
        events.close()
        status = deck.get_thread(deck.threads()[0].thread_id).status
    else:
        status = deck.run(demo.INPUT, context=demo.CONTEXT, matter_id=demo.MATTER_ID).status
    spans_module = "skilldeck._internal.spans" in sys.modules
report = {"traced": deck.traced, "status": status, "spans_module": spans_module}
print("REPORT", json.dumps(report))
"""


def run_demo(env: Mapping[str, str], *args: str) -> tuple[dict[str, object], str]:
    """The demo run to its card in a new process with ``env`` (and no other ``OTEL_*``
    variable); what it reported, and everything else it printed (the spans exported to the
    console, at its exit)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    ran = subprocess.run(
        [sys.executable, "-c", DEMO, *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    (report,) = [line.removeprefix("REPORT ") for line in lines if line.startswith("REPORT ")]
    return json.loads(report), "\n".join(line for line in lines if not line.startswith("REPORT "))


def test_without_an_exporter_a_run_builds_no_span() -> None:
    reported, _ = run_demo({"SKILLDECK_TRACE_CONTENT": "1"})  # opting in turns nothing on
    assert reported == {"traced": False, "status": "interrupted", "spans_module": False}
    reported, _ = run_demo(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}
    )
    assert reported["traced"] is False and reported["spans_module"] is False
    reported, _ = run_demo(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_EXPORTER": "none"}
    )
    assert reported["traced"] is False and reported["spans_module"] is False


def test_the_console_exporter_prints_the_runs_span_tree() -> None:
    reported, printed = run_demo({"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "intake"})
    assert reported == {"traced": True, "status": "interrupted", "spans_module": True}
    spans = printed_spans(printed)
    by_id = {s["context"]["span_id"]: s for s in spans}
    names = {s["name"] for s in spans}
    assert {
        "skilldeck.run",
        "skill litigation-intake",
        "attempt 1",
        "interrupt litigation-intake",
    } <= names
    run = next(s for s in spans if s["name"] == "skilldeck.run")
    assert run["parent_id"] is None and run["resource"]["attributes"]["service.name"] == "intake"
    for span in spans:  # one tree: every other span's parent is in it
        assert span is run or span["parent_id"] in by_id
    assert all(s["context"]["trace_id"] == run["context"]["trace_id"] for s in spans)


def printed_spans(printed: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed (one JSON object each)."""
    spans, decoder = [], json.JSONDecoder()
    at = printed.find("{")
    while at != -1:
        span, end = decoder.raw_decode(printed, at)
        spans.append(span)
        at = printed.find("{", end)
    return spans


def test_a_stream_its_reader_leaves_ends_its_run_abandoned_not_failed() -> None:
    reported, printed = run_demo({"OTEL_TRACES_EXPORTER": "console"}, "leave")
    assert reported["traced"] is True
    (run,) = [s for s in printed_spans(printed) if s["name"] == "skilldeck.run"]
    assert run["attributes"]["skilldeck.run.status"] == "abandoned"
    assert run["status"]["status_code"] == "UNSET"


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "'zipkin'"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "'grpc'",
        ),
    ],
)
def test_a_variable_skilldeck_cannot_honour_is_refused_with_how_to_fix_it(
    env: Mapping[str, str], names: str
) -> None:
    reported, _ = run_demo(env)
    message = str(reported["message"])
    assert names in message and ("otlp" in message or "http/protobuf" in message)


def test_a_tools_error_text_stays_out_of_its_span_unless_content_is_on() -> None:
    """A tool's error quotes its arguments (here the file the matter lacks): with content off
    its span says only the error's type; with content on, what the tool said."""
    env = {"OTEL_TRACES_EXPORTER": "console"}
    _, printed = run_demo(env, "nofiles")
    assert '"ToolError"' in printed or "ToolError" in printed
    assert "complaint.txt" not in printed
    _, printed = run_demo({**env, "SKILLDECK_TRACE_CONTENT": "1"}, "nofiles")
    assert "no file 'complaint.txt'" in printed
