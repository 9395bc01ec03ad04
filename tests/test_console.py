"""L2: the card console in a real headless Chromium against a real ``skilldeck serve``.

The demo runs from the console: its card is a form with its required marks; an invalid answer
shows the service's error in place; a valid one streams the run to its end; a reload mid-run
(which asks for the key again: it is kept in memory only) picks the run up where it is. Every
``input_type`` has its control, and a card's answers reach the thread's state. Another user's
thread is the same 404 as an unknown one, and the page loads nothing from elsewhere.

Set ``SKILLDECK_SCREENSHOTS=DIR`` to keep the screenshots (the README's comes from here).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from conftest import DEMO_FILES, DEMO_SCRIPT, output, own_matter, write_bundle
from PIL import Image
from playwright.sync_api import expect, sync_playwright
from servers import CHROMIUM_INSTALL, program
from serving import ServeProcess, free_port

from skilldeck.checkpoints.threads import thread_title
from skilldeck.server import hash_key
from skilldeck.skills import builtin_skills_dir

pytestmark = [pytest.mark.L2, pytest.mark.browser, pytest.mark.server]

ALICE, BOB = "alice-console-key", "bob-console-key"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
#: Seconds the scripted model takes over its second turn and the turns after the card: long
#: enough to reload the page in the middle of a run.
LATENCY_S = 2.5

KINDS_QUESTIONS = [
    {"question": "What is it about?", "field_key": "topic", "input_type": "text", "required": True},
    {
        "question": "Which colour?",
        "field_key": "colour",
        "input_type": "select",
        "required": True,
        "options": [{"label": "Red", "value": "red"}, {"label": "Green", "value": "green"}],
    },
    {
        "question": "Which tags?",
        "field_key": "tags",
        "input_type": "multi_select",
        "required": False,
        "options": [
            {"label": "Alpha", "value": "a"},
            {"label": "Beta", "value": "b"},
            {"label": "Gamma", "value": "c"},
        ],
    },
    {"question": "Urgent?", "field_key": "urgent", "input_type": "boolean", "required": True},
    {"question": "Which files?", "field_key": "files", "input_type": "file_ids", "required": True},
    {
        "question": "How much?",
        "field_key": "amount",
        "input_type": "number",
        "required": True,
        "minimum": 0,
        "maximum": 500,
    },
    {
        "question": "How many crates?",
        "field_key": "crates",
        "input_type": "integer",
        "required": False,
        "error_message": "Give the number of crates: 1 or more.",
    },
]
#: The ``kinds`` card's field for the text question holds words only: a pattern the card's
#: errors must not quote.
TOPIC_PATTERN = "^[a-z ]+$"
ANSWERED = [q["field_key"] for q in KINDS_QUESTIONS]


@dataclass(frozen=True)
class Console:
    url: str
    #: A second ``skilldeck serve --no-console`` on the same checkpoint database.
    other: str
    #: Start another server on the same checkpoint database (the caller stops it).
    serve: Callable[..., ServeProcess]


#: A matter with a long id: the thread list shows it whole beside the skill.
CERAMICS = "matter-of-the-broken-ceramics-shipment-2024"


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """``skilldeck serve`` with its console: the demo skill on the demo's script, slowed down
    by ``latency_s``, and a ``kinds`` skill whose card asks every input type; and another
    process without the console on the same checkpoints."""
    root = tmp_path_factory.mktemp("console")
    script = yaml.safe_load(DEMO_SCRIPT.read_text("utf-8"))
    turns = script["skills"]["litigation-intake"]
    for turn in (turns[1], turns[3], turns[4]):  # before the card, and after it
        turn["latency_s"] = LATENCY_S
    script["skills"]["kinds"] = [
        {"text": "Let me think first.", "invalid": True},  # rejected: the timeline shows a retry
        output(action="ask_user", review_type="clarify", questions=KINDS_QUESTIONS),
        output(response="Noted.", action="finish"),
    ]
    (root / "script.yaml").write_text(yaml.safe_dump(script), "utf-8")
    write_bundle(
        root / "skills",
        "kinds",
        meta={"triggers": {"contexts": ["kinds"]}},
        data={
            "topic": {"type": "string", "pattern": TOPIC_PATTERN},
            "colour": {"enum": ["red", "green"]},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}},
            "urgent": {"type": "boolean"},
            "files": {"type": "array", "items": {"type": "string"}},
            "amount": {"type": "number"},
            "crates": {"type": "integer", "minimum": 1},
        },
    )
    keys = {hash_key(ALICE): "alice", hash_key(BOB): "bob"}
    (root / "keys.json").write_text(json.dumps(keys), "utf-8")

    def serve(*options: str) -> ServeProcess:
        port = free_port()
        command = [
            *(sys.executable, "-m", "skilldeck.cli"),
            *("serve", "--port", str(port), "--keys", str(root / "keys.json"), *options),
            *("--checkpoint", f"sqlite:///{root / 'console.sqlite'}"),
            *("--model", f"scripted:{root / 'script.yaml'}"),
            *("--skills", str(builtin_skills_dir() / "litigation-intake")),
            *("--skills", str(root / "skills" / "kinds")),
        ]
        env = {"SKILLDECK_FILES_ROOT": str(DEMO_FILES)}
        return ServeProcess(command, port, root / f"server-{port}.log", env)

    for matter in ("demo-matter", CERAMICS):  # alice's matters (the service grants no other)
        own_matter(f"sqlite:///{root / 'console.sqlite'}", matter, "alice")
    servers = [serve(), serve("--no-console")]
    try:
        yield Console(*(server.wait().url for server in servers), serve)
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def browser(console: Console) -> Iterator[Any]:
    chromium = program("chromium", CHROMIUM_INSTALL)
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def open_console(browser: Any, console: Console, requests: list[str]) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(20_000)
    page.on("request", lambda r: requests.append(r.url))
    page.goto(console.url + "/")
    return page


def sign_in(page: Any, key: str) -> None:
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#app").wait_for()


def shoot(page: Any, name: str, target: Any = None) -> np.ndarray[Any, Any]:
    """A screenshot of the page (or of ``target``) as an RGB array (height, width, 3); kept in
    ``SKILLDECK_SCREENSHOTS`` when it is set."""
    png = (target or page).screenshot()
    keep = os.environ.get("SKILLDECK_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{name}.png").write_bytes(png)
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def reddish(pixels: np.ndarray[Any, Any]) -> int:
    """How many pixels are the error red (strong red, weak green and blue)."""
    r, g, b = (pixels[..., i].astype(int) for i in range(3))
    return int(((r > 150) & (g < 90) & (b < 90)).sum())


def colours(pixels: np.ndarray[Any, Any]) -> int:
    return len(np.unique(pixels.reshape(-1, 3), axis=0))


def thread_status(console: Console, thread: str) -> str:
    view = httpx.get(f"{console.url}/threads/{thread}", headers={"X-API-Key": ALICE}).json()
    return str(view["status"])


def test_the_demo_from_the_console_card_error_answer_and_reloads(
    browser: Any, console: Console
) -> None:
    requests: list[str] = []
    page = open_console(browser, console, requests)

    page.get_by_label("API key").fill("not-a-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#login-error")).to_have_text("This key is not accepted.")
    sign_in(page, ALICE)

    page.get_by_role("button", name="New run").click()
    page.get_by_label("Context").select_option("matter")
    expect(page.locator("#run-skills")).to_contain_text("A run needs a matter id.")
    page.get_by_label("Input (a JSON object)").fill("[1, 2]")
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#run-error")).to_contain_text("must be a JSON object")
    page.get_by_label("Input (a JSON object)").fill('{"documents": ["complaint.txt"]}')
    page.get_by_role("button", name="Start").click()  # no matter id: the service refuses it
    expect(page.locator("#run-error")).to_contain_text("matter_id")
    page.get_by_label("Matter id").fill("demo-matter")
    page.get_by_role("button", name="Start").click()

    # The first model turn takes LATENCY_S: reload while it runs.
    page.locator("#timeline .entry").first.wait_for()
    thread = page.url.split("#thread=")[1]
    assert thread_status(console, thread) == "running"
    page.reload()
    # The key was in the page's memory only: nothing of it is left anywhere.
    expect(page.locator("#login")).to_be_visible()
    kept = page.evaluate("[localStorage.length, sessionStorage.length, document.cookie]")
    assert kept == [0, 0, ""] and ALICE not in page.url
    sign_in(page, ALICE)

    card = page.locator("form#card")
    card.wait_for()
    expect(page.locator("#thread-status")).to_have_text("interrupted")
    timeline = page.locator("#timeline").inner_text()
    assert "file__parse ok" in timeline and "element__extract ok" in timeline
    fields = card.locator("fieldset.field")
    assert fields.count() == 2
    assert card.locator(".required").count() == 2
    name = fields.nth(0)
    assert name.get_attribute("data-field-key") == "profile.defendant.name"
    kind = card.get_by_label("Is the defendant a person or an organisation?")
    options = kind.locator("option").all_inner_texts()
    assert options[1:] == ["Person", "Organisation"]

    # An invalid answer: the service's error appears at its question, and nothing else moves.
    kind.select_option(label="Organisation")
    card.get_by_role("button", name="Submit").click()
    error = name.locator(".field-error")
    expect(error).to_have_text("an answer is required")
    assert fields.nth(1).locator(".field-error").is_hidden()
    assert thread_status(console, thread) == "interrupted"
    assert reddish(shoot(page, "console-error", error)) > 50

    name.locator("textarea").fill("Acme Logistics Ltd.")
    expect(error).to_be_hidden()  # the error was about the answer sent, now edited
    full = shoot(page, "console-card")
    assert full.shape == (800, 1280, 3) and colours(full) > 50
    card.get_by_role("button", name="Submit").click()
    expect(card).to_be_hidden()
    page.locator("#timeline .entry.answer").wait_for()

    # Reload while the run goes on after the answer: it continues, and finishes.
    assert thread_status(console, thread) == "running"
    page.reload()
    sign_in(page, ALICE)
    done = page.locator("#timeline .entry.done")
    done.wait_for(timeout=30_000)
    expect(done).to_contain_text("Intake complete")
    expect(page.locator("#thread-status")).to_have_text("finished")
    state = httpx.get(f"{console.url}/threads/{thread}", headers={"X-API-Key": ALICE}).json()
    assert state["state"]["profile"]["defendant"]["name"] == "Acme Logistics Ltd."
    row = page.locator(f'#threads li[data-thread="{thread}"]')
    expect(row.locator(".status")).to_have_text("finished")

    # Nothing came from anywhere but the service.
    assert requests and all(url.startswith(console.url + "/") for url in requests)


def answer_kinds(controls: dict[str | None, Any]) -> None:
    """Fill the ``kinds`` card's controls (by input type)."""
    controls["text"].locator("textarea").fill("the quarterly review")
    controls["select"].locator("select").select_option(label="Green")
    controls["multi_select"].get_by_label("Alpha").check()
    controls["multi_select"].get_by_label("Gamma").check()
    controls["boolean"].get_by_label("No").check()
    controls["file_ids"].locator("textarea").fill("a.txt\n\n  b.pdf \n")
    controls["number"].locator("input").fill("120.5")
    controls["integer"].locator("input").fill("3")


def kinds_card(browser: Any, console: Console) -> tuple[Any, Any]:
    """A page on a new run of the ``kinds`` skill, at its card; and the card."""
    page = open_console(browser, console, [])
    sign_in(page, ALICE)
    page.get_by_role("button", name="New run").click()
    page.get_by_label("Context").select_option("kinds")
    page.get_by_role("button", name="Start").click()
    card = page.locator("form#card")
    card.wait_for()
    return page, card


def test_every_input_type_has_its_control_and_its_answer_reaches_the_state(
    browser: Any, console: Console
) -> None:
    page, card = kinds_card(browser, console)
    expect(page.locator("#timeline .entry.retry")).to_contain_text("kinds attempt 1 was rejected")
    controls = {f.get_attribute("data-input-type"): f for f in card.locator("fieldset.field").all()}
    assert list(controls) == [q["input_type"] for q in KINDS_QUESTIONS]
    assert card.locator(".required").count() == 5 and card.locator(".optional").count() == 2
    expect(controls["number"].locator("legend")).to_contain_text("from 0 to 500")

    # Answers the card refuses: each error in words at its question, never the field's regex;
    # a question's own message instead of the validator's.
    answer_kinds(controls)
    controls["text"].locator("textarea").fill("Q3 review!")
    controls["number"].locator("input").fill("900")
    controls["integer"].locator("input").fill("0")
    card.get_by_role("button", name="Submit").click()
    errors = {kind: field.locator(".field-error") for kind, field in controls.items()}
    expect(errors["text"]).to_have_text("is not in the expected format")
    expect(errors["number"]).to_have_text("must be at most 500")
    expect(errors["integer"]).to_have_text("Give the number of crates: 1 or more.")
    assert TOPIC_PATTERN not in card.inner_text() and errors["select"].is_hidden()

    answer_kinds(controls)
    assert colours(shoot(page, "console-kinds", card)) > 50
    card.get_by_role("button", name="Submit").click()
    page.locator("#timeline .entry.done").wait_for()

    thread = page.url.split("#thread=")[1]
    state = httpx.get(f"{console.url}/threads/{thread}", headers={"X-API-Key": ALICE}).json()
    assert state["status"] == "finished"
    assert {k: state["state"].get(k) for k in ANSWERED} == {
        "topic": "the quarterly review",
        "colour": "green",
        "tags": ["a", "c"],
        "urgent": False,
        "files": ["a.txt", "b.pdf"],
        "amount": 120.5,
        "crates": 3,
    }


def test_each_model_reply_is_one_entry_with_its_text_once(browser: Any, console: Console) -> None:
    page, card = kinds_card(browser, console)
    replies = page.locator("#timeline .entry.delta pre")
    # The rejected reply, then the card's: each in its own entry, its text exactly once (the
    # card's reply is JSON, which its text written twice over would not be).
    live = replies.all_text_contents()
    assert len(live) == 2 and live[0] == "Let me think first."
    assert json.loads(live[1]) and live[1].count("What is it about?") == 1
    answer_kinds(
        {f.get_attribute("data-input-type"): f for f in card.locator("fieldset.field").all()}
    )
    card.get_by_role("button", name="Submit").click()
    page.locator("#timeline .entry.done").wait_for()
    # The resumed run's reply is a new entry (its attempt is 1 again), and the old ones stay.
    resumed = replies.all_text_contents()
    assert resumed[:2] == live and len(resumed) == 3
    assert json.loads(resumed[2]) and resumed[2].count("Noted.") == 1


def test_the_new_run_form_shows_the_skills_input_and_the_list_names_each_thread(
    browser: Any, console: Console
) -> None:
    page = open_console(browser, console, [])
    page.set_viewport_size({"width": 1000, "height": 800})
    sign_in(page, ALICE)
    page.get_by_role("button", name="New run").click()
    context = page.get_by_label("Context")
    expect(context).to_have_value("")  # no context the user did not choose
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#run-error")).to_contain_text("Choose a context")

    # litigation-intake's input schema: its fields, and a template of the input to fill in.
    context.select_option("matter")
    fields = page.locator("#run-input-fields")
    expect(fields.locator('[data-field="documents"]')).to_contain_text("documents (required): ")
    box = page.get_by_label("Input (a JSON object)")
    assert json.loads(box.input_value()) == {"documents": [""]}
    page.get_by_label("Matter id").fill("demo-matter")
    page.get_by_role("button", name="Start").click()  # the template as it is: refused
    error = page.locator("#run-error")
    expect(error).to_contain_text("The input does not fit skill litigation-intake:")
    expect(error).to_contain_text("$.documents[0]: must not be empty")

    # A context without an input schema: the untouched template goes, any object runs.
    context.select_option("kinds")
    expect(box).to_have_value("{}")
    assert fields.is_hidden()
    topic = {"topic": "Quarterly review of the ceramics shipments and their insurance"}
    box.fill(json.dumps(topic))
    page.get_by_label("Matter id").fill(CERAMICS)
    page.get_by_role("button", name="Start").click()
    page.locator("form#card").wait_for()
    thread = page.url.split("#thread=")[1]
    row = page.locator(f'#threads li[data-thread="{thread}"]')
    title = thread_title(topic)  # its first words
    assert title is not None and title.startswith("Quarterly review") and title.endswith("…")
    expect(row.locator(".title")).to_have_text(title)
    expect(row.locator(".meta")).to_contain_text("kinds · matter-of-the-broken-ceramics")
    when = row.locator(".meta time")
    expect(when).to_have_text(re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}$"))
    # One piece: never wrapped. Asked of the list as it settles (it is redrawn as runs move,
    # and an element being replaced has no boxes for a moment); a wrapped date never passes.
    page.wait_for_function(
        "s => document.querySelector(s)?.getClientRects().length === 1",
        arg=f'#threads li[data-thread="{thread}"] .meta time',
        timeout=10_000,
    )


def test_another_users_thread_is_the_same_404_as_an_unknown_one(
    browser: Any, console: Console
) -> None:
    alices = httpx.post(f"{console.url}/threads", headers={"X-API-Key": ALICE}).json()["thread_id"]
    unknown = "f" * len(alices)
    page = open_console(browser, console, [])
    sign_in(page, BOB)
    seen = {}
    for thread in (alices, unknown):
        page.goto(f"{console.url}/#thread={thread}")
        expect(page.locator("#detail-error")).to_contain_text("not found")
        seen[thread] = page.locator("#detail-error").inner_text().replace(thread, "ID")
        assert page.locator("#thread").is_hidden()
    assert seen[alices] == seen[unknown] and "not found" in seen[unknown]


def test_a_run_driven_by_another_process_is_watched_until_its_card(
    browser: Any, console: Console
) -> None:
    other = httpx.Client(base_url=console.other, headers={"X-API-Key": ALICE}, timeout=60)
    assert other.get("/").status_code == 404  # --no-console
    thread = other.post("/threads").json()["thread_id"]
    body = {"input": {"documents": ["complaint.txt"]}, "context": "matter"}
    with other.stream(
        "POST", f"/threads/{thread}/runs", json={**body, "matter_id": "demo-matter"}
    ) as events:
        next(events.iter_lines())  # the run has begun; its stream goes on elsewhere
        page = open_console(browser, console, [])
        page.goto(f"{console.url}/#thread={thread}")
        sign_in(page, ALICE)
        expect(page.locator("#thread-status")).to_have_text("running")
        expect(page.locator("#thread-note")).to_contain_text("from the thread's checkpoints")
        page.locator("form#card").wait_for()
        expect(page.locator("#thread-status")).to_have_text("interrupted")
        assert page.locator("#timeline .entry").count() > 0


def test_a_thread_whose_server_died_mid_run_is_continued_from_the_console(
    browser: Any, console: Console
) -> None:
    dying = console.serve("--no-console").wait()
    try:
        http = httpx.Client(base_url=dying.url, headers={"X-API-Key": ALICE}, timeout=60)
        thread = http.post("/threads").json()["thread_id"]
        body = {"input": {"documents": ["complaint.txt"]}, "context": "matter"}
        path = f"/threads/{thread}/runs"
        with http.stream("POST", path, json={**body, "matter_id": "demo-matter"}) as events:
            next(events.iter_lines())
            deadline = time.monotonic() + 20  # its first model turn is checkpointed; the
            while len(http.get(f"/threads/{thread}/history").json()["checkpoints"]) < 3:
                assert time.monotonic() < deadline  # second one takes LATENCY_S
                time.sleep(0.05)
            dying.kill()  # kill -9 of its pid, mid-run
    finally:
        dying.stop()

    page = open_console(browser, console, [])
    page.goto(f"{console.url}/#thread={thread}")
    sign_in(page, ALICE)
    # Running while the dead run's lease lasts (the 10 s grace of a dead process), then the
    # console, watching, sees nothing runs it any more.
    expect(page.locator("#thread-status")).to_have_text("resumable", timeout=40_000)
    expect(page.locator("#threads li .status").first).to_have_text("resumable")
    box = page.locator("#resume-box")
    expect(box).to_be_visible()
    box.get_by_role("button", name="Continue").click()
    expect(box).to_be_hidden()
    page.locator("form#card").wait_for(timeout=30_000)  # the run went on, to the demo's card
    expect(page.locator("#thread-status")).to_have_text("interrupted")
    assert thread_status(console, thread) == "interrupted"
    rows = httpx.get(
        f"{console.url}/threads/{thread}/history", headers={"X-API-Key": ALICE}
    ).json()["checkpoints"]
    assert [row["source"] for row in rows].count("input") == 1  # went on, did not start over


def test_the_console_is_served_with_a_same_origin_policy(
    console: Console,
) -> None:
    page = httpx.get(console.url + "/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    for asset, kind in (("console.js", "javascript"), ("console.css", "text/css")):
        response = httpx.get(f"{console.url}/console/{asset}")
        assert response.status_code == 200 and kind in response.headers["content-type"]
        assert "http://" not in response.text and "https://" not in response.text


def test_the_readme_shows_the_console_in_a_screenshot_of_this_test() -> None:
    root = Path(__file__).resolve().parents[1]
    assert "](docs/images/console.png)" in (root / "README.md").read_text("utf-8")
    shot = np.asarray(Image.open(root / "docs" / "images" / "console.png"))
    assert shot.shape[:2] == (800, 1280) and colours(shot[..., :3]) > 50  # the viewport above
