"""The no-model planner of seed 001: time signals, hybrid search, neighbors and cue extraction.

When no model is configured, :class:`RulesPlanner` writes the plans a model would write, and
they go through the same validation and execution as a model's (see :mod:`skilldeck.nodes.planner`):

1. The question's time signal becomes an explicit ``time_range``: a date, a month or a year, or
   最近 / 上次 / recently / last time relative to the user's latest message (stored
   conversations may be old); no signal is an explicit all-time range.
2. ``lexical_search`` on the question's keywords, then ``semantic_search`` on the question
   (hits above a similarity floor), fused as ``Memory.hybrid_search`` fuses them.
3. No hit in a narrowed window widens it to all time (seed 001's Reflect rule); otherwise
   ``neighbors`` of the top anchor, with seed 001's default ``before=8, after=0``.

:func:`extract_view` fills ``memory_view`` from cue patterns in the user's own messages among the
evidence, each item citing its message.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from skilldeck.tools.messages import format_ts, parse_ts
from skilldeck.tools.text import ENGLISH_STOPWORDS

__all__ = [
    "ALL_TIME",
    "LoopView",
    "RulesConfig",
    "RulesPlanner",
    "TimeWindow",
    "extract_view",
    "first_message_ts",
    "keywords",
    "latest_message_ts",
    "time_window",
]

ALL_TIME = "1970-01-01T00:00:00Z"

# -- time signals ----------------------------------------------------------------------------
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
# Most specific first: the first pattern that matches decides the window.
_SIGNALS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("day", r"(?P<year>\d{4})年(?P<month>\d{1,2})月(?P<day>\d{1,2})[日号]"),
        ("day", r"\b(?P<year>\d{4})-(?P<month>\d\d)-(?P<day>\d\d)\b"),
        ("day", rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b"),
        ("day", rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b"),
        ("month", r"(?P<year>\d{4})年(?P<month>\d{1,2})月"),
        ("month", rf"\b(?:in\s+)?{_MONTH},?\s+{_YEAR}\b"),
        ("month", r"(?<![\d年])(?P<month>\d{1,2})月份?"),
        ("month", rf"\b(?:in|during)\s+{_MONTH}\b"),
        ("year", r"(?P<year>\d{4})年"),
        ("year", rf"\b(?:in\s+)?{_YEAR}\b"),
        ("recent", r"\b(?:recently|lately|these days|of late)\b|最近|近来|近期|这几天|这阵子"),
        ("last", r"\blast time\b|上一次|上次|上回"),
        ("long", r"\blong[- ]term\b|\balways\b|长期|一直|向来|总是"),
    )
)
#: How far back a relative signal reaches from the user's latest message.
RELATIVE_DAYS = {"recent": 30, "last": 90}


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """An explicit time range: ``since`` (inclusive) and ``until`` (exclusive, optional)."""

    since: str
    until: str | None
    kind: str  # day | month | year | recent | last | long | all
    signal: str | None = None  # the words of the question that set it

    @property
    def narrowed(self) -> bool:
        return self.kind not in ("all", "long")

    def as_filter(self) -> dict[str, str]:
        return {"since": self.since, **({"until": self.until} if self.until else {})}


def _month_number(text: str) -> int:
    return int(text) if text.isdigit() else _MONTHS[text.lower().rstrip(".")]


def time_window(question: str, latest: datetime | None) -> TimeWindow:
    """The time range a question's signal asks for; relative signals count from ``latest``."""
    base = latest or datetime.now(UTC)
    for kind, pattern in _SIGNALS:
        match = pattern.search(question)
        if match is None:
            continue
        found = match.groupdict()
        signal = match.group(0).strip()
        try:
            if kind in RELATIVE_DAYS:
                since = base - timedelta(days=RELATIVE_DAYS[kind])
                until = base + timedelta(seconds=1)  # the latest message itself is in range
            elif kind == "long":
                return TimeWindow(ALL_TIME, None, kind, signal)
            else:
                month = _month_number(found["month"]) if found.get("month") else 1
                year = int(found["year"]) if found.get("year") else base.year
                if not found.get("year") and month > base.month:
                    year -= 1  # "in June" means the last June before the latest message
                if kind == "day":
                    since = datetime(year, month, int(found["day"]), tzinfo=UTC)
                    until = since + timedelta(days=1)
                elif kind == "month":
                    since = datetime(year, month, 1, tzinfo=UTC)
                    until = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
                else:
                    since, until = (
                        datetime(year, 1, 1, tzinfo=UTC),
                        datetime(year + 1, 1, 1, tzinfo=UTC),
                    )
        except (ValueError, KeyError):
            continue  # "31 February": not a date, so not a signal
        return TimeWindow(format_ts(since), format_ts(until), kind, signal)
    return TimeWindow(ALL_TIME, None, "all")


def _strip_signals(question: str) -> str:
    for _, pattern in _SIGNALS:
        question = pattern.sub(" ", question)
    return question


# -- the user's latest message, found with messages_list --------------------------------------
Call = Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None]
_FAR_PAST = datetime(1, 1, 2, tzinfo=UTC).timestamp()
_FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC).timestamp()


def latest_message_ts(call: Call, now: datetime | None = None) -> datetime | None:
    """When the user's latest message was written, or ``None`` if there is none.

    ``messages_list`` pages in time order only, so: gallop back from now until some message is
    newer than the bound, then halve the window until one page holds all of it. ``call(tool,
    args)`` returns the tool's result, or ``None`` when it failed.
    """

    def page(since: float, size: int) -> Mapping[str, Any] | None:
        iso = format_ts(datetime.fromtimestamp(since, UTC))
        return call("messages_list", {"role": "any", "since": iso, "page_size": size})

    def newer(since: float) -> bool:
        found = page(since, 1)
        return bool(found and found.get("hits"))

    hi = ((now or datetime.now(UTC)) + timedelta(days=1)).timestamp()
    if newer(hi):  # messages dated in the future: the bound is the far future instead
        hi = _FAR_FUTURE
    step = 86_400.0
    while not newer(lo := max(hi - step, _FAR_PAST)):
        if lo == _FAR_PAST:
            return None  # no message at all
        step *= 2
    last = None
    for _ in range(64):
        found = page(lo, 200)
        hits = (found or {}).get("hits") or []
        if not hits:
            break
        last = parse_ts(str(hits[-1]["ts"]))
        if not (found or {}).get("next_cursor"):
            break
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if newer(mid) else (lo, mid)
    # Past 64 halvings, over 200 messages share one time: the page's last one has that time.
    return last


def first_message_ts(call: Call) -> datetime | None:
    """When the user's first message was written (``messages_list`` pages oldest first), or
    ``None`` if there is none or the call failed."""
    since = format_ts(datetime.fromtimestamp(_FAR_PAST, UTC))
    found = call("messages_list", {"role": "any", "since": since, "page_size": 1})
    hits = (found or {}).get("hits") or []
    return parse_ts(str(hits[0]["ts"])) if hits else None


# -- queries -----------------------------------------------------------------------------------
_QUESTION_WORDS = frozenset(
    (
        *("what", "when", "where", "who", "whom", "whose", "which", "why", "how", "did", "does"),
        *("do", "is", "was", "were", "are", "would", "could", "should", "can", "will", "may"),
        *("might", "likely", "tell", "know", "remember", "ever", "please"),
    )
)
_ZH_FILLERS = re.compile(
    r"什么|哪些|哪里|哪儿|怎么样|怎么|为什么|是否|有没有|多少|还记得|记得|知道|告诉|请问|"
    r"之前|以前|聊过|说过|提到过|提到|[吗呢吧啊呀谁几]"
)
_WORD = re.compile(r"[^\W\d_](?:[\w'’-]*\w)?|\d+", re.UNICODE)


def keywords(question: str) -> list[str]:
    """The question's content words: no time signals, question words or stop words."""
    text = _ZH_FILLERS.sub(" ", _strip_signals(question))
    out = []
    for word in _WORD.findall(text):
        word = re.sub(r"['’]s$", "", word)  # "Gina's" -> "Gina": possessives are not indexed
        folded = word.lower().replace("'", "").replace("’", "")
        if folded in ENGLISH_STOPWORDS or folded in _QUESTION_WORDS:
            continue
        out.append(word)
    return out


# -- the planner -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RulesConfig:
    """Settings of the deterministic planner (the benchmark compares variants)."""

    depth: int = 50  # page_size / top_k of each search, as Memory.hybrid_search
    # Dense hits below this cosine are not evidence: without a floor a dense search always
    # "finds" top_k messages, and a question about something never said must find nothing.
    semantic_floor: float | None = 0.3
    before: int = 8  # seed 001's neighbors default
    after: int = 0
    time_signals: bool = True


@dataclass(frozen=True, slots=True)
class LoopView:
    """What the planner may read about the rounds so far (the runtime keeps the loop)."""

    searches: Sequence[Mapping[str, Any]]  # {"tool", "args", "hits", "ok"} of each search run
    anchors: Sequence[str]  # fused ranking of every search hit
    expanded: frozenset[str]  # anchors whose neighbors were fetched (or failed to be)


class RulesPlanner:
    """Plans ``{stop, tool, args}`` for one question; see the module docstring."""

    def __init__(
        self,
        question: str,
        latest: datetime | None,
        *,
        empty: bool = False,
        config: RulesConfig | None = None,
    ) -> None:
        self.config = config or RulesConfig()
        self.question = question.strip()
        self.window = (
            time_window(self.question, latest)
            if self.config.time_signals
            else TimeWindow(ALL_TIME, None, "all")
        )
        self.query = " ".join(keywords(self.question))
        stripped = " ".join(_strip_signals(self.question).split())
        self.semantic_query = stripped or self.question
        self.empty = empty  # the user has no messages at all: nothing to search

    def plan(self, loop: LoopView) -> dict[str, Any]:
        """The next plan: one of the four tools with explicit filters, or stop."""
        if not self.question or self.empty:
            return {"stop": True}
        done = {s["tool"] for s in loop.searches}
        if self.query and "lexical_search" not in done:
            return self._search("lexical_search", self.window)
        if "semantic_search" not in done:
            return self._search("semantic_search", self.window)
        widened = any("until" not in s["args"]["filter"]["time_range"] for s in loop.searches)
        if self.window.narrowed and not widened and not loop.anchors:
            # Reflect: nothing in the window, so widen it to all time. One hit is an anchor
            # already: its neighbors are the better use of the round.
            tool = "lexical_search" if self.query else "semantic_search"
            return self._search(tool, TimeWindow(ALL_TIME, None, "all"))
        pending = [a for a in loop.anchors[:1] if a not in loop.expanded]
        if pending:
            args = {"message_id": pending[0], "before": self.config.before}
            return {
                "stop": False,
                "tool": "neighbors",
                "args": {**args, "after": self.config.after},
            }
        return {"stop": True}

    def _search(self, tool: str, window: TimeWindow) -> dict[str, Any]:
        args: dict[str, Any] = {"filter": {"role": "any", "time_range": window.as_filter()}}
        if tool == "lexical_search":
            args.update(query_text=self.query, page_size=self.config.depth)
        else:
            args.update(query_text=self.semantic_query, top_k=self.config.depth)
            if self.config.semantic_floor is not None:
                args["min_score"] = self.config.semantic_floor
        return {"stop": False, "tool": tool, "args": args}


# -- synthesis from cue patterns --------------------------------------------------------------
_CUES: dict[str, re.Pattern[str]] = {
    "preferences": re.compile(
        r"\b(?:like[sd]?|love[sd]?|prefer(?:s|red)?|enjoy(?:s|ed)?|favou?rites?)\b|"
        r"喜欢|(?<!可)爱|不吃|偏好",
        re.IGNORECASE,
    ),
    "constraints": re.compile(
        r"\b(?:can['’]?t|cannot|allergic|must|never|don['’]?t eat|do not eat)\b|"
        r"不能|过敏|必须|不要",
        re.IGNORECASE,
    ),
    "profile": re.compile(
        r"\bI am\b|\bI['’]?m an?\b|\bI work|\bI live|\bmy job\b|我是|我在|我住", re.IGNORECASE
    ),
}
# "looks like", "can't wait": the cue word, but not a preference or a constraint.
_FALSE_CUES = re.compile(
    r"\b(?:feels?|felt|looks?|looked|seems?|seemed|sounds?|sounded|something|kind of|sort of)"
    r"\s+like\b|\bcan['’]?t (?:wait|believe)\b|\bcannot (?:wait|believe)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i['’]m|i['’]ve|i['’]d|my|me|mine|we|our|us)\b", re.IGNORECASE)
_CJK = re.compile(r"[\u3400-\u9fff]")
_SENTENCE = re.compile(r"(?<=[.!?。！？；;])\s*|\n+")
_MAX_ITEM = 200


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def extract_view(evidence: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``memory_view`` from cue patterns in the user-role messages of ``evidence``.

    Each sentence with a cue becomes an item citing its message; English sentences must speak
    in the first person (a user quoting someone else states nothing about themselves).
    """
    view: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("preferences", "profile", "constraints")
    }
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for message in evidence:
        if message.get("role") != "user":
            continue
        for sentence in _sentences(str(message.get("text", ""))):
            cleaned = _FALSE_CUES.sub(" ", sentence)
            if not _CJK.search(sentence) and not _FIRST_PERSON.search(sentence):
                continue
            text = sentence if len(sentence) <= _MAX_ITEM else sentence[: _MAX_ITEM - 1] + "…"
            for category, cue in _CUES.items():
                if not cue.search(cleaned):
                    continue
                item = seen.get((category, text))
                if item is None:
                    item = seen[(category, text)] = {"text": text, "evidence": []}
                    view[category].append(item)
                if message["message_id"] not in item["evidence"]:
                    item["evidence"].append(message["message_id"])
    return view
