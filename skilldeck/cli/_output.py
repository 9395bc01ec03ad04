"""How commands print runs, cards and steps for people (rich), and for scripts (``--json``)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.cells import cell_len
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table

from skilldeck.cli._shared import EXIT_FAILED, err, out

if TYPE_CHECKING:
    from skilldeck.graph.records import RunError
    from skilldeck.types import Card, CardQuestion, RunResult

__all__ = [
    "STEPS_DROPPED_FIRST",
    "STEP_COLUMNS",
    "bounds_hint",
    "exit_for",
    "fit_columns",
    "print_answer_hint",
    "print_card",
    "print_result",
    "print_transcript",
    "say_left_out",
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
        body["error"] = result.error.dump()
    return body


def exit_for(result: RunResult) -> None:
    """End the command with exit code 1 when the run failed or no skill could run."""
    if result.status in ("failed", "no_skill"):
        raise typer.Exit(EXIT_FAILED)


def _model_note(result: RunResult) -> None:
    model = (result.state.get("attempt") or {}).get("model")
    if model and model.startswith("scripted:"):
        err.print(f"[yellow]model: {model} (scripted turns, not a real model)[/]", highlight=False)


def bounds_hint(question: CardQuestion) -> str:
    """A number question's bounds in words (``""``: it has none)."""
    low, high = question.get("minimum"), question.get("maximum")
    if low is not None and high is not None:
        return f"from {low:g} to {high:g}"
    if low is not None:
        return f"at least {low:g}"
    return "" if high is None else f"at most {high:g}"


def print_card(card: Card) -> None:
    rows = [
        {
            "field_key": q["field_key"],
            "question": q["question"],
            "type": q["input_type"] + ("" if q["required"] else " (optional)"),
            "options": ", ".join(str(o["value"]) for o in q.get("options", [])) or bounds_hint(q),
        }
        for q in card["questions"]
    ]
    # A field key is what the answers name: it is never cut.
    table, _ = fit_columns(
        rows,
        ("field_key", "question", "type", "options"),
        (),
        whole=("field_key",),
        title=f"card from {card['skill']} ({card['review_type']})",
        show_lines=True,
    )
    out.print(table)
    for e in card.get("errors", []):
        err.print(f"[red]{e['field_key']}: {e['message']}[/]", highlight=False)
    out.print(f"interrupt_id: {card['interrupt_id']}", highlight=False)


def _print_no_skill(error: RunError) -> None:
    out.print(error.message or "no skill could run", highlight=False, soft_wrap=True)
    table = Table("skill", "why it did not run", title="skills considered", show_lines=True)
    for row in error.skills:
        table.add_row(row.skill, row.reason)
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
        out.print_json(data=result.error.dump(), default=str)
    else:
        shown = {k: v for k, v in result.state.items() if k not in _BOOKKEEPING}
        out.print_json(data=shown, default=str)


def print_answer_hint(result: RunResult) -> None:
    """The command that answers the card ``result`` waits on."""
    out.print(f"answer with: skilldeck resume {result.thread_id} --answers '{{...}}'")


#: The columns of ``show``'s steps table, and the order a narrow terminal leaves them out in.
STEP_COLUMNS = (
    *("step", "node", "skill", "attempt", "action", "tools"),
    *("model", "tokens", "ms", "status", "card"),
)
STEPS_DROPPED_FIRST = ("tokens", "ms", "model", "attempt", "node", "tools")


def fit_columns(
    rows: Sequence[Mapping[str, str]],
    columns: Sequence[str],
    dropped_first: Sequence[str],
    *,
    whole: Collection[str] = (),
    **options: Any,
) -> tuple[Table, tuple[str, ...]]:
    """``rows`` as a table (``options`` as for rich's ``Table``) of as many ``columns`` as the
    terminal shows without cutting a header or breaking a word: the columns of
    ``dropped_first`` are left out, in that order, until the rest fit. Cells wrap between
    words, except in the ``whole`` columns (ids, dates), which stay on one line. The table,
    and the columns left out."""

    def widths(column: str) -> tuple[int, int]:
        """The narrowest and the widest a column's content may be."""
        cells = [column, *(row[column] for row in rows)]
        widest = max(cell_len(line) for cell in cells for line in cell.splitlines() or [""])
        if column in whole:
            return widest, widest
        return max(cell_len(word) for cell in cells for word in cell.split() or [""]), widest

    unbounded = out.options.update(max_width=1_000_000)
    for n in range(len(dropped_first) + 1):
        left_out = tuple(dropped_first[:n])
        kept = [c for c in columns if c not in left_out]
        table = Table(**options)
        for column in kept:
            table.add_column(column, no_wrap=column in whole)
        for row in rows:
            table.add_row(*(row[c] for c in kept))
        ranges = [widths(c) for c in kept]
        # Borders and padding: what the table takes besides its columns' content.
        room = out.width - (
            Measurement.get(out, unbounded, table).maximum - sum(most for _, most in ranges)
        )
        if sum(least for least, _ in ranges) <= room:
            break
    least_total, slack = sum(r[0] for r in ranges), sum(r[1] - r[0] for r in ranges)
    if least_total <= room < least_total + slack:
        # Too wide at its widest: each column gets its narrowest and a share of the room left,
        # as rich would otherwise squeeze a column past its longest word.
        extra = room - least_total
        for shown, (least, most) in zip(table.columns, ranges, strict=True):
            shown.width = least + extra * (most - least) // slack
    return table, left_out


def say_left_out(left_out: Sequence[str]) -> None:
    """The stderr note that a narrow terminal left columns out."""
    if left_out:
        err.print(
            f"[dim]{out.width} columns: left out {', '.join(left_out)} (a wider terminal shows "
            "them; --json has every field)[/]",
            highlight=False,
        )


def steps_table(rows: list[dict[str, Any]]) -> tuple[Table, tuple[str, ...]]:
    """A thread's steps (``SkillDeck.history`` rows) as a table that fits the terminal
    (:data:`STEPS_DROPPED_FIRST` says what goes first), and the columns left out."""
    cells = [_step_cells(row) for row in rows]
    return fit_columns(cells, STEP_COLUMNS, STEPS_DROPPED_FIRST, title="steps")


def _step_cells(row: Mapping[str, Any]) -> dict[str, str]:
    action = row["action"] or ""
    if row["validation_errors"]:
        action += f" ({len(row['validation_errors'])} errors)"
    tokens = (row["tokens"] or {}).get("total_tokens")
    return {
        "step": str(row["step"]),
        "node": row["node"] or "",
        "skill": row["in_skill"] or "",
        "attempt": str(row["attempt"] or ""),
        "action": action,
        "tools": ", ".join(f"{c['name']} {c['status']}" for c in row["tool_calls"]),
        "model": _short_model(row["model"]),
        "tokens": "" if tokens is None else str(tokens),
        "ms": "" if row["elapsed_ms"] is None else f"{row['elapsed_ms']:g}",
        "status": row["status"],
        "card": "asked" if row["card"] else "answered" if row["answers"] else "",
    }


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
