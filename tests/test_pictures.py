"""Offline pictures: the graph (Graphviz) and a thread's timeline (matplotlib), plus the CLI."""

from __future__ import annotations

import json
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_ANSWERS, DEMO_FILES, DEMO_SCRIPT, output, write_bundle
from servers import DOT_INSTALL, program
from typer.testing import CliRunner

from skilldeck import Resume, SkillDeck, SkillDeckError, ThreadNotFoundError
from skilldeck.cli import app
from skilldeck.errors import MissingExtraError
from skilldeck.pictures import graph_picture, graph_view, timeline

pytestmark = pytest.mark.L2

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG file; fails unless it starts like one."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def assert_picture(path: Path, min_bytes: int = 10_000) -> None:
    width, height = png_size(path)
    assert width >= 400 and height >= 150, (width, height)
    assert path.stat().st_size >= min_bytes


def _demo_thread(deck: SkillDeck) -> str:
    result = deck.run({"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter")
    return deck.run(Resume(result.thread_id, DEMO_ANSWERS)).thread_id


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Any attempt to open a network connection raises (and is recorded)."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("network is disabled in this test")

    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_graph_and_timeline_render_without_network(
    demo_deck: SkillDeck, tmp_path: Path, offline: list[Any]
) -> None:
    program("dot", DOT_INSTALL)
    thread = _demo_thread(demo_deck)
    assert graph_picture(demo_deck, tmp_path / "graph.png") == tmp_path / "graph.png"
    assert_picture(tmp_path / "graph.png")
    svg = graph_picture(demo_deck, tmp_path / "pics" / "graph.svg").read_text("utf-8")
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert all(f"<title>{b.name.replace('-', '&#45;')}</title>" in svg for b in demo_deck.bundles)
    figure = timeline(demo_deck, thread, tmp_path / "timeline.png")
    assert_picture(tmp_path / "timeline.png")
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == [
        "(engine)",
        "litigation-intake",
    ]
    timeline(demo_deck, thread, tmp_path / "steps.png", x="step")
    assert_picture(tmp_path / "steps.png")
    assert offline == []


def test_graph_view_needs_no_program_and_keeps_dot_as_an_option(
    demo_deck: SkillDeck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: list[Any]
) -> None:
    """A notebook shows the graph as Mermaid in Markdown, which Jupyter draws: no Graphviz,
    no network. ``engine="dot"`` draws a PNG where Graphviz is installed."""
    with monkeypatch.context() as without_programs:
        without_programs.setenv("PATH", str(tmp_path / "empty"))
        view = graph_view(demo_deck)
        with pytest.raises(MissingExtraError, match="apt-get install graphviz"):
            graph_view(demo_deck, engine="dot")
    assert view._repr_markdown_() == f"```mermaid\n{demo_deck.mermaid()}\n```"
    assert view._repr_png_() is None and repr(view) == demo_deck.mermaid()
    program("dot", DOT_INSTALL)
    picture = graph_view(demo_deck, engine="dot")
    png = picture._repr_png_()
    assert png is not None and png.startswith(PNG_SIGNATURE)
    assert picture._repr_markdown_() is None  # Jupyter shows the picture
    with pytest.raises(SkillDeckError, match="engine must be 'mermaid' or 'dot'"):
        graph_view(demo_deck, engine="svg")  # type: ignore[arg-type]
    assert offline == []


def test_timeline_marks_retries(skills_dir: Path, make_deck: Any) -> None:
    write_bundle(skills_dir, "intake", meta={"outputs": {"provides": []}})
    turns = [{"text": "not json", "invalid": True}, output(data={"note": "ok"})]
    deck = make_deck(skills_dir, {"intake": turns}, max_retries=1)
    figure = timeline(deck, deck.run({}, context="ctx").thread_id)
    markers = [line.get_marker() for line in figure.axes[0].get_lines()]
    assert markers.count("X") == 2  # the rejected attempt and the retried one
    assert "D" not in markers  # no card was asked


def test_timeline_marks_the_card(demo_deck: SkillDeck) -> None:
    figure = timeline(demo_deck, _demo_thread(demo_deck))
    markers = [line.get_marker() for line in figure.axes[0].get_lines()]
    assert markers.count("D") == 1 and markers.count("o") == 1 and "X" not in markers


def test_picture_errors(
    demo_deck: SkillDeck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = _demo_thread(demo_deck)
    with pytest.raises(SkillDeckError, match=r"use a file ending in \.png, \.svg, \.pdf"):
        graph_picture(demo_deck, tmp_path / "graph.gif")
    with pytest.raises(SkillDeckError, match="use a file ending in"):
        timeline(demo_deck, thread, tmp_path / "timeline")
    with pytest.raises(SkillDeckError, match="x must be 'time' or 'step'"):
        timeline(demo_deck, thread, x="wall")  # type: ignore[arg-type]
    with pytest.raises(ThreadNotFoundError):
        timeline(demo_deck, "no-such-thread", tmp_path / "t.png")
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".png", ".gif", "")]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(MissingExtraError, match="apt-get install graphviz"):
        graph_picture(demo_deck, tmp_path / "graph.png")
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(MissingExtraError, match=r"skilldeck\[notebooks\]"):
        graph_picture(demo_deck, tmp_path / "graph.png")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(MissingExtraError, match=r"matplotlib is not installed"):
        timeline(demo_deck, thread)
    assert not (tmp_path / "graph.png").exists()


# -- the CLI ----------------------------------------------------------------------------------
def _cli(tmp_path: Path, *args: str) -> Any:
    runner = CliRunner(env={"SKILLDECK_FILES_ROOT": str(DEMO_FILES), "COLUMNS": "200"})
    return runner.invoke(app, [*args, "--checkpoint", f"sqlite:///{tmp_path / 'c.sqlite'}"])


def _cli_demo(tmp_path: Path) -> str:
    result = _cli(tmp_path, "demo", "--answers", json.dumps(DEMO_ANSWERS), "--json")
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["thread_id"])


def test_cli_show_prints_the_steps_and_draws_the_timeline(tmp_path: Path) -> None:
    thread = _cli_demo(tmp_path)
    result = _cli(tmp_path, "show", thread, "--timeline", str(tmp_path / "t.png"))
    assert result.exit_code == 0, result.output
    table = result.stdout.split("finished thread")[0]
    for text in ("steps", "file__parse requested", "file__parse ok", "ask_user", "answered"):
        assert text in table, text
    assert f"scripted:{DEMO_SCRIPT.name}" in table  # the model, without its long path
    assert f"timeline: {tmp_path / 't.png'}" in result.stdout
    assert_picture(tmp_path / "t.png")
    body = json.loads(_cli(tmp_path, "show", thread, "--json").stdout)
    nodes = [r["node"] for r in body["history"]]
    assert nodes[-4:] == ["card", "litigation-intake", "tools", "litigation-intake"]
    assert "timeline" not in body


def test_cli_show_errors(tmp_path: Path) -> None:
    _cli_demo(tmp_path)
    result = _cli(tmp_path, "show", "nope", "--timeline", str(tmp_path / "t.png"), "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["code"] == "THREAD_NOT_FOUND"
    assert not (tmp_path / "t.png").exists()


def test_cli_graph_draws_png_and_svg(tmp_path: Path) -> None:
    program("dot", DOT_INSTALL)
    png, svg = tmp_path / "g.png", tmp_path / "g.svg"
    result = CliRunner().invoke(app, ["graph", "--png", str(png), "--svg", str(svg)])
    assert result.exit_code == 0, result.output
    assert f"wrote {png}" in result.stdout and f"wrote {svg}" in result.stdout
    assert_picture(png)
    assert "<svg" in svg.read_text("utf-8")
    body = json.loads(CliRunner().invoke(app, ["graph", "--png", str(png), "--json"]).stdout)
    assert body["pictures"] == [str(png)] and body["mermaid"].startswith("---")
