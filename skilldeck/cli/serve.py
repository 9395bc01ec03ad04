"""``skilldeck serve`` and ``skilldeck keys``: run the HTTP service and manage its API keys."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from skilldeck.cli._shared import SkillsOpt, fail, skills_paths
from skilldeck.errors import SkillDeckError
from skilldeck.server.keys import ApiKeys, hash_key, new_key

__all__ = ["keys_app", "serve"]

keys_app = typer.Typer(
    help="API keys of the HTTP service (stored as hashes).", no_args_is_help=True
)


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=0, max=65535)] = 8000,
    keys: Annotated[
        Path | None,
        typer.Option(help="API key file {sha256: user_id} (default: $SKILLDECK_API_KEYS)."),
    ] = None,
    skills: SkillsOpt = None,
    checkpoint: Annotated[
        str | None,
        typer.Option(help="Checkpoint URL (default: SKILLDECK_CHECKPOINT_URL)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Model for every skill: MODEL, PROVIDER:MODEL or scripted:FILE."),
    ] = None,
    max_body_bytes: Annotated[int, typer.Option(help="Larger request bodies get 413.", min=1)] = (
        1_000_000
    ),
) -> None:
    """Serve the HTTP API (FastAPI + uvicorn): threads, SSE runs and card answers.

    Runs several of these against one PostgreSQL (SKILLDECK_CHECKPOINT_URL=postgresql://...)
    behind a load balancer to scale out; the OpenAPI schema is at /docs and /openapi.json.
    """
    try:
        import uvicorn

        from skilldeck.deck import SkillDeck
        from skilldeck.server.app import create_app
        from skilldeck.settings import Settings
    except ImportError as exc:
        from skilldeck.errors import MissingExtraError

        fail(MissingExtraError(f"the service's {exc.name}", "service"))
    try:
        api_keys = ApiKeys.load(keys)
        settings = Settings(**({"model": model} if model else {}))  # type: ignore[arg-type]
        deck = SkillDeck(skills_paths(skills), checkpointer=checkpoint, settings=settings)
    except SkillDeckError as exc:
        fail(exc)
    try:
        app = create_app(deck, api_keys=api_keys, max_body_bytes=max_body_bytes)
        typer.echo(f"skilldeck: {len(api_keys)} API key(s); http://{host}:{port}/docs", err=True)
        uvicorn.run(app, host=host, port=port, log_level="info")
    finally:
        deck.close()


@keys_app.command("hash")
def keys_hash(key: Annotated[str, typer.Argument(help="The API key to hash.")]) -> None:
    """Print the SHA-256 of a key: the form the key file stores it in."""
    print(hash_key(key))


@keys_app.command("new")
def keys_new(
    user: Annotated[str, typer.Option(help="The user_id the key acts as.")],
    file: Annotated[
        Path | None, typer.Option(help="Add the key's hash to this key file (created if new).")
    ] = None,
) -> None:
    """Make a random key for USER: prints the key once; stores only its hash."""
    if not user.strip():
        typer.echo("error: --user must not be empty", err=True)
        raise typer.Exit(2)
    key = new_key()
    entry = {hash_key(key): user}
    if file is None:
        typer.echo(f"key file entry: {json.dumps(entry)}", err=True)
    else:
        try:
            hashes = ApiKeys.load(file).hashes() if file.exists() else {}
        except SkillDeckError as exc:
            fail(exc)
        hashes.update(entry)
        file.write_text(json.dumps(hashes, indent=2) + "\n", "utf-8")
        os.chmod(file, 0o600)
        typer.echo(f"added the key of {user!r} to {file}", err=True)
    print(key)
