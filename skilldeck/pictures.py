"""Pictures of a deck, drawn on this machine: the compiled graph and a thread's timeline.

Nothing here uses the network (LangGraph's ``draw_mermaid_png`` calls a web service, so it is
never used). In a notebook, :func:`graph_view` shows the graph as Mermaid text, which Jupyter
draws itself: no program to install. Pictures of the graph in a file, or ``graph_view(deck,
engine="dot")``, go through Graphviz's ``dot`` program (Debian: ``apt-get install graphviz``)
and the ``graphviz`` Python package; the timeline is a matplotlib figure drawn with the Agg
backend, without pyplot's global state. Both Python packages come with the ``notebooks`` extra
(``pip install 'skilldeck[notebooks]'``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from skilldeck.checkpoints.inspect import steps
from skilldeck.errors import MissingExtraError, SkillDeckError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from skilldeck.deck import SkillDeck

__all__ = ["GraphView", "graph_picture", "graph_view", "timeline"]

_FORMATS = ("png", "svg", "pdf")
_ENGINE_LANE = "(engine)"


def _format(path: Path, format: str | None) -> str:
    fmt = (format or path.suffix.removeprefix(".")).lower()
    if fmt not in _FORMATS:
        raise SkillDeckError(
            f"cannot draw {str(path)!r} as {fmt or 'an unknown format'!r}: "
            f"use a file ending in {', '.join('.' + f for f in _FORMATS)} or pass format="
        )
    return fmt


@dataclass(frozen=True, slots=True, repr=False)
class GraphView:
    """A deck's graph as Jupyter shows it (a cell's last value, or ``display(view)``): the
    Mermaid text in a Markdown ``mermaid`` block, which Jupyter draws, or a PNG drawn by
    Graphviz when there is one. Elsewhere its ``repr`` is the Mermaid text."""

    mermaid: str
    png: bytes | None = None

    def _repr_markdown_(self) -> str | None:
        return None if self.png is not None else f"```mermaid\n{self.mermaid}\n```"

    def _repr_png_(self) -> bytes | None:
        return self.png

    def __repr__(self) -> str:
        return self.mermaid


def graph_view(deck: SkillDeck, *, engine: Literal["mermaid", "dot"] = "mermaid") -> GraphView:
    """The deck's compiled graph, for a notebook to show.

    ``engine="mermaid"`` (the default) hands Jupyter the Mermaid text to draw (JupyterLab 4.1
    and Notebook 7 render Mermaid in Markdown): nothing to install, nothing downloaded.
    ``engine="dot"`` draws a PNG with Graphviz, as :func:`graph_picture` does.

    Raises:
        SkillDeckError: ``engine`` is neither.
        MissingExtraError: ``engine="dot"`` without the ``graphviz`` package or the ``dot``
            program.
    """
    if engine not in ("mermaid", "dot"):
        raise SkillDeckError(f"graph_view engine must be 'mermaid' or 'dot', not {engine!r}")
    return GraphView(deck.mermaid(), _dot_drawing(deck, "png") if engine == "dot" else None)


def graph_picture(deck: SkillDeck, path: str | Path, *, format: str | None = None) -> Path:
    """Draw the deck's compiled graph into ``path`` (PNG, SVG or PDF, from its suffix) with
    Graphviz.

    Skills are rounded boxes, the router a diamond, the card node a note; dashed edges are
    conditional (chosen at run time).

    Raises:
        SkillDeckError: the format is not png, svg or pdf.
        MissingExtraError: the ``graphviz`` package or the ``dot`` program is missing.
    """
    path = Path(path)
    data = _dot_drawing(deck, _format(path, format))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _dot_drawing(deck: SkillDeck, fmt: str) -> bytes:
    """The graph drawn by Graphviz's ``dot`` in format ``fmt``."""
    try:
        import graphviz
    except ImportError:
        raise MissingExtraError("the graphviz Python package", "notebooks") from None
    drawn = deck.graph.get_graph()
    skills = {b.name for b in deck.bundles}
    dot = graphviz.Digraph(
        "skilldeck",
        graph_attr={"rankdir": "TB", "concentrate": "true", "fontname": "Helvetica"},
        node_attr={"fontname": "Helvetica", "fontsize": "11"},
        edge_attr={"color": "#555555", "arrowsize": "0.6"},
    )
    for node in drawn.nodes.values():
        dot.node(node.id, node.name, **_node_style(node.id, skills))
    for edge in drawn.edges:
        dot.edge(edge.source, edge.target, style="dashed" if edge.conditional else "solid")
    try:
        data: bytes = dot.pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise MissingExtraError(
            "Graphviz's dot program", hint="apt-get install graphviz (or brew install graphviz)"
        ) from None
    return data


def _node_style(node: str, skills: set[str]) -> dict[str, str]:
    if node in ("__start__", "__end__"):
        return {"shape": "circle", "style": "filled", "fillcolor": "#dddddd", "fontsize": "8"}
    if node in skills:
        return {"shape": "box", "style": "rounded,filled", "fillcolor": "#cfe2f3"}
    if node == "router":
        return {"shape": "diamond", "style": "filled", "fillcolor": "#fff2cc"}
    if node == "card":
        return {"shape": "note", "style": "filled", "fillcolor": "#fce5cd"}
    return {"shape": "box3d", "style": "filled", "fillcolor": "#d9ead3"}


def timeline(
    deck: SkillDeck,
    thread_id: str,
    path: str | Path | None = None,
    *,
    x: Literal["time", "step"] = "time",
) -> Figure:
    """Plot a thread's steps: one lane per skill (plus one for the engine's router steps),
    a bar per step, and markers for cards asked and answered, retries and failures.

    ``x="time"`` spaces steps by wall time since the thread started (a card's bar includes the
    wait for its answer); ``x="step"`` gives every step the same width. With ``path`` the figure
    is also saved (its format from the suffix: png, svg or pdf).

    Raises:
        ThreadNotFoundError: the thread is unknown.
        MissingExtraError: matplotlib is not installed.
    """
    if x not in ("time", "step"):
        raise SkillDeckError(f"timeline x must be 'time' or 'step', not {x!r}")
    fmt = _format(Path(path), None) if path is not None else None
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        raise MissingExtraError("matplotlib", "notebooks") from None
    rows: list[dict[str, Any]] = steps(deck, thread_id)
    spans = _spans(rows, x)
    unit = "step"
    if x == "time":
        # Scripted runs take milliseconds; a real one with a card can take hours.
        total = spans[-1][0] + spans[-1][1]
        unit, scale = ("ms", 1000.0) if total < 2 else ("s", 1.0)
        spans = [(start * scale, width * scale) for start, width in spans]
    lanes = [_ENGINE_LANE, *dict.fromkeys(r["in_skill"] for r in rows if r["in_skill"])]
    fig = Figure(figsize=(10, 1.2 + 0.7 * len(lanes)), layout="constrained")
    FigureCanvasAgg(fig)  # the Agg canvas: rendering needs no display and no pyplot
    ax = fig.add_subplot()
    colours = {"skill": "#6fa8dc", "tools": "#93c47d", "card": "#f6b26b", "engine": "#b7b7b7"}
    marks: dict[str, tuple[str, str]] = {
        "card asked": ("D", "#e69138"),
        "card answered": ("o", "#38761d"),
        "retry": ("X", "#cc0000"),
        "failed": ("s", "#000000"),
    }
    for row, (start, width) in zip(rows, spans, strict=True):
        lane = lanes.index(row["in_skill"] or _ENGINE_LANE)
        kind = _kind(row)
        ax.barh(lane, width, left=start, height=0.5, color=colours[kind], edgecolor="white")
        end = start + width
        for label in _marks(row):
            marker, colour = marks[label]
            ax.plot(end, lane + 0.32, marker=marker, color=colour, markersize=7, linestyle="")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel(f"{unit} since the thread started" if x == "time" else "checkpoint")
    ax.set_title(f"thread {thread_id}: {len(rows)} checkpoints, status {rows[-1]['status']}")
    ax.grid(axis="x", alpha=0.3)
    handles: list[Any] = [Patch(color=c, label=k) for k, c in colours.items()]
    handles += [
        Line2D([], [], marker=m, color=c, linestyle="", label=k) for k, (m, c) in marks.items()
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=fmt, dpi=120)
    return fig


def _spans(rows: Sequence[Mapping[str, Any]], x: str) -> list[tuple[float, float]]:
    """(start, width) of each step; the first checkpoint (the input) is a sliver at 0."""
    if x == "step":
        return [(float(i), 0.9) for i in range(len(rows))]
    times = [datetime.fromisoformat(r["created_at"]) for r in rows]
    offsets = [(t - times[0]).total_seconds() for t in times]
    # Steps can take microseconds; a minimum width keeps every one of them visible.
    least = max(offsets[-1], 1e-3) / 200
    return [(0.0, least)] + [(a, max(b - a, least)) for a, b in pairwise(offsets)]


def _kind(row: Mapping[str, Any]) -> str:
    if "tools" in row["ran"]:
        return "tools"
    if "card" in row["ran"]:
        return "card"
    return "skill" if row["in_skill"] else "engine"


def _marks(row: Mapping[str, Any]) -> list[str]:
    marks = []
    if row["card"]:
        marks.append("card asked")
    if row["answers"]:
        marks.append("card answered")
    retried = row["action"] == "rejected" or row["validation_errors"] or (row["attempt"] or 0) > 1
    if retried:
        marks.append("retry")
    if row["error"]:
        marks.append("failed")
    return marks
