"""Commands over the stores behind the memory and knowledge tools: messages, knowledge, recall."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from skilldeck.cli._shared import (
    EXIT_FAILED,
    CheckpointOpt,
    JsonOpt,
    ModelOpt,
    SkillsOpt,
    TrustOpt,
    err,
    fail,
    make_settings,
    open_deck,
    out,
)
from skilldeck.errors import SkillDeckError

__all__ = ["knowledge_app", "messages_app", "recall"]

messages_app = typer.Typer(help="The message store behind the memory tools.", no_args_is_help=True)


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
    from skilldeck.services import open_memory
    from skilldeck.tools.importers import read_messages_file

    try:
        messages = list(read_messages_file(file, user))
        memory = open_memory(make_settings())
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
    from skilldeck.services import open_memory

    memory = open_memory(make_settings())
    memory.rebuild(user)
    count = memory.store.count(user)
    memory.close()
    print(json.dumps({"user": user, "messages": count}) if as_json else f"rebuilt {count} messages")


knowledge_app = typer.Typer(help="The knowledge base behind rag_retrieve.", no_args_is_help=True)


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
    from skilldeck.services import open_knowledge

    kb = open_knowledge(make_settings())
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


def recall(
    question: Annotated[str, typer.Argument(help="What to recall, e.g. 'What food do I avoid?'")],
    user: Annotated[str, typer.Option(help="Whose messages to search (bound to the tools).")],
    skills: SkillsOpt = None,
    trust: TrustOpt = None,
    checkpoint: CheckpointOpt = None,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recall a user's preferences, profile and constraints from the message store.

    Runs the nomemory-recall skill (context "recall"), or the recall skills under --skills;
    without a model its rule-based planner runs. A failed run exits with code 1.
    """
    try:
        with open_deck(skills or ["nomemory-recall"], checkpoint, model, trust=trust) as deck:
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
        body["error"] = result.error.dump()
    if as_json:
        print(json.dumps(body, ensure_ascii=False, default=str))
    else:
        _print_recall(body)
    if result.status == "failed":
        raise typer.Exit(EXIT_FAILED)


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
