"""Tokenization for English and Chinese (and other CJK) text, and search-query parsing.

Words of alphabetic scripts are runs of letters and digits; CJK runs are cut into overlapping
character bigrams, as Lucene's CJKAnalyzer does, so Chinese needs no dictionary or model.
Tokens keep their order, so a phrase is a run of consecutive token positions.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from dataclasses import dataclass

import snowballstemmer

__all__ = ["Query", "Tokenizer", "parse_query"]

# Apostrophe-free forms, because tokens lose their apostrophes ("don't" -> "dont"). Contractions
# that collide with ordinary words ("we'll" -> "well", "she'd" -> "shed", "I'd" -> "id") are left
# out so that those words stay searchable.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are arent as at be because been before
    being below between both but by can cannot cant could couldnt did didnt do does doesnt doing
    dont down during each few for from further had hadnt has hasnt have havent having he hed
    her here heres hers herself hes him himself his how hows i if im in into is isnt it its
    itself ive just lets me more most mustnt my myself no nor not of off on once only or other
    ought our ours ourselves out over own same shant she shes should shouldnt so some such than
    that thats the their theirs them themselves then there theres these they theyd theyll
    theyre theyve this those through to too under until up very was wasnt we were werent weve
    what whats when whens where wheres which while who whom whos why whys will with wont would
    wouldnt you youd youll your youre yours yourself yourselves youve
"""
ENGLISH_STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

# Han (with 々〆〇 and the compatibility ideographs), kana and Hangul. Text is NFKC-normalised
# first, so half-width katakana and compatibility jamo arrive in these blocks.
_CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005-\u3007"  # 々〆〇
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\ua960-\ua97f"  # Hangul Jamo Extended-A
    "\uac00-\ud7ff"  # Hangul syllables, Jamo Extended-B
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0003134f"  # CJK Extensions B-G, Compatibility Supplement
)
_APOSTROPHES = "'\u2019"

_STEMMER = snowballstemmer.stemmer("english")
# The Snowball stemmer keeps the word being stemmed in the object, so calls must not interleave.
_STEM_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    # Cached: vocabularies are Zipfian, so a few thousand words cover almost every call.
    with _STEM_LOCK:
        stem: str = _STEMMER.stemWord(word)
    return stem


def _mark_class() -> str:
    """Character-class ranges of the combining marks of the Basic Multilingual Plane.

    ``\\w`` does not match combining marks, which would cut Devanagari or vocalised Arabic
    words apart, so they join words explicitly. Scanning the plane takes a few milliseconds.
    """
    marks = [c for c in range(0x10000) if unicodedata.category(chr(c)).startswith("M")]
    ranges: list[tuple[int, int]] = []
    for code in marks:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return "".join(f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in ranges)


@functools.cache
def _token_pattern() -> re.Pattern[str]:
    # Built on first use rather than at import, to keep importing the package cheap.
    cjk = f"[{_CJK_RANGES}]"
    letter = rf"(?:(?!{cjk})[^\W_]|[{_mark_class()}])"
    word = rf"{letter}+(?:[{_APOSTROPHES}]{letter}+)*"
    return re.compile(rf"(?P<cjk>{cjk}+)|(?P<word>{word})")


_APOSTROPHE_TABLE = str.maketrans("", "", _APOSTROPHES)


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """Split text into search tokens.

    Attributes:
        stem: Reduce English words to their Snowball stems ("running" -> "run").
        stopwords: Drop the words of :data:`ENGLISH_STOPWORDS`.
    """

    stem: bool = False
    stopwords: bool = False

    def tokens(self, text: str) -> list[str]:
        """Return the tokens of ``text`` in order.

        Text is NFKC-normalised and case-folded. Words lose inner apostrophes; CJK runs become
        overlapping bigrams, a lone CJK character a unigram. Stop words and stems apply to
        non-CJK words only, stop words first (checked on the unstemmed word).
        """
        text = unicodedata.normalize("NFKC", text).casefold()
        out: list[str] = []
        for match in _token_pattern().finditer(text):
            run = match.group("cjk")
            if run is not None:
                if len(run) == 1:
                    out.append(run)
                else:
                    out.extend(run[i : i + 2] for i in range(len(run) - 1))
                continue
            word = match.group("word").translate(_APOSTROPHE_TABLE)
            if self.stopwords and word in ENGLISH_STOPWORDS:
                continue
            out.append(_stem(word) if self.stem else word)
        return out


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed search query.

    Attributes:
        terms: Every token of the query in order, phrase tokens included; duplicates are kept
            because BM25 counts them.
        phrases: The tokens of each quoted phrase of two or more tokens.
    """

    terms: tuple[str, ...]
    phrases: tuple[tuple[str, ...], ...]


# A quote opened with one mark closes with its partner; an opening mark without its partner
# does not match, so an unbalanced quote leaves the rest of the query as ordinary text.
_QUOTED = re.compile(r'"([^"]*)"|“([^”]*)”|「([^」]*)」|『([^』]*)』')


def parse_query(text: str, tokenizer: Tokenizer) -> Query:
    """Parse a search query into terms and quoted phrases.

    Phrases are quoted with ``"..."``, ``“...”``, ``「...」`` or ``『...』``.

    Args:
        text: The query as typed, e.g. ``'"不吃辣" 偏好'``.
        tokenizer: The tokenizer the searched documents were indexed with.

    Returns:
        The query's terms and phrases.
    """
    # NFKC first, so that a full-width quote mark (＂) is a quote mark too.
    text = unicodedata.normalize("NFKC", text)
    terms: list[str] = []
    phrases: list[tuple[str, ...]] = []
    start = 0
    for match in _QUOTED.finditer(text):
        terms.extend(tokenizer.tokens(text[start : match.start()]))
        inner = next(group for group in match.groups() if group is not None)
        phrase = tokenizer.tokens(inner)
        terms.extend(phrase)
        if len(phrase) >= 2:
            phrases.append(tuple(phrase))
        start = match.end()
    terms.extend(tokenizer.tokens(text[start:]))
    return Query(terms=tuple(terms), phrases=tuple(phrases))
