"""Read runs back from their checkpoints: threads, steps, state diffs and forks.

Everything here goes through the deck's compiled graph and checkpointer, so it reads any
checkpointer a deck runs on (memory, SQLite, PostgreSQL). Rows are lists of JSON-native dicts;
pass ``frame=True`` (or call :func:`as_frame`) for pandas DataFrames, which need the
``notebooks`` extra (``pip install 'skilldeck[notebooks]'``).

Example:
    >>> from skilldeck.checkpoints.inspect import diff, list_threads, steps
    >>> list_threads(deck, status="interrupted")
    >>> rows = steps(deck, thread_id)
    >>> diff(deck, thread_id, rows[0]["checkpoint_id"], rows[-1]["checkpoint_id"])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, get_args

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.types import Interrupt, StateSnapshot

from skilldeck._internal.paths import get_path
from skilldeck.checkpoints.threads import ThreadIndex, ThreadRecord, thread_title
from skilldeck.errors import CheckpointError, MissingExtraError, SkillDeckError
from skilldeck.graph.records import Attempt
from skilldeck.graph.state import RunView
from skilldeck.nodes.context import CARD_NODE, ROUTER_NODE, TOOLS_NODE
from skilldeck.types import Card, RunResult, ThreadStatus

if TYPE_CHECKING:
    import pandas as pd
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.runnables import RunnableConfig

    from skilldeck.deck import SkillDeck, SkillsSource

__all__ = [
    "as_frame",
    "diff",
    "fork",
    "index_threads",
    "list_threads",
    "pending_card",
    "read_history",
    "read_snapshot",
    "state_fields",
    "step_rows",
    "steps",
    "thread_status",
    "transcript",
]

# Graph nodes that are not skills; any other node a step ran is a skill's node.
_ENGINE_NODES = frozenset({"__start__", ROUTER_NODE, TOOLS_NODE, CARD_NODE})


def thread_status(snapshot: StateSnapshot) -> ThreadStatus:
    """Where a thread stands at ``snapshot``: running, interrupted, finished, failed or
    no_skill."""
    if snapshot.interrupts:
        return "interrupted"
    if snapshot.next:
        return "running"
    status = snapshot.values.get("status")
    if status in ("finished", "failed", "no_skill"):
        return status  # type: ignore[no-any-return]
    # Nothing left to run, yet the state does not say the run ended: a live read between a
    # step's task writes and its checkpoint (LangGraph lists only unwritten tasks in ``next``),
    # or a process that died right there. The run has not ended either way.
    return "running" if status in ("running", "interrupted") else "finished"


def state_fields(channel_values: Mapping[str, Any]) -> dict[str, Any]:
    """The state fields among a checkpoint's channel values, without LangGraph's own channels
    (``branch:to:<node>`` triggers a node; ``__start__``, ``__pregel_*`` are the engine's)."""
    return {k: v for k, v in channel_values.items() if not k.startswith(("branch:", "__"))}


def _with_stored_fields(
    snapshot: StateSnapshot, channel_values: Mapping[str, Any]
) -> StateSnapshot:
    """``snapshot`` with every state field its checkpoint (``channel_values``) holds.

    A compiled graph reads only the fields of its own state schema, which is built from the
    skills it loaded; a deck without a thread's skills would drop their data fields. Reading a
    thread must not depend on which skills the reader loaded, so the fields the graph has no
    channel for are added from the checkpoint as they were saved.
    """
    extra = {k: v for k, v in state_fields(channel_values).items() if k not in snapshot.values}
    return snapshot._replace(values={**snapshot.values, **extra}) if extra else snapshot


def read_snapshot(graph: Any, config: RunnableConfig) -> StateSnapshot:
    """``graph.get_state(config)`` with every stored state field (:func:`_with_stored_fields`)."""
    snapshot: StateSnapshot = graph.get_state(config)
    if snapshot.created_at is None:  # LangGraph's answer for a thread or checkpoint it lacks
        return snapshot
    return _with_stored_fields(
        snapshot, _channel_values(graph.checkpointer.get_tuple(snapshot.config))
    )


def read_history(
    graph: Any, config: RunnableConfig, *, limit: int | None = None, before: str | None = None
) -> list[StateSnapshot]:
    """``graph.get_state_history(config)`` (newest first) with every stored state field: at
    most ``limit`` snapshots, those older than the checkpoint ``before`` when it is given.

    A field, once written, stays in every later checkpoint: when the latest checkpoint holds
    none the graph lacks, no earlier one does, and the checkpoints are not read again.
    """
    page: dict[str, Any] = {"limit": limit}
    if before is not None:
        page["before"] = {"configurable": {"checkpoint_id": before}}
    snapshots = list(graph.get_state_history(config, **page))
    if not snapshots:
        return snapshots
    latest = snapshots[0]
    stored = state_fields(_channel_values(graph.checkpointer.get_tuple(latest.config)))
    if stored.keys() <= latest.values.keys():
        return snapshots
    saved = {
        _checkpoint_id(t): t.checkpoint["channel_values"]
        for t in graph.checkpointer.list(config, **page)
    }
    return [_with_stored_fields(s, saved.get(_checkpoint_id(s), {})) for s in snapshots]


def _channel_values(saved: CheckpointTuple | None) -> Mapping[str, Any]:
    return {} if saved is None else saved.checkpoint["channel_values"]


def _checkpoint_id(found: StateSnapshot | CheckpointTuple) -> str | None:
    return found.config["configurable"].get("checkpoint_id")


def index_threads(graph: Any, index: ThreadIndex) -> int:
    """Fill the thread index from the checkpoints of ``graph`` (a database from before the
    index); threads it knows are kept. How many threads it added."""
    checkpointer = graph.checkpointer
    latest: dict[str, Any] = {}
    created: dict[str, str] = {}
    for item in checkpointer.list(None):
        configurable = item.config["configurable"]
        if configurable.get("checkpoint_ns"):
            continue
        thread = configurable["thread_id"]
        latest.setdefault(thread, item)
        ts = item.checkpoint["ts"]
        created[thread] = min(created.get(thread, ts), ts)
    for thread_id, item in latest.items():
        snapshot = graph.get_state({"configurable": {"thread_id": thread_id}})
        view = RunView(snapshot.values)
        index.add(
            ThreadRecord(
                thread_id=thread_id,
                user_id=view.user_id,
                matter_id=view.matter_id,
                status=thread_status(snapshot),
                skill=view.attempt.skill if view.attempt is not None else None,
                steps=int((item.metadata or {}).get("step", 0)) + 1,
                created_at=created[thread_id],
                updated_at=snapshot.created_at or created[thread_id],
                title=thread_title(view.input, view.response),
            )
        )
    return len(latest)


def pending_card(pending: Interrupt) -> Card:
    """The card payload of a pending interrupt, with its ``interrupt_id``."""
    return {**pending.value, "interrupt_id": pending.id}  # type: ignore[typeddict-item]


def step_rows(snapshots: Iterable[StateSnapshot]) -> list[dict[str, Any]]:
    """One row per super-step, oldest first, from a thread's snapshots (newest first, as
    ``graph.get_state_history`` yields them). :meth:`SkillDeck.history` returns these rows.

    Keys (``None`` when a step has no such thing):

    - ``checkpoint_id``, ``parent_id``, ``step``, ``source`` (input, loop, update),
      ``created_at``, ``status`` (the thread's status at this checkpoint), ``next``;
    - ``ran`` (the nodes that ran to make this checkpoint) and ``node`` (the same, joined, or the
      source for a checkpoint no node made);
    - ``in_skill``: the skill the step worked for (its own node, its tool calls or its card);
    - ``skill``, ``turn`` (its transcript's id), ``head`` (the transcript as the attempt left
      it: :func:`skilldeck.nodes.transcript.read` reads it), ``attempt``, ``action``,
      ``validation_errors``, ``model``, ``tokens``, ``attempt_ms``, ``fingerprint`` (the
      skill's version): from the attempt record, only on the step that ended the attempt
      (``action`` ``rejected`` is a retry); ``upgrade``: the resume that moved the thread to
      another version of the skill (``{skill, policy, old, new}``), on the step it made;
    - ``tool_calls``: the calls a skill step asked for (``status`` requested) or a tools step ran
      (``status`` ok, error or refused, with ``ms``);
    - ``elapsed_ms``: wall time since the parent checkpoint (a card's step includes the wait for
      the answer);
    - ``card``: the card the thread waits on at this checkpoint; ``answers``: the answers a card
      step wrote (``{field_key: value}``); ``error``: the error a failing step recorded.
    """
    rows: list[dict[str, Any]] = []
    ran: list[str] = []
    before: Mapping[str, Any] = {}
    for snap in reversed(list(snapshots)):
        meta = snap.metadata or {}
        values = snap.values
        attempt = RunView(values).attempt
        # The state carries the last attempt forward; report it only on the step that made it.
        fresh = attempt if attempt != RunView(before).attempt else None
        error = values.get("error")
        rows.append(
            {
                "checkpoint_id": snap.config["configurable"].get("checkpoint_id"),
                "parent_id": (snap.parent_config or {})
                .get("configurable", {})
                .get("checkpoint_id"),
                "step": meta.get("step"),
                "source": meta.get("source"),
                "ran": ran,
                "node": ",".join(ran) or meta.get("source"),
                "next": list(snap.next),
                "created_at": snap.created_at,
                "status": thread_status(snap),
                "in_skill": _in_skill(ran, before, fresh),
                "skill": fresh.skill if fresh else None,
                "turn": fresh.turn if fresh else None,
                "head": fresh.head if fresh else None,
                "attempt": fresh.attempt if fresh else None,
                "action": fresh.action if fresh else None,
                "validation_errors": [i.dump() for i in fresh.validation_errors] if fresh else [],
                "model": fresh.model if fresh else None,
                "tokens": fresh.tokens.dump() if fresh and fresh.tokens else None,
                "attempt_ms": fresh.duration_ms if fresh else None,
                "fingerprint": fresh.fingerprint if fresh else None,
                "upgrade": fresh.upgrade.dump() if fresh and fresh.upgrade else None,
                "tool_calls": _tool_calls(ran, before, values),
                "elapsed_ms": _elapsed_ms(rows[-1]["created_at"] if rows else None, snap),
                "card": pending_card(snap.interrupts[0]) if snap.interrupts else None,
                "answers": _answers(ran, before, values),
                "error": error if error and error != before.get("error") else None,
            }
        )
        ran, before = list(snap.next), values
    return rows


def _in_skill(ran: Sequence[str], before: Mapping[str, Any], fresh: Attempt | None) -> str | None:
    skills = [n for n in ran if n not in _ENGINE_NODES]
    if skills:
        return skills[0]
    if fresh is not None:
        return fresh.skill
    view = RunView(before)
    if TOOLS_NODE in ran and view.turn is not None:
        return view.turn.skill
    if CARD_NODE in ran and view.card is not None:
        return view.card.skill
    return None


def _tool_calls(
    ran: Sequence[str], before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[dict[str, Any]]:
    old, new = RunView(before).turn, RunView(after).turn
    asked = old.pending if old is not None else ()
    if TOOLS_NODE in ran:
        args = {c.id: c.args for c in asked}
        done = new.ran if new else ()
        return [
            {"name": c.name, "args": args.get(c.id), "status": c.status, "ms": c.ms} for c in done
        ]
    pending = new.pending if new is not None else ()
    if any(n not in _ENGINE_NODES for n in ran) and pending != asked:
        return [
            {"name": c.name, "args": c.args, "status": "requested", "ms": None} for c in pending
        ]
    return []


def _answers(
    ran: Sequence[str], before: Mapping[str, Any], after: Mapping[str, Any]
) -> dict[str, Any] | None:
    card = RunView(before).card
    if CARD_NODE not in ran or card is None or RunView(after).card is not None:
        return None
    return {str(q["field_key"]): get_path(after, str(q["field_key"])) for q in card.questions}


def _elapsed_ms(parent_time: str | None, snap: StateSnapshot) -> float | None:
    if parent_time is None or snap.created_at is None:
        return None
    delta = datetime.fromisoformat(snap.created_at) - datetime.fromisoformat(parent_time)
    return round(delta.total_seconds() * 1000, 1)


# -- the inspection API ---------------------------------------------------------------------
def as_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """``rows`` as a pandas DataFrame.

    Raises:
        MissingExtraError: pandas is not installed.
    """
    try:
        import pandas as pd
    except ImportError:
        raise MissingExtraError("pandas", "notebooks") from None
    return pd.DataFrame(list(rows))


def _out(rows: list[dict[str, Any]], frame: bool) -> Any:
    return as_frame(rows) if frame else rows


def list_threads(
    deck: SkillDeck,
    user: str | None = None,
    status: ThreadStatus | None = None,
    *,
    frame: bool = False,
) -> Any:
    """One row per thread, newest first: thread_id, user, created, updated, status, last_skill,
    steps. ``user`` and ``status`` keep only the matching threads.

    Returns:
        A list of dicts, or a DataFrame with ``frame=True``.

    Raises:
        SkillDeckError: ``status`` is not a thread status (see ``ThreadStatus``).
    """
    allowed = get_args(ThreadStatus)
    if status is not None and status not in allowed:
        raise SkillDeckError(f"unknown thread status {status!r}; use one of {', '.join(allowed)}")
    rows = [
        {
            "thread_id": t.thread_id,
            "user": t.user_id,
            "created": t.created_at,
            "updated": t.updated_at,
            "status": t.status,
            "last_skill": t.last_skill,
            "steps": t.steps,
        }
        for t in deck.threads(user_id=user, status=status)
    ]
    return _out(rows, frame)


def steps(deck: SkillDeck, thread_id: str, *, frame: bool = False) -> Any:
    """One row per super-step of a thread, oldest first; the keys are listed in
    :func:`step_rows`.

    Raises:
        ThreadNotFoundError: the thread is unknown.
    """
    return _out(deck.history(thread_id), frame)


def transcript(deck: SkillDeck, thread_id: str) -> list[dict[str, Any]]:
    """What each turn of a thread said, oldest first: ``{"turn", "skill", "attempts",
    "messages"}``, each message ``{"role", "content"}`` with ``tool_calls`` (a model's calls)
    or ``name`` (the tool a result came from). Turns are those whose attempts ended; a turn
    holds every attempt of its skill, re-asks included.

    Raises:
        ThreadNotFoundError: the thread is unknown.
    """
    import skilldeck.nodes.transcript as transcripts

    turns: dict[str, dict[str, Any]] = {}
    heads: dict[str, str | None] = {}
    for row in deck.history(thread_id):
        if row["turn"] is not None:
            entry = turns.setdefault(row["turn"], {"skill": row["skill"], "attempts": 0})
            entry["attempts"] += 1
            heads[row["turn"]] = row["head"]  # the last attempt's: the whole turn
    out = []
    for turn_id, entry in turns.items():
        messages = []
        for message in transcripts.read(deck.store, turn_id, heads[turn_id]):
            said: dict[str, Any] = {"role": message.type, "content": message.content}
            calls = getattr(message, "tool_calls", None)
            if calls:
                said["tool_calls"] = [{"name": c["name"], "args": c["args"]} for c in calls]
            if message.type == "tool":
                said["name"] = message.name
            messages.append(said)
        out.append({"turn": turn_id, **entry, "messages": messages})
    return out


def _values_at(deck: SkillDeck, thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
    configurable = {"thread_id": thread_id}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    snapshot = read_snapshot(deck.graph, {"configurable": configurable})
    if snapshot.created_at is None:
        raise CheckpointError(
            f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; list them with "
            "steps(deck, thread_id)"
        )
    return dict(snapshot.values)


def diff(
    deck: SkillDeck,
    thread_id: str,
    a: str,
    b: str | None = None,
    *,
    frame: bool = False,
) -> Any:
    """What changed in the state from checkpoint ``a`` to checkpoint ``b`` (default: the
    thread's latest), as rows ``{path, change, old, new}``: ``path`` is a dot path (list items
    by index, ``profile.facts.0``), ``change`` is added, removed or changed.

    Raises:
        ThreadNotFoundError: the thread is unknown.
        CheckpointError: ``a`` or ``b`` is not a checkpoint of this thread.
    """
    deck.get_thread(thread_id)  # ThreadNotFoundError before any checkpoint lookup
    old, new = _flatten(_values_at(deck, thread_id, a)), _flatten(_values_at(deck, thread_id, b))
    rows = []
    for path in [*old, *(p for p in new if p not in old)]:
        if path not in new:
            rows.append({"path": path, "change": "removed", "old": old[path], "new": None})
        elif path not in old:
            rows.append({"path": path, "change": "added", "old": None, "new": new[path]})
        elif old[path] != new[path]:
            rows.append({"path": path, "change": "changed", "old": old[path], "new": new[path]})
    return _out(rows, frame)


def _flatten(value: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Leaves of a nested value by dot path; empty mappings and lists are leaves."""
    out = {} if out is None else out
    if isinstance(value, Mapping) and value:
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list) and value:
        items = enumerate(value)
    else:
        out[prefix] = value
        return out
    for key, item in items:
        _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    return out


def fork(
    deck: SkillDeck,
    thread_id: str,
    checkpoint_id: str,
    update: Mapping[str, Any] | None = None,
    *,
    model: str | None = None,
    skills: SkillsSource | None = None,
    new_thread_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    callbacks: Sequence[BaseCallbackHandler] | None = None,
) -> RunResult:
    """Time travel: copy a thread as it was at ``checkpoint_id`` into a new thread and run on.

    ``update`` changes state keys first (see :meth:`SkillDeck.fork`). ``model`` (a model spec
    such as ``scripted:turns.yaml`` or ``openai:gpt-4o-mini``) or ``skills`` (for example an
    edited copy of a bundle folder, to try a prompt change) run the fork on a second deck built
    over the same checkpointer and store; the original thread is never touched. Later calls on
    the fork (``resume`` after a card) run on whichever deck they are made on.

    Raises:
        ThreadNotFoundError, CheckpointError: as :meth:`SkillDeck.fork`.
        ModelConfigError: ``model`` cannot be built; nothing was forked.
    """
    kwargs: dict[str, Any] = {
        "new_thread_id": new_thread_id,
        "metadata": metadata,
        "callbacks": callbacks,
    }
    if model is None and skills is None:
        return deck.fork(thread_id, checkpoint_id, update, **kwargs)
    settings = deck.settings.model_copy(update={"model": model}) if model else deck.settings
    other = deck.sibling(deck.bundles if skills is None else skills, settings)
    with other:
        other.check_models()
        return other.fork(thread_id, checkpoint_id, update, **kwargs)
