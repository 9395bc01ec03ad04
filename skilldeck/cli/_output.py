"""How commands print runs, cards and steps for people (rich), and for scripts (``--json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.panel import Panel
from rich.table import Table

from skilldeck.cli._shared import EXIT_FAILED, err, out

if TYPE_CHECKING:
    from skilldeck.types import Card, RunResult

__all__ = [
    "exit_for",
    "print_answer_hint",
    "print_card",
    "print_result",
    "print_transcript",
    "steps_table",
    "summary",
]

# State keys that are the engine's bookkeeping, not a skill's result.
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
_COLOURS = {"finished": "green", "interrupted": "yellow", "failed": "red", "no_skill": "red"}


def summary(result: RunResult) -> dict[str, Any]:
    """What ``--json`` prints of a run: status, thread, and the card or the state."""
    body: dict[str, Any] = {"status": result.status, "thread_id": result.thread_id}
    if result.card is not None:
        body["card"] = result.card
    else:
        body["state"] = result.state
    if result.error:
        body["error"] = result.error
    return body


def exit_for(result: RunResult) -> None:
    """End the command with exit code 1 when the run failed or no skill could run."""
    if result.status in ("failed", "no_skill"):
        raise typer.Exit(EXIT_FAILED)


def _model_note(result: RunResult) -> None:
    model = (result.state.get("attempt") or {}).get("model")
    if model and model.startswith("scripted:"):
        err.print(f"[yellow]model: {model} (scripted turns, not a real model)[/]", highlight=False)


def print_card(card: Card) -> None:
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


def _print_no_skill(error: dict[str, Any]) -> None:
    out.print(error.get("message", "no skill could run"), highlight=False, soft_wrap=True)
    table = Table("skill", "why it did not run", title="skills considered", show_lines=True)
    for row in error.get("skills") or []:
        table.add_row(row["skill"], row["reason"])
    if table.row_count:
        out.print(table)


def print_result(result: RunResult, as_json: bool, *, waiting: bool = True) -> None:
    """Print a run's outcome: JSON, or the status, response and card/state/error.

    ``waiting``: a card is left for someone to answer later, so say how (``False`` when the
    command goes on to answer it itself)."""
    if as_json:
        print(json.dumps(summary(result), ensure_ascii=False, default=str))
        return
    _model_note(result)
    colour = _COLOURS.get(result.status, "")
    out.print(f"[bold {colour}]{result.status}[/] thread {result.thread_id}", highlight=False)
    if result.state.get("response"):
        out.print(Panel(str(result.state["response"]), title="response"))
    if result.card is not None:
        print_card(result.card)
        if waiting:
            print_answer_hint(result)
    elif result.status == "no_skill" and result.error:
        _print_no_skill(result.error)
    elif result.error:
        out.print_json(data=result.error, default=str)
    else:
        shown = {k: v for k, v in result.state.items() if k not in _BOOKKEEPING}
        out.print_json(data=shown, default=str)


def print_answer_hint(result: RunResult) -> None:
    """The command that answers the card ``result`` waits on."""
    out.print(f"answer with: skilldeck resume {result.thread_id} --answers '{{...}}'")


def steps_table(rows: list[dict[str, Any]]) -> Table:
    """A thread's steps (``SkillDeck.history`` rows) as a table."""
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


def print_transcript(turns: list[dict[str, Any]]) -> None:
    """Each turn's messages (``inspect.transcript``); a system prompt, the same every turn,
    as its first line and size."""
    for turn in turns:
        out.rule(f"turn {turn['turn'][:12]} · {turn['skill']} · {turn['attempts']} attempt(s)")
        for message in turn["messages"]:
            content = message["content"]
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            if message["role"] == "system":
                text = f"{text.splitlines()[0] if text else ''} … ({len(text):,} characters)"
            for called in message.get("tool_calls", []):
                args = json.dumps(called["args"], ensure_ascii=False)
                text += f"{chr(10) if text else ''}→ {called['name']}({args})"
            label = message["role"] + (f" {message['name']}" if message.get("name") else "")
            out.print(f"[bold]{label}[/]", highlight=False)
            out.print(text, markup=False, highlight=False)


def _short_model(label: str | None) -> str:
    """``scripted:/long/path/turns.yaml`` → ``scripted:turns.yaml``: tables stay narrow."""
    provider, _, name = (label or "").rpartition(":")
    return f"{provider}:{Path(name).name}" if provider and "/" in name else label or ""
