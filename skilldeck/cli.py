"""The ``skilldeck`` command line (typer + rich). Every command has ``--json`` for scripts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.prompt import Confirm, Prompt
from rich.table import Table

from skilldeck import demo as demo_data
from skilldeck._internal.cli_output import err, fail
from skilldeck.checkpoints import open_persistence
from skilldeck.deck import SkillDeck
from skilldeck.errors import InvalidAnswersError, SkillDeckError
from skilldeck.evals.cli import eval_app
from skilldeck.server.commands import keys_app, serve
from skilldeck.services import open_knowledge, open_memory
from skilldeck.settings import Settings
from skilldeck.tools.importers import read_messages_file
from skilldeck.types import Card, RunResult

app = typer.Typer(
    help="Run folder-defined agent skills as a durable LangGraph workflow.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(eval_app, name="eval")
app.add_typer(keys_app, name="keys")
app.command()(serve)
out = Console()

_BOOKKEEPING = {
    "turn",
    "guard",
    "calls",
    "attempt",
    "card",
    "next_skill",
    "error",
    "response",
    "status",
}

SkillsOpt = Annotated[
    list[Path] | None,
    typer.Option("--skills", help="Skills folder (repeatable); default: built-in."),
]
CheckpointOpt = Annotated[
    str | None,
    typer.Option("--checkpoint", help="Checkpoint URL (default: SKILLDECK_CHECKPOINT_URL)."),
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="Model for every skill: MODEL, PROVIDER:MODEL or scripted:FILE."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _deck(
    skills: list[Path] | None,
    checkpoint: str | None,
    model: str | None,
    *,
    existing: bool = False,
    **overrides: Any,
) -> SkillDeck:
    """A deck for one command; ``existing`` refuses to create a missing checkpoint database."""
    settings = Settings(**({"model": model} if model else {}), **overrides)  # type: ignore[arg-type]
    persistence = open_persistence(
        checkpoint or settings.checkpoint_url,
        timeout=settings.sqlite_timeout_s,
        must_exist=existing,
    )
    try:
        return SkillDeck(skills or None, checkpointer=persistence, settings=settings)
    except BaseException:
        persistence.close()
        raise


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SkillDeckError(f"{what} is not valid JSON: {exc.msg} (char {exc.pos})") from None
    if not isinstance(value, dict):
        raise SkillDeckError(f'{what} must be a JSON object, e.g. \'{{"key": "value"}}\'')
    return value


def _summary(result: RunResult) -> dict[str, Any]:
    body: dict[str, Any] = {"status": result.status, "thread_id": result.thread_id}
    if result.card is not None:
        body["card"] = result.card
    else:
        body["state"] = result.state
    if result.error:
        body["error"] = result.error
    return body


def _model_note(result: RunResult) -> None:
    model = (result.state.get("attempt") or {}).get("model")
    if model and model.startswith("scripted:"):
        err.print(f"[yellow]model: {model} (scripted turns, not a real model)[/]", highlight=False)


def _print_card(card: Card) -> None:
    table = Table(title=f"card from {card['skill']} ({card['review_type']})", show_lines=True)
    for column in ("field_key", "question", "type", "options"):
        table.add_column(column)
    for q in card["questions"]:
        options = ", ".join(str(o["value"]) for o in q.get("options", []))
        kind = q["input_type"] + ("" if q["required"] else " (optional)")
        table.add_row(q["field_key"], q["question"], kind, options)
    out.print(table)
    for e in card.get("errors", []):
        err.print(f"[red]{e['field_key']}: {e['message']}[/]", highlight=False)
    out.print(f"interrupt_id: {card['interrupt_id']}", highlight=False)


def _print_result(result: RunResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_summary(result), ensure_ascii=False, default=str))
        return
    _model_note(result)
    colour = {"finished": "green", "interrupted": "yellow", "failed": "red"}.get(result.status, "")
    out.print(f"[bold {colour}]{result.status}[/] thread {result.thread_id}", highlight=False)
    if result.state.get("response"):
        out.print(Panel(str(result.state["response"]), title="response"))
    if result.card is not None:
        _print_card(result.card)
        out.print(f"answer with: skilldeck resume {result.thread_id} --answers '{{...}}'")
    elif result.error:
        out.print_json(data=result.error)
    else:
        shown = {k: v for k, v in result.state.items() if k not in _BOOKKEEPING}
        out.print_json(data=shown, default=str)


@app.command()
def run(
    context: Annotated[str, typer.Option(help="The run's context, e.g. 'matter'.")],
    input: Annotated[str, typer.Option("--input", help="Input JSON object.")] = "{}",
    thread: Annotated[str | None, typer.Option(help="Thread id (default: new).")] = None,
    user: Annotated[str | None, typer.Option(help="user_id bound to tools.")] = None,
    matter: Annotated[str | None, typer.Option(help="matter_id bound to tools.")] = None,
    skills: SkillsOpt = None,
    checkpoint: CheckpointOpt = None,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a run; prints the final state, or the card when the run pauses."""
    try:
        payload = _json_object(input, "--input")
        with _deck(skills, checkpoint, model) as deck:
            result = deck.run(
                payload, context=context, thread_id=thread, user_id=user, matter_id=matter
            )
    except SkillDeckError as exc:
        fail(exc, as_json)
    _print_result(result, as_json)


@app.command()
def resume(
    thread: Annotated[str, typer.Argument(help="Thread id of the paused run.")],
    answers: Annotated[str, typer.Option(help="Answers JSON: {field_key: value}.")],
    interrupt_id: Annotated[str | None, typer.Option(help="Expected pending interrupt.")] = None,
    skills: SkillsOpt = None,
    checkpoint: CheckpointOpt = None,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a paused run's card and continue it."""
    try:
        values = _json_object(answers, "--answers")
        with _deck(skills, checkpoint, model, existing=True) as deck:
            result = deck.resume(thread, values, interrupt_id=interrupt_id)
    except SkillDeckError as exc:
        fail(exc, as_json)
    _print_result(result, as_json)


@app.command()
def threads(
    skills: SkillsOpt = None, checkpoint: CheckpointOpt = None, as_json: JsonOpt = False
) -> None:
    """List the threads in the checkpoint database."""
    try:
        with _deck(skills, checkpoint, None, existing=True) as deck:
            rows = deck.threads()
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps([r.to_dict() for r in rows]))
        return
    table = Table("thread_id", "status", "user", "last skill", "steps", "updated")
    for r in rows:
        table.add_row(
            r.thread_id,
            r.status,
            r.user_id or "",
            r.last_skill or "",
            str(r.steps),
            r.updated_at or "",
        )
    out.print(table)


@app.command()
def show(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    timeline: Annotated[
        Path | None, typer.Option("--timeline", help="Also draw the steps into this PNG/SVG.")
    ] = None,
    skills: SkillsOpt = None,
    checkpoint: CheckpointOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a thread: its state, a table of its steps and its cards (--timeline: a plot)."""
    from skilldeck.checkpoints.inspect import steps
    from skilldeck.pictures import timeline as draw_timeline

    try:
        with _deck(skills, checkpoint, None, existing=True) as deck:
            result = deck.get_thread(thread)
            rows = steps(deck, thread)
            if timeline is not None:
                draw_timeline(deck, thread, timeline)
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        body = {**_summary(result), "history": rows}
        if timeline is not None:
            body["timeline"] = str(timeline)
        print(json.dumps(body, ensure_ascii=False, default=str))
        return
    out.print(_steps_table(rows))
    _print_result(result, False)
    if timeline is not None:
        out.print(f"timeline: {timeline}", highlight=False)


def _steps_table(rows: list[dict[str, Any]]) -> Table:
    columns = ("step", "node", "skill", "attempt", "action", "tools", "model", "tokens", "ms")
    table = Table(*columns, "status", "card", title="steps")
    for row in rows:
        action = row["action"] or ""
        if row["validation_errors"]:
            action += f" ({len(row['validation_errors'])} errors)"
        tools = ", ".join(f"{c['name']} {c['status']}" for c in row["tool_calls"])
        tokens = (row["tokens"] or {}).get("total_tokens")
        card = "asked" if row["card"] else "answered" if row["answers"] else ""
        table.add_row(
            str(row["step"]),
            row["node"] or "",
            row["in_skill"] or "",
            str(row["attempt"] or ""),
            action,
            tools,
            _short_model(row["model"]),
            "" if tokens is None else str(tokens),
            "" if row["elapsed_ms"] is None else f"{row['elapsed_ms']:g}",
            row["status"],
            card,
        )
    return table


def _short_model(label: str | None) -> str:
    """``scripted:/long/path/turns.yaml`` → ``scripted:turns.yaml``: tables stay narrow."""
    provider, _, name = (label or "").rpartition(":")
    return f"{provider}:{Path(name).name}" if provider and "/" in name else label or ""


@app.command()
def graph(
    png: Annotated[Path | None, typer.Option("--png", help="Draw the graph into a PNG.")] = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Draw the graph into an SVG.")] = None,
    skills: SkillsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the compiled graph as Mermaid text, or draw it offline with Graphviz."""
    from skilldeck.pictures import graph_picture

    pictures = [p for p in (png, svg) if p is not None]
    try:
        with _deck(skills, "memory://", None) as deck:
            text = deck.mermaid()
            for picture, fmt in ((png, "png"), (svg, "svg")):
                if picture is not None:
                    graph_picture(deck, picture, format=fmt)
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps({"mermaid": text, "pictures": [str(p) for p in pictures]}))
    elif pictures:
        out.print("\n".join(f"wrote {p}" for p in pictures), highlight=False)
    else:
        print(text)


def _ask(card: Card) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    for q in card["questions"]:
        values = [str(o["value"]) for o in q.get("options", [])]
        kind = q["input_type"]
        if kind == "boolean":
            answers[q["field_key"]] = Confirm.ask(q["question"])
        elif kind == "select":
            answers[q["field_key"]] = Prompt.ask(q["question"], choices=values)
        elif kind in ("multi_select", "file_ids"):
            raw = Prompt.ask(
                f"{q['question']} (comma-separated{': ' + ', '.join(values) if values else ''})"
            )
            answers[q["field_key"]] = [v.strip() for v in raw.split(",") if v.strip()]
        else:
            answers[q["field_key"]] = Prompt.ask(q["question"])
    return answers


@app.command()
def demo(
    answers: Annotated[
        str | None, typer.Option(help="Answers JSON for the card (default: ask interactively).")
    ] = None,
    checkpoint: CheckpointOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The litigation-intake example end to end, on the scripted model: run, card, resume."""
    try:
        with _deck(
            None, checkpoint, f"scripted:{demo_data.SCRIPT}", files_root=str(demo_data.FILES)
        ) as deck:
            result = deck.run(
                demo_data.INPUT,
                context=demo_data.CONTEXT,
                user_id="demo-user",
                matter_id=demo_data.MATTER_ID,
            )
            steps = [_summary(result)]
            if not as_json:
                _print_result(result, False)
            while result.status == "interrupted" and result.card is not None:
                if answers is not None:
                    given = _json_object(answers, "--answers")
                elif sys.stdin.isatty() and not as_json:
                    given = _ask(result.card)
                else:
                    raise SkillDeckError("the demo paused on a card: pass --answers '{...}'")
                if not as_json:
                    out.print(
                        f"[bold]resume[/] with answers {json.dumps(given, ensure_ascii=False)}"
                    )
                try:
                    result = deck.resume(result.thread_id, given)
                except InvalidAnswersError as exc:
                    if answers is not None or as_json:
                        raise
                    err.print(f"[red]{exc}[/]", highlight=False)
                    continue
                steps.append(_summary(result))
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps({**steps[-1], "steps": steps}, ensure_ascii=False, default=str))
    else:
        _print_result(result, False)
        out.print(f"inspect it: skilldeck show {result.thread_id}")


messages_app = typer.Typer(help="The message store behind the memory tools.", no_args_is_help=True)
app.add_typer(messages_app, name="messages")


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


@messages_app.command("import")
def messages_import(
    file: Annotated[Path, typer.Argument(help="JSONL/JSON messages, or a LoCoMo file.")],
    user: Annotated[str, typer.Option(help="The user the messages belong to.")],
    batch: Annotated[int, typer.Option(help="Messages per transaction.", min=1)] = 500,
    as_json: JsonOpt = False,
) -> None:
    """Import messages (idempotent: messages already stored are skipped)."""
    settings = Settings()
    try:
        messages = list(read_messages_file(file, user))
        memory = open_memory(settings)
        added = 0
        with _progress() as progress:
            task = progress.add_task(f"importing {file.name}", total=len(messages))
            for start in range(0, len(messages), batch):
                chunk = messages[start : start + batch]
                added += len(memory.add(chunk))
                progress.advance(task, len(chunk))
        memory.close()
    except SkillDeckError as exc:
        fail(exc, as_json)
    summary = {
        "file": str(file),
        "user": user,
        "read": len(messages),
        "added": added,
        "skipped": len(messages) - added,
    }
    if as_json:
        print(json.dumps(summary))
    else:
        out.print(f"{added} new messages, {len(messages) - added} already stored", highlight=False)


@messages_app.command("rebuild")
def messages_rebuild(
    user: Annotated[str, typer.Option(help="Whose indexes to rebuild.")],
    as_json: JsonOpt = False,
) -> None:
    """Rebuild a user's lexical and semantic indexes from the message store."""
    memory = open_memory(Settings())
    memory.rebuild(user)
    count = memory.store.count(user)
    memory.close()
    print(json.dumps({"user": user, "messages": count}) if as_json else f"rebuilt {count} messages")


knowledge_app = typer.Typer(help="The knowledge base behind rag_retrieve.", no_args_is_help=True)
app.add_typer(knowledge_app, name="knowledge")


@knowledge_app.command("index")
def knowledge_index(
    folder: Annotated[
        Path, typer.Argument(help="Documents (md, txt, pdf) and tables (csv, xlsx).")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Index a folder into the knowledge base (incremental: unchanged files are skipped)."""
    if not folder.is_dir():
        fail(SkillDeckError(f"no such folder: {folder}"), as_json)
    kb = open_knowledge(Settings())
    with _progress() as progress:
        task = progress.add_task(f"indexing {folder}", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        counts = kb.index(folder, progress=advance)
    kb.close()
    if as_json:
        print(json.dumps(counts))
    else:
        out.print(", ".join(f"{v} {k}" for k, v in counts.items()), highlight=False)


@app.command()
def recall(
    question: Annotated[str, typer.Argument(help="What to recall, e.g. 'What food do I avoid?'")],
    user: Annotated[str, typer.Option(help="Whose messages to search (bound to the tools).")],
    skills: SkillsOpt = None,
    checkpoint: CheckpointOpt = None,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recall a user's preferences, profile and constraints from the message store.

    Runs the nomemory-recall skill (context "recall"), or the recall skills under --skills;
    without a model its rule-based planner runs. A failed run exits with code 1.
    """
    from skilldeck.skills import builtin_skills_dir

    bundles = skills or [builtin_skills_dir() / "nomemory-recall"]
    try:
        with _deck(bundles, checkpoint, model) as deck:
            result = deck.run({"question": question}, context="recall", user_id=user)
    except SkillDeckError as exc:
        fail(exc, as_json)
    state, attempt = result.state, result.state.get("attempt") or {}
    body: dict[str, Any] = {
        "status": result.status,
        "thread_id": result.thread_id,
        "model": attempt.get("model"),
        "response": state.get("response"),
        "memory_view": state.get("memory_view"),
        "evidence": state.get("evidence"),
        "trajectory": attempt.get("trajectory"),
    }
    if result.error:
        body["error"] = result.error
    if as_json:
        print(json.dumps(body, ensure_ascii=False, default=str))
    else:
        _print_recall(body)
    if result.status == "failed":
        raise typer.Exit(1)


def _print_recall(body: dict[str, Any]) -> None:
    colour = "green" if body["status"] == "finished" else "red"
    err.print(f"[dim]model: {body['model']}[/]", highlight=False)
    out.print(f"[bold {colour}]{body['status']}[/] thread {body['thread_id']}", highlight=False)
    if body.get("error"):
        out.print_json(data=body["error"], default=str)
        return
    if body["response"]:
        out.print(Panel(str(body["response"]), title="response"))
    view = body["memory_view"] or {}
    items = Table("kind", "item", "evidence", title="memory_view", show_lines=True)
    for kind in ("preferences", "profile", "constraints"):
        for item in view.get(kind) or []:
            items.add_row(kind, item["text"], ", ".join(item["evidence"]))
    if items.row_count:
        out.print(items)
    else:
        out.print("memory_view is empty: no evidence supports an item")
    evidence = Table("message_id", "ts", "role", "text", title="evidence", show_lines=True)
    for e in body["evidence"] or []:
        evidence.add_row(e["message_id"], e["ts"], e["role"], e["text"])
    if evidence.row_count:
        out.print(evidence)


if __name__ == "__main__":
    app()
