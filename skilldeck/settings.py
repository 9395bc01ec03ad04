"""Host settings: limits and defaults the host controls, not the skills.

Every field can be set from the environment with the ``SKILLDECK_`` prefix, e.g.
``SKILLDECK_MAX_RETRIES=1`` or ``SKILLDECK_CHECKPOINT_URL=sqlite:///runs.sqlite``. The stores
default to files in one state folder, ``SKILLDECK_HOME`` (see :mod:`skilldeck._internal.home`:
a project's ``.skilldeck/`` when there is one, else the per-user data folder).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from skilldeck._internal.home import state_home

__all__ = ["Settings", "settings_reference"]


class Settings(BaseSettings):
    """Defaults for a :class:`~skilldeck.SkillDeck`.

    Model selection: a skill's ``execution_config`` picks provider, model and temperature; the
    fields here fill what it leaves out. ``model`` set here (or ``--model`` on the CLI) overrides
    every skill, which is how tests and the demo switch to the ``scripted`` provider. ``base_url``
    sends every call to one OpenAI-compatible endpoint (vLLM, Ollama, a llama.cpp server).
    """

    model_config = SettingsConfigDict(env_prefix="SKILLDECK_", extra="ignore")

    model: str | None = Field(
        default=None,
        description="Model override for every skill: 'MODEL', 'PROVIDER:MODEL', "
        "'scripted:FILE', or 'rules' (each skill's scripts/rules.py, no model).",
    )
    provider: str = Field(
        default="openai",
        description="Provider of skills that name none: openai, openrouter, compatible, "
        "scripted, rules.",
    )
    base_url: str | None = Field(
        default=None, description="One OpenAI-compatible endpoint for every model call."
    )
    api_key: SecretStr | None = Field(default=None, description="The endpoint's API key.")
    temperature: float = Field(
        default=0.2, description="Sampling temperature of skills that set none."
    )
    output_mode: Literal["auto", "schema", "tool", "json"] = Field(
        default="auto",
        description="How a model's turn is constrained: 'schema' (each reply is forced by a "
        "strict JSON Schema to one allowed tool call or the exact output contract), 'tool' "
        "(native tool calls; the output through a submit_output call), 'json' (JSON mode); "
        "'auto' picks schema where the endpoint supports it, else tool (scripted: tool).",
    )
    max_output_tokens: int = Field(
        default=1024, ge=16, description="Tokens a model may generate per call (sent each call)."
    )
    model_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Seconds one model call may take; then it is retried like any call that got "
        "no reply (see transport_attempts).",
    )
    transport_attempts: int = Field(
        default=6,
        ge=1,
        description="Calls a model call may take when the endpoint gives no reply (a timeout, a "
        "dropped connection, HTTP 429 or 5xx), the first included: retried with exponential "
        "backoff and jitter, honouring Retry-After. Then the run stops as MODEL_UNAVAILABLE and "
        "the thread is resumable.",
    )
    transport_budget_s: float = Field(
        default=300.0,
        gt=0,
        description="Seconds one model call may spend on those retries, waits included (the run's "
        "deadline, run_timeout_s, bounds them too).",
    )
    run_timeout_s: float | None = Field(
        default=None, gt=0, description="Seconds a whole run (one request) may take."
    )
    index_cache_mb: float = Field(
        default=512.0,
        gt=0,
        description="Memory the process's in-memory search indexes (each user's BM25 lexicon "
        "and vector copy, each knowledge base's lexicon) may hold together; the least recently "
        "used are dropped and rebuilt from the stores on their next use.",
    )
    index_snapshots: bool = Field(
        default=True,
        description="Keep each user's BM25 lexicon in the message store, written with the "
        "messages (about 250 bytes a message), and save large vector copies there (500 "
        "messages up; about 2 KB a message, 1 KB on PostgreSQL, where vectors are stored at half "
        "width), so a cold start opens them instead of re-reading the history and copying every "
        "vector out of Chroma. Off: nothing is saved or read.",
    )
    model_context_tokens: int | None = Field(
        default=None,
        ge=256,
        description="The endpoint's context window in tokens: longer prompts are trimmed "
        "(earlier tool results first) or refused before the call (PROMPT_TOO_LONG).",
    )

    mcp_config: str | None = Field(
        default=None,
        description='An mcp.json naming MCP servers ({"mcpServers": {name: {command, args} or '
        "{url}}}); a mcp.json in a skills folder is read too.",
    )
    mcp_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds an MCP server has to list its tools or answer a call.",
    )
    trusted_skills: str | None = Field(
        default=None,
        description="Bundles whose scripts (scripts/*.py) may run, in the process and with its "
        "environment: bundle folders, folders of bundles or globs, separated by ':' (';' on "
        "Windows). The built-in bundles and those made by `skilldeck new` or recorded by "
        "`skilldeck trust` are trusted without it; any other bundle loads without its scripts.",
    )
    changed_skill: Literal["refuse", "latest", "migrate"] = Field(
        default="refuse",
        description="What a resume (or continue) does when the skill of the thread's pending "
        "card or turn changed since it paused (its fingerprint differs), for skills whose "
        "skill.meta.json names no on_change: 'refuse' (SKILL_CHANGED, nothing written), "
        "'latest' (run the new version on the old state, recorded on the attempt record), "
        "'migrate' (the bundle's scripts/migrate.py rewrites the state first; a trusted bundle "
        "only).",
    )
    router: Literal["auto", "lexical", "model"] = Field(
        default="auto",
        description="How a request is routed by description (context 'auto', or candidates "
        "that tie on priority): 'model' asks the default model to choose from the skills' "
        "names and descriptions, 'lexical' ranks them with BM25, 'auto' is 'model' when a "
        "model endpoint is configured (not scripted) and 'lexical' otherwise.",
    )
    route_threshold: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="The share of a request's informative words a skill's name and "
        "description must match for the lexical router to choose it (else: none).",
    )

    max_retries: int = Field(default=2, ge=0, description="Re-asks after an invalid output.")
    max_output_bytes: int = Field(
        default=256_000, ge=1000, description="Larger model output is a contract error."
    )
    max_output_depth: int = Field(
        default=32, ge=4, description="Model output nested deeper is a contract error."
    )
    max_tool_rounds: int = Field(default=4, ge=0, description="Model/tool round trips per attempt.")
    loop_limit: int = Field(
        default=3, ge=1, description="Runs of one skill without any state change before stopping."
    )
    max_steps: int = Field(default=200, ge=1, description="LangGraph recursion limit per call.")
    reference_token_budget: int = Field(
        default=4000,
        ge=0,
        description='Tokens of references/ that a skill with "references": "inline" puts in '
        "its system prompt (the rest is cut); other skills read theirs on demand.",
    )
    planner_max_rounds: int = Field(
        default=3, ge=1, description="Planner-mode tool rounds, whatever the skill asks."
    )
    planner_max_evidence: int = Field(
        default=6, ge=1, description="Evidence messages a planner-mode skill may return."
    )

    checkpoint_url: str = Field(
        default_factory=lambda: state_home().sqlite_url("checkpoints.sqlite"),
        description="memory://, sqlite:///PATH or postgresql://...; default: in SKILLDECK_HOME.",
    )
    durability: Literal["sync", "async", "exit"] = Field(
        default="sync",
        description="When checkpoints are written (LangGraph): 'sync' before the next step "
        "starts, so a killed process loses nothing.",
    )
    sqlite_timeout_s: float = Field(default=5.0, gt=0, description="Wait for a locked database.")
    postgres_pool_size: int = Field(
        default=10, ge=1, description="PostgreSQL connections per pool (checkpoints, messages)."
    )
    matter_policy: Literal["claim", "granted"] = Field(
        default="granted",
        description="Who may name a matter over HTTP: 'granted', only its owner and the users "
        "it is granted to, as made with `skilldeck matters add/grant`; 'claim' (for one "
        "tenant), also any user who names a matter nobody owns yet, who then owns it.",
    )
    max_threads_per_user: int = Field(
        default=10_000,
        ge=1,
        description="Threads one user may own over HTTP (POST /threads, and AG-UI thread ids); "
        "past it, creating one answers 403 QUOTA_EXCEEDED and nothing is stored.",
    )
    max_matters_per_user: int = Field(
        default=1_000,
        ge=1,
        description="Matters one user may come to own by naming them (matter_policy 'claim'); "
        "past it, naming a new one answers 403 QUOTA_EXCEEDED (an operator's `skilldeck matters "
        "add` is never refused).",
    )
    run_log_mb: float = Field(
        default=64.0,
        ge=0.01,
        description="Memory the service's run logs (each thread's latest run's events, for "
        "clients that reconnect) may hold together: finished runs' logs are dropped oldest "
        "first; one user's running logs hold at most the budget divided by the users with a "
        "run going; a run whose events do not fit has its stream cut off with an error event "
        "RUN_LOG_FULL (the run goes on; GET /threads/{id} shows where it stands).",
    )
    files_root: str | None = Field(
        default=None,
        description="The folder holding one folder per matter, for the file, card and PKM "
        "tools; none by default, so no tool ever reads the working directory by accident.",
    )

    runs_per_user: int = Field(
        default=4,
        ge=1,
        description="Runs of one user that go on at once in one service process; the user's "
        "further runs wait in a queue, and free workers take waiting runs of the users in turn.",
    )
    queued_runs_per_user: int = Field(
        default=16,
        ge=1,
        description="Runs of one user that may wait for a worker (beyond those going on); one "
        "more is refused with 429 TOO_MANY_RUNS and Retry-After, nothing started.",
    )
    threads_per_minute: int = Field(
        default=60,
        ge=1,
        description="Threads one user may create per minute over HTTP (POST /threads, new "
        "AG-UI threads); one more is refused with 429 TOO_MANY_THREADS and Retry-After.",
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description="Connections `skilldeck serve` keeps open at once (streams included); "
        "requests beyond them are answered 503 at once. Keep it under the open-files limit.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a client has to send a request's headers (from connecting, or "
        "from its previous response); then `skilldeck serve` closes the connection.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a client has to send a request's body once its headers are in; "
        "then the request is answered 408 REQUEST_TIMEOUT and the connection closed.",
    )
    keep_alive_s: int = Field(
        default=5,
        ge=1,
        description="Seconds `skilldeck serve` keeps an idle connection open between requests.",
    )
    drain_timeout_s: float = Field(
        default=20.0,
        ge=0,
        description="Seconds `skilldeck serve` gives its runs to reach their next checkpoint "
        "after SIGTERM (readiness and new runs answer 503 meanwhile) before it exits; a run "
        "whose step takes longer is left at its last checkpoint, resumable once the process "
        "is gone. Keep it under the orchestrator's grace period (Kubernetes: 30 s).",
    )
    metrics: bool = Field(
        default=False,
        description="Serve Prometheus metrics at GET /metrics (runs, cards pending, model "
        "calls, tool calls, the run queue, transport retries), behind the API keys like every "
        "other route, or at metrics_address.",
    )
    metrics_address: str | None = Field(
        default=None,
        description="HOST:PORT where `skilldeck serve` serves the metrics to anyone who can "
        "reach it, without an API key (a private interface for the Prometheus scraper), "
        "instead of GET /metrics on the service; implies metrics.",
    )

    thread_ttl: float | None = Field(
        default=None,
        description="How long a thread is kept after its last activity: seconds, or a whole "
        "number with a unit (90s, 15m, 12h, 30d); unset or 'never': kept until deleted. A run "
        "may set its own thread's (ttl). Expired threads are deleted by the prune (see "
        "prune_interval_s, `skilldeck prune`), except one whose card waits.",
    )
    prune_interval_s: float = Field(
        default=300.0,
        ge=0,
        description="Seconds between the prunes `skilldeck serve` runs in the background "
        "(expired threads; and thinning, with thin_finished); 0: none (run `skilldeck prune`).",
    )
    thin_finished: bool = Field(
        default=False,
        description="Let the prune delete every checkpoint of a finished thread but its last "
        "one: the database keeps what the thread ended with, and time travel (history, fork) "
        "to its earlier checkpoints ends.",
    )

    messages_path: str = Field(
        default_factory=lambda: str(state_home().path / "messages.sqlite"),
        description="The message store: a SQLite file, or a postgresql:// URL.",
    )
    chroma_path: str = Field(
        default_factory=lambda: str(state_home().path / "chroma"),
        description="Embedded Chroma folder.",
    )
    chroma_url: str | None = Field(
        default=None, description="A `chroma run` server, e.g. http://127.0.0.1:8000."
    )
    embedding_model: str | None = Field(
        default=None,
        description="An embeddings model on an OpenAI-compatible endpoint "
        "(SKILLDECK_EMBEDDING_BASE_URL); default: the offline multilingual USE model.",
    )
    embedding_base_url: str | None = Field(
        default=None, description="The endpoint of embedding_model (OpenAI-compatible)."
    )
    knowledge_path: str = Field(
        default_factory=lambda: str(state_home().path / "knowledge"),
        description="Where the knowledge base keeps its index.",
    )

    @property
    def trusted_paths(self) -> list[str]:
        """``trusted_skills`` as a list of paths and globs."""
        from skilldeck.skills.trust import split_paths

        return split_paths(self.trusted_skills)

    @field_validator("metrics_address")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        """``HOST:PORT`` with a port number, or unset."""
        if value is None or not value.strip():
            return None
        host, sep, port = value.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"metrics_address must be HOST:PORT (e.g. 127.0.0.1:9464), not {value!r}"
            )
        return value.strip()

    @field_validator("thread_ttl", mode="before")
    @classmethod
    def _ttl(cls, value: object) -> float | None:
        """A time-to-live as :func:`~skilldeck._internal.durations.parse_ttl` reads it."""
        from skilldeck._internal.durations import parse_ttl
        from skilldeck.errors import SkillDeckError

        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        try:
            return parse_ttl(value.strip() if isinstance(value, str) else value, name="thread_ttl")
        except SkillDeckError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("files_root", "model", "base_url", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        """``SKILLDECK_FILES_ROOT=`` (empty) means "not set", not "the current directory"."""
        return None if isinstance(value, str) and not value.strip() else value


def settings_reference() -> str:
    """The Markdown table of every setting (``docs/settings.md`` holds it; a test keeps the two
    equal): environment variable, default and what it does."""
    rows = ["| variable | default | what it does |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        if field.default_factory is not None:
            default = "in `SKILLDECK_HOME`"
        elif field.default is None:
            default = "none"
        else:
            default = f"`{field.default}`"
        text = (field.description or "").replace("|", "\\|")
        rows.append(f"| `SKILLDECK_{name.upper()}` | {default} | {text} |")
    return "\n".join(rows) + "\n"
