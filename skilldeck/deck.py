"""``SkillDeck``: load skills, compile the graph, run, pause on cards, resume, inspect."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.channels import LastValue
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, Interrupt, StateSnapshot

from skilldeck.checkpoints.open import Persistence, open_persistence
from skilldeck.errors import (
    CheckpointError,
    InvalidAnswersError,
    NoModelConfiguredError,
    NoPendingCardError,
    SkillDeckError,
    StaleInterruptError,
    ThreadNotFoundError,
)
from skilldeck.graph import build_graph
from skilldeck.models import ModelSpec, build_model, resolve_model
from skilldeck.nodes import MODES, ROUTER_NODE, NodeContext, validate_answers
from skilldeck.services import Lazy, open_knowledge, open_memory
from skilldeck.settings import Settings
from skilldeck.skills import SkillBundle, builtin_skills_dir, load_skills
from skilldeck.tools import IDENTITY_KEYS, ToolRegistry, default_registry
from skilldeck.types import Card, RunResult, ThreadStatus, ThreadSummary

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

    Example:
        >>> deck = SkillDeck("skills/", checkpointer="sqlite:///runs.sqlite")
        >>> result = deck.run({"documents": ["complaint.txt"]}, context="matter", matter_id="m-1")
        >>> if result.status == "interrupted":
        ...     result = deck.resume(result.thread_id, {"profile.defendant.name": "Acme"})
    """

    def __init__(
        self,
        skills: SkillsSource | None = None,
        *,
        checkpointer: str | Persistence | BaseCheckpointSaver[Any] | None = None,
        store: BaseStore | None = None,
        settings: Settings | None = None,
        tools: ToolRegistry | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.bundles = _load(skills, self.settings)
        self._memory = Lazy(lambda: open_memory(self.settings))
        self._knowledge = Lazy(lambda: open_knowledge(self.settings))
        self.tools = tools or default_registry(
            self.settings.files_root, memory=self._memory, knowledge=self._knowledge
        )
        self._models: dict[str, BaseChatModel] = {}
        self._specs: dict[str, ModelSpec] = {}
        self._ctx = NodeContext(
            bundles={b.name: b for b in self.bundles},
            registry=self.tools,
            settings=self.settings,
            model_for=self._model_for,
            model_label=self._model_label,
            has_model=self._has_model,
        )
        builder = build_graph(self.bundles, self._ctx)
        if checkpointer is None or isinstance(checkpointer, str | Persistence):
            self._persistence: Persistence | None = (
                checkpointer
                if isinstance(checkpointer, Persistence)
                else open_persistence(
                    checkpointer or self.settings.checkpoint_url,
                    timeout=self.settings.sqlite_timeout_s,
                )
            )
            saver, store = self._persistence.saver, self._persistence.store
        else:
            self._persistence, saver = None, checkpointer
            store = store or InMemoryStore()
        self.checkpointer = saver
        self.store = store
        self.graph = builder.compile(checkpointer=saver, store=store)

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Close the checkpoint connections and the tool stores this deck opened."""
        for opened in (self._memory.made, self._knowledge.made):
            if opened is not None:
                opened.close()
        if self._persistence is not None:
            self._persistence.close()

    def __enter__(self) -> SkillDeck:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- models ---------------------------------------------------------------------------
    def model_spec(self, skill: str) -> ModelSpec:
        """The model a skill runs with (``execution_config`` plus host settings)."""
        if skill not in self._specs:
            bundle = self._ctx.bundles[skill]
            self._specs[skill] = resolve_model(bundle.execution, self.settings, base=bundle.path)
        return self._specs[skill]

    def _model_for(self, skill: str) -> BaseChatModel:
        if skill not in self._models:
            self._models[skill] = build_model(self.model_spec(skill), self.settings)
        return self._models[skill]

    def _has_model(self, skill: str) -> bool:
        try:
            self.model_spec(skill)
        except NoModelConfiguredError:
            return False
        return True

    def _model_label(self, skill: str) -> str:
        mode = self._ctx.bundles[skill].execution.mode
        return self.model_spec(skill).label if self._has_model(skill) else f"rules:{mode}"

    def check_models(self) -> None:
        """Build every skill's model now, so a missing key fails before a run starts.

        Skills whose execution mode has a rule-based fallback may run without a model.
        """
        for bundle in self.bundles:
            if MODES[bundle.execution.mode].rules_fallback and not self._has_model(bundle.name):
                continue
            self._model_for(bundle.name)

    # -- running --------------------------------------------------------------------------
    def run(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        context: str,
        thread_id: str | None = None,
        user_id: str | None = None,
        matter_id: str | None = None,
        next_skill: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        callbacks: Sequence[BaseCallbackHandler] | None = None,
    ) -> RunResult:
        """Start a run (or a new turn of an existing thread) and run until a card or the end.

        Identity (``user_id``, ``matter_id``) is taken from these arguments only; it reaches
        tools through the run's config and is never read from model output or ``input``.
        ``metadata`` and ``callbacks`` go into the run's LangChain config, so tracing handlers
        (and the eval harness's recorder) see every model call; ``metadata["skilldeck_case"]``
        selects a scripted model's per-case turns.
        """
        input = dict(input or {})
        forged = sorted(set(input) & set(IDENTITY_KEYS))
        if forged:
            raise SkillDeckError(
                f"input must not carry identity ({', '.join(forged)}): pass user_id= and "
                "matter_id= (CLI: --user, --matter)"
            )
        if next_skill is not None and next_skill not in self._ctx.bundles:
            raise SkillDeckError(f"next_skill {next_skill!r} is not a loaded skill")
        thread_id = thread_id or uuid.uuid4().hex
        snapshot = self._snapshot(thread_id)
        if snapshot is not None and snapshot.interrupts:
            raise SkillDeckError(
                f"thread {thread_id!r} is waiting for answers to a card; call resume() first"
            )
        self.check_models()
        update = {
            "context": context,
            "input": input,
            "user_id": user_id,
            "matter_id": matter_id,
            "next_skill": next_skill,
            "status": "running",
            "error": None,
            "guard": None,
            "turn": None,
        }
        identity = {"user_id": user_id, "matter_id": matter_id}
        return self._invoke(update, self._config(thread_id, identity, metadata, callbacks))

    def resume(
        self,
        thread_id: str,
        answers: Mapping[str, Any],
        *,
        interrupt_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        callbacks: Sequence[BaseCallbackHandler] | None = None,
    ) -> RunResult:
        """Answer the pending card of ``thread_id`` and run on.

        Answers are ``{field_key: value}``. They are checked before anything is written:
        invalid or partial answers raise :class:`~skilldeck.errors.InvalidAnswersError` (its
        ``card`` carries the errors) and leave the thread as it was.

        Raises:
            ThreadNotFoundError, NoPendingCardError, StaleInterruptError, InvalidAnswersError
        """
        snapshot = self._require(thread_id)
        if not snapshot.interrupts:
            raise NoPendingCardError(thread_id, self._status(snapshot))
        pending = snapshot.interrupts[0]
        if interrupt_id is not None and interrupt_id != pending.id:
            raise StaleInterruptError(thread_id, interrupt_id, pending.id)
        card = _card(pending)
        errors = validate_answers(card["questions"], answers)
        if errors:
            raise InvalidAnswersError(dict(card), errors)
        self.check_models()
        config = self._config(thread_id, _identity(snapshot.values), metadata, callbacks)
        return self._invoke(Command(resume={pending.id: dict(answers)}), config)

    def _config(
        self,
        thread_id: str,
        identity: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        callbacks: Sequence[BaseCallbackHandler] | None = None,
        checkpoint_id: str | None = None,
    ) -> RunnableConfig:
        configurable = {"thread_id": thread_id, **(identity or {})}
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        config: RunnableConfig = {
            "configurable": configurable,
            "recursion_limit": self.settings.max_steps,
        }
        if metadata:
            config["metadata"] = dict(metadata)
        if callbacks:
            config["callbacks"] = list(callbacks)
        return config

    def _invoke(self, payload: Any, config: RunnableConfig) -> RunResult:
        with _checkpoint_errors():
            self.graph.invoke(payload, config, durability=self.settings.durability, version="v2")
        return self.get_thread(config["configurable"]["thread_id"])

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
    ) -> RunResult:
        """Copy ``thread_id`` as it was at ``checkpoint_id`` into a new thread and run it on.

        ``update`` (state keys, e.g. a changed ``input`` or ``next_skill``) is applied first,
        as if the step that made the checkpoint had written it. The original thread is not
        touched, so a prompt or model change can be tried against the same starting point.

        Raises:
            ThreadNotFoundError: ``thread_id`` is unknown.
            CheckpointError: ``checkpoint_id`` is not a checkpoint of ``thread_id``.
        """
        self._require(thread_id)
        with _checkpoint_errors():
            source = self.graph.get_state(self._config(thread_id, checkpoint_id=checkpoint_id))
        if source.created_at is None:
            raise CheckpointError(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; list them with "
                "deck.history(thread_id)"
            )
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
        new_thread_id = new_thread_id or uuid.uuid4().hex
        if self._snapshot(new_thread_id) is not None:
            raise SkillDeckError(f"thread {new_thread_id!r} already exists; pick a new id")
        config = self._config(new_thread_id, _identity(dict(writes)), metadata, callbacks)
        # Re-enter where the source stood: its pending nodes, or the router when it had ended.
        goto = list(source.next) or [ROUTER_NODE]
        with _checkpoint_errors():
            self.graph.update_state(config, Command(update=writes, goto=goto), as_node=ROUTER_NODE)
        return self._invoke(None, config)

    # -- reading --------------------------------------------------------------------------
    def _snapshot(self, thread_id: str) -> StateSnapshot | None:
        with _checkpoint_errors():
            snapshot = self.graph.get_state(self._config(thread_id))
        return snapshot if snapshot.created_at is not None else None

    def _require(self, thread_id: str) -> StateSnapshot:
        snapshot = self._snapshot(thread_id)
        if snapshot is None:
            raise ThreadNotFoundError(thread_id)
        return snapshot

    @staticmethod
    def _status(snapshot: StateSnapshot) -> ThreadStatus:
        if snapshot.interrupts:
            return "interrupted"
        status = snapshot.values.get("status")
        if status in ("finished", "failed") and not snapshot.next:
            return status  # type: ignore[no-any-return]
        return "running" if snapshot.next else "finished"

    def get_thread(self, thread_id: str) -> RunResult:
        """The current state of a thread, with its pending card if it is paused."""
        snapshot = self._require(thread_id)
        status = self._status(snapshot)
        return RunResult(
            status=status,
            thread_id=thread_id,
            state=dict(snapshot.values),
            card=_card(snapshot.interrupts[0]) if snapshot.interrupts else None,
            error=snapshot.values.get("error") if status == "failed" else None,
            checkpoint_id=snapshot.config["configurable"].get("checkpoint_id"),
        )

    def history(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's checkpoints, oldest first: one row per super-step."""
        self._require(thread_id)
        with _checkpoint_errors():
            snapshots = list(self.graph.get_state_history(self._config(thread_id)))
        rows: list[dict[str, Any]] = []
        ran: list[str] = []
        previous: dict[str, Any] = {}
        for snap in reversed(snapshots):
            meta = snap.metadata or {}
            attempt = snap.values.get("attempt") or {}
            # The state carries the last attempt forward; report it only on the step that made it.
            fresh = attempt if attempt != previous else {}
            rows.append(
                {
                    "checkpoint_id": snap.config["configurable"].get("checkpoint_id"),
                    "parent_id": (snap.parent_config or {})
                    .get("configurable", {})
                    .get("checkpoint_id"),
                    "step": meta.get("step"),
                    "source": meta.get("source"),
                    "ran": ran,
                    "next": list(snap.next),
                    "created_at": snap.created_at,
                    "status": self._status(snap),
                    "skill": fresh.get("skill"),
                    "attempt": fresh.get("attempt"),
                    "action": fresh.get("action"),
                    "validation_errors": fresh.get("validation_errors", []),
                    "card": _card(snap.interrupts[0]) if snap.interrupts else None,
                }
            )
            ran, previous = list(snap.next), attempt
        return rows

    def threads(self) -> list[ThreadSummary]:
        """Every thread in the checkpoint database, newest first."""
        with _checkpoint_errors():
            latest: dict[str, Any] = {}
            for item in self.checkpointer.list(None):
                thread = item.config["configurable"]["thread_id"]
                if item.config["configurable"].get("checkpoint_ns"):
                    continue
                if thread not in latest:
                    latest[thread] = item
        rows = []
        for thread_id, item in latest.items():
            snapshot = self._require(thread_id)
            attempt = snapshot.values.get("attempt") or {}
            rows.append(
                ThreadSummary(
                    thread_id=thread_id,
                    status=self._status(snapshot),
                    user_id=snapshot.values.get("user_id"),
                    last_skill=attempt.get("skill"),
                    steps=int((item.metadata or {}).get("step", 0)) + 1,
                    updated_at=snapshot.created_at,
                )
            )
        rows.sort(key=lambda r: r.updated_at or "", reverse=True)
        return rows

    def mermaid(self) -> str:
        """The compiled graph as Mermaid text (rendered offline by any Mermaid viewer)."""
        return str(self.graph.get_graph().draw_mermaid())


def _load(skills: SkillsSource | None, settings: Settings) -> tuple[SkillBundle, ...]:
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
    return load_skills(paths, reference_token_budget=settings.reference_token_budget)


def _identity(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: values.get(k) for k in ("user_id", "matter_id")}


def _card(pending: Interrupt) -> Card:
    return {**pending.value, "interrupt_id": pending.id}  # type: ignore[typeddict-item]


@contextlib.contextmanager
def _checkpoint_errors() -> Iterator[None]:
    """Turn database failures into :class:`CheckpointError` with a hint."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise CheckpointError(
            f"checkpoint database unavailable ({exc}); if another process holds a write lock, "
            "retry or raise SKILLDECK_SQLITE_TIMEOUT_S"
        ) from exc
