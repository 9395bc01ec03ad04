"""The Python embedding API: typed stream events, the async API and resume-once claims."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, FakeClock, output, write_bundle
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from skilldeck import (
    CheckpointError,
    InvalidAnswersError,
    NoPendingCardError,
    Resume,
    Settings,
    SkillDeck,
    SkillDeckError,
)
from skilldeck._internal.aio import run_sync
from skilldeck.checkpoints import open_persistence
from skilldeck.checkpoints.claims import RUN_LEASE
from skilldeck.errors import AlreadyResumedError, CardPendingError, ThreadBusyError
from skilldeck.types import (
    CardEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    SkillResultEvent,
    StepEvent,
    ToolCallEvent,
)

pytestmark = pytest.mark.L2

DEMO = {"documents": ["complaint.txt"]}
RUN = {"context": "matter", "user_id": "u", "matter_id": "demo-matter"}

#: The demo's run: two tool rounds, then the skill's output asks for the defendant.
RUN_EVENTS = [
    ("step", "litigation-intake"),
    ("step", "tools"),
    ("tool_call", "file__parse"),
    ("step", "litigation-intake"),
    ("step", "tools"),
    ("tool_call", "element__extract"),
    ("step", "litigation-intake"),
    ("skill_result", "ask_user"),
    ("card", "litigation-intake"),
]
#: After the card the skill reads the complaint again (each turn reads what it rests on).
RESUME_EVENTS = [
    ("step", "card"),
    ("step", "litigation-intake"),
    ("step", "tools"),
    ("tool_call", "file__parse"),
    ("step", "litigation-intake"),
    ("skill_result", "continue"),
    ("done", "finished"),
]


def _shape(events: list[Event]) -> list[tuple[str, str]]:
    """Each event's name and its most telling field."""
    detail = {
        StepEvent: "node",
        ToolCallEvent: "name",
        SkillResultEvent: "action",
        CardEvent: "skill",
        DoneEvent: "status",
        ErrorEvent: "code",
    }
    return [(e.event, getattr(e, detail[type(e)])) for e in events]


def _demo_deck(where: Path | str) -> SkillDeck:
    """The demo deck on a checkpoint URL, or on a SQLite file in the folder ``where``."""
    url = where if isinstance(where, str) else f"sqlite:///{where / 'demo.sqlite'}"
    return SkillDeck(
        checkpointer=url,
        settings=Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES)),
    )


# -- sync streams -----------------------------------------------------------------------------
def test_stream_yields_typed_events_in_order_then_resume_finishes(demo_deck: SkillDeck) -> None:
    events = list(demo_deck.stream(DEMO, **RUN))
    assert _shape(events) == RUN_EVENTS
    thread = events[0].thread_id
    assert all(e.thread_id == thread for e in events)

    parse = events[2]
    assert isinstance(parse, ToolCallEvent)
    assert parse.args == {"file_id": "complaint.txt"} and parse.status == "ok"
    result = events[-2]
    assert isinstance(result, SkillResultEvent)
    assert result.data["evidence_list"][0]["kind"] == "document"
    assert result.profile["plaintiff"] == {"name": "Jane Doe", "type": "person"}

    card = events[-1]
    assert isinstance(card, CardEvent)
    paused = demo_deck.get_thread(thread)
    assert paused.status == "interrupted" and card.card == paused.card

    resumed = list(demo_deck.stream(Resume(thread, DEMO_ANSWERS, interrupt_id=card.interrupt_id)))
    assert _shape(resumed) == RESUME_EVENTS
    assert resumed[0].skill == "litigation-intake"  # the card step works for the asking skill
    done = resumed[-1]
    assert isinstance(done, DoneEvent)
    final = demo_deck.get_thread(thread)
    assert done.response == final.state["response"]
    assert done.checkpoint_id == final.checkpoint_id
    assert final.state["profile"]["defendant"]["name"] == "Acme Logistics Ltd."


def test_events_are_frozen_and_serialise_to_json_with_their_name_first(
    demo_deck: SkillDeck,
) -> None:
    events = list(demo_deck.stream(DEMO, **RUN))
    for event in events:
        body = event.to_dict()
        assert next(iter(body)) == "event" and body["event"] == event.event
        assert json.loads(json.dumps(body)) == body
    with pytest.raises(dataclasses.FrozenInstanceError):
        events[0].node = "x"  # type: ignore[misc, union-attr]
    # The card event's payload is the seed's event=card: what RunResult.card holds.
    assert set(events[-1].to_dict()) >= {"thread_id", "skill", "questions", "interrupt_id"}


def test_streamed_run_ends_where_a_blocking_run_ends(tmp_path: Path) -> None:
    with _demo_deck(tmp_path) as deck:
        streamed = list(deck.stream(DEMO, **RUN))[-1].thread_id
        blocking = deck.run(DEMO, **RUN).thread_id
        a, b = deck.get_thread(streamed), deck.get_thread(blocking)
    assert a.status == b.status == "interrupted"
    for key in ("profile", "evidence_list", "response"):
        assert a.state[key] == b.state[key]


def test_a_bad_request_raises_before_the_first_event(demo_deck: SkillDeck) -> None:
    with pytest.raises(SkillDeckError, match="must not carry identity"):
        demo_deck.stream({"user_id": "mallory"}, context="matter")
    thread = demo_deck.run(DEMO, **RUN).thread_id
    history = demo_deck.history(thread)
    with pytest.raises(CardPendingError, match="waiting for answers"):
        demo_deck.stream(DEMO, thread_id=thread, **RUN)
    with pytest.raises(InvalidAnswersError) as caught:
        demo_deck.stream(Resume(thread, {"profile.defendant.name": "A", "bogus": 1}))
    assert {"field_key": "bogus", "message": "this card did not ask for it"} in caught.value.errors
    assert demo_deck.history(thread) == history
    # The failed check took no claim: the right answers go through.
    assert list(demo_deck.stream(Resume(thread, DEMO_ANSWERS)))[-1].event == "done"


def test_a_failed_run_ends_with_an_error_event(skills_dir: Path, make_deck: Any) -> None:
    bundle = write_bundle(skills_dir, "intake")
    deck = make_deck(bundle, {"intake": [{"text": "not json"}]}, max_retries=0)
    events = list(deck.stream({}, context="ctx"))
    assert [e.event for e in events] == ["step", "skill_result", "error"]
    rejected, error = events[-2], events[-1]
    assert isinstance(rejected, SkillResultEvent) and rejected.action == "rejected"
    assert rejected.validation_errors and rejected.data == {}
    assert isinstance(error, ErrorEvent)
    assert error.code == "CONTRACT_VIOLATION" and error.skill == "intake"
    assert "nothing was merged" in error.message and error.details["errors"]


def test_stream_passes_metadata_and_callbacks_to_the_model_calls(demo_deck: SkillDeck) -> None:
    class Count(BaseCallbackHandler):
        calls = 0

        def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            Count.calls += 1

    list(demo_deck.stream(DEMO, **RUN, callbacks=[Count()], metadata={"purpose": "test"}))
    assert Count.calls == 3  # two tool rounds and the output


def test_stopping_a_resume_stream_keeps_its_steps_and_frees_the_card(demo_deck: SkillDeck) -> None:
    thread = demo_deck.run(DEMO, **RUN).thread_id
    interrupt = demo_deck.get_thread(thread).card["interrupt_id"]  # type: ignore[index]
    events = demo_deck.stream(Resume(thread, DEMO_ANSWERS))
    assert next(events).event == "step"  # the card step: the answers are checkpointed
    events.close()
    stopped = demo_deck.get_thread(thread)
    assert stopped.status == "resumable"  # stopped mid-way, and nothing runs it any more
    assert stopped.state["profile"]["defendant"]["name"] == "Acme Logistics Ltd."
    assert demo_deck.claims.claim(thread, interrupt)  # released when the stream stopped


# -- resume once ------------------------------------------------------------------------------
def test_a_card_claimed_elsewhere_cannot_be_resumed_until_released(demo_deck: SkillDeck) -> None:
    thread = demo_deck.run(DEMO, **RUN).thread_id
    interrupt = demo_deck.get_thread(thread).card["interrupt_id"]  # type: ignore[index]
    history = demo_deck.history(thread)
    assert demo_deck.claims.claim(thread, interrupt)  # another process is answering it
    with pytest.raises(AlreadyResumedError, match="already being answered") as caught:
        demo_deck.run(Resume(thread, DEMO_ANSWERS))
    assert caught.value.code == "ALREADY_RESUMED"
    with pytest.raises(AlreadyResumedError):
        demo_deck.stream(Resume(thread, DEMO_ANSWERS))
    assert demo_deck.history(thread) == history
    demo_deck.claims.release(thread, interrupt)
    assert demo_deck.run(Resume(thread, DEMO_ANSWERS)).status == "finished"


def test_concurrent_resumes_from_two_decks_apply_the_answers_once(database_url: str) -> None:
    """Two decks on one database stand for two server processes."""
    first, second = _demo_deck(database_url), _demo_deck(database_url)
    thread = first.run(DEMO, **RUN).thread_id
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def answer(deck: SkillDeck) -> None:
        barrier.wait()
        try:
            outcomes.append(deck.run(Resume(thread, DEMO_ANSWERS)).status)
        except (AlreadyResumedError, NoPendingCardError) as exc:
            outcomes.append(exc.code.value)

    workers = [threading.Thread(target=answer, args=(d,)) for d in (first, second)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert sorted(outcomes)[1] == "finished" and sorted(outcomes)[0] in (
        "ALREADY_RESUMED",
        "NO_PENDING_CARD",
    )
    # The scripted model has exactly four turns: a second application would need a fifth.
    final = first.get_thread(thread)
    assert final.status == "finished" and final.state["calls"] == {"litigation-intake": 5}
    first.close()
    second.close()


# -- run leases ------------------------------------------------------------------------------
@pytest.mark.slow  # a busy lease is asked for again for about 2 s before it is refused
def test_a_thread_being_run_is_busy_for_another_deck(database_url: str) -> None:
    """Two decks on one database stand for two processes: while one runs a thread, the other
    can neither continue that run nor start a new turn; the run gives the thread back before
    its card event, so the card can be answered at once anywhere."""
    first, second = _demo_deck(database_url), _demo_deck(database_url)
    try:
        events = first.stream(DEMO, thread_id="t", **RUN)
        assert next(events).event == "step"  # running: it holds the thread's run lease
        history = first.history("t")
        with pytest.raises(ThreadBusyError, match="'t' is in progress") as caught:
            second.run(DEMO, thread_id="t", **RUN)  # would continue the run
        assert caught.value.code == "THREAD_BUSY"
        with pytest.raises(ThreadBusyError):
            second.stream({"documents": ["reply.txt"]}, thread_id="t", **RUN)  # a new turn
        assert first.history("t") == history
        for event in events:
            if event.event == "card":
                assert second.run(Resume("t", DEMO_ANSWERS)).status == "finished"
        assert first.get_thread("t").state["calls"] == {"litigation-intake": 5}
    finally:
        first.close()
        second.close()


def test_a_run_renews_its_lease_and_stops_once_it_lost_it(tmp_path: Path) -> None:
    url, clock, lease = f"sqlite:///{tmp_path / 'lease.sqlite'}", FakeClock(), 60.0
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES))
    mine = open_persistence(url, claim_lease_s=lease, claim_clock=clock)
    deck = SkillDeck(checkpointer=mine, settings=settings)
    other = open_persistence(url, claim_lease_s=lease, claim_clock=clock)
    try:
        events = deck.stream(DEMO, thread_id="t", **RUN)
        for _ in range(4):  # 1.6 leases in all: the lease would have run out unless renewed
            next(events)
            clock.advance(lease * 0.4)
            assert not other.claims.claim("t", RUN_LEASE)
        with sqlite3.connect(tmp_path / "lease.sqlite") as conn:  # taken over elsewhere
            taken = ("elsewhere:/1/1", clock(), "elsewhere")
            conn.execute(
                "UPDATE skilldeck_interrupt_claims SET owner = ?, claimed_at = ?, holder = ?",
                taken,
            )
        clock.advance(lease * 0.4)  # the run's next renewal finds the lease gone
        with pytest.raises(ThreadBusyError):
            list(events)
        assert deck.get_thread("t").status == "running"  # stopped after its step
        assert not other.claims.claim("t", RUN_LEASE)  # the new owner's lease was kept
    finally:
        deck.close()
        other.close()


def test_a_run_waits_a_moment_for_a_lease_about_to_be_given_back(demo_deck: SkillDeck) -> None:
    """A client polling the thread may see its card just before the run gives its lease back."""
    thread = demo_deck.run(DEMO, **RUN).thread_id
    assert demo_deck.claims.claim(thread, RUN_LEASE)  # the run's tail still holds it
    threading.Timer(0.3, demo_deck.claims.release, (thread, RUN_LEASE)).start()
    assert demo_deck.run(Resume(thread, DEMO_ANSWERS)).status == "finished"


def test_a_request_checked_against_an_older_checkpoint_is_busy(demo_deck: SkillDeck) -> None:
    """A run that ends between a request's check and its lease: check the request again."""
    thread = demo_deck.run(DEMO, **RUN).thread_id
    demo_deck.run(Resume(thread, DEMO_ANSWERS))
    stale = demo_deck._snapshot(thread)
    request = demo_deck._start(stale, thread, DEMO, {"context": "matter", **RUN})
    demo_deck.run({"documents": ["reply.txt"]}, thread_id=thread, **RUN)  # the thread moves on
    history = demo_deck.history(thread)
    with pytest.raises(ThreadBusyError):
        run_sync(lambda: demo_deck._driver_of(demo_deck.graph).invoke(request))
    assert demo_deck.history(thread) == history
    assert demo_deck.claims.claim(thread, RUN_LEASE)  # given back


@pytest.mark.slow  # as above
def test_async_runs_hold_the_run_lease_too(database_url: str) -> None:
    other = _demo_deck(database_url)

    async def main() -> Any:
        async with _demo_deck(database_url) as deck:
            events = other.stream(DEMO, thread_id="t", **RUN)
            next(events)
            with pytest.raises(ThreadBusyError):
                _ = [e async for e in deck.astream(DEMO, thread_id="t", **RUN)]
            events.close()  # the run stops after its step and gives the thread back
            paused = await deck.arun(DEMO, thread_id="t", **RUN)  # continues it
            stream = deck.astream(Resume("t", DEMO_ANSWERS))
            assert (await anext(stream)).event == "step"
            with pytest.raises(ThreadBusyError):
                other.run(DEMO, thread_id="t", **RUN)
            rest = [e.event async for e in stream]
            return paused, rest

    try:
        paused, rest = asyncio.run(main())
        assert paused.status == "interrupted" and rest[-1] == "done"
        assert other.get_thread("t").state["calls"] == {"litigation-intake": 5}
        assert other.claims.claim("t", RUN_LEASE)  # the async run gave it back
    finally:
        other.close()


# -- async ------------------------------------------------------------------------------------
def test_async_api_streams_the_same_events_on_the_async_saver(database_url: str) -> None:
    async def main() -> tuple[list[Event], list[Event], Any]:
        async with _demo_deck(database_url) as deck:
            graph = await deck._loops.get()
            saver = type(graph.checkpointer).__name__
            run = [e async for e in deck.astream(DEMO, **RUN)]
            card = run[-1]
            assert isinstance(card, CardEvent)
            resume = [
                e
                async for e in deck.astream(
                    Resume(card.thread_id, DEMO_ANSWERS, interrupt_id=card.interrupt_id)
                )
            ]
            return run, resume, saver

    run, resume, saver = asyncio.run(main())
    assert saver == (
        "AsyncPostgresSaver" if database_url.startswith("postgres") else "AsyncSqliteSaver"
    )
    assert _shape(run) == RUN_EVENTS and _shape(resume) == RESUME_EVENTS
    # Another deck reads what the async API wrote.
    with _demo_deck(database_url) as deck:
        assert deck.get_thread(run[0].thread_id).status == "finished"


def test_arun_and_aresume_share_threads_with_the_sync_api(tmp_path: Path) -> None:
    deck = _demo_deck(tmp_path)
    thread = deck.run(DEMO, **RUN).thread_id

    async def answer() -> Any:
        return await deck.arun(Resume(thread, DEMO_ANSWERS))

    assert asyncio.run(answer()).status == "finished"

    async def again() -> Any:
        paused = await deck.arun(DEMO, **RUN)
        with pytest.raises(InvalidAnswersError):
            await deck.arun(Resume(paused.thread_id, {"bogus": 1}))
        return paused

    paused = asyncio.run(again())  # a second event loop gets its own async saver
    assert paused.status == "interrupted" and paused.card is not None
    assert deck.get_thread(paused.thread_id).status == "interrupted"
    deck.close()  # closes the async savers of both loops without hanging


def test_concurrent_aresumes_apply_the_answers_once(database_url: str) -> None:
    async def main() -> tuple[list[Any], Any]:
        async with _demo_deck(database_url) as deck:
            paused = await deck.arun(DEMO, **RUN)
            outcomes = await asyncio.gather(
                deck.arun(Resume(paused.thread_id, DEMO_ANSWERS)),
                deck.arun(Resume(paused.thread_id, DEMO_ANSWERS)),
                return_exceptions=True,
            )
            return outcomes, deck.get_thread(paused.thread_id)

    outcomes, final = asyncio.run(main())
    kinds = sorted(type(o).__name__ for o in outcomes)
    assert kinds in (
        ["AlreadyResumedError", "RunResult"],
        ["NoPendingCardError", "RunResult"],
    )
    assert final.state["calls"] == {"litigation-intake": 5}


def test_async_api_on_a_saver_object(tmp_path: Path) -> None:
    settings = Settings(model=f"scripted:{DEMO_SCRIPT}", files_root=str(DEMO_FILES))
    memory = SkillDeck(checkpointer=InMemorySaver(), settings=settings)

    async def run() -> Any:
        return await memory.arun(DEMO, **RUN)

    assert asyncio.run(run()).status == "interrupted"

    with SqliteSaver.from_conn_string(str(tmp_path / "sync-only.sqlite")) as saver:
        sync_only = SkillDeck(checkpointer=saver, settings=settings)
        with pytest.raises(CheckpointError, match="has no async API"):
            asyncio.run(sync_only.arun(DEMO, **RUN))


def test_an_async_stream_raises_a_bad_request_before_any_event(demo_deck: SkillDeck) -> None:
    async def main() -> list[Event]:
        return [e async for e in demo_deck.astream({"matter_id": "other"}, context="matter")]

    with pytest.raises(SkillDeckError, match="must not carry identity"):
        asyncio.run(main())


def test_a_finishing_skill_streams_its_data_then_done(skills_dir: Path, make_deck: Any) -> None:
    """A finishing skill's stream ends with done and its data in the skill_result."""
    deck = make_deck(write_bundle(skills_dir, "intake"), {"intake": [output(data={"note": "n"})]})
    events = list(deck.stream({}, context="ctx"))
    assert _shape(events)[-2:] == [("skill_result", "finish"), ("done", "finished")]
    assert events[-2].data == {"note": "n"}  # type: ignore[union-attr]
