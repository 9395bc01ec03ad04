"""A turn's conversation: immutable rows in the store, chained, addressed by their content.

Each step appends its messages as one row ``{"parent": <row>, "messages": [...]}`` whose key is
a digest of that content, parent included, so a row never changes meaning: writing it again (a
node re-run after a crash) writes the same row, and two runs that said the same things from the
same point share it. The checkpoint keeps only the turn's ``head``, the key of the last row it
has seen; the conversation at any checkpoint is the chain that ends at its head. So:

- a checkpoint's size does not grow with the conversation (one key, however long the turn);
- re-running from an earlier checkpoint never sees the messages written after it;
- a fork at any checkpoint (mid-turn too) reads exactly the conversation the original had there.

A row that ran tool calls keeps their records beside their results (``"calls"``, with the
attempt that made them): :func:`history` reads them with the messages, so the checkpoint's
:class:`~skilldeck.graph.records.Turn` need not carry a turn's calls, however many rounds it
takes, and an attempt's record lists them when it ends.

Rows live in the turn's namespace, not the thread's, so a fork that carries a turn in flight
reads and extends the same chain. Which threads refer to a turn is recorded beside it
(:func:`refer`), so deleting a thread (:func:`forget_thread`) removes only the rows no other
thread still reaches. A skill's system prompt (its SKILL.md, references and contract, the same
for every turn) is stored once, under its content hash, and rows refer to it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict
from langgraph.store.base import BaseStore, Op, PutOp, SearchItem, SearchOp

from skilldeck._internal.store_keys import thread_label
from skilldeck.errors import CheckpointError
from skilldeck.graph.records import ToolCall

__all__ = [
    "PROMPTS",
    "TURN_DATA",
    "History",
    "append",
    "forget_thread",
    "history",
    "read",
    "refer",
    "turn_namespace",
]

#: Where system prompts are stored, keyed by the sha256 of their text.
PROMPTS = ("skilldeck", "prompts")
_TURN_REFS = ("skilldeck", "turn_refs")  # turn -> threads that reach it
_THREAD_TURNS = ("skilldeck", "thread_turns")  # thread -> its turns
#: Rows one turn may hold, across every fork that extends it (a bound for the store search).
MAX_ROWS = 20_000
_REF = "prompt_ref"
# The prompts each store is known to hold, so a turn writes only its own row.
_stored: weakref.WeakKeyDictionary[BaseStore, set[str]] = weakref.WeakKeyDictionary()


#: What a turn keeps in the store besides its rows (its own namespaces, deleted with it).
TURN_DATA = ("evidence",)


def turn_namespace(turn_id: str, kind: str = "turns") -> tuple[str, ...]:
    """The namespace of a turn's rows, or of its ``kind`` of data (:data:`TURN_DATA`)."""
    return ("skilldeck", kind, turn_id)


@dataclass(frozen=True, slots=True)
class History:
    """A turn's transcript up to a head: its messages, and the records of the tool calls it
    ran with the attempt that ran each (oldest first)."""

    head: str | None
    messages: tuple[BaseMessage, ...] = ()
    calls: tuple[tuple[int, ToolCall], ...] = ()

    def then(
        self,
        head: str,
        messages: Sequence[BaseMessage],
        calls: Sequence[ToolCall] = (),
        attempt: int = 1,
    ) -> History:
        """This history and the row :func:`append` wrote after it (``head``)."""
        ran = tuple((attempt, c) for c in calls)
        return History(head, (*self.messages, *messages), (*self.calls, *ran))

    def of_attempt(self, attempt: int) -> tuple[ToolCall, ...]:
        """The calls ``attempt`` ran, in order."""
        return tuple(c for n, c in self.calls if n == attempt)

    def standing(self, attempt: int) -> tuple[ToolCall, ...]:
        """The calls of attempts before ``attempt`` whose results still stand: those that
        worked and changed no file (a rejected attempt's file changes are undone)."""
        return tuple(c for n, c in self.calls if n < attempt and c.worked and not c.wrote)

    def made(self, attempt: int) -> tuple[ToolCall, ...]:
        """The calls whose results ``attempt``'s output may report: those of earlier attempts
        that still stand, and its own that worked."""
        own = (c for c in self.of_attempt(attempt) if c.worked)
        return (*self.standing(attempt), *own)


def append(
    store: BaseStore,
    turn_id: str,
    head: str | None,
    messages: Sequence[BaseMessage],
    calls: Sequence[ToolCall] = (),
    attempt: int = 1,
    *,
    reaches: str | None = None,
) -> str:
    """Write ``messages`` as the row after ``head``; the new head. ``calls``: the records of
    the tool calls whose results ``messages`` hold, made by ``attempt``; ``reaches``: a thread
    to :func:`refer` to the turn (its first row's writer).

    A system prompt the store may not hold yet, and the reference, are written in the same
    batch: one transaction a step.
    """
    known = _stored.setdefault(store, set())
    ops: list[Op] = _refer_ops(reaches, [turn_id]) if reaches is not None else []
    dumped = messages_to_dict(list(messages))
    row, prompts = _row(dumped, head, calls, attempt)
    text = _canonical(row)
    # One pass in C over the row's JSON (and each prompt's own, cached) finds the rare lone
    # surrogate; only then is every value walked.
    if _SURROGATE.search(text) or any(_unstorable(p["data"]["content"]) for p in prompts):
        row, prompts = _row(_storable(dumped), head, calls, attempt)
        text = _canonical(row)
    for prompt in prompts:
        key = _digest(prompt["data"]["content"])
        if key not in known:
            ops.append(PutOp(PROMPTS, key, {"message": prompt}))
    key = hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()[:32]
    ops.append(PutOp(turn_namespace(turn_id), key, row))
    store.batch(ops)
    known.update(op.key for op in ops[:-1] if isinstance(op, PutOp) and op.namespace == PROMPTS)
    return key


def read(store: BaseStore, turn_id: str, head: str | None) -> list[BaseMessage]:
    """The conversation of a turn up to ``head``, oldest first.

    Raises:
        CheckpointError: the chain is broken (a row or a prompt the store does not hold: the
            store was not copied with the checkpoints).
    """
    return list(history(store, turn_id, head).messages)


def history(store: BaseStore, turn_id: str, head: str | None) -> History:
    """The transcript of a turn up to ``head``: its messages and its calls' records.

    Raises:
        CheckpointError: the chain is broken (a row or a prompt the store does not hold: the
            store was not copied with the checkpoints).
    """
    if head is None:
        return History(None)
    items = store.search(turn_namespace(turn_id), limit=MAX_ROWS)
    rows = {item.key: item.value for item in items}
    chain: list[dict[str, Any]] = []
    key: str | None = head
    while key is not None:
        row = rows.get(key)
        if row is None:
            raise CheckpointError(
                f"the transcript of turn {turn_id} lacks row {key}; the store was not copied "
                "with the checkpoints"
            )
        chain.append(row)
        key = row["parent"]
    chain.reverse()
    found = [m for row in chain for m in row["messages"]]
    messages = messages_from_dict(
        [_prompt(store, m["key"]) if m["type"] == _REF else m for m in found]
    )
    calls = tuple(
        (int(row["attempt"]), ToolCall.load(c)) for row in chain for c in row.get("calls", ())
    )
    return History(head, tuple(messages), calls)


def refer(store: BaseStore, thread_id: str, turn_ids: Iterable[str]) -> None:
    """Record that ``thread_id`` reaches the rows of ``turn_ids`` (it ran them, or a fork
    carried them over), so deleting another thread keeps them."""
    ops = _refer_ops(thread_id, turn_ids)
    if ops:
        store.batch(ops)


def _refer_ops(thread_id: str, turn_ids: Iterable[str]) -> list[Op]:
    label = thread_label(thread_id)
    ops: list[Op] = []
    for turn_id in turn_ids:
        ops += [
            PutOp((*_TURN_REFS, turn_id), label, {}),
            PutOp((*_THREAD_TURNS, label), turn_id, {}),
        ]
    return ops


def forget_thread(store: BaseStore, thread_id: str) -> int:
    """Drop ``thread_id``'s references to its turns, and the rows of each turn no other thread
    reaches; the number of turns deleted."""
    label = thread_label(thread_id)
    deleted = 0
    # Three batches a turn (each a round trip to a server's store), in this order: a search
    # in the batch that deletes the reference could run before the delete.
    for item in store.search((*_THREAD_TURNS, label), limit=MAX_ROWS):
        turn_id = item.key
        refs = [
            PutOp((*_TURN_REFS, turn_id), label, None),
            PutOp((*_THREAD_TURNS, label), turn_id, None),
        ]
        store.batch(refs)
        namespaces = [turn_namespace(turn_id, kind) for kind in ("turns", *TURN_DATA)]
        searches = [SearchOp(ns, limit=MAX_ROWS) for ns in namespaces]
        found = cast(
            list[list[SearchItem]],
            store.batch([SearchOp((*_TURN_REFS, turn_id), limit=1), *searches]),
        )
        if found[0]:
            continue  # another thread (a fork) still reaches the turn
        rows = zip(namespaces, found[1:], strict=True)
        store.batch([PutOp(ns, row.key, None) for ns, items in rows for row in items])
        deleted += 1
    return deleted


_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(value: Any) -> Any:
    """``value`` with lone UTF-16 surrogates (a model may send them as JSON escapes) replaced:
    no store can encode them. The contract check sees the message as it came."""
    if isinstance(value, str):
        return (
            value.encode("utf-8", "replace").decode("utf-8") if _SURROGATE.search(value) else value
        )
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def _row(
    dumped: list[dict[str, Any]], head: str | None, calls: Sequence[ToolCall], attempt: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A transcript row of ``dumped`` messages after ``head``, and the system prompts it
    refers to by their hash (stored once, apart)."""
    rows: list[dict[str, Any]] = []
    prompts: list[dict[str, Any]] = []
    for message in dumped:
        if _plain_system(message):
            prompts.append(message)
            rows.append({"type": _REF, "key": _digest(message["data"]["content"])})
        else:
            rows.append(message)
    row: dict[str, Any] = {"parent": head, "messages": rows}
    if calls:
        row |= {"attempt": attempt, "calls": [c.dump() for c in calls]}
    return row, prompts


@functools.lru_cache(maxsize=256)
def _unstorable(text: str) -> bool:
    # A runner passes the same prompt string every turn: it is searched once.
    return _SURROGATE.search(text) is not None


def _plain_system(message: dict[str, Any]) -> bool:
    """A system message with only text, which its hash identifies."""
    data = message["data"]
    extras = ("additional_kwargs", "response_metadata", "name", "id")
    return (
        message["type"] == "system"
        and isinstance(data["content"], str)
        and not any(data.get(k) for k in extras)
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@functools.lru_cache(maxsize=256)
def _digest(text: str) -> str:
    # A runner passes the same prompt string every turn: its hash is computed once. (A prompt
    # with a lone surrogate is hashed only to be replaced by its storable copy.)
    return hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()


def _prompt(store: BaseStore, key: str) -> dict[str, Any]:
    item = store.get(PROMPTS, key)
    if item is None:
        raise CheckpointError(
            f"a transcript refers to system prompt {key} that the store does not hold; the "
            "store was not copied with the checkpoints"
        )
    message: dict[str, Any] = item.value["message"]
    return message
