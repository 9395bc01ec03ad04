"""The retrieval plan of a question: its sources' order, ``top_k``, and the terms, facets and
scope its results are judged against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skilldeck.nodes.retrieval.rewrite import INTENTS, TEXT_KINDS, Rewrite, classify, scope_of
from skilldeck.nodes.retrieval.terms import (
    GENERIC_TOKENS,
    TOKENS,
    Term,
    entity_term,
    is_chinese,
    make_term,
)

__all__ = ["LOCAL", "RAG", "STANDARD", "TABLE", "TOP_K", "Plan", "make_plan"]

#: The standard sources (canonical tool names) and the top_k steps rag_retrieve expands along.
RAG = "knowledge__rag_retrieve"
TABLE = "knowledge__table_rag_retrieve"
LOCAL = "file__local_search"
STANDARD = (RAG, TABLE, LOCAL)
TOP_K = (30, 50, 100)
_FULL_COVERAGE = frozenset({"list", "historical", "comparison", "mixed"})  # section 4


@dataclass(frozen=True, slots=True)
class Plan:
    """How one question is retrieved and judged."""

    question: str
    kind: str
    table_first: bool
    breadth: str
    top_k: int
    variants: tuple[str, ...]
    entities: tuple[Term, ...]
    any_entity: bool  # a comparison of several entities: each result covers one of them
    years: tuple[str, ...]
    core: tuple[Term, ...]
    facets: tuple[Term, ...]
    zh: bool

    @property
    def full_coverage(self) -> bool:
        """Full-list, historical, comparison and mixed requests reject partial coverage."""
        return self.kind in _FULL_COVERAGE

    def summary(self) -> dict[str, Any]:
        """The plan as the trajectory records it."""
        return {
            "kind": self.kind,
            "first": TABLE if self.table_first else RAG,
            "breadth": self.breadth,
            "top_k": self.top_k,
            "entities": [t.label for t in self.entities],
            "years": list(self.years),
            "facets": [t.label for t in self.facets],
        }


def make_plan(question: str, rewrite: Rewrite) -> Plan:
    """The retrieval plan of ``question``.

    rag_retrieve goes first only for a pure text question (definition, concept, workflow,
    policy, explanation) without any data cue, whatever a model says; everything else,
    unclear cases included, starts with table_rag_retrieve.
    """
    rules_kind = classify(question)
    kind = rewrite.intent if rewrite.intent in INTENTS else rules_kind
    if kind in TEXT_KINDS and rules_kind not in TEXT_KINDS | {"unclear"}:
        kind = rules_kind  # the question has a data cue after all
    table_first = kind not in TEXT_KINDS
    _, years = scope_of(" ".join((question, *rewrite.time_scope)))
    entities = tuple(dict.fromkeys(e.strip() for e in rewrite.entity if TOKENS.tokens(e)))
    entity_terms = tuple(entity_term(e) for e in entities)
    facets = [make_term(a) for a in dict.fromkeys(rewrite.attributes) if TOKENS.tokens(a)]
    if len(years) >= 2:
        facets += [Term(y, ((y,),)) for y in years]
    any_entity = kind in ("comparison", "list", "ranking") and len(entity_terms) >= 2
    if any_entity:
        facets += entity_terms
    skip = {t for term in entity_terms for alt in term.alts for t in alt} | set(years)
    skip |= GENERIC_TOKENS
    core = [
        make_term(t, (t,))
        for t in dict.fromkeys(TOKENS.tokens(rewrite.variants[0]))
        if t not in skip
    ]
    width = max(len(facets), len(entity_terms))
    if kind in ("list", "historical", "summary", "unclear") or width >= 3:
        breadth = "broad"  # "if unsure, use 100"
    elif kind in ("comparison", "ranking", "mixed", "explanation", "extraction") or width == 2:
        breadth = "moderate"
    else:
        breadth = "simple"
    return Plan(
        question=question,
        kind=kind,
        table_first=table_first,
        breadth=breadth,
        top_k={"simple": 30, "moderate": 50, "broad": 100}[breadth],
        variants=rewrite.variants,
        entities=entity_terms,
        any_entity=any_entity,
        years=tuple(years),
        core=tuple(core),
        facets=tuple(facets),
        zh=is_chinese(question),
    )
