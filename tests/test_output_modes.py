"""Output modes (schema, tool, json): what is sent, how replies are read, how the turn narrows,
and what a timeout, a cut-off or a broken endpoint does to a run."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import jsonschema
import openai
import pytest
import yaml
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, INTAKE_FINAL, output, write_bundle
from endpoint import Answer, call, serve, text
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from skilldeck import Continue, Resume, Settings, SkillDeck
from skilldeck.checkpoints.inspect import transcript
from skilldeck.errors import ModelConfigError, PromptTooLongError
from skilldeck.evals.cassette import CassetteRecorder
from skilldeck.models import build_model, output_mode, resolve_model
from skilldeck.nodes.model_call import estimate_tokens, fit_context
from skilldeck.nodes.output_modes import find_output_mode
from skilldeck.nodes.transcript import read as read_transcript
from skilldeck.scripted import CALL_INDEX_KEY, CASE_KEY, SKILL_KEY, load_script
from skilldeck.skills import builtin_skills_dir, load_bundle
from skilldeck.skills.bundle import ExecutionConfig
from skilldeck.skills.contract import skeleton, turn_schema

pytestmark = pytest.mark.L2

INTAKE = builtin_skills_dir() / "litigation-intake"
PARSE = {"tool": "file__parse", "arguments": {"file_id": "complaint.txt"}}


def _settings(**kw: Any) -> Settings:
    kw.setdefault("api_key", "local")
    kw.setdefault("model", "compatible:local-model")
    kw.setdefault("files_root", str(DEMO_FILES))
    return Settings(_env_file=None, **kw)  # type: ignore[call-arg]


def _intake(deck: SkillDeck) -> Any:
    return deck.run({"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter")


@contextlib.contextmanager
def _intake_on(
    steps: list[Any], bundle: Path = INTAKE, **settings: Any
) -> Iterator[tuple[Any, SkillDeck, Any]]:
    """The demo's intake run (of ``bundle``, a copy of the intake, trusted as the built-in
    one is) against a local endpoint that answers with ``steps``: the endpoint (its
    requests), the open deck and the result."""
    with serve(steps) as endpoint:
        config = _settings(base_url=endpoint.url, **settings)
        # A copy of the intake is the test's own bundle: its scripts run because it trusts it.
        with SkillDeck([bundle], checkpointer="memory://", settings=config, trust=[bundle]) as deck:
            yield endpoint, deck, _intake(deck)


def _run_intake(steps: list[Any], **settings: Any) -> tuple[Any, Any]:
    """:func:`_intake_on` for a test that needs only the endpoint and the result."""
    with _intake_on(steps, **settings) as (endpoint, _, result):
        return endpoint, result


# -- every mode runs the demo's cassette ----------------------------------------------------
@pytest.mark.parametrize("mode", ["schema", "tool", "json"])
def test_the_demo_runs_in_every_mode(mode: str, tmp_path: Path) -> None:
    settings = Settings(
        model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), output_mode=mode
    )
    with SkillDeck(checkpointer=f"sqlite:///{tmp_path / 'runs.sqlite'}", settings=settings) as deck:
        result = _intake(deck)
        assert result.status == "interrupted", result.error
        result = deck.run(Resume(result.thread_id, DEMO_ANSWERS))
        assert result.status == "finished", result.error
        assert (
            result.state["profile"]["defendant"]["name"] == DEMO_ANSWERS["profile.defendant.name"]
        )
        attempt = result.state["attempt"]
        assert attempt["output_mode"] == mode
        # Whatever the mode, the transcript keeps tool calls in their native form.
        first = deck.history(result.thread_id)
        row = next(r for r in first if r["turn"])
        said = read_transcript(deck.store, row["turn"], row["head"])
        calls = [c["name"] for m in said if isinstance(m, AIMessage) for c in m.tool_calls]
        assert "file__parse" in calls


# -- schema mode against an OpenAI-compatible endpoint --------------------------------------
def test_schema_mode_sends_one_strict_schema_of_the_next_step() -> None:
    steps: list[Any] = [text(json.dumps(PARSE)), text(json.dumps({"final": INTAKE_FINAL}))]
    endpoint, result = _run_intake(steps, output_mode="schema")
    assert result.status == "finished", result.error
    assert result.state["attempt"]["output_mode"] == "schema"
    first, second = endpoint.requests
    assert "tools" not in first  # the envelope carries the calls: no native tools
    # The intake starts by reading (tool_choice: file__parse): its first reply can only do that.
    assert _branches(first) == ["tool"] and _tools_offered(first) == ["file__parse"]
    # ... of a file the matter has: a model cannot ask for one it does not.
    parse = first["response_format"]["json_schema"]["schema"]
    assert parse["properties"]["arguments"]["properties"]["file_id"]["enum"] == ["complaint.txt"]
    fmt = second["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    names = [b["properties"]["tool"]["const"] for b in schema["anyOf"][:-1]]
    # The matter's one file was parsed: its result is above, so parsing it is not offered.
    assert names == ["file__get_info", "element__extract"]
    assert schema["anyOf"][-1]["required"] == ["final"]
    validator = jsonschema.Draft202012Validator(schema)
    info = {"tool": "file__get_info", "arguments": {"file_id": "complaint.txt"}}
    assert validator.is_valid(info) and validator.is_valid({"final": INTAKE_FINAL})
    assert not validator.is_valid({**info, "arguments": {"file_id": "answer.txt"}})
    assert not validator.is_valid(PARSE)
    assert not validator.is_valid({"tool": "file__delete", "arguments": {}})
    assert not validator.is_valid({"final": {**INTAKE_FINAL, "profile": {"judge": "X"}}})
    # The schema is sent once: as the grammar, not again in the prompt.
    system = first["messages"][0]["content"]
    assert "JSON Schema of the whole output" not in system
    # The model sees its call as the envelope it wrote and the result as a user message.
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert json.loads(second["messages"][2]["content"]) == PARSE
    assert second["messages"][3]["content"].startswith("Result of file__parse:\n")
    assert "Jane Doe" in second["messages"][3]["content"]
    # ... and the tool result reached the skill as a tool call the engine ran.
    assert [c["name"] for c in result.state["attempt"]["tool_calls"]] == ["file__parse"]


def test_a_repeated_call_narrows_the_turn_to_the_final_output() -> None:
    steps: list[Any] = [
        text(json.dumps(PARSE)),
        text(json.dumps(PARSE)),
        text(json.dumps({"final": INTAKE_FINAL})),
    ]
    endpoint, result = _run_intake(steps, output_mode="schema")
    assert result.status == "finished", result.error
    third = endpoint.requests[2]
    narrowed = third["response_format"]["json_schema"]["schema"]
    assert "anyOf" not in narrowed and narrowed["required"] == ["final"]
    assert "You already called file__parse" in third["messages"][-1]["content"]
    # The repeat ran nothing: one call of the tool in the attempt.
    assert len(result.state["attempt"]["tool_calls"]) == 1


def test_tool_mode_reads_a_call_written_as_text_but_only_of_an_allowed_tool() -> None:
    fenced = "```json\n" + json.dumps(PARSE) + "\n```"
    denied = json.dumps({"tool": "file__delete", "arguments": {"file_id": "complaint.txt"}})
    steps: list[Any] = [text(fenced), text(denied), call("submit_output", INTAKE_FINAL, "c3")]
    with _intake_on(steps, output_mode="tool") as (endpoint, deck, result):
        history = deck.history(result.thread_id)
    assert result.status == "finished", result.error
    ran = [c["name"] for r in history if r["node"] == "tools" for c in r["tool_calls"]]
    assert ran == ["file__parse"]
    # The unknown tool was no call: its text was read as an output and rejected.
    (rejected,) = [r for r in history if r["action"] == "rejected"]
    assert "not JSON" not in json.dumps(rejected["validation_errors"])  # JSON, of no contract
    assert "tools" in endpoint.requests[0]


# -- choosing the mode ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "mode"), [(text('{"ok": true}'), "schema"), (text("Hello!"), "tool")]
)
def test_auto_probes_the_endpoint_once(reply: dict[str, Any], mode: str) -> None:
    with serve([reply]) as endpoint:
        settings = _settings(base_url=endpoint.url)
        spec = resolve_model(ExecutionConfig(), settings, base=Path("."))
        model = build_model(spec, settings)
        chosen = [output_mode(ExecutionConfig(), settings, spec, model) for _ in range(3)]
    assert chosen == [mode] * 3 and len(endpoint.requests) == 1
    assert endpoint.requests[0]["response_format"]["type"] == "json_schema"
    own = ExecutionConfig(output_mode="json")  # a skill's own mode wins, and is not probed
    assert output_mode(own, settings, spec, model) == "json"


# -- tool_choice: required ------------------------------------------------------------------
@pytest.fixture
def must_call(tmp_path: Path) -> Path:
    """The intake with ``tool_choice: required``: it answers only after a call has worked."""
    bundle = tmp_path / INTAKE.name
    shutil.copytree(INTAKE, bundle)
    meta = json.loads((bundle / "skill.meta.json").read_text("utf-8"))
    meta.setdefault("execution_config", {})["tool_choice"] = "required"
    (bundle / "skill.meta.json").write_text(json.dumps(meta), "utf-8")
    return bundle


def _branches(request: dict[str, Any]) -> list[str]:
    schema = request["response_format"]["json_schema"]["schema"]
    return sorted(next(iter(b["required"])) for b in schema.get("anyOf", [schema]))


def test_a_required_call_leaves_the_grammar_no_output_until_one_worked(must_call: Path) -> None:
    final = text(json.dumps({"final": INTAKE_FINAL}))
    steps: list[Any] = [text(json.dumps(PARSE)), final]
    with _intake_on(steps, must_call, output_mode="schema") as (endpoint, _, result):
        assert result.status == "finished", result.error
    first, second = endpoint.requests
    assert "final" not in _branches(first) and _branches(first)[0] == "tool"
    assert "final" in _branches(second)


def test_a_required_call_is_required_of_the_endpoint_in_tool_mode(must_call: Path) -> None:
    submit = call("submit_output", INTAKE_FINAL, "c2")
    steps: list[Any] = [call("file__parse", PARSE["arguments"], "c1"), submit]
    with _intake_on(steps, must_call, output_mode="tool") as (endpoint, _, result):
        assert result.status == "finished", result.error
    first, second = endpoint.requests
    assert first["tool_choice"] == "required"
    assert "submit_output" not in [t["function"]["name"] for t in first["tools"]]
    assert "submit_output" in [t["function"]["name"] for t in second["tools"]]


def test_an_output_before_a_required_call_is_rejected_in_json_mode(must_call: Path) -> None:
    steps: list[Any] = [
        text(json.dumps(INTAKE_FINAL)),
        text(json.dumps(PARSE)),
        text(json.dumps(INTAKE_FINAL)),
    ]
    with _intake_on(steps, must_call, output_mode="json") as (_, deck, result):
        history = deck.history(result.thread_id)
    assert result.status == "finished", result.error
    (rejected,) = [r for r in history if r["action"] == "rejected"]
    message = rejected["validation_errors"][0]["message"]
    assert "tool_choice: required" in message and "file__parse" in message


def _intake_with(tmp_path: Path, **execution: Any) -> Path:
    """A copy of the intake with ``execution`` merged into its ``execution_config``."""
    bundle = tmp_path / INTAKE.name
    shutil.copytree(INTAKE, bundle)
    meta = json.loads((bundle / "skill.meta.json").read_text("utf-8"))
    meta.setdefault("execution_config", {}).update(execution)
    (bundle / "skill.meta.json").write_text(json.dumps(meta), "utf-8")
    return bundle


def _intake_calls(
    bundle: Path, replies: list[dict[str, Any]], mode: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The intake of ``bundle`` run on ``replies`` (each written as JSON) in ``mode``, to a
    finish: the endpoint's requests and the status of each tool call, in order."""
    steps: list[Any] = [text(json.dumps(reply)) for reply in replies]
    with _intake_on(steps, bundle, output_mode=mode) as (endpoint, deck, result):
        assert result.status == "finished", result.error
        ran = [r for r in deck.history(result.thread_id) if r["node"] == "tools"]
    return endpoint.requests, [c["status"] for r in ran for c in r["tool_calls"]]


def _tools_offered(request: dict[str, Any]) -> list[str]:
    schema = request["response_format"]["json_schema"]["schema"]
    branches = schema.get("anyOf", [schema])
    return [b["properties"]["tool"]["const"] for b in branches if "tool" in b["properties"]]


def test_a_named_tool_choice_offers_that_tool_alone_until_it_worked(tmp_path: Path) -> None:
    bundle = _intake_with(tmp_path, tool_choice="file__parse")
    steps: list[Any] = [text(json.dumps(PARSE)), text(json.dumps({"final": INTAKE_FINAL}))]
    with _intake_on(steps, bundle, output_mode="schema") as (endpoint, _, result):
        assert result.status == "finished", result.error
    first, second = endpoint.requests
    assert _branches(first) == ["tool"] and _tools_offered(first) == ["file__parse"]
    assert "final" in _branches(second)
    assert _tools_offered(second) == ["file__get_info", "element__extract"]  # complaint read


def test_a_named_tool_choice_is_sent_to_the_endpoint_in_tool_mode(tmp_path: Path) -> None:
    bundle = _intake_with(tmp_path, tool_choice="file__parse")
    submit = call("submit_output", INTAKE_FINAL, "c2")
    steps: list[Any] = [call("file__parse", PARSE["arguments"], "c1"), submit]
    with _intake_on(steps, bundle, output_mode="tool") as (endpoint, _, result):
        assert result.status == "finished", result.error
    first = endpoint.requests[0]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "file__parse"}}
    assert [t["function"]["name"] for t in first["tools"]] == ["file__parse"]


def test_a_tool_at_its_limit_is_not_offered_again(tmp_path: Path) -> None:
    bundle = _intake_with(tmp_path, tool_limits={"file__parse": 1})
    info = {"tool": "file__get_info", "arguments": {"file_id": "complaint.txt"}}
    steps: list[Any] = [
        text(json.dumps(PARSE)),
        text(json.dumps(info)),
        text(json.dumps({"final": INTAKE_FINAL})),
    ]
    with _intake_on(steps, bundle, output_mode="schema") as (endpoint, _, result):
        assert result.status == "finished", result.error
    first, second, _ = endpoint.requests
    assert "file__parse" in _tools_offered(first)
    assert _tools_offered(second) == ["file__get_info", "element__extract"]


def test_a_group_limit_counts_the_calls_of_all_its_tools(tmp_path: Path) -> None:
    reading = ["file__parse", "file__get_info"]
    bundle = _intake_with(tmp_path, tool_groups={"reading": reading}, tool_limits={"reading": 1})
    steps: list[Any] = [text(json.dumps(PARSE)), text(json.dumps({"final": INTAKE_FINAL}))]
    with _intake_on(steps, bundle, output_mode="schema") as (endpoint, _, result):
        assert result.status == "finished", result.error
    # The intake starts with file__parse (tool_choice); after it worked, file__get_info,
    # which is in its group, is not offered either.
    assert _tools_offered(endpoint.requests[1]) == ["element__extract"]


def test_a_tool_after_another_is_offered_once_that_one_worked(tmp_path: Path) -> None:
    bundle = _intake_with(
        tmp_path, tool_choice="auto", tool_after={"file__get_info": ["file__parse"]}
    )
    steps: list[Any] = [text(json.dumps(PARSE)), text(json.dumps({"final": INTAKE_FINAL}))]
    with _intake_on(steps, bundle, output_mode="schema") as (endpoint, _, result):
        assert result.status == "finished", result.error
    first, second = endpoint.requests
    assert _tools_offered(first) == ["file__parse", "element__extract"]
    assert _tools_offered(second) == ["file__get_info", "element__extract"]


def test_a_call_before_its_turn_is_refused_in_json_mode(tmp_path: Path) -> None:
    bundle = _intake_with(
        tmp_path, tool_choice="auto", tool_after={"file__get_info": ["file__parse"]}
    )
    info = {"tool": "file__get_info", "arguments": {"file_id": "complaint.txt"}}
    requests, statuses = _intake_calls(bundle, [info, PARSE, INTAKE_FINAL], "json")
    assert statuses == ["refused", "ok"]
    told = json.dumps(requests[1]["messages"])
    assert "file__get_info is offered only after a call of file__parse has worked" in told


def test_a_failed_call_uses_no_limit(tmp_path: Path) -> None:
    bundle = _intake_with(tmp_path, tool_limits={"file__parse": 1})
    missing = {**PARSE, "arguments": {"file_id": "no-such-file.txt"}}
    replies = [missing, PARSE, {"final": INTAKE_FINAL}]
    requests, statuses = _intake_calls(bundle, replies, "schema")
    assert statuses == ["error", "ok"]
    _, second, third = requests
    assert "file__parse" in _tools_offered(second)
    assert "file__parse" not in _tools_offered(third)


def test_a_call_over_its_limit_is_refused_in_json_mode(tmp_path: Path) -> None:
    bundle = _intake_with(tmp_path, tool_limits={"file__parse": 1})
    again = {**PARSE, "arguments": {"file_id": "complaint.txt", "mode": "text"}}
    requests, statuses = _intake_calls(bundle, [PARSE, again, INTAKE_FINAL], "json")
    assert statuses == ["ok", "refused"]
    told = json.dumps(requests[2]["messages"])
    assert "calls of file__parse have worked 1 time(s) in this attempt, the limit" in told


# -- limits and endpoint failures -----------------------------------------------------------
def test_a_cut_off_reply_is_a_rejected_attempt_that_is_asked_again() -> None:
    cut = Answer(message=text('{"final": {"resp'), finish_reason="length")
    steps: list[Any] = [cut, text(json.dumps(PARSE)), text(json.dumps({"final": INTAKE_FINAL}))]
    with _intake_on(steps, output_mode="schema") as (endpoint, deck, result):
        history = deck.history(result.thread_id)
    assert result.status == "finished", result.error
    rejected = [r for r in history if r["action"] == "rejected"]
    assert len(rejected) == 1
    assert "cut off" in rejected[0]["validation_errors"][0]["message"]
    assert endpoint.requests[0]["max_completion_tokens"] == 1024


@pytest.mark.slow
@pytest.mark.parametrize(
    "trouble",
    [
        Answer(status=429, headers={"Retry-After": "0"}),
        Answer(status=503),
        Answer(status=502),
        Answer(message=text("{}"), delay=2.0),
    ],
    ids=["429", "503", "502", "timeout"],
)
def test_a_call_that_got_no_reply_is_retried_and_never_reaches_the_transcript(
    trouble: Answer,
) -> None:
    """Transport is not the model: the same request is sent again (after a backoff), no
    attempt is rejected, and nothing of the failure reaches what the model is shown."""
    steps: list[Any] = [trouble, trouble, text(json.dumps(PARSE))]
    steps.append(text(json.dumps({"final": INTAKE_FINAL})))
    with _intake_on(steps, output_mode="schema", model_timeout_s=0.5) as (endpoint, deck, result):
        history = deck.history(result.thread_id)
    assert result.status == "finished", result.error
    assert not [r for r in history if r["action"] == "rejected"]
    first, again, answered, last = endpoint.requests
    assert first == again == answered  # byte for byte the same request, three times
    said = [str(m.get("content")) for m in last["messages"]]
    assert not [m for m in said if m.startswith("Your output was rejected")]
    assert "HTTP" not in json.dumps(said[1:])  # the system prompt aside, no word of it
    assert len(last["messages"]) == len(answered["messages"]) + 2  # the call and its result


@pytest.mark.slow
def test_retry_after_is_honoured_before_the_next_call() -> None:
    wait = Answer(status=429, headers={"Retry-After": "1"})
    steps: list[Any] = [wait, text(json.dumps(PARSE)), text(json.dumps({"final": INTAKE_FINAL}))]
    arrived: list[float] = []

    def stamp(step: Any) -> Any:
        def answer(body: dict[str, Any]) -> Any:
            arrived.append(time.monotonic())
            return step

        return answer

    with _intake_on([stamp(s) for s in steps], output_mode="schema") as (_, _, result):
        assert result.status == "finished", result.error
    assert arrived[1] - arrived[0] >= 1.0  # the endpoint's wait, not the 0.5 s backoff


@pytest.mark.slow
def test_an_endpoint_that_stays_away_leaves_the_thread_resumable() -> None:
    """Retries spent: the run stops MODEL_UNAVAILABLE (not CONTRACT_VIOLATION) at its last
    checkpoint, resumable; continuing it, once the endpoint is back, finishes the turn."""
    down = [Answer(status=503)] * 3
    steps: list[Any] = [text(json.dumps(PARSE)), *down, text(json.dumps({"final": INTAKE_FINAL}))]
    with _intake_on(steps, output_mode="schema", transport_attempts=3) as (endpoint, deck, result):
        assert result.status == "resumable" and result.error is not None
        assert result.error.code == "MODEL_UNAVAILABLE"
        assert "(HTTP 503)" in result.error.message and result.error.skill == "litigation-intake"
        assert len(endpoint.requests) == 4  # the first call, then the second three times
        assert deck.get_thread(result.thread_id).status == "resumable"
        # Listed as what it is, for the operator looking for threads to continue.
        assert [t.thread_id for t in deck.threads(status="resumable")] == [result.thread_id]
        assert deck.threads(status="running") == []
        done = deck.run(Continue(result.thread_id))
        assert done.status == "finished", done.error
        assert done.error is None and done.state.get("error") is None
        assert endpoint.requests[4] == endpoint.requests[1]  # the same call, retried later
        rows = deck.history(result.thread_id)
        assert not [r for r in rows if r["action"] == "rejected"]


def test_a_long_conversation_loses_its_earlier_tool_results_first() -> None:
    long = "x" * 3000
    messages = [
        SystemMessage("system"),
        HumanMessage("the task"),
        AIMessage('{"tool": "a"}'),
        HumanMessage(f"Result of a:\n{long}"),
        AIMessage('{"tool": "b"}'),
        HumanMessage(f"Result of b:\n{long}"),
        HumanMessage("latest"),
    ]
    fitted = fit_context(messages, estimate_tokens(messages) - 500)
    assert [type(m) for m in fitted] == [type(m) for m in messages]
    assert "trimmed to fit" in str(fitted[3].content) and long in str(fitted[5].content)
    assert fitted[:3] == messages[:3] and fitted[-1] == messages[-1]
    assert fit_context(messages, 10_000) == messages  # nothing trimmed when it fits
    with pytest.raises(PromptTooLongError, match="raise model_context_tokens"):
        fit_context([SystemMessage(long), HumanMessage("task")], 100)


def test_a_prompt_that_cannot_fit_the_context_is_refused_before_the_call() -> None:
    endpoint, result = _run_intake(
        [text(json.dumps(PARSE))],
        output_mode="schema",
        model_context_tokens=256,
        max_output_tokens=64,
    )
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "PROMPT_TOO_LONG"
    assert "192 are left" in result.error.message
    assert endpoint.requests == []


def test_a_refused_key_is_a_model_error_at_once() -> None:
    endpoint, result = _run_intake([Answer(status=401)] * 3, output_mode="schema")
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "MODEL_ERROR"
    assert len(endpoint.requests) == 1


@pytest.mark.slow
def test_the_run_deadline_ends_a_run_that_keeps_calling() -> None:
    slow = Answer(message=text(json.dumps(PARSE)), delay=0.6)
    settings = {"output_mode": "schema", "run_timeout_s": 1.0, "max_tool_rounds": 10}
    with _intake_on([slow] * 10, **settings) as (endpoint, deck, result):
        assert deck.get_thread(result.thread_id).status == "failed"  # not stuck running
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "RUN_TIMEOUT"
    assert len(endpoint.requests) <= 3


# -- re-asks --------------------------------------------------------------------------------
def test_a_reask_shows_a_skeleton_and_names_a_repeated_reply(
    make_deck: Callable[..., SkillDeck], skills_dir: Path
) -> None:
    write_bundle(skills_dir, "alpha")
    wrong = {"text": '{"response": "x"}', "invalid": True}
    deck = make_deck(skills_dir, {"alpha": [wrong, wrong, output(data={"note": "n"})]})
    result = deck.run({}, context="ctx")
    assert result.status == "finished", result.error
    attempt = result.state["attempt"]
    asks = [
        m.content
        for m in read_transcript(deck.store, attempt["turn"], attempt["head"])
        if isinstance(m, HumanMessage) and str(m.content).startswith("Your output was rejected")
    ]
    assert len(asks) == 2
    shape = skeleton(load_bundle(skills_dir / "alpha").output_schema)
    assert shape["control"] == {"action": "continue"}  # the enum's first value
    # The example finishes: a model that copies it does not start another turn.
    example = json.dumps({**shape, "control": {"action": "finish"}}, separators=(",", ":"))
    assert f"(fill in real values): {example}" in asks[0]
    assert "same as the one rejected before" not in asks[0]
    assert "same as the one rejected before" in asks[1]


# -- reading replies ------------------------------------------------------------------------
ALLOWED = ("file__parse", "file__get_info")


@pytest.mark.parametrize(
    "content",
    [
        json.dumps(PARSE),
        "```json\n" + json.dumps(PARSE) + "\n```",
        "<tool_call>\n" + json.dumps(PARSE) + "\n</tool_call>",
        json.dumps({"name": "file__parse", "arguments": json.dumps({"file_id": "complaint.txt"})}),
        json.dumps({"tool": "file__parse", "args": {"file_id": "complaint.txt"}}),
    ],
    ids=["plain", "fenced", "tagged", "string-arguments", "args-key"],
)
def test_calls_written_as_text_are_read(content: str) -> None:
    reply = find_output_mode("json").read(AIMessage(content=content), ALLOWED, "c")
    assert reply.calls == [
        {"id": "c_0", "name": "file__parse", "args": {"file_id": "complaint.txt"}}
    ]
    assert reply.message.tool_calls[0]["name"] == "file__parse" and reply.output is None


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({"tool": "file__delete", "arguments": {}}),  # not an allowed tool
        json.dumps({"tool": "file__parse", "arguments": {}, "why": "x"}),  # not only a call
        json.dumps({"tool": "file__parse", "arguments": "not json"}),
        json.dumps([PARSE, {"tool": "file__delete", "arguments": {}}]),
        "file__parse(complaint.txt)",
    ],
)
def test_text_that_is_no_allowed_call_is_left_to_the_contract(content: str) -> None:
    reply = find_output_mode("json").read(AIMessage(content=content), ALLOWED, "c")
    assert reply.calls == [] and reply.output is None and reply.errors == []


def test_several_calls_and_the_final_envelope() -> None:
    json_mode, schema, tool = (find_output_mode(m) for m in ("json", "schema", "tool"))
    two = json.dumps([PARSE, {"tool": "file__get_info", "arguments": {"file_id": "a"}}])
    assert [c["name"] for c in json_mode.read(AIMessage(content=two), ALLOWED, "c").calls] == [
        "file__parse",
        "file__get_info",
    ]
    reply = AIMessage(content=json.dumps({"final": INTAKE_FINAL}))
    final = schema.read(reply, ALLOWED, "c")
    assert final.output == INTAKE_FINAL
    bad = schema.read(AIMessage(content='{"final": 3}'), ALLOWED, "c")
    assert bad.errors == [{"path": "$.final", "message": "must be an object"}]
    # In tool mode "final" is no envelope: the text goes to the contract as it is.
    assert tool.read(AIMessage(content='{"final": 3}'), ALLOWED, "c").output is None


def test_the_wire_shows_calls_as_envelopes_in_text_modes() -> None:
    called = AIMessage(content="", tool_calls=[{"id": "1", "name": "file__parse", "args": {}}])
    assert find_output_mode("tool").wire([called]) == [called]
    (wire,) = find_output_mode("schema").wire([called])
    assert json.loads(str(wire.content)) == {"tool": "file__parse", "arguments": {}}


def test_turn_schema_strips_prose_and_keeps_references_apart() -> None:
    output_schema = {
        "type": "object",
        "description": "for people",
        "properties": {"x": {"$ref": "#/$defs/Item", "default": None}},
        "$defs": {"Item": {"type": "string", "title": "Item", "pattern": "^([^/\\\\]+/)*$"}},
    }
    arguments = {
        "type": "object",
        "properties": {"y": {"$ref": "#/$defs/Item"}},
        "$defs": {"Item": {"type": "integer"}},
    }
    schema = turn_schema(output_schema, {"t": arguments})
    assert "description" not in json.dumps(schema) and "title" not in json.dumps(schema)
    # A pattern is checked after the reply: a converter that misreads one can loosen the grammar.
    assert "pattern" not in json.dumps(schema)
    assert set(schema["$defs"]) == {"out_Item", "t0_Item"}
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"final": {"x": "s"}})
    assert validator.is_valid({"tool": "t", "arguments": {"y": 1}})
    assert not validator.is_valid({"tool": "t", "arguments": {"y": "s"}})
    assert turn_schema(output_schema)["required"] == ["final"]


def _replay_intake(
    tmp_path: Path, edit: Callable[[list[dict[str, Any]]], None], **more: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """The demo's intake replayed in ``schema`` mode from its cassette, its turns changed by
    ``edit`` and labelled as a recording (``more``: other settings): the result and the
    rejected attempts."""
    script = yaml.safe_load(DEMO_SCRIPT.read_text("utf-8"))
    edit(script["skills"]["litigation-intake"])
    cassette = tmp_path / "recorded.yaml"
    cassette.write_text(yaml.safe_dump({**script, "recorded": {"date": "2026-11-25"}}), "utf-8")
    settings = Settings(
        model=f"scripted:{cassette}", files_root=str(DEMO_FILES), output_mode="schema", **more
    )
    with SkillDeck(checkpointer="memory://", settings=settings) as deck:
        result = _intake(deck)
        rows = [r for r in deck.history(result.thread_id) if r["action"] == "rejected"]
    return result, rows


@pytest.mark.parametrize(
    "failed",
    [{"error": "length"}, {"error": "length", "received": '{"final": {"resp'}],
)
def test_a_recorded_cut_off_replays_as_the_same_failure(
    failed: dict[str, Any], tmp_path: Path
) -> None:
    """A cassette turn ``error: length`` fails as the live call did, so the run re-asks as it
    did live; and a recorder writes such a turn for a reply that was cut off."""
    result, rows = _replay_intake(tmp_path, lambda turns: turns.insert(0, failed))
    assert result.status == "interrupted", result.error
    assert len(rows) == 1 and "cut off" in rows[0]["validation_errors"][0]["message"]

    recorder = CassetteRecorder()
    run_id = uuid.uuid4()
    meta = {CASE_KEY: "c", SKILL_KEY: "s", CALL_INDEX_KEY: 0}
    recorder.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=run_id, metadata=meta)
    message = SimpleNamespace(content=failed.get("received"))
    completion: Any = SimpleNamespace(choices=[SimpleNamespace(message=message)], usage=None)
    recorder.on_llm_error(openai.LengthFinishReasonError(completion=completion), run_id=run_id)
    (turn,) = recorder.cassette()["cases"]["c"]["skills"]["s"]
    assert {k: v for k, v in turn.items() if k != "request"} == failed
    assert len(turn["request"]) == 16


@pytest.mark.slow
@pytest.mark.parametrize(
    "failed",
    [{"error": "timeout"}, {"error": "unavailable"}, {"error": "unavailable", "status": 500}],
)
def test_a_scripted_endpoint_failure_is_the_transports(
    failed: dict[str, Any], tmp_path: Path
) -> None:
    """A cassette's endpoint failure is raised as the SDK raises it live: the transport
    retries it (the cassette repeats it) and the run stops resumable, not re-asked."""
    result, rows = _replay_intake(
        tmp_path, lambda turns: turns.insert(0, failed), transport_attempts=2
    )
    assert result.status == "resumable" and result.error is not None
    assert result.error.code == "MODEL_UNAVAILABLE" and rows == []


def test_a_recorder_keeps_the_call_after_a_transport_failure() -> None:
    """A call that got no reply is not the model's turn: the retry that answered is."""
    recorder = CassetteRecorder()
    meta = {CASE_KEY: "c", SKILL_KEY: "s", CALL_INDEX_KEY: 0}
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    for error in (
        openai.APITimeoutError(request=request),
        openai.RateLimitError(
            "slow down", response=httpx.Response(429, request=request), body=None
        ),
    ):
        failed = uuid.uuid4()
        recorder.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=failed, metadata=meta)
        recorder.on_llm_error(error, run_id=failed)
    assert recorder.cassette()["cases"] == {}


def test_an_object_closed_before_the_cut_off_is_the_reply(tmp_path: Path) -> None:
    """A constrained model can spend its budget after the object closed (the server drops
    what follows): the reply lost nothing, so it is taken, live and in a replay, not re-asked."""
    steps: list[Any] = [
        Answer(message=text(json.dumps(PARSE)), finish_reason="length"),
        text(json.dumps({"final": INTAKE_FINAL})),
    ]
    with _intake_on(steps, output_mode="schema") as (endpoint, deck, result):
        history = deck.history(result.thread_id)
    assert result.status == "finished", result.error
    assert not [r for r in history if r["action"] == "rejected"] and len(endpoint.requests) == 2

    def closed_then_cut_off(turns: list[dict[str, Any]]) -> None:
        call = turns[0]["tool_calls"][0]
        closed = json.dumps({"tool": call["name"], "arguments": call["args"]})
        turns[0] = {"error": "length", "received": closed}

    replayed, rows = _replay_intake(tmp_path, closed_then_cut_off)
    assert replayed.status == "interrupted", replayed.error
    assert rows == []


def test_a_cut_off_reply_is_kept_short_for_the_reask_and_the_transcript() -> None:
    """What a model wrote before the token limit cut it off is what a reader needs to see
    (a runaway repetition): its start and its end stay in the turn, the middle is dropped."""
    runaway = '{"final": {"response": "' + "the same words again " * 400
    steps: list[Any] = [
        Answer(message=text(runaway), finish_reason="length"),
        text(json.dumps(PARSE)),
        text(json.dumps({"final": INTAKE_FINAL})),
    ]
    with _intake_on(steps, output_mode="schema") as (endpoint, deck, result):
        turns = transcript(deck, result.thread_id)
    assert result.status == "finished", result.error
    reask = endpoint.requests[1]["messages"]
    kept = [m["content"] for m in reask if m["role"] == "assistant"]
    assert len(kept) == 1 and kept[0].startswith(runaway[:600])
    assert kept[0].endswith(runaway[-200:]) and f"({len(runaway) - 800} characters)" in kept[0]
    shown = [m for turn in turns for m in turn["messages"] if m["role"] == "ai"]
    assert shown and shown[0]["content"] == kept[0]


def test_the_recorder_keeps_a_cut_off_reply_that_came_back_as_text() -> None:
    """A cut-off reply that the client returns (no exception) is recorded as ``error: length``
    with its text, so the replay takes the re-ask path as the live run did."""
    recorder = CassetteRecorder()
    run_id = uuid.uuid4()
    meta = {CASE_KEY: "c", SKILL_KEY: "s", CALL_INDEX_KEY: 0}
    recorder.on_chat_model_start({}, [[HumanMessage("hi")]], run_id=run_id, metadata=meta)
    cut = AIMessage('{"final": {"resp', response_metadata={"finish_reason": "length"})
    recorder.on_llm_end(LLMResult(generations=[[ChatGeneration(message=cut)]]), run_id=run_id)
    (turn,) = recorder.cassette()["cases"]["c"]["skills"]["s"]
    assert turn["error"] == "length" and turn["received"] == '{"final": {"resp'


@pytest.mark.parametrize(
    "turn", [{"text": "x", "received": "x"}, {"error": "length", "received": 3}]
)
def test_received_text_belongs_to_a_cut_off_turn_only(turn: dict[str, Any]) -> None:
    with pytest.raises(ModelConfigError, match=r"s\[0\]\.received: only an 'error: length'"):
        load_script({"skills": {"s": [turn]}})


@pytest.mark.parametrize(
    "turn", [{"error": "length", "status": 500}, {"error": "unavailable", "status": 404}]
)
def test_a_status_belongs_to_an_endpoint_failure_only(turn: dict[str, Any]) -> None:
    script = {"skills": {"s": [turn]}}
    with pytest.raises(ModelConfigError, match=r"s\[0\]\.status: only an 'error: unavailable'"):
        load_script(script)
