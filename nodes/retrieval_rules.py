"""The rules of the retrieval policy (seed 002) that need no model, English and Chinese.

* :func:`rewrite_question`: entity, time scope, attributes, intent and query variants.
* :func:`make_plan`: the question type (table first or rag first), ``top_k`` and the terms,
  facets and scope that results are judged against.
* :func:`parse_result` and :func:`judge`: a tool result as evidence, and whether it suffices
  (section 4: empty, ``Error:``, ``no excel files found``, off-topic, missing entity or scope,
  no usable evidence, partial or truncated coverage).
* :func:`compose_answer` and :func:`check_answer`: the rule-based answer, and the citation
  contract every answer (rules or model) must pass.

Everything here is pure: no I/O, no model. The rules live in :mod:`skilldeck.nodes.retrieval`,
one module per concern; this module gathers them in one import.
"""

from skilldeck.nodes.retrieval.answer import (
    check_answer,
    compose_answer,
    no_information,
    select_evidence,
)
from skilldeck.nodes.retrieval.evidence import Evidence, Result, citations_in, parse_result
from skilldeck.nodes.retrieval.plan import LOCAL, RAG, STANDARD, TABLE, TOP_K, Plan, make_plan
from skilldeck.nodes.retrieval.rewrite import INTENTS, REWRITE_SCHEMA, Rewrite, rewrite_question
from skilldeck.nodes.retrieval.sufficiency import EXPANDABLE, Verdict, judge, usable
from skilldeck.nodes.retrieval.terms import Term, is_chinese

__all__ = [
    "EXPANDABLE",
    "INTENTS",
    "LOCAL",
    "RAG",
    "REWRITE_SCHEMA",
    "STANDARD",
    "TABLE",
    "TOP_K",
    "Evidence",
    "Plan",
    "Result",
    "Rewrite",
    "Term",
    "Verdict",
    "check_answer",
    "citations_in",
    "compose_answer",
    "is_chinese",
    "judge",
    "make_plan",
    "no_information",
    "parse_result",
    "rewrite_question",
    "select_evidence",
    "usable",
]
