"""Property-based tests: whatever a model, a person, a caller or a client sends, the engine
answers with a specific error and leaves the thread as it was, or ends the run ``failed`` with
its reason. Never a thread ``running`` with nothing running, never an unexpected exception,
never a 5xx. The number of examples is bounded so the suite stays quick in CI."""

from __future__ import annotations

import json
import logging
import operator
import os
import re
import string
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, write_bundle
from endpoint import Answer, serve, settings_for
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from skilldeck import InvalidAnswersError, Resume, Settings, SkillDeck, SkillDeckError
from skilldeck._internal.ids import ID_MAX_LENGTH, ID_PATTERN, check_id, id_problem
from skilldeck._internal.redact import log_error, safe_reason
from skilldeck.nodes import validate_answers
from skilldeck.server import create_app, hash_key
from skilldeck.server.agui import AguiInput
from skilldeck.server.errors import (
    LOC_PART_CHARS,
    MAX_LISTED_ERRORS,
    MESSAGE_CHARS,
    public_validation_errors,
)
from skilldeck.server.schemas import ResumeRequest, RunRequest
from skilldeck.skills.conditions import ConditionError, parse_condition
from skilldeck.skills.contract import PATH_PART_CHARS, OutputLimits
from skilldeck.tools import default_registry

pytestmark = [pytest.mark.L2, pytest.mark.slow]

# SKILLDECK_PROPERTY_EXAMPLES=2000 hunts longer; CI runs the default.
BOUNDED = settings(
    max_examples=int(os.environ.get("SKILLDECK_PROPERTY_EXAMPLES", "100")),
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# JSON values, with the numbers and strings that broke things before: huge integers, floats,
# unicode (lone surrogates among them), and nesting.
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
TEXT = st.text(max_size=200) | JSON.map(lambda v: json.dumps(v, ensure_ascii=False))


def _outputs() -> st.SearchStrategy[dict[str, Any]]:
    """Four-part outputs with any of their parts replaced by anything."""
    valid = output(data={"note": "x"})["output"]
    return st.fixed_dictionaries(
        {
            k: st.one_of(st.just(v), JSON)
            for k, v in valid.items()
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def skills() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_bundle(root, "intake", meta={"tools": ["element__extract"]})
        yield root


@BOUNDED
@given(
    replies=st.lists(
        st.one_of(
            TEXT.map(lambda t: {"text": t}),
            _outputs().map(lambda o: {"output": o}),
            JSON.map(lambda a: {"tool_calls": [{"name": "element__extract", "args": {"text": a}}]}),
        ),
        min_size=1,
        max_size=4,
    ),
    marked=st.booleans(),
)
def test_any_model_reply_ends_the_run_or_is_re_asked(
    skills: Path, replies: list[dict[str, Any]], marked: bool
) -> None:
    turns = [{**r, "invalid": True} for r in replies] if marked else replies
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "turns.json"
        try:
            script.write_text(json.dumps({"skills": {"intake": turns}}))
        except (ValueError, UnicodeEncodeError):
            return  # not a cassette anyone can write
        deck = SkillDeck(
            skills, checkpointer="memory://", settings=Settings(model=f"scripted:{script}")
        )
        with deck:
            result = deck.run(context="ctx")
            assert result.status in ("finished", "failed"), result
            if result.status == "failed":
                assert result.error and result.error.code and result.error.message
            assert deck.get_thread(result.thread_id).status == result.status


@pytest.fixture(scope="module")
def demo() -> Iterator[SkillDeck]:
    deck = SkillDeck(
        checkpointer="memory://",
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES)),
    )
    yield deck
    deck.close()


@BOUNDED
@given(
    answers=st.dictionaries(
        st.sampled_from([*DEMO_ANSWERS, "profile.other", "x"]) | st.text(max_size=10),
        JSON,
        max_size=4,
    )
)
def test_any_card_answer_is_refused_whole_or_fits(demo: SkillDeck, answers: dict[str, Any]) -> None:
    paused = demo.run(
        {"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter", user_id="u"
    )
    assert paused.card is not None
    schema = paused.card["answers_schema"]
    try:
        done = demo.run(Resume(paused.thread_id, answers, interrupt_id=paused.card["interrupt_id"]))
    except InvalidAnswersError as exc:
        assert exc.errors and all(
            isinstance(e["field_key"], str) and e["message"] for e in exc.errors
        )
        still = demo.get_thread(paused.thread_id)
        assert still.status == "interrupted" and still.card == paused.card
        return
    assert validate_answers(schema, answers) == []  # accepted only if it fits
    assert done.status == "finished"


@pytest.fixture(scope="module")
def registry() -> Iterator[Any]:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "m1" / "PKM").mkdir(parents=True)
        yield default_registry(folder)


TOOLS = [
    "file__parse",
    "file__get_info",
    "element__extract",
    "card__save",
    "card__update_insight",
    "pkm__list",
    "pkm__read",
    "pkm__append",
    "pkm__create",
    "pkm__write",
]


@BOUNDED
@given(
    name=st.sampled_from(TOOLS),
    args=st.dictionaries(
        st.text(max_size=12) | st.sampled_from(["path", "text", "file_id", "card", "user_id"]),
        JSON,
        max_size=4,
    ),
)
def test_any_tool_arguments_give_a_result_never_an_exception(
    registry: Any, name: str, args: dict[str, Any]
) -> None:
    result = registry.invoke(name, args, {"matter_id": "m1", "user_id": "u"})
    assert isinstance(result.content, str)
    if not result.ok:
        assert result.content.startswith("Error: ")


STATES = st.fixed_dictionaries({"profile": JSON, "input": JSON, "matter_id": SCALARS, "n": JSON})


@BOUNDED
@given(source=st.text(max_size=80), state=STATES)
def test_any_condition_parses_or_is_refused_and_never_raises_on_any_state(
    source: str, state: dict[str, Any]
) -> None:
    try:
        condition = parse_condition(source)
    except ConditionError as exc:
        assert exc.reason
        return
    assert condition.evaluate(state) in (True, False)


@BOUNDED
@given(
    source=st.sampled_from(["state.n > 1", "state.profile.a in state.input", "not state.n"]),
    state=STATES,
)
def test_known_conditions_never_raise_on_any_state(source: str, state: dict[str, Any]) -> None:
    assert parse_condition(source).evaluate(state) in (True, False)


KEYS = {"alice": "sdk_property_alice_key_0001"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    # One thread per example: more than a user may create per minute by default (that limit
    # has its own test in test_hardening.py).
    settings = Settings(
        model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES), threads_per_minute=100_000
    )
    deck = SkillDeck(checkpointer="memory://", settings=settings)
    with TestClient(create_app(deck, api_keys={hash_key(KEYS["alice"]): "alice"})) as test_client:
        yield test_client
    deck.close()


BODIES = st.one_of(
    st.binary(max_size=200),
    JSON.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    st.fixed_dictionaries(
        {"context": st.sampled_from(["matter", "x"]) | st.text(max_size=5), "input": JSON},
        optional={"matter_id": SCALARS, "answers": JSON, "interrupt_id": SCALARS},
    ).map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
)


@BOUNDED
@given(body=BODIES, route=st.sampled_from(["runs", "resume"]))
def test_any_request_body_gets_a_documented_answer(
    client: TestClient, body: bytes, route: str
) -> None:
    headers = {"Authorization": f"Bearer {KEYS['alice']}", "content-type": "application/json"}
    thread = client.post("/threads", headers=headers).json()["thread_id"]
    answer = client.post(f"/threads/{thread}/{route}", content=body, headers=headers)
    assert answer.status_code in (200, 404, 409, 413, 422), answer.text
    if answer.status_code != 200:
        assert answer.json()["error"]["code"]
    status = client.get(f"/threads/{thread}", headers=headers).json()["status"]
    assert status != "running"


# -- issue 32: one rule for ids, one way from an exception to what anyone reads ----------------
#: Strings near the id rule's edges: ids, almost-ids, paths, long ones, and anything.
ID_LIKE = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,140}", fullmatch=True),
    st.text(alphabet="ab.:_-/\\ %", max_size=140),
    st.text(max_size=40),
)


@BOUNDED
@given(value=ID_LIKE)
def test_every_id_is_held_to_the_one_rule_wherever_it_is_given(value: str) -> None:
    problem = id_problem(value)
    accepted = problem is None
    assert accepted == (
        0 < len(value) <= ID_MAX_LENGTH and re.fullmatch(ID_PATTERN, value) is not None
    )
    if accepted:  # an id names one folder, never a path
        assert value not in (".", "..") and "/" not in value and "\\" not in value
    body = {"threadId": "t", "runId": "r", "messages": [], "forwardedProps": {}}
    fields = {
        "runId": {**body, "runId": value},
        "threadId": {**body, "threadId": value},
        "message id": {**body, "messages": [{"id": value, "role": "user", "content": "hi"}]},
        "interruptId": {**body, "resume": [{"interruptId": value, "status": "cancelled"}]},
    }
    for where, given_body in fields.items():
        try:
            AguiInput.model_validate(given_body)
        except ValidationError:
            assert not accepted, where
        else:
            assert accepted, where
    for model, field in ((RunRequest, {"context": "c", "matter_id": value}),
                         (ResumeRequest, {"answers": {}, "interrupt_id": value})):  # fmt: skip
        try:
            model.model_validate(field)
        except ValidationError:
            assert not accepted
        else:
            assert accepted
    try:
        check_id("thread_id", value)
    except SkillDeckError as exc:
        assert not accepted and len(str(exc)) < ID_MAX_LENGTH + 200  # never an echo of a long id
    else:
        assert accepted


#: Credentials as providers and services echo them back: API keys of known shapes, AWS key ids
#: and long opaque tokens.
SECRETS = st.one_of(
    st.builds(
        operator.add,
        st.sampled_from(["sk-", "sk-proj-", "sdk_", "rk_", "pk-", "ghp_", "gho_", "xoxb-"]),
        st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=12, max_size=48),
    ),
    st.text(alphabet=string.ascii_uppercase + string.digits, min_size=16, max_size=16).map(
        lambda s: "AKIA" + s
    ),
    st.text(alphabet=string.ascii_letters + string.digits, min_size=40, max_size=90),
)
AROUND = st.text(max_size=60)


class _ProviderError(Exception):
    """An SDK's error: a status, a response, and the provider's body in its text."""

    def __init__(self, text: str, status_code: int) -> None:
        super().__init__(text)
        self.status_code = status_code


def _raised(kind: str, text: str) -> BaseException:
    made: dict[str, Callable[[], BaseException]] = {
        "runtime": lambda: RuntimeError(text),
        "os": lambda: OSError(13, text),
        "key": lambda: KeyError(text),
        "provider": lambda: _ProviderError(text, 401),
        "group": lambda: ExceptionGroup("task group", [ConnectionError(text)]),
        "ours": lambda: SkillDeckError(text),
    }
    return made[kind]()


@BOUNDED
@given(
    secret=SECRETS,
    before=AROUND,
    after=AROUND,
    kind=st.sampled_from(["runtime", "os", "key", "provider", "group", "ours"]),
)
def test_no_secret_in_an_exception_reaches_its_public_reason_or_the_log(
    secret: str, before: str, after: str, kind: str
) -> None:
    exc = _raised(kind, f"{before} {secret} {after}")
    reason = safe_reason(exc)
    assert secret not in str(reason) and len(str(reason)) <= 500
    if kind == "provider":
        assert str(reason) == "_ProviderError (HTTP 401)"
    records: list[str] = []
    log = logging.getLogger("skilldeck.properties")
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    log.addHandler(handler)
    try:
        logged = log_error(log, "it failed", exc, frame="failed: {}; see the log")
    finally:
        log.removeHandler(handler)
    assert logged == reason or str(logged) == f"failed: {reason}; see the log"
    assert records and all(secret not in r for r in records)


@pytest.fixture(scope="module")
def leaky_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A deck routing by description with a real model whose routing calls fail 401 with
    whatever ``said["body"]`` holds, and a client of its service."""
    said = {"body": ""}

    def answer(body: dict[str, Any]) -> Answer:
        return Answer(status=401, error=said["body"])

    root = tmp_path_factory.mktemp("leaky")
    write_bundle(root / "skills", "recipes", meta={"description": "Suggest a recipe"})
    with serve([answer] * 10_000) as endpoint:
        settings = settings_for(endpoint, output_mode="json")
        with SkillDeck(root / "skills", checkpointer="memory://", settings=settings) as deck:
            app = create_app(deck, api_keys={hash_key(KEYS["alice"]): "alice"})
            with TestClient(app) as test_client:
                yield said, deck, test_client


@settings(BOUNDED, max_examples=max(10, (BOUNDED.max_examples or 100) // 4))
@given(secret=SECRETS, before=AROUND, after=AROUND)
def test_no_secret_a_routing_model_echoes_reaches_an_event_or_a_state(
    leaky_provider: Any, secret: str, before: str, after: str
) -> None:
    said, deck, test_client = leaky_provider
    said["body"] = f"{before} {secret} {after}"
    result = deck.run("nothing matches zzz", context="auto", user_id="alice")
    assert result.status == "no_skill"
    assert "the routing model failed" in result.error.message
    body = {"threadId": f"p{uuid.uuid4().hex}", "runId": "r", "messages": [
        {"id": "m", "role": "user", "content": "nothing matches zzz"}]}  # fmt: skip
    auth = {"Authorization": f"Bearer {KEYS['alice']}"}
    events = test_client.post("/agui", headers=auth, json=body).text
    thread = test_client.get(f"/threads/{body['threadId']}", headers=auth).text
    assert '"RUN_ERROR"' in events
    shown = json.dumps([result.to_dict(), deck.history(result.thread_id)]) + events + thread
    assert secret not in shown


@BOUNDED
@given(
    where=st.lists(
        st.text(st.characters(exclude_categories=("Cs",)), max_size=150) | st.integers(0, 3),
        max_size=8,
    ),
    around=JSON,
    bad=st.sampled_from([float("inf"), 2**70, "\ud800"]),
)
def test_a_values_problem_is_reported_at_its_place_with_every_key_cut(
    where: list[str | int], around: Any, bad: Any
) -> None:
    """Whatever surrounds a value past the limits, the one problem reported is that value's,
    at its path, each key in it at most ``PATH_PART_CHARS`` long."""
    value, parts = bad, []
    for key in reversed(where):
        if isinstance(key, int):
            value = [*([around] if key else []), value]  # the bad value's index: 0 or 1
            parts.append(f"[{int(bool(key))}]")
        else:
            value = {key: value}
            parts.append("." + (key if len(key) <= PATH_PART_CHARS else key[:63] + "…"))
    clean = OutputLimits().problems(around) == []
    problems = OutputLimits(max_depth=64).problems(value, "body")
    assert len(problems) == 1
    if clean:
        assert problems[0]["path"] == "body" + "".join(reversed(parts))
    assert all(len(p) <= PATH_PART_CHARS + 1 for p in re.split(r"[.\[]", problems[0]["path"]))


@BOUNDED
@given(
    body=st.dictionaries(
        st.text(max_size=300),
        st.recursive(
            SCALARS | st.sampled_from([1e300, -1e300, (1, 2), {1, 2}]),
            lambda inner: st.lists(inner, max_size=30) | st.dictionaries(st.text(), inner),
            max_leaves=60,
        ),
        max_size=8,
    )
)
def test_any_invalid_body_gets_a_bounded_422(body: dict[str, Any]) -> None:
    """Whatever keys and values a client sends, the 422 lists at most ``MAX_LISTED_ERRORS``
    errors, each ``loc`` part and message cut, and counts the rest."""
    try:
        RunRequest.model_validate({"context": "matter", **body})
    except ValidationError as exc:
        errors = exc.errors()
    else:
        return
    public = public_validation_errors(errors)
    listed = public["errors"]
    assert len(listed) == min(len(errors), MAX_LISTED_ERRORS)
    assert public["more_errors"] == len(errors) - len(listed)
    assert all(len(str(part)) <= LOC_PART_CHARS for e in listed for part in e["loc"])
    assert all(len(e["message"]) <= MESSAGE_CHARS for e in listed)
    longest_loc = max((len(e["loc"]) for e in listed), default=0)
    assert len(public["message"]) <= 100 + 3 * (longest_loc * (LOC_PART_CHARS + 1) + MESSAGE_CHARS)
