"""Read message files for the message store: JSONL, JSON, and LoCoMo conversations.

A plain message record is ``{"text", "role", "ts", "thread_id"?, "id"?, "meta"?}``. Records
without an ``id`` get one from a hash of their content, so re-importing a file is idempotent.

LoCoMo (``locomo10.json``) samples become one thread each: every turn is a message whose ``ts``
is its session's date (plus the turn's position, to keep order), whose ``meta`` keeps
``dia_id``, ``speaker`` and ``session``, and whose role is ``user`` for ``speaker_a`` and
``assistant`` for ``speaker_b``. A shared photo's caption is part of the turn's text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from skilldeck.errors import SkillDeckError, ToolError
from skilldeck.tools.messages import Message, format_ts, parse_ts

__all__ = ["parse_locomo_date", "read_messages_file"]

_SESSION = re.compile(r"^session_(\d+)$")


def parse_locomo_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as a UTC datetime."""
    try:
        return parse_ts(datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").isoformat())
    except ValueError:
        raise SkillDeckError(f"unreadable LoCoMo session date {text!r}") from None


def _locomo(sample: Mapping[str, Any], user_id: str) -> Iterator[Message]:
    conv = sample["conversation"]
    thread = str(sample.get("sample_id", "locomo"))
    roles = {conv.get("speaker_a"): "user", conv.get("speaker_b"): "assistant"}
    sessions = sorted((int(m.group(1)), key) for key in conv if (m := _SESSION.match(key)))
    for number, key in sessions:
        start = parse_locomo_date(conv[f"{key}_date_time"])
        for i, turn in enumerate(conv[key]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo: {turn['blip_caption']}]"
            yield Message(
                id=f"{thread}:{turn['dia_id']}",
                user_id=user_id,
                thread_id=thread,
                role=roles.get(turn["speaker"], "user"),
                ts=format_ts(start + timedelta(seconds=i)),
                text=text,
                meta={"dia_id": turn["dia_id"], "speaker": turn["speaker"], "session": number},
            )


def _record(raw: Any, user_id: str, where: str) -> Message:
    if not isinstance(raw, Mapping):
        raise SkillDeckError(f"{where}: a message must be a JSON object")
    for key in ("text", "role", "ts"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise SkillDeckError(f"{where}: missing or empty {key!r}")
    if raw.get("user_id") not in (None, user_id):
        raise SkillDeckError(
            f"{where}: user_id {raw['user_id']!r} differs from the import's user {user_id!r}"
        )
    try:
        ts = format_ts(parse_ts(raw["ts"]))
    except ToolError as exc:
        raise SkillDeckError(f"{where}: {exc}") from None
    thread = str(raw.get("thread_id") or "default")
    ident = (
        raw.get("id")
        or hashlib.sha256(
            json.dumps([thread, ts, raw["role"], raw["text"]], ensure_ascii=False).encode()
        ).hexdigest()[:24]
    )
    meta = raw.get("meta") or {}
    if not isinstance(meta, Mapping):
        raise SkillDeckError(f"{where}: 'meta' must be an object")
    return Message(str(ident), user_id, thread, raw["role"], ts, raw["text"], dict(meta))


def read_messages_file(path: str | Path, user_id: str) -> Iterator[Message]:
    """The messages in ``path`` (``.jsonl`` or ``.json``; LoCoMo detected by its shape).

    Raises:
        SkillDeckError: the file is unreadable; the message names the line or record.
    """
    file = Path(path)
    if not file.is_file():
        raise SkillDeckError(f"no such file: {file}")
    if file.suffix == ".jsonl":
        with file.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    try:
                        raw = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise SkillDeckError(f"{file}:{number}: invalid JSON: {exc.msg}") from None
                    yield _record(raw, user_id, f"{file}:{number}")
        return
    try:
        data = json.loads(file.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SkillDeckError(f"{file}: not a JSON or JSONL file: {exc}") from None
    records = data if isinstance(data, list) else [data]
    for i, raw in enumerate(records):
        if isinstance(raw, Mapping) and isinstance(raw.get("conversation"), Mapping):
            yield from _locomo(raw, user_id)
        else:
            yield _record(raw, user_id, f"{file}[{i}]")
