"""``python -m skilldeck.cli``: the same as the ``skilldeck`` command."""

from skilldeck.cli import app

app()
