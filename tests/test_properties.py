"""Property-based tests: whatever a model, a person, a caller or a client sends, the engine
answers with a specific error and leaves the thread as it was, or ends the run ``failed`` with
its reason. Never a thread ``running`` with nothing running, never an unexpected exception,
never a 5xx. The number of examples is bounded so the suite stays quick in CI."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, write_bundle
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skilldeck import InvalidAnswersError, Settings, SkillDeck
from skilldeck.nodes import validate_answers
from skilldeck.server import create_app, hash_key
from skilldeck.skills.conditions import ConditionError, parse_condition
from skilldeck.tools import default_registry

pytestmark = pytest.mark.L2

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
                assert result.error and result.error["code"] and result.error["message"]
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
        done = demo.resume(paused.thread_id, answers, interrupt_id=paused.card["interrupt_id"])
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
