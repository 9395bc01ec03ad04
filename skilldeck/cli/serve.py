"""Operator commands: ``serve`` the HTTP service, serve the deck over ``mcp``, manage its
API ``keys`` and who owns which ``matters``."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from skilldeck.cli._shared import (
    CheckpointOpt,
    JsonOpt,
    ModelOpt,
    SkillsOpt,
    TrustOpt,
    checkpoint_url,
    fail,
    skills_paths,
)
from skilldeck.errors import SkillDeckError
from skilldeck.server.keys import ApiKeys, hash_key, new_key

if TYPE_CHECKING:
    from skilldeck.checkpoints.threads import ThreadIndex
    from skilldeck.deck import SkillDeck

__all__ = ["keys_app", "matters_app", "mcp", "serve"]

keys_app = typer.Typer(
    help="API keys of the HTTP service (stored as hashes).", no_args_is_help=True
)

# The options `serve` and `mcp` share.
HostOpt = Annotated[str, typer.Option(help="Interface to listen on.")]
PortOpt = Annotated[int, typer.Option(help="TCP port.", min=0, max=65535)]
MaxBodyOpt = Annotated[
    int, typer.Option(help="Larger request bodies (MCP: tool arguments) are refused.", min=1)
]
KeysOpt = Annotated[
    Path | None,
    typer.Option(help="API key file {sha256: user_id} (default: $SKILLDECK_API_KEYS)."),
]
ServiceCheckpointOpt = Annotated[
    str | None, typer.Option(help="Checkpoint URL (default: SKILLDECK_CHECKPOINT_URL).")
]
FilesRootOpt = Annotated[
    Path | None,
    typer.Option(help="The folder with one folder per matter (default: SKILLDECK_FILES_ROOT)."),
]
MatterPolicyOpt = Annotated[
    str | None,
    typer.Option(
        help="'granted': users run only on matters made or granted with `skilldeck "
        "matters`; 'claim' (one tenant): also on a matter nobody owns yet, which becomes "
        "theirs (default: SKILLDECK_MATTER_POLICY, else granted; `mcp --demo`: claim)."
    ),
]


def serve(
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    keys: KeysOpt = None,
    skills: SkillsOpt = None,
    trust: TrustOpt = None,
    checkpoint: ServiceCheckpointOpt = None,
    model: ModelOpt = None,
    max_body_bytes: MaxBodyOpt = 1_000_000,
    files_root: FilesRootOpt = None,
    matter_policy: MatterPolicyOpt = None,
    docs: Annotated[
        bool, typer.Option(help="Serve /docs (its page loads Swagger UI from a CDN).")
    ] = False,
    console: Annotated[
        bool, typer.Option(help="Serve the card console, a web app for people, at /.")
    ] = True,
    runs_per_user: Annotated[
        int | None,
        typer.Option(help="Runs of one user at once (default: SKILLDECK_RUNS_PER_USER, 4).", min=1),
    ] = None,
    queued_runs_per_user: Annotated[
        int | None,
        typer.Option(
            help="Runs of one user waiting for a worker; more get 429 (default: "
            "SKILLDECK_QUEUED_RUNS_PER_USER, 16).",
            min=1,
        ),
    ] = None,
    threads_per_minute: Annotated[
        int | None,
        typer.Option(
            help="Threads one user may create a minute; more get 429 (default: "
            "SKILLDECK_THREADS_PER_MINUTE, 60).",
            min=1,
        ),
    ] = None,
    max_connections: Annotated[
        int | None,
        typer.Option(
            help="Connections at once; requests beyond get 503 (default: "
            "SKILLDECK_MAX_CONNECTIONS, 1000).",
            min=1,
        ),
    ] = None,
    header_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to send a request's headers (default: SKILLDECK_HEADER_TIMEOUT_S, 10).",
            min=0.001,
        ),
    ] = None,
    body_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to send a request's body; then 408 (default: "
            "SKILLDECK_BODY_TIMEOUT_S, 30).",
            min=0.001,
        ),
    ] = None,
    keep_alive: Annotated[
        int | None,
        typer.Option(
            help="Seconds an idle connection stays open (default: SKILLDECK_KEEP_ALIVE_S, 5).",
            min=1,
        ),
    ] = None,
    drain_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds runs get to reach their next checkpoint after SIGTERM before the "
            "process exits (default: SKILLDECK_DRAIN_TIMEOUT_S, 20).",
            min=0,
        ),
    ] = None,
    metrics: Annotated[
        bool | None,
        typer.Option(
            "--metrics/--no-metrics",
            help="Serve Prometheus metrics at GET /metrics, behind the API keys (default: "
            "SKILLDECK_METRICS, off).",
        ),
    ] = None,
    metrics_address: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT to serve the metrics at instead, without an API key (default: "
            "SKILLDECK_METRICS_ADDRESS).",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API (FastAPI + uvicorn): threads, SSE runs and card answers, and the card
    console, a web app where people sign in with their key and answer cards, at /.

    Runs several of these against one PostgreSQL (SKILLDECK_CHECKPOINT_URL=postgresql://...)
    behind a load balancer to scale out; the OpenAPI schema is at /openapi.json. A user may run
    only on matters they own or were granted (see `skilldeck matters --help`). Each user's runs
    wait in a queue of their own, served in turn; the per-user limits and the connection limits
    hold per process. docs/security.md is the operator's page on who may reach what and the
    limits; docs/operations.md on probes (/livez, /readyz), metrics and restarts: on SIGTERM
    the process stops taking runs, lets its runs reach their next checkpoint, and exits 0.
    """
    try:
        import uvicorn

        from skilldeck.server.app import create_app
        from skilldeck.server.limits import server_options
        from skilldeck.server.shutdown import SHUTDOWN_GRACE_S, DrainingServer
    except ImportError as exc:
        from skilldeck.errors import MissingExtraError

        fail(MissingExtraError(f"the service's {exc.name}", "service"))
    try:
        api_keys = ApiKeys.load(keys)
    except SkillDeckError as exc:
        fail(exc)
    deck = _service_deck(
        skills,
        trust,
        checkpoint,
        files_root,
        model=model,
        matter_policy=matter_policy,
        runs_per_user=runs_per_user,
        queued_runs_per_user=queued_runs_per_user,
        threads_per_minute=threads_per_minute,
        max_connections=max_connections,
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
        keep_alive_s=keep_alive,
        drain_timeout_s=drain_timeout,
        metrics=metrics,
        metrics_address=metrics_address,
    )
    settings = deck.settings
    try:
        app = create_app(
            deck, api_keys=api_keys, max_body_bytes=max_body_bytes, docs=docs, console=console
        )
        base = f"http://{host}:{port}/"
        where = [f"console {base}"] if console else []
        where.append(base + ("docs" if docs else "openapi.json"))
        typer.echo(f"skilldeck: {len(api_keys)} API key(s); {'; '.join(where)}", err=True)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="info",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            **server_options(settings),
        )
        runs = app.state.service.runs
        DrainingServer(config, lambda: runs.drain(settings.drain_timeout_s)).run()
        if runs.abandoned:
            # Their steps still run in worker threads, which the interpreter would wait for at
            # exit; their threads go on from their last checkpoint once this process is gone.
            typer.echo(
                f"skilldeck: exiting with {len(runs.abandoned)} run(s) mid-step; their threads "
                "are resumable once this process is gone",
                err=True,
            )
            logging.shutdown()
            os._exit(0)
    finally:
        deck.close()


def mcp(
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Serve streamable HTTP at http://HOST:PORT/mcp, each request with an API key "
            "(as `serve`), instead of stdio.",
        ),
    ] = False,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    keys: KeysOpt = None,
    user: Annotated[
        str | None,
        typer.Option(help="The user a stdio server acts as (default: the login name)."),
    ] = None,
    skills: SkillsOpt = None,
    trust: TrustOpt = None,
    checkpoint: ServiceCheckpointOpt = None,
    model: ModelOpt = None,
    files_root: FilesRootOpt = None,
    matter_policy: MatterPolicyOpt = None,
    demo: Annotated[
        bool,
        typer.Option(
            help="The demo's offline model and files (as `skilldeck demo`), and matters claimed "
            "by whoever names them first: the litigation-intake tool on matter demo-matter."
        ),
    ] = False,
    elicit_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a card's elicitation waits for the client's answer; then the card "
            "stays pending, for the resume tool.",
            min=0.001,
        ),
    ] = 600.0,
    sessions_per_user: Annotated[
        int,
        typer.Option(
            help="Streamable HTTP sessions one user may hold open at once (then 429).", min=1
        ),
    ] = 16,
    max_body_bytes: MaxBodyOpt = 1_000_000,
) -> None:
    """Serve the deck over MCP (stdio, or streamable HTTP with --http): each skill a tool, its
    cards asked by elicitation; a card left unanswered stays pending, for the resume tool.

    Over stdio the server acts as the local user (--user, else the login name); over HTTP as
    the user of each request's API key. Matter policy and per-user limits are the HTTP
    service's. docs/mcp.md has the client configuration and what runs over MCP.
    """
    try:
        import anyio
        import uvicorn

        from skilldeck.server.limits import server_options
        from skilldeck.server.mcp import http_app, local_user, serve_stdio
    except ImportError as exc:
        from skilldeck.errors import MissingExtraError

        fail(MissingExtraError(f"the MCP server's {exc.name}", "mcp,service"))
    if demo:
        from skilldeck import demo as demo_data

        model = model or f"scripted:{demo_data.SCRIPT}"
        files_root = files_root or demo_data.FILES
        matter_policy = matter_policy or "claim"
    try:
        api_keys = ApiKeys.load(keys) if http else None
        who = user or local_user() if api_keys is None else None
    except SkillDeckError as exc:
        fail(exc)
    deck = _service_deck(
        skills, trust, checkpoint, files_root, model=model, matter_policy=matter_policy
    )
    try:
        if api_keys is None:
            assert who is not None  # the stdio server's user, found above
            typer.echo(f"skilldeck mcp: stdio, as user {who!r}", err=True)
            anyio.run(
                lambda: serve_stdio(
                    deck,
                    user=who,
                    elicit_timeout_s=elicit_timeout,
                    max_body_bytes=max_body_bytes,
                )
            )
        else:
            app = http_app(
                deck,
                api_keys,
                elicit_timeout_s=elicit_timeout,
                sessions_per_user=sessions_per_user,
                max_body_bytes=max_body_bytes,
            )
            typer.echo(
                f"skilldeck mcp: {len(api_keys)} API key(s); http://{host}:{port}/mcp", err=True
            )
            uvicorn.run(
                app, host=host, port=port, log_level="info", **server_options(deck.settings)
            )
    finally:
        deck.close()


def _service_deck(
    skills: list[str] | None,
    trust: list[str] | None,
    checkpoint: str | None,
    files_root: Path | None,
    **overrides: Any,
) -> SkillDeck:
    """The deck a service serves: the settings of the environment with the command's
    overrides (``None``: not given). Exits with the error when a skill's scripts are not
    trusted (every run of it would be refused) or skills work in matters' files and there is
    no files root (the service never serves its working directory)."""
    from skilldeck.deck import SkillDeck
    from skilldeck.settings import Settings

    if files_root is not None:
        overrides["files_root"] = str(files_root.resolve())
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
        deck = SkillDeck(
            skills_paths(skills), checkpointer=checkpoint, settings=settings, trust=trust or ()
        )
    except (SkillDeckError, ValueError) as exc:
        fail(exc if isinstance(exc, SkillDeckError) else SkillDeckError(str(exc)))
    try:
        deck.check_scripts()
        needing = deck.matter_skills(files=True)
        if needing and settings.files_root is None:
            raise SkillDeckError(
                f"skills {', '.join(needing)} work in matters' files: set --files-root or "
                "SKILLDECK_FILES_ROOT to the folder with one folder per matter (there is no "
                "default, so the service never serves its working directory)"
            )
    except SkillDeckError as exc:
        deck.close()
        fail(exc)
    return deck


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


matters_app = typer.Typer(
    help="Who owns which matter, and who else may use it (the HTTP service enforces it).",
    no_args_is_help=True,
)
MatterArg = Annotated[str, typer.Argument(help="The matter id.")]


@contextmanager
def _matters(checkpoint: str | None) -> Iterator[ThreadIndex]:
    """The index that records matters, of the checkpoint database."""
    from skilldeck.checkpoints.open import open_persistence

    persistence = open_persistence(checkpoint_url(checkpoint))
    try:
        yield persistence.threads
    finally:
        persistence.close()


@matters_app.command("list")
def matters_list(checkpoint: CheckpointOpt = None, as_json: JsonOpt = False) -> None:
    """Every matter with its owner and the users it is granted to."""
    try:
        with _matters(checkpoint) as index:
            rows = index.matters()
    except SkillDeckError as exc:
        fail(exc, as_json)
    if as_json:
        print(json.dumps([{"matter_id": m, "owner": o, "granted": list(g)} for m, o, g in rows]))
        return
    for matter, owner, granted in rows:
        shown = f" (also: {', '.join(granted)})" if granted else ""
        print(f"{matter}\t{owner}{shown}")


@matters_app.command("add")
def matters_add(
    matter: MatterArg,
    owner: Annotated[str, typer.Option(help="The user who owns it.")],
    title: Annotated[str | None, typer.Option(help="The title of its record.")] = None,
    checkpoint: CheckpointOpt = None,
) -> None:
    """Create a matter owned by OWNER (it must not exist yet)."""
    try:
        if title is not None and not title.strip():
            raise SkillDeckError("--title is empty: give the matter a title, or leave it out")
        with _matters(checkpoint) as index:
            if not index.add_matter(matter, owner):
                found = index.matter(matter)
                holder = found[0] if found else "someone"
                raise SkillDeckError(f"matter {matter!r} already exists, owned by {holder!r}")
            if title is not None:
                index.update_matter_record(matter, lambda record: {**record, "title": title})
    except SkillDeckError as exc:
        fail(exc)
    typer.echo(f"matter {matter!r} belongs to {owner!r}", err=True)


@matters_app.command("show")
def matters_show(
    matter: MatterArg, checkpoint: CheckpointOpt = None, as_json: JsonOpt = False
) -> None:
    """MATTER's owner, the users it is granted to, and its record (title, status and the
    fields skills wrote with matters__update)."""
    try:
        with _matters(checkpoint) as index:
            found, record = index.matter(matter), index.matter_record(matter)
            if found is None or record is None:
                raise SkillDeckError(
                    f"no matter {matter!r} in {index.where}; `skilldeck matters list` shows them"
                )
    except SkillDeckError as exc:
        fail(exc, as_json)
    owner, granted = found
    if as_json:
        body = {"matter_id": matter, "owner": owner, "granted": list(granted), "record": record}
        print(json.dumps(body, ensure_ascii=False))
        return
    shown = f" (also: {', '.join(granted)})" if granted else ""
    print(f"{matter}\t{owner}{shown}")
    print(json.dumps(record, ensure_ascii=False, indent=2))


@matters_app.command("grant")
def matters_grant(
    matter: MatterArg,
    user: Annotated[str, typer.Option(help="The user who may use it too.")],
    checkpoint: CheckpointOpt = None,
) -> None:
    """Let USER run on MATTER too."""
    try:
        with _matters(checkpoint) as index:
            index.grant(matter, user)
    except SkillDeckError as exc:
        fail(exc)
    typer.echo(f"{user!r} may use matter {matter!r}", err=True)


@matters_app.command("revoke")
def matters_revoke(
    matter: MatterArg,
    user: Annotated[str, typer.Option(help="The user to take the grant from.")],
    checkpoint: CheckpointOpt = None,
) -> None:
    """Take USER's grant of MATTER back (its owner keeps it)."""
    try:
        with _matters(checkpoint) as index:
            index.revoke(matter, user)
    except SkillDeckError as exc:
        fail(exc)
    typer.echo(f"{user!r} may no longer use matter {matter!r}", err=True)
