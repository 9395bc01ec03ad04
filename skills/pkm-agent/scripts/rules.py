"""The PKM agent without a model (``--model rules``): lexical routing into PARA.

It searches the notes, then skips low-signal
records (a bare acknowledgement, a few characters, or the user saying not to save); otherwise
it lists ``PKM/``, scores each note by the words it shares with the record
(BM25 over the note's name and title, IDF over the knowledge base, stemmed; its folders'
words count half), reads the best note that shares a word of its own with the record, appends
the record in that note's style (a bullet, a table row or a paragraph, as its last entries
are), and records the card's insight when the record has a ``fact_id``. When no note shares a
word with the record, it creates one in the PARA folder whose notes match best (``Resources/``
when none does).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from datetime import date
from typing import Any

from skilldeck.tools.text import Tokenizer

_TOKENS = Tokenizer(stem=True, stopwords=True)
_SKIP_WORDS = re.compile(
    r"don'?t save|do not save|not for my notes|no need to (?:save|note)|别保存|不要保存|不用记",
    re.I,
)
# A bare acknowledgement: nothing but such words ("ok thanks", "lol", "好的谢谢").
_ACK = re.compile(
    r"^(?:\W*(?:ok(?:ay)?|k|lol|thanks?|thank you|thx|ty|yes|no|sure|cool|nice|haha|great|"
    r"嗯|好的?|谢谢))+\W*$",
    re.I,
)
_PARA = ("Projects", "Areas", "Resources", "Archives")


def low_signal(content: str, instructions: str = "") -> str | None:
    """Why the record is not worth saving, or ``None``."""
    if _SKIP_WORDS.search(f"{content} {instructions}"):
        return "the user asked not to save it"
    if _ACK.match(content) or len(_TOKENS.tokens(content)) < 2:
        return "it carries no information worth keeping"
    return None


def _words(text: str) -> list[str]:
    return _TOKENS.tokens(text.removesuffix(".md").replace("/", " ").replace("-", " "))


def rank_notes(content: str, files: list[Mapping[str, Any]]) -> list[tuple[float, str, bool]]:
    """Each note's score against the record, best first: BM25 over the note's own name and
    title, plus half that over its folders' names; and whether its own name or title shares a
    word with the record (a folder's words alone do not make a note the record's place)."""
    own = {f["path"]: Counter(_words(f["path"].rsplit("/", 1)[-1] + " " + (f.get("title") or "")))
           for f in files}  # fmt: skip
    folders = {f["path"]: Counter(_words(f["path"].rsplit("/", 1)[0])) for f in files}
    terms = set(_TOKENS.tokens(content))
    return sorted(
        (
            (round(_bm25(terms, own, p) + 0.5 * _bm25(terms, folders, p), 4), p,
             bool(terms & own[p].keys()))
            for p in own
        ),
        key=lambda s: (-s[0], s[1]),
    )  # fmt: skip


def _bm25(terms: set[str], docs: Mapping[str, Counter[str]], path: str) -> float:
    n = max(len(docs), 1)
    df = Counter(t for d in docs.values() for t in d)
    avg = sum(sum(d.values()) for d in docs.values()) / n or 1.0
    doc, length = docs[path], sum(docs[path].values())
    score = 0.0
    for term in terms & doc.keys():
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        score += idf * doc[term] * 2.2 / (doc[term] + 1.2 * (0.25 + 0.75 * length / avg))
    return score


def styled(text: str, note: str, fact_id: str | None) -> str:
    """``text`` as the note's next entry: a bullet, a table row or a paragraph, as its last
    entries are; with the date (and the fact_id) the way a log keeps them."""
    lines = [line for line in note.splitlines() if line.strip() and not line.startswith("<!--")]
    last = lines[-1] if lines else ""
    one_line = " ".join(text.split())
    suffix = f" ({fact_id})" if fact_id else ""
    stamp = date.today().isoformat()
    if last.lstrip().startswith("|"):
        cells = max(last.count("|") - 1, 1)
        row = [stamp, one_line + suffix] + [""] * max(cells - 2, 0)
        return "| " + " | ".join(row[:cells]) + " |"
    if re.match(r"\s*[-*] ", last):
        dated = re.match(r"\s*[-*] \d{4}-\d{2}-\d{2}", last)
        return f"- {stamp} — {one_line}{suffix}" if dated else f"- {one_line}{suffix}"
    return f"{one_line}{suffix}"


def _new_note(content: str, ranked: list[tuple[float, str, bool]]) -> str:
    folders = Counter(
        p.rsplit("/", 1)[0] for s, p, _ in ranked if s > 0 and p.split("/")[0] in _PARA[:3]
    )
    folder = folders.most_common(1)[0][0] if folders else "Resources"
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z'-]+", content) if len(w) > 3][:3]
    name = "-".join(w.capitalize() for w in words) or f"Note-{date.today().isoformat()}"
    return f"{folder}/{name}.md"


def respond(state: Mapping[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """The next turn: skip, or list, read the best note, append (or create), set the insight."""
    given = state.get("input") or {}
    content = str(given.get("content") or "")
    fact_id = given.get("fact_id")
    done: dict[str, dict[str, Any]] = {}
    for result in results:
        done.setdefault(result["name"], result)
    if "pkm__search" not in done:
        return _call("pkm__search", query=content)
    why = low_signal(content, str(given.get("instructions") or ""))
    if why is not None:
        return _finish("Not saved: " + why + ".", "skipped", [], None, why)
    if "pkm__list" not in done:
        return _call("pkm__list", folder="")
    files = list((done["pkm__list"]["content"] or {}).get("files") or [])
    ranked = rank_notes(content, files)
    best = next((r for r in ranked if r[2]), None)
    written = done.get("pkm__append") or done.get("pkm__create")
    if written is None:
        if best is None:
            path = _new_note(content, ranked)
            title = path.rsplit("/", 1)[-1].removesuffix(".md").replace("-", " ")
            body = f"# {title}\n\nNotes filed from the timeline.\n\n- {' '.join(content.split())}"
            return _call("pkm__create", path=path, text=body + (f" ({fact_id})" if fact_id else ""))
        if "pkm__read" not in done:
            return _call("pkm__read", path=best[1])
        note = str((done["pkm__read"]["content"] or {}).get("text") or "")
        return _call("pkm__append", path=best[1], text=styled(content, note, fact_id))
    if not written["ok"]:
        reason = f"the note could not be written: {written['content']}"
        return _finish("Not saved: " + reason + ".", "skipped", [], None, reason)
    path = str(written["args"]["path"])
    insight = f"Filed under {path}, next to the notes it shares the most words with."
    if fact_id and "card__update_insight" not in done:
        return _call("card__update_insight", fact_id=fact_id, insight=insight)
    reason = (
        f"{path} is the note whose name and title share the most with the record."
        if best
        else f"no note matched, so a new one was started in {path.rsplit('/', 1)[0]}/."
    )
    return _finish(f"Saved to {path}.", "saved", [path], insight, reason)


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


def _finish(
    response: str, action: str, files: list[str], insight: str | None, reason: str
) -> dict[str, Any]:
    pkm = {"action": action, "files": files, "insight": insight, "reason": reason}
    return {
        "output": {
            "response": response,
            "profile": {},
            "data": {"pkm": pkm},
            "control": {"action": "finish"},
        }
    }
