"""The ``skilldeck`` command line (typer + rich). Every command has ``--json`` for scripts.

Commands live in modules by concern (runs, bundles, stores, evals, serve); each imports its
heavy dependencies inside the command, so ``skilldeck --help`` and ``skilldeck threads`` start
fast (see ``bench/startup.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from skilldeck.cli import bundles, retention, runs, stores
from skilldeck.cli.evals import eval_app
from skilldeck.cli.serve import keys_app, matters_app, mcp, serve

__all__ = ["app"]

app = typer.Typer(
    help="Run folder-defined agent skills as a durable LangGraph workflow.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
commands: tuple[Callable[..., None], ...] = (
    runs.run,
    runs.resume,
    runs.threads,
    runs.show,
    runs.demo,
    bundles.new,
    bundles.check,
    bundles.trust,
    bundles.route,
    runs.graph,
    stores.recall,
    retention.prune,
    serve,
    mcp,
)
for command in commands:
    app.command()(command)
app.add_typer(stores.messages_app, name="messages")
app.add_typer(stores.knowledge_app, name="knowledge")
app.add_typer(eval_app, name="eval")
app.add_typer(keys_app, name="keys")
app.add_typer(matters_app, name="matters")
