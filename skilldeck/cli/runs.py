"""Commands that run threads and read them back: run, resume, demo, threads, show, graph.

Exit codes: 0 the run finished or paused on a card; 1 it failed, or no skill could run; 2 the
request was refused (nothing changed); 130 Ctrl-C (the command that continues is printed).
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.prompt import Confirm, Prompt

from skilldeck import Resume
from skilldeck.cli._output import (
    bounds_hint,
    exit_for,
    fit_columns,
    print_answer_hint,
    print_result,
    print_transcript,
    say_left_out,
    steps_table,
    summary,
)
from skilldeck.cli._shared import (
    EXIT_INTERRUPTED,
    CheckpointOpt,
    JsonOpt,
    ModelOpt,
    SkillsOpt,
    TrustOpt,
    checkpoint_url,
    err,
    fail,
    json_object,
    open_deck,
    out,
    say_where,
)
from skilldeck.errors import SkillDeckError

if TYPE_CHECKING:
    from skilldeck.checkpoints.threads import ThreadRecord
    from skilldeck.deck import SkillDeck
    from skilldeck.types import Card, CardQuestion

__all__ = ["demo", "graph", "resume", "run", "show", "threads"]

ThreadArg = Annotated[str, typer.Argument(help="Thread id, or a unique prefix of it.")]


@contextmanager
def _ctrl_c(
    deck: SkillDeck, thread_id: Callable[[], str | None], again: list[str]
) -> Iterator[None]:
    """On Ctrl-C, say where the thread stands and the exact command that goes on with it.

    ``again`` is the deck's options (``--skills``, ``--checkpoint``, ``--model``) to repeat.
    """
    try:
        yield
    except KeyboardInterrupt:
        thread = thread_id()
        err.print(f"\n[yellow]stopped[/] {_where_it_stands(deck, thread, again)}", soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _where_it_stands(deck: SkillDeck, thread: str | None, again: list[str]) -> str:
    try:
        result = deck.get_thread(thread) if thread else None
    except SkillDeckError:
        result = None
    if result is None:
        return "before the first checkpoint: nothing was saved; run the command again"
    if result.status == "interrupted":
        how = ["skilldeck", "resume", result.thread_id, "--answers", "{...}", *again]
        return f"thread {result.thread_id} waits on its card; answer it: {shlex.join(how)}"
    if result.status not in ("running", "resumable"):  # resumable: stopped by this Ctrl-C
        return f"thread {result.thread_id} is {result.status}"
    state = result.state
    how = [
        *("skilldeck", "run", "--thread", result.thread_id),
        *("--context", str(state.get("context"))),
        *("--input", json.dumps(state.get("input") or {}, ensure_ascii=False)),
    ]
    for option, key in (("--user", "user_id"), ("--matter", "matter_id")):
        if state.get(key) is not None:
            how += [option, str(state[key])]
    return (
        f"thread {result.thread_id}: its steps so far are checkpointed; continue it with: "
        f"{shlex.join([*how, *again])}"
    )


def _again(
    skills: list[str] | None, checkpoint: str | None, model: str | None, trust: list[str] | None
) -> list[str]:
    flags = [f for s in skills or [] for f in ("--skills", s)]
    flags += [f for t in trust or [] for f in ("--trust", t)]
    if checkpoint:
        flags += ["--checkpoint", checkpoint]
    if model:
        flags += ["--model", model]
    return flags


@contextmanager
def _refused(as_json: bool) -> Iterator[None]:
    """Report a refused request (exit 2)."""
    try:
        yield
    except SkillDeckError as exc:
        fail(exc, as_json)


def run(
    context: Annotated[
        str, typer.Option(help="The run's context, e.g. 'matter'; 'auto' routes by description.")
    ],
    input: Annotated[str, typer.Option("--input", help="Input JSON object.")] = "{}",
    request: Annotated[
        str | None, typer.Option(help="The request text (input.request), e.g. for --context auto.")
    ] = None,
    thread: Annotated[str | None, typer.Option(help="Thread id (default: new).")] = None,
    user: Annotated[str | None, typer.Option(help="user_id bound to tools.")] = None,
    matter: Annotated[str | None, typer.Option(help="matter_id bound to tools.")] = None,
    skills: SkillsOpt = None,
    trust: TrustOpt = None,
    checkpoint: CheckpointOpt = None,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a run; prints the final state, or the card when the run pauses."""
    import uuid

    thread_id = thread or uuid.uuid4().hex
    say_where(checkpoint, as_json)
    with _refused(as_json):
        payload = json_object(input, "--input")
        if request is not None:
            payload["request"] = request
        with open_deck(skills, checkpoint, model, trust=trust) as deck:
            again = _again(skills, checkpoint, model, trust)
            with _ctrl_c(deck, lambda: thread_id, again):
                result = deck.run(
                    payload, context=context, thread_id=thread_id, user_id=user, matter_id=matter
                )
    print_result(result, as_json)
    exit_for(result)


def resume(
    thread: ThreadArg,
    answers: Annotated[str, typer.Option(help="Answers JSON: {field_key: value}.")],
    interrupt_id: Annotated[str | None, typer.Option(help="Expected pending interrupt.")] = None,
    skills: SkillsOpt = None,
    trust: TrustOpt = None,
    checkpoint: CheckpointOpt = None,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a paused run's card and continue it, with the skills and the model the thread ran
    with (unless --skills or --model say otherwise)."""
    say_where(checkpoint, as_json)
    with _refused(as_json):
        values = json_object(answers, "--answers")
        record = _thread_record(thread, checkpoint)
        if record is not None:
            model = model or record.model
            if not skills and record.sources and all(Path(p).is_dir() for p in record.sources):
                skills = list(record.sources)
        with open_deck(skills, checkpoint, model, existing=True, trust=trust) as deck:
            thread_id = deck.resolve_thread(thread)
            with _ctrl_c(deck, lambda: thread_id, _again(skills, checkpoint, model, trust)):
                result = deck.run(Resume(thread_id, values, interrupt_id=interrupt_id))
    print_result(result, as_json)
    exit_for(result)


def _thread_record(thread: str, checkpoint: str | None) -> ThreadRecord | None:
    """What the thread index knows of ``thread`` (an id or a prefix); ``None`` for a database
    from before the index."""
    from skilldeck.checkpoints.threads import open_index

    with open_index(checkpoint_url(checkpoint)) as index:
        return None if index is None else index.get(index.resolve(thread))


#: The columns of ``threads``, and the order a narrow terminal leaves them out in.
THREAD_COLUMNS = ("thread_id", "status", "skill", "user", "updated")
# The list is sorted by the updated time: its order still tells it when the column goes.
THREADS_DROPPED_FIRST = ("updated", "user")


def threads(
    user: Annotated[str | None, typer.Option(help="Only this user's threads.")] = None,
    status: Annotated[str | None, typer.Option(help="Only threads with this status.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 50,
    checkpoint: CheckpointOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List threads, most recently run first (read from the thread index: fast).

    Thread ids are never cut. On a narrow terminal the updated column goes first (the list
    is in that order), then the user one, until the table fits (stderr says which went;
    --json has every field)."""
    from skilldeck.checkpoints.threads import open_index

    say_where(checkpoint, as_json)
    url = checkpoint_url(checkpoint)
    rows: list[ThreadRecord] | None = None
    with _refused(as_json):
        if url == _default_url() and not Path(url.removeprefix("sqlite:///")).exists():
            rows = []  # nothing has run here yet: not an error, unlike a path that was given
        else:
            with open_index(url) as index:
                rows = (
                    None if index is None else index.list(user_id=user, status=status, limit=limit)
                )
        if rows is None:  # a database from before the index: a deck fills it in
            with open_deck(None, checkpoint, None, existing=True) as deck:
                rows = deck.index.list(user_id=user, status=status, limit=limit)
    if as_json:
        from skilldeck.types import ThreadSummary

        summaries = [ThreadSummary.from_record(r).to_dict() for r in rows]
        print(json.dumps(summaries, ensure_ascii=False))
        return
    if not rows:
        out.print("no threads yet: start one with skilldeck run or skilldeck demo")
        return
    users = any(r.user_id for r in rows)
    cells = [
        {
            "thread_id": r.thread_id,
            "status": r.status,
            "skill": r.skill or "",
            "user": r.user_id or "",
            "updated": r.updated_at[:16].replace("T", " "),
        }
        for r in rows
    ]

    columns = THREAD_COLUMNS if users else tuple(c for c in THREAD_COLUMNS if c != "user")
    # Ids and dates stay whole, on one line: ids are what `show` and `resume` take.
    table, left_out = fit_columns(
        cells,
        columns,
        THREADS_DROPPED_FIRST,
        whole=("thread_id", "updated"),
        box=None,
        pad_edge=False,
    )
    out.print(table)
    say_left_out(left_out)


def _default_url() -> str:
    from skilldeck._internal.home import state_home

    return state_home().sqlite_url("checkpoints.sqlite")


def show(
    thread: ThreadArg,
    timeline: Annotated[
        Path | None, typer.Option("--timeline", help="Also draw the steps into this PNG/SVG.")
    ] = None,
    with_transcript: Annotated[
        bool,
        typer.Option(
            "--transcript",
            help="Also print what each turn said: prompts, replies, tool results, re-asks.",
        ),
    ] = False,
    checkpoint: CheckpointOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a thread: its state, a table of its steps and its cards (--timeline: a plot,
    --transcript: the conversations).

    On a narrow terminal the steps table leaves columns out, in this order, until it fits:
    tokens, ms, model, attempt, node, tools (stderr says which went; --json has every field)."""
    from skilldeck.checkpoints.inspect import steps, transcript

    say_where(checkpoint, as_json)
    with _refused(as_json), open_deck(None, checkpoint, None, existing=True) as deck:
        thread_id = deck.resolve_thread(thread)
        result = deck.get_thread(thread_id)
        rows = steps(deck, thread_id)
        turns = transcript(deck, thread_id) if with_transcript else None
        if timeline is not None:
            from skilldeck.pictures import timeline as draw_timeline

            draw_timeline(deck, thread_id, timeline)
    if as_json:
        body = {**summary(result), "history": rows}
        if timeline is not None:
            body["timeline"] = str(timeline)
        if turns is not None:
            body["transcript"] = turns
        print(json.dumps(body, ensure_ascii=False, default=str))
        return
    table, left_out = steps_table(rows)
    out.print(table)
    say_left_out(left_out)
    if turns is not None:
        print_transcript(turns)
    print_result(result, False)
    if timeline is not None:
        out.print(f"timeline: {timeline}", highlight=False)


def graph(
    png: Annotated[Path | None, typer.Option("--png", help="Draw the graph into a PNG.")] = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Draw the graph into an SVG.")] = None,
    skills: SkillsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the compiled graph as Mermaid text, or draw it offline with Graphviz."""
    pictures = [p for p in (png, svg) if p is not None]
    with _refused(as_json), open_deck(skills, "memory://", None) as deck:
        text = deck.mermaid()
        if pictures:
            from skilldeck.pictures import graph_picture

            for picture, fmt in ((png, "png"), (svg, "svg")):
                if picture is not None:
                    graph_picture(deck, picture, format=fmt)
    if as_json:
        print(json.dumps({"mermaid": text, "pictures": [str(p) for p in pictures]}))
    elif pictures:
        # A path is printed whole, never broken across lines: it is copied and pasted.
        out.print("\n".join(f"wrote {p}" for p in pictures), highlight=False, soft_wrap=True)
    else:
        print(text)


def _ask(card: Card) -> dict[str, Any]:
    """The card's answers, asked at the terminal. An answer the card would refuse is asked
    again, with what is wrong with it (the words a resume would say)."""
    from skilldeck.nodes.card import answers_schema, validate_answers

    schema = card.get("answers_schema") or answers_schema(card["questions"])
    answers: dict[str, Any] = {}
    for q in card["questions"]:
        key = q["field_key"]
        while (value := _ask_one(q)) is not _LEFT_EMPTY:
            errors = validate_answers(schema, {key: value}, card["questions"])
            problems = [e["message"] for e in errors if e["field_key"] == key]
            if not problems:
                answers[key] = value
                break
            err.print(f"[red]{'; '.join(problems)}[/]", highlight=False)
    return answers


#: What :func:`_ask_one` returns for an optional question left empty.
_LEFT_EMPTY = object()


def _ask_one(q: CardQuestion) -> Any:
    """One answer as its ``input_type`` takes it (not checked: :func:`_ask` does)."""
    options = q.get("options", [])
    values = [str(o["value"]) for o in options]
    kind = q["input_type"]
    if kind == "boolean":
        return Confirm.ask(q["question"])
    if kind == "select":
        return options[values.index(Prompt.ask(q["question"], choices=values))]["value"]
    if kind in ("multi_select", "file_ids"):
        hint = f"comma-separated{': ' + ', '.join(values) if values else ''}"
        raw = Prompt.ask(f"{q['question']} ({hint})", default="", show_default=False)
        chosen = [v.strip() for v in raw.split(",") if v.strip()]
        by_text = {str(o["value"]): o["value"] for o in options}
        picked = [by_text.get(v, v) for v in chosen]
        return picked if picked or q["required"] else _LEFT_EMPTY
    hint = bounds_hint(q)
    raw = Prompt.ask(
        f"{q['question']}{f' ({hint})' if hint else ''}", default="", show_default=False
    )
    if not raw and not q["required"]:
        return _LEFT_EMPTY
    return _number(raw) if kind in ("number", "integer") else raw


def _number(raw: str) -> Any:
    """``raw`` as the number it writes; else as it is (the card then says it is no number)."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return value if number and math.isfinite(value) else raw


def demo(
    answers: Annotated[
        str | None, typer.Option(help="Answers JSON for the card (default: ask interactively).")
    ] = None,
    checkpoint: CheckpointOpt = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Run it on this model instead of the scripted one: MODEL or PROVIDER:MODEL "
            "(e.g. with SKILLDECK_BASE_URL for a local server)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The litigation-intake example end to end: run, card, resume. On the scripted model
    unless --model names a real one.

    Without --answers and without a terminal to ask at, it stops at the card, which
    `skilldeck resume THREAD --answers '{...}'` answers later."""
    import uuid

    from skilldeck import demo as demo_data
    from skilldeck.errors import InvalidAnswersError

    model = model or f"scripted:{demo_data.SCRIPT}"
    thread_id = uuid.uuid4().hex
    say_where(checkpoint, as_json)
    steps: list[dict[str, Any]] = []
    with (
        _refused(as_json),
        open_deck(None, checkpoint, model, files_root=str(demo_data.FILES)) as deck,
        _ctrl_c(deck, lambda: thread_id, _again(None, checkpoint, model, None)),
    ):
        result = deck.run(
            demo_data.INPUT,
            context=demo_data.CONTEXT,
            thread_id=thread_id,
            user_id="demo-user",
            matter_id=demo_data.MATTER_ID,
        )
        steps.append(summary(result))
        if not as_json:
            print_result(result, False, waiting=False)  # the hint follows if no one answers
        while result.status == "interrupted" and result.card is not None:
            if answers is not None:
                given = json_object(answers, "--answers")
            elif sys.stdin.isatty() and not as_json:
                given = _ask(result.card)
            else:
                break  # no one to ask here: the card waits, and the hint says how to answer
            if not as_json:
                out.print(f"[bold]resume[/] with answers {json.dumps(given, ensure_ascii=False)}")
            try:
                result = deck.run(Resume(result.thread_id, given))
            except InvalidAnswersError as exc:
                if answers is not None or as_json:
                    raise
                err.print(f"[red]{escape(str(exc))}[/]", highlight=False)
                continue
            steps.append(summary(result))
    if as_json:
        print(json.dumps({**steps[-1], "steps": steps}, ensure_ascii=False, default=str))
    else:
        if len(steps) > 1:  # the first result (a card) is printed already
            print_result(result, False)
        elif result.card is not None:  # no one answered it here: it waits
            print_answer_hint(result)
        out.print(f"inspect it: skilldeck show {result.thread_id}")
    exit_for(result)
