"""The card agent without a model (``--model rules``): a rule-based card matcher.

Like the rule-based matcher Memex ships, it reads the record for signals and picks the template
they point to, first match wins: a URL is a ``link`` (a ``video`` on a video site), a future
time with a place or a medium is an ``event`` (past tense makes it a ``conversation`` when
people talked), a score is a ``rating``, an amount of money a ``transaction``, a number with a
unit a ``metric``, and so on; a plain thought is ``compact``. It fills ``ui_config`` with what
the signals captured and keeps the record as the card's ``content``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from skilldeck.tools.cards import TEMPLATES, card_relpath

URL = re.compile(r"https?://\S+")
VIDEO_SITE = re.compile(r"youtu\.?be|vimeo|bilibili|twitch|/watch\b|video|webinar|recording", re.I)
TIME = re.compile(
    r"\b\d{1,2}(?::\d{2})\s*(?:am|pm)?\b|\b\d{1,2}\s*(?:am|pm)\b|[上下]午\s*\d{1,2}\s*[点點]"
    r"|\d{1,2}\s*[点點](?:\d{1,2}分?)?",
    re.I,
)
FUTURE = re.compile(
    r"\b(?:tomorrow|tonight|next|upcoming|on (?:mon|tues|wednes|thurs|fri|satur|sun)day|"
    r"(?:mon|tues|wednes|thurs|fri|satur|sun)day|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|"
    r"dec)\w*\b|明天|后天|下周|周[一二三四五六日天]|星期",
    re.I,
)
PAST = re.compile(
    r"\b(?:yesterday|last|ago|had|was|were|went|did|discussed|agreed|decided|talked|said|"
    r"minutes|notes? from|recap)\b|昨天|刚才|已经",
    re.I,
)
MEDIUM = re.compile(
    r"\b(?:zoom|teams|google meet|meet|skype|webex|phone|call|room|office|studio|clinic|"
    r"restaurant|cafe|hall|online)\b|腾讯会议|电话|会议室|视频",
    re.I,
)
MEETING = re.compile(
    r"\b(?:meeting|standup|stand-up|call|sync|interview|appointment|class|lesson|dinner|lunch|"
    r"breakfast|flight|train|session|workshop|webinar|1:1)\b|会议|开会|面试|约",
    re.I,
)
SCORE = re.compile(r"\b\d+(?:\.\d+)?\s*/\s*(?:5|10|100)\b|\b\d(?:\.\d)?\s*stars?\b|[★]{1,5}", re.I)
MONEY = re.compile(
    r"[€$£¥￥]\s?\d[\d,.]*|\b\d[\d,.]*\s?(?:eur|usd|gbp|cny|rmb|jpy|dollars?|euros?)\b|\d[\d,.]*\s?元",
    re.I,
)
MUSING = re.compile(r"\b(?:maybe|might|would|should i|thinking|wonder|too expensive)\b|\?", re.I)
MEASURE = re.compile(
    r"\b\d+(?:\.\d+)?\s*(?:h|hrs?|hours?|mins?|minutes|km|mi|miles|kg|lbs?|bpm|steps|kcal|"
    r"cal|ml|l|%)\b|resting heart rate \d+|\d+(?:\.\d+)?\s*(?:小时|公里|公斤|步)",
    re.I,
)
PROGRESS = re.compile(
    r"\b(?:chapter|page|episode|lesson|module)\s+\d+|\b\d+\s*%\s*(?:done|through|complete)|"
    r"\bstarted reading|\bnow at\b|读到",
    re.I,
)
TASK = re.compile(
    r"^\s*(?:todo|to do|remember to|need to|have to|must|don't forget|buy|renew|call|email|"
    r"send|book|pay|fix|finish|prepare|submit)\b|\b(?:before|by|due)\s+\w+|记得|需要|要去",
    re.I,
)
QUOTE = re.compile(r"[\"“「](.{8,}?)[\"”」]\s*[-—–~]+\s*(\w[\w .'-]+)|^[\"“「].{8,}[\"”」]$")
CONTACT = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|\+?\d[\d ()-]{7,}\d")
MET = re.compile(r"\b(?:met|new contact|introduced|intro to|connect(?:ed)? with)\b|认识", re.I)
ADDRESS = re.compile(
    r"\b\d+\s+(?:rue|rua|via|calle|street|st\.?|avenue|ave\.?|road|rd\.?|lane|blvd)\b[^,.]*|"
    r"\b(?:rue|rua|via|calle)\s+[\w' -]+",
    re.I,
)
MOOD = re.compile(
    r"\b(?:feel(?:ing)?|felt|tired|exhausted|happy|sad|anxious|stressed|angry|frustrated|"
    r"excited|grateful|lonely|annoyed|hate|love)\b|累|开心|难过|焦虑|烦",
    re.I,
)
CODE = re.compile(r"`[^`]+`|\b(?:def|class|import|SELECT|git|npm|pip|docker)\b .+", re.I)
STEPS = re.compile(r"\b(?:step \d|first,|then,|finally,|recipe)\b|^\s*\d+\.\s", re.I | re.M)
ROUTINE = re.compile(
    r"\b(?:every (?:day|morning|night|week)|daily|weekly|each morning)\b|每天", re.I
)


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    return match.group(0).strip() if match else None


# (template, test, ui_config) in order: the first test that holds picks the primary template.
Rule = tuple[str, Callable[[str], bool], Callable[[str], dict[str, Any]]]
RULES: list[Rule] = [
    (
        "video",
        lambda t: bool(URL.search(t) and VIDEO_SITE.search(t)),
        lambda t: {"url": _first(URL, t)},
    ),
    ("link", lambda t: bool(URL.search(t)), lambda t: {"url": _first(URL, t)}),
    (
        "quote",
        lambda t: bool(QUOTE.search(t.strip())),
        lambda t: {"text": t.strip()},
    ),
    (
        "conversation",
        lambda t: bool(MEETING.search(t) and PAST.search(t)),
        lambda t: {"summary": t.strip()},
    ),
    (
        "event",
        lambda t: bool(
            TIME.search(t) and (MEDIUM.search(t) or MEETING.search(t) or FUTURE.search(t))
        ),
        lambda t: {k: v for k, v in (("start", _first(TIME, t)), ("medium", _first(MEDIUM, t)))
                   if v},
    ),
    (
        "person",
        lambda t: bool(CONTACT.search(t) and MET.search(t)),
        lambda t: {"contact": _first(CONTACT, t)},
    ),
    ("rating", lambda t: bool(SCORE.search(t)), lambda t: {"score": _first(SCORE, t)}),
    ("task", lambda t: bool(TASK.search(t)), lambda t: {"task": t.strip()}),
    (
        "transaction",
        lambda t: bool(MONEY.search(t) and not MUSING.search(t)),
        lambda t: {"amount": _first(MONEY, t)},
    ),
    ("progress", lambda t: bool(PROGRESS.search(t)), lambda t: {"goal": t.strip()}),
    ("routine", lambda t: bool(ROUTINE.search(t)), lambda t: {"activity": t.strip()}),
    ("metric", lambda t: bool(MEASURE.search(t)), lambda t: {"value": _first(MEASURE, t)}),
    ("place", lambda t: bool(ADDRESS.search(t)), lambda t: {"address": _first(ADDRESS, t)}),
    ("snippet", lambda t: bool(CODE.search(t)), lambda t: {"text": t.strip()}),
    ("procedure", lambda t: bool(STEPS.search(t)), lambda t: {"steps": [t.strip()]}),
    ("mood", lambda t: bool(MOOD.search(t)), lambda t: {"feeling": _first(MOOD, t)}),
]  # fmt: skip


def match_templates(text: str) -> list[str]:
    """The templates whose signals ``text`` has, the primary first (at most three); a plain
    thought is ``compact``."""
    matched = [name for name, test, _ in RULES if test(text)]
    return matched[:3] or ["compact"]


def build_card(fact_id: str, content: str) -> dict[str, Any]:
    """The card the rules make of one record."""
    templates = match_templates(content)
    ui: dict[str, Any] = {}
    for name, _, fields in RULES:
        if name in templates:
            ui.update({k: v for k, v in fields(content).items() if k not in ui})
    if templates == ["compact"]:
        ui = {"text": content.strip()}
    shape = {n for t in templates for n, _ in TEMPLATES[t].shape}
    title = re.split(r"(?<=[.!?。！？])\s|\n", content.strip(), maxsplit=1)[0]
    return {
        "fact_id": fact_id,
        "title": title if len(title) <= 60 else title[:57].rstrip() + "...",
        "template_ids": templates,
        "tags": templates[:2],
        "ui_config": {k: v for k, v in ui.items() if k in shape},
        "content": content,
    }


def respond(state: Mapping[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """The next turn: read the record if it was not given, save its card, then finish."""
    given = state.get("input") or {}
    fact_id = str(given.get("fact_id"))
    done = {r["name"]: r for r in results}
    content = given.get("content")
    if not content:
        read = done.get("fact__read")
        if read is None:
            return {"tool_calls": [{"name": "fact__read", "args": {"fact_id": fact_id}}]}
        if not read["ok"]:
            return _finish(f"The record could not be read: {read['content']}", None)
        content = read["content"]["content"]
    saved = done.get("card__save")
    if saved is None:
        return {
            "tool_calls": [{"name": "card__save", "args": {"card": build_card(fact_id, content)}}]
        }
    if not saved["ok"]:
        return _finish(f"The card could not be saved: {saved['content']}", None)
    card = saved["args"]["card"]
    return _finish(
        f"Saved the card '{card['title']}'.",
        {**{k: card[k] for k in ("fact_id", "title", "template_ids", "tags", "ui_config")},
         "path": card_relpath(fact_id)},
    )  # fmt: skip


def _finish(response: str, card: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "output": {
            "response": response,
            "profile": {"card_status": "completed"} if card else {},
            "data": {"timeline_card": card} if card else {},
            "control": {"action": "finish"},
        }
    }
