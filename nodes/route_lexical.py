"""Routing by description without a model: a lexical ranker over skills' names and descriptions.

Each skill is one short document (its name, split at ``-`` and ``_``, and its description),
scored against the request with BM25 (stemmed, stop words dropped). BM25 orders the skills, but
its scores have no scale, so whether the best one fits at all is judged by ``coverage``: the
share of the request's informative weight (the IDF of its distinct terms; a term no skill uses
weighs as much as the rarest) that the skill's document matches. Below ``threshold`` the answer
is ``none``: a request about the weather must not run the one skill that mentions "today".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from skilldeck.skills.bundle import SkillBundle
from skilldeck.tools.text import Tokenizer

__all__ = ["DEFAULT_THRESHOLD", "LexicalRanker", "Ranked"]

#: The coverage below which the lexical ranker answers ``none`` (``SKILLDECK_ROUTE_THRESHOLD``).
DEFAULT_THRESHOLD = 0.2
_K1, _B = 1.2, 0.75
_TOKENIZER = Tokenizer(stem=True, stopwords=True)
_WORDS = Tokenizer(stopwords=True)


@dataclass(frozen=True, slots=True)
class Ranked:
    """One skill's lexical score for a request: BM25 (the order) and coverage (the fit), and
    the request's words its name and description match (``matched``) and do not (``missed``),
    as the request writes them, in its order."""

    skill: str
    score: float
    coverage: float
    matched: tuple[str, ...] = ()
    missed: tuple[str, ...] = ()


@dataclass(frozen=True)
class LexicalRanker:
    """BM25 over the names and descriptions of a deck's skills (IDF over the whole deck)."""

    bundles: Sequence[SkillBundle]
    threshold: float = DEFAULT_THRESHOLD
    _docs: dict[str, Counter[str]] = field(init=False, repr=False)
    _idf: dict[str, float] = field(init=False, repr=False)
    _avg: float = field(init=False, repr=False)
    _max_idf: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        docs = {b.name: Counter(_TOKENIZER.tokens(_document(b))) for b in self.bundles}
        n = max(len(docs), 1)
        df: Counter[str] = Counter(t for doc in docs.values() for t in doc)
        object.__setattr__(self, "_docs", docs)
        object.__setattr__(
            self, "_idf", {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        )
        object.__setattr__(self, "_avg", sum(sum(d.values()) for d in docs.values()) / n or 1.0)
        object.__setattr__(self, "_max_idf", math.log(1 + (n + 0.5) / 0.5))

    def rank(self, request: str, skills: Sequence[str]) -> list[Ranked]:
        """``skills`` ranked for ``request``, best first (ties keep the given order)."""
        words = _words(request)
        terms = set(words)
        weight = sum(self._idf.get(t, self._max_idf) for t in terms)
        out = []
        for name in skills:
            doc = self._docs[name]
            length = sum(doc.values())
            score = matched = 0.0
            for term in terms & doc.keys():
                idf, tf = self._idf[term], doc[term]
                score += idf * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / self._avg))
                matched += idf
            coverage = round(matched / weight, 4) if weight else 0.0
            hits = tuple(w for t, w in words.items() if t in doc)
            misses = tuple(w for t, w in words.items() if t not in doc)
            out.append(Ranked(name, round(score, 4), coverage, hits, misses))
        return sorted(out, key=lambda r: -r.score)

    def choose(self, request: str, skills: Sequence[str]) -> tuple[str | None, list[Ranked]]:
        """The best of ``skills`` for ``request`` if it covers at least ``threshold`` of the
        request, else ``None``; and the ranking."""
        ranked = self.rank(request, skills)
        best = ranked[0] if ranked else None
        if best is None or best.score <= 0 or best.coverage < self.threshold:
            return None, ranked
        return best.skill, ranked


def _words(request: str) -> dict[str, str]:
    """The request's distinct terms (stems), in order, each with the first word it stems from:
    what a person reads in an explanation."""
    first: dict[str, str] = {}
    for word in _WORDS.tokens(request):
        for term in _TOKENIZER.tokens(word):
            first.setdefault(term, word)
    return {t: first.get(t, t) for t in _TOKENIZER.tokens(request)}


def _document(bundle: SkillBundle) -> str:
    return f"{bundle.name.replace('-', ' ').replace('_', ' ')} {bundle.description}"
