"""Retrieval benchmark: quality on LoCoMo, SciFact and CMRC 2018, and speed at 10k/100k messages.

Usage::

    python bench/retrieval.py --dataset locomo|scifact|cmrc2018|speed [--data PATH]
                              [--qrels FILE] [--json] [--limit N]

Data is read where ``--data`` points (default ``../shared/data/...`` beside the repository) and
never copied. Everything the run writes (SQLite store, embedded Chroma, embedding cache) lives in
a temporary directory that is removed at the end. No network and no model download: dense
retrieval uses the offline USE model on one thread, exactly as :class:`VectorIndex` does.

* ``locomo``: each conversation is imported through :func:`read_messages_file` into a real
  :class:`Memory` (SQLite store + embedded Chroma), one user per conversation, so a question
  only searches its own conversation. The **product-default** rows use ``Memory(store, vectors)``
  with no tokenizer override and the importer's texts, through ``lexical_search`` (role ``any``,
  a time range covering everything), ``semantic_search`` and ``hybrid_search``; the targets are
  judged on those rows only. Recall of the gold evidence turns at k = 5, 10, 25, 50 is computed
  as the LoCoMo paper computes it (questions with no evidence count as 1; evidence ids that name
  no turn of the conversation are skipped, the question is kept). Variants undo one product
  choice at a time: ``Memory(..., tokenizer=...)`` for stemming/stop words; the same turns as
  another user with one thread per turn (no previous turn in the indexed text) or per session;
  the first run's bare-text indexing (``BM25Index`` / ``VectorIndex`` directly). ``BM25Index``
  variants (k1/b, the next turn too) use the product's own ``indexed_text``; RRF weight/depth
  variants fuse the product's own rankings with the product's ``rrf``. rank-bm25 (lowercase
  whitespace tokens) is the baseline row. ``--limit N``: first N questions.
* ``scifact``: BM25 (:class:`BM25Index`) over title + text, nDCG@10 over the queries with qrels
  (train by default: the only split settings may be chosen on). Variants: the four tokenizer
  settings x three (k1, b) pairs; the product-default row is the tokenizer ``Memory()`` builds
  with ``BM25Index``'s default k1/b (documents are not messages: no ``indexed_text``). rank-bm25
  on the same tokens cross-checks scores and speed on a sample of queries. ``--limit N``: first
  N queries.
* ``cmrc2018``: each paragraph is a message (one thread, as in the first run); each question
  retrieves paragraphs; R@1, R@5 and MRR@50 for the product-default lexical (CJK bigrams), dense
  and hybrid, one thread per paragraph (no previous paragraph in the indexed text), and fusion
  variants. ``--limit N``: first N paragraphs (and their questions).
* ``speed``: real text (LoCoMo turns, SciFact abstract sentences, CMRC paragraph sentences),
  shuffled and cycled to 10k and 100k messages of two users, roles user/assistant, timestamps
  spread over two years. p50/p95 of ``lexical_search`` vs rank-bm25 ``get_scores`` + argsort
  (with a top-10 identity check), ``semantic_search`` with role + time filters vs Chroma's own
  ``where`` query, ``Memory.add`` of one message with its parts, and the previous-turn lookup
  at the end of a one-thread user. ``--limit N``: sizes N/10 and N.
"""

from __future__ import annotations

import json
import random
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from common import arguments, log, median, progress_bar, report_header
from rank_bm25 import BM25Okapi
from rich.console import Console
from rich.table import Table

from skilldeck.errors import ToolError
from skilldeck.tools.bm25 import BM25Index
from skilldeck.tools.fusion import rrf
from skilldeck.tools.importers import read_messages_file
from skilldeck.tools.memory import HYBRID_WEIGHTS, Memory, indexed_text
from skilldeck.tools.messages import Message, MessageStore, format_ts, parse_ts
from skilldeck.tools.text import ENGLISH_STOPWORDS, Tokenizer, parse_query
from skilldeck.tools.vectors import VectorIndex, open_chroma

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DEFAULT_DATA = {
    "locomo": DATA / "locomo" / "locomo-dev5.json",
    "scifact": DATA / "scifact",
    "cmrc2018": DATA / "cmrc2018" / "cmrc2018_dev.json",
    "speed": DATA,
}

# Targets of the brief and published references.
LOCOMO_KS = (5, 10, 25, 50)
LOCOMO_TARGETS = {5: 60.0, 10: 70.0}
LOCOMO_DRAGON = {5: 56.7, 10: 66.2, 25: 76.7, 50: 82.7}
LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
SCIFACT_TARGET = 0.66
SCIFACT_PUBLISHED = {"Anserini flat (test)": 0.679, "BEIR paper (test)": 0.665}
SPEED_LEX_RATIO_TARGET = 10.0
SPEED_SEM_P50_TARGET_MS = 20.0
SPEED_ADD_TARGET_MS = 10.0

# A filter that lets every message through (the tools require an explicit one).
EVERY_SINCE, EVERY_UNTIL = "1970-01-01T00:00:00Z", "2200-01-01T00:00:00Z"
ALL_TIME = {"role": "any", "time_range": {"since": EVERY_SINCE, "until": EVERY_UNTIL}}
TOKENIZERS = {
    "plain": Tokenizer(),
    "stem": Tokenizer(stem=True),
    "stop": Tokenizer(stopwords=True),
    "stem+stop": Tokenizer(stem=True, stopwords=True),
}
# Words that only make a sentence a question; dropped by the "question words" query rewrite.
QUESTION_WORDS = frozenset(
    {
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "did",
        "does",
        "do",
        "is",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "would",
        "could",
        "can",
        "will",
        "should",
    }
)
_WORD = re.compile(r"[\w']+")


def p95(values: Sequence[float]) -> float:
    return float(np.percentile(values, 95)) if values else float("nan")


def ms_stats(values: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / n of timings given in seconds, as milliseconds."""
    ms = [v * 1000 for v in values]
    return {"p50_ms": round(median(ms), 3), "p95_ms": round(p95(ms), 3), "n": len(ms)}


@contextmanager
def stopwatch(into: list[float]) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        into.append(time.perf_counter() - start)


def iso(epoch: float) -> str:
    return str(format_ts(datetime.fromtimestamp(epoch, UTC)))


def rewrite(query: str, drop: frozenset[str]) -> str:
    """The query without the words of ``drop`` (compared lowercase, apostrophes removed)."""
    kept = [w for w in _WORD.findall(query) if w.lower().replace("'", "") not in drop]
    return " ".join(kept) or query


def stable_top(scores: np.ndarray, k: int) -> list[int]:
    """Indexes of the ``k`` best positive scores, ties broken by index."""
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [int(i) for i in order if scores[i] > 0]


def new_memory(tmp: Path, name: str) -> tuple[Memory, MessageStore, VectorIndex]:
    store = MessageStore(tmp / f"{name}.sqlite")
    # As skilldeck.services.open_memory configures it: Chroma writes behind, reads flush first.
    vectors = VectorIndex(open_chroma(tmp / f"chroma-{name}"), write_behind=True)
    return Memory(store, vectors), store, vectors


def lexical_ids(memory: Memory, user: str, query: str, k: int) -> list[str]:
    """``Memory.lexical_search`` (the tool path) with a filter that keeps everything."""
    try:
        found = memory.lexical_search(user, query_text=query, filter=ALL_TIME, page_size=k)
    except ToolError:  # e.g. a query of stop words only: no searchable words
        return []
    return [hit["message_id"] for hit in found["hits"]]


def semantic_ids(memory: Memory, user: str, query: str, k: int) -> list[str]:
    found = memory.semantic_search(user, query_text=query, filter=ALL_TIME, top_k=k)
    return [hit["message_id"] for hit in found["hits"]]


def hybrid_ids(memory: Memory, user: str, query: str, k: int) -> list[str]:
    return [m.id for m, _ in memory.hybrid_search(user, query, top_k=k)]


def embed_all(vectors: VectorIndex, texts: Sequence[str], label: str) -> np.ndarray:
    """Embed ``texts`` with the index's own function, in batches, with a progress bar."""
    out: list[np.ndarray] = []
    with progress_bar() as bar:
        task = bar.add_task(label, total=len(texts))
        for start in range(0, len(texts), 256):
            batch = texts[start : start + 256]
            out.append(vectors.embed(batch))
            bar.advance(task, len(batch))
    return np.concatenate(out) if out else np.zeros((0, 512), dtype=np.float32)


# -- LoCoMo -------------------------------------------------------------------------------------
@dataclass
class Question:
    sample: str
    text: str
    category: int
    evidence: list[str]  # valid dia ids only
    skipped: list[str]  # evidence ids that name no turn of the conversation


def thread_neighbours(messages: Sequence[Message]) -> list[tuple[Message | None, Message | None]]:
    """The previous and next message of the same thread of each message, in the given (store)
    order: the previous one is what :class:`Memory` indexes a message after."""
    prev: list[Message | None] = [None] * len(messages)
    after: list[Message | None] = [None] * len(messages)
    last: dict[str, int] = {}
    for i, m in enumerate(messages):
        j = last.get(m.thread_id)
        if j is not None:
            prev[i], after[j] = messages[j], m
        last[m.thread_id] = i
    return list(zip(prev, after, strict=True))


def product_texts(messages: Sequence[Message], *, with_next: bool = False) -> list[str]:
    """The text the product's indexes see for each message (``indexed_text`` with the previous
    message of its thread), optionally followed by the next turn as ``speaker: text``."""
    out = []
    for m, (prev, nxt) in zip(messages, thread_neighbours(messages), strict=True):
        text = indexed_text(m, prev)
        if with_next and nxt is not None:
            text += "\n" + indexed_text(nxt, None)
        out.append(text)
    return out


def _bare(m: Message) -> str:
    return str(m.text)


def recall_at(ranked_dia: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """The LoCoMo paper's recall: share of the evidence ids in the top k; 1 without evidence."""
    if not evidence:
        return 1.0
    top = set(ranked_dia[:k])
    return sum(e in top for e in evidence) / len(evidence)


def locomo_scores(questions: Sequence[Question], rankings: Sequence[list[str]]) -> dict[str, Any]:
    """Recall@k (percent) over all questions, per category and per conversation (R@5, R@10);
    ``rankings`` hold dia ids."""
    per_k: dict[int, list[float]] = {k: [] for k in LOCOMO_KS}
    per_cat: dict[int, dict[int, list[float]]] = defaultdict(lambda: {k: [] for k in LOCOMO_KS})
    per_conv: dict[str, dict[int, list[float]]] = defaultdict(lambda: {5: [], 10: []})
    for q, ranked in zip(questions, rankings, strict=True):
        for k in LOCOMO_KS:
            r = recall_at(ranked, q.evidence, k)
            per_k[k].append(r)
            per_cat[q.category][k].append(r)
            if k in per_conv[q.sample]:
                per_conv[q.sample][k].append(r)
    return {
        "recall": {str(k): round(100 * float(np.mean(v)), 2) for k, v in per_k.items()},
        "by_category": {
            f"{c} {LOCOMO_CATEGORIES.get(c, '?')}": {
                "n": len(per_cat[c][LOCOMO_KS[0]]),
                **{str(k): round(100 * float(np.mean(v)), 2) for k, v in per_cat[c].items()},
            }
            for c in sorted(per_cat)
        },
        "by_conversation": {
            sid: {str(k): round(100 * float(np.mean(v)), 1) for k, v in ks.items()}
            for sid, ks in per_conv.items()
        },
    }


# Row names. The three product-default rows are the only ones the targets are judged on.
def ratio(weights: Sequence[float]) -> str:
    """``(4.0, 1.0)`` as ``4:1``."""
    return ":".join(f"{w:g}" for w in weights)


HYBRID_LABEL = f"RRF {ratio(HYBRID_WEIGHTS)}, depth 50"
PRODUCT_LEXICAL = "product default: lexical_search"
PRODUCT_SEMANTIC = "product default: semantic_search"
PRODUCT_HYBRID = f"product default: hybrid_search ({HYBRID_LABEL})"
PRODUCT_ROWS = (PRODUCT_LEXICAL, PRODUCT_SEMANTIC, PRODUCT_HYBRID)
# Memory objects over the same store and vectors with another tokenizer (the stem/stop choice).
TOKENIZER_ABLATIONS = {
    "Tokenizer() (no stemming, no stop words: the first run's default)": Tokenizer(),
    "Tokenizer(stem=True) (no stop words)": Tokenizer(stem=True),
    "Tokenizer(stopwords=True) (no stemming)": Tokenizer(stopwords=True),
}
# The same turns imported as another user with other threads (the previous-turn choice): with one
# thread per turn no turn has a previous one, so only "speaker: text" is indexed.
THREADINGS: dict[str, tuple[str, Callable[[Message], str]]] = {
    "one thread per turn (no previous turn; speaker: text)": (
        "turn-threads",
        lambda m: f"{m.thread_id}/{m.meta['dia_id']}",
    ),
    "one thread per session (previous turn never from the session before)": (
        "session-threads",
        lambda m: f"{m.thread_id}/session-{m.meta['session']}",
    ),
}
FUSION_WEIGHTS = ((1.0, 1.0), (2.0, 1.0), (4.0, 1.0), (8.0, 1.0), (1.0, 2.0))
FUSION_DEPTHS = (50, 100, 200)


def fused(
    lexical: Sequence[str], dense: Sequence[str], depth: int, weights: Sequence[float]
) -> list[str]:
    """The product's own ``rrf`` (tools/fusion.py) of the two rankings cut at ``depth``."""
    return [item for item, _ in rrf(lexical[:depth], dense[:depth], weights=weights)]


def bench_locomo(path: Path, limit: int | None, tmp: Path) -> dict[str, Any]:
    samples = json.loads(path.read_text("utf-8"))
    pairs = [(s["sample_id"], q) for s in samples for q in s["qa"]]
    if limit:
        pairs = pairs[:limit]
    needed = list(dict.fromkeys(sid for sid, _ in pairs))
    memory, store, vectors = new_memory(tmp, "locomo")  # Memory(store, vectors): no override
    tok = memory.tokenizer
    by_tokenizer = {
        name: Memory(store, vectors, tokenizer=t) for name, t in TOKENIZER_ABLATIONS.items()
    }
    dia_ids: dict[str, set[str]] = {}
    turns: dict[str, list[Message]] = {}
    t0 = time.perf_counter()
    for sid in needed:
        # The real importer; it reads every sample of the file, this user keeps its own thread.
        messages = [m for m in read_messages_file(path, sid) if m.thread_id == sid]
        turns[sid] = messages
        dia_ids[sid] = {str(m.meta["dia_id"]) for m in messages}
        log(f"{sid}: {len(messages)} turns; importing (embeds every turn, 3 threadings + bare)")
        memory.add(messages)  # the product path, texts as the importer made them
        for suffix, thread_of in THREADINGS.values():
            memory.add(
                replace(m, user_id=f"{sid}+{suffix}", thread_id=thread_of(m)) for m in messages
            )
        # The first run's dense indexing (the bare turn text), straight into the vector index.
        vectors.add(
            f"{sid}+bare",
            ids=[m.id for m in messages],
            texts=[m.text for m in messages],
            roles=[m.role for m in messages],
            ts=[m.ts_epoch for m in messages],
            thread_ids=[m.thread_id for m in messages],
            new=True,
        )
    import_s = time.perf_counter() - t0

    questions: list[Question] = []
    for sid, q in pairs:
        evidence = [str(e) for e in q.get("evidence", [])]
        questions.append(
            Question(
                sid,
                q["question"],
                int(q["category"]),
                [e for e in evidence if e in dia_ids[sid]],
                [e for e in evidence if e not in dia_ids[sid]],
            )
        )

    # Plain rank-bm25 over each conversation's bare turns: the baseline rows. Whitespace tokens
    # keep punctuation ("group?"); lowercase \w+ words with the speaker's name in the text is the
    # setting that reproduces the ~47/55/65/71 reference of the brief.
    baselines: dict[str, tuple[Callable[[str], list[str]], Callable[[Message], str]]] = {
        "rank-bm25 whitespace lowercase (baseline)": (lambda t: t.lower().split(), _bare),
        "rank-bm25 lowercase words": (lambda t: re.findall(r"\w+", t.lower()), _bare),
        "rank-bm25 lowercase words, speaker in text": (
            lambda t: re.findall(r"\w+", t.lower()),
            lambda m: indexed_text(m, None),
        ),
    }
    plain: dict[str, dict[str, BM25Okapi]] = defaultdict(dict)
    for sid in needed:
        for bname, (split, text_of) in baselines.items():
            plain[bname][sid] = BM25Okapi([split(text_of(m)) for m in turns[sid]])

    def dia(ids: Iterable[str]) -> list[str]:
        return [i.split(":", 1)[1] for i in ids]

    # Bench-side BM25Index variants (settings Memory does not expose: k1/b, the next turn too),
    # on the very text the product indexes (tools/memory.py indexed_text, previous message of the
    # thread in store order) and the product's tokenizer; and the first run's bare-text indexing.
    side_docs: dict[str, tuple[Tokenizer, float, float, Callable[[list[Message]], list[str]]]] = {
        "BM25Index k1=1.5 b=0.75, product indexed text (= lexical_search)": (
            tok,
            1.5,
            0.75,
            product_texts,
        ),
        "BM25Index k1=1.2 b=0.75, product indexed text": (tok, 1.2, 0.75, product_texts),
        "BM25Index k1=0.9 b=0.4, product indexed text": (tok, 0.9, 0.4, product_texts),
        "BM25Index k1=1.5 b=0.75, product indexed text + next turn": (
            tok,
            1.5,
            0.75,
            lambda ms: product_texts(ms, with_next=True),
        ),
        "BM25Index k1=0.9 b=0.4, product indexed text + next turn": (
            tok,
            0.9,
            0.4,
            lambda ms: product_texts(ms, with_next=True),
        ),
        "BM25Index, bare text, Tokenizer() (= the first run's product default lexical)": (
            Tokenizer(),
            1.5,
            0.75,
            lambda ms: [m.text for m in ms],
        ),
        "BM25Index, bare text, product tokenizer (stem+stop)": (
            tok,
            1.5,
            0.75,
            lambda ms: [m.text for m in ms],
        ),
    }
    side: dict[str, dict[str, tuple[BM25Index, Tokenizer]]] = defaultdict(dict)
    for sid in needed:
        for name, (t, k1, b, texts_of) in side_docs.items():
            index = BM25Index(k1=k1, b=b)
            index.add_many(t.tokens(text) for text in texts_of(turns[sid]))
            side[name][sid] = (index, t)

    depth = max(LOCOMO_KS)
    fuse_depth = max(FUSION_DEPTHS)
    since_all, until_all = (parse_ts(t).timestamp() for t in (EVERY_SINCE, EVERY_UNTIL))
    runs: dict[str, list[list[str]]] = defaultdict(list)
    lex_deep: list[list[str]] = []
    dense_deep: list[list[str]] = []
    times: dict[str, list[float]] = defaultdict(list)
    with progress_bar() as bar:
        task = bar.add_task("LoCoMo questions", total=len(questions))
        for q in questions:
            sid = q.sample
            order = [str(m.meta["dia_id"]) for m in turns[sid]]
            for bname, (split, _) in baselines.items():
                scores = plain[bname][sid].get_scores(split(q.text))
                runs[bname].append([order[i] for i in stable_top(scores, depth)])
            # The product defaults, through the tools.
            with stopwatch(times["lexical_search"]):
                ranked = lexical_ids(memory, sid, q.text, fuse_depth)
            lex_deep.append(ranked)
            runs[PRODUCT_LEXICAL].append(dia(ranked[:depth]))
            with stopwatch(times["semantic_search"]):
                ranked = semantic_ids(memory, sid, q.text, fuse_depth)
            dense_deep.append(ranked)
            runs[PRODUCT_SEMANTIC].append(dia(ranked[:depth]))
            with stopwatch(times["hybrid_search"]):
                runs[PRODUCT_HYBRID].append(dia(hybrid_ids(memory, sid, q.text, depth)))
            # One product choice undone at a time, still through the tools.
            for name, mem in by_tokenizer.items():
                runs[f"lexical_search, {name}"].append(dia(lexical_ids(mem, sid, q.text, depth)))
                runs[f"hybrid_search, {name}"].append(dia(hybrid_ids(mem, sid, q.text, depth)))
            for name, (suffix, _) in THREADINGS.items():
                user = f"{sid}+{suffix}"
                runs[f"lexical_search, {name}"].append(
                    dia(lexical_ids(memory, user, q.text, depth))
                )
                runs[f"semantic_search, {name}"].append(
                    dia(semantic_ids(memory, user, q.text, depth))
                )
                runs[f"hybrid_search, {name}"].append(dia(hybrid_ids(memory, user, q.text, depth)))
            runs["semantic_search, query w/o question words"].append(
                dia(semantic_ids(memory, sid, rewrite(q.text, QUESTION_WORDS), depth))
            )
            runs["semantic_search, query w/o stop words"].append(
                dia(semantic_ids(memory, sid, rewrite(q.text, ENGLISH_STOPWORDS), depth))
            )
            hits = vectors.query(
                f"{sid}+bare", text=q.text, top_k=depth, since=since_all, until=until_all
            )
            runs["VectorIndex, bare text (the first run's dense indexing)"].append(
                dia(h.id for h in hits)
            )
            for name, per_sample in side.items():
                index, t = per_sample[sid]
                terms = parse_query(q.text, t).terms
                runs[name].append([order[d] for d, _ in index.top(terms, depth)] if terms else [])
            bar.advance(task)

    # Fusion variants from the product's own rankings (lexical_search page of 200,
    # semantic_search top 200), fused with the product's rrf.
    fusion: dict[str, list[list[str]]] = {}
    for fdepth in FUSION_DEPTHS:
        for weights in FUSION_WEIGHTS:
            name = f"RRF product lexical + semantic, depth {fdepth}, weights {ratio(weights)}"
            fusion[name] = [
                dia(fused(lex, dense, fdepth, weights)[:depth])
                for lex, dense in zip(lex_deep, dense_deep, strict=True)
            ]
    # Checks: the bench's fusion at the product's depth and weights against hybrid_search, and
    # the bench's BM25Index on indexed_text against lexical_search.
    product_fusion = f"RRF product lexical + semantic, depth 50, weights {ratio(HYBRID_WEIGHTS)}"
    same_hybrid = [
        a[:10] == b[:10] for a, b in zip(fusion[product_fusion], runs[PRODUCT_HYBRID], strict=True)
    ]
    same_lexical = [
        a == b
        for a, b in zip(
            runs["BM25Index k1=1.5 b=0.75, product indexed text (= lexical_search)"],
            runs[PRODUCT_LEXICAL],
            strict=True,
        )
    ]
    results = {name: locomo_scores(questions, ranked) for name, ranked in runs.items()}
    fused_scores = {name: locomo_scores(questions, ranked) for name, ranked in fusion.items()}
    best = max(PRODUCT_ROWS, key=lambda n: (results[n]["recall"]["5"], results[n]["recall"]["10"]))
    every = {**results, **fused_scores}
    best_any = max(every.items(), key=lambda kv: (kv[1]["recall"]["10"], kv[1]["recall"]["5"]))[0]
    return {
        "questions": len(questions),
        "conversations": len(needed),
        "turns": sum(len(t) for t in turns.values()),
        "product_tokenizer": repr(tok),
        "hybrid_weights": list(HYBRID_WEIGHTS),
        "categories": dict(sorted(Counter(q.category for q in questions).items())),
        "questions_without_evidence": sum(not q.evidence for q in questions),
        "skipped_evidence_ids": [
            {"sample": q.sample, "question": q.text, "skipped": q.skipped, "kept": q.evidence}
            for q in questions
            if q.skipped
        ],
        "import_s": round(import_s, 1),
        "query_ms": {name: ms_stats(v) for name, v in times.items()},
        "product_default_rows": list(PRODUCT_ROWS),
        "retrievers": results,
        "fusion_variants": fused_scores,
        "bench_rrf_matches_hybrid_top10": round(float(np.mean(same_hybrid)), 4)
        if same_hybrid
        else None,
        "bm25index_matches_lexical_top50": round(float(np.mean(same_lexical)), 4)
        if same_lexical
        else None,
        "best_product_default": best,
        "best_overall_by_r10": best_any,
        "targets": {str(k): v for k, v in LOCOMO_TARGETS.items()},
        "dragon_paper": {str(k): v for k, v in LOCOMO_DRAGON.items()},
        "pass": {str(k): results[best]["recall"][str(k)] >= v for k, v in LOCOMO_TARGETS.items()},
        "pass_best_variant": {
            str(k): every[best_any]["recall"][str(k)] >= v for k, v in LOCOMO_TARGETS.items()
        },
    }


# -- SciFact ------------------------------------------------------------------------------------
def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with the relevance grades as gains (trec_eval / pytrec_eval ``ndcg_cut``)."""
    dcg = sum(relevant.get(d, 0) / np.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / np.log2(i + 2) for i, g in enumerate(ideal))
    return float(dcg / idcg) if idcg > 0 else 0.0


def bench_scifact(path: Path, qrels_path: Path, limit: int | None, tmp: Path) -> dict[str, Any]:
    corpus = [json.loads(line) for line in (path / "corpus.jsonl").open(encoding="utf-8")]
    queries = {
        (q := json.loads(line))["_id"]: q["text"]
        for line in (path / "queries.jsonl").open(encoding="utf-8")
    }
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with qrels_path.open(encoding="utf-8") as lines:
        for line in lines:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3 or parts[0] == "query-id":
                continue
            if int(parts[2]) > 0:
                qrels[parts[0]][parts[1]] = int(parts[2])
    qids = [q for q in qrels if q in queries]
    if limit:
        qids = qids[:limit]
    doc_ids = [str(d["_id"]) for d in corpus]
    texts = [f"{d.get('title', '')} {d.get('text', '')}".strip() for d in corpus]
    params = {
        "rank-bm25 default k1=1.5 b=0.75": (1.5, 0.75),
        "k1=1.2 b=0.75": (1.2, 0.75),
        "Anserini k1=0.9 b=0.4": (0.9, 0.4),
    }
    variants: dict[str, Any] = {}
    tokens_by_tok: dict[str, list[list[str]]] = {}
    with progress_bar() as bar:
        task = bar.add_task("SciFact variants", total=len(TOKENIZERS) * len(params))
        for tname, tok in TOKENIZERS.items():
            docs = tokens_by_tok[tname] = [tok.tokens(t) for t in texts]
            for pname, (k1, b) in params.items():
                index = BM25Index(k1=k1, b=b)
                index.add_many(docs)
                scores = []
                for qid in qids:
                    terms = parse_query(queries[qid], tok).terms
                    ranked = [doc_ids[d] for d, _ in index.top(terms, 10)]
                    scores.append(ndcg_at(ranked, qrels[qid]))
                variants[f"{tname}, {pname}"] = {
                    "tokenizer": tname,
                    "k1": k1,
                    "b": b,
                    "ndcg@10": round(float(np.mean(scores)), 4),
                }
                bar.advance(task)
    best = max(variants, key=lambda n: variants[n]["ndcg@10"])
    # The product's default: the tokenizer Memory() builds (no override) and BM25Index's k1/b.
    default_tok = Memory(MessageStore(tmp / "scifact.sqlite")).tokenizer
    default_name = next(name for name, t in TOKENIZERS.items() if t == default_tok)
    product = f"{default_name}, rank-bm25 default k1=1.5 b=0.75"

    # Cross-check against rank-bm25 on the same tokens (the best tokenizer, default k1/b).
    tname = variants[best]["tokenizer"]
    tok = TOKENIZERS[tname]
    docs = tokens_by_tok[tname]
    index = BM25Index()
    index.add_many(docs)
    oracle = BM25Okapi(docs)
    sample = qids[: min(100, len(qids))]
    ours: list[float] = []
    theirs: list[float] = []
    max_diff = 0.0
    same_top = 0
    for qid in sample:
        terms = list(parse_query(queries[qid], tok).terms)
        with stopwatch(theirs):
            s_ref = oracle.get_scores(terms)
            ref_top = stable_top(s_ref, 10)
        with stopwatch(ours):
            top = index.top(terms, 10)
        max_diff = max(max_diff, float(np.max(np.abs(index.scores(terms) - s_ref))))
        same_top += [d for d, _ in top] == ref_top
    return {
        "queries": len(qids),
        "qrels": str(qrels_path),
        "docs": len(corpus),
        "variants": variants,
        "product_default": product,
        "product_default_ndcg@10": variants[product]["ndcg@10"],
        "best_on_these_qrels": best,
        "best_ndcg@10": variants[best]["ndcg@10"],
        "target": SCIFACT_TARGET,
        "published": SCIFACT_PUBLISHED,
        "pass_best": variants[best]["ndcg@10"] >= SCIFACT_TARGET,
        "pass_product_default": variants[product]["ndcg@10"] >= SCIFACT_TARGET,
        "rank_bm25_crosscheck": {
            "tokenizer": tname,
            "queries": len(sample),
            "max_abs_score_diff": max_diff,
            "top10_identical": same_top,
            "bm25index_top10": ms_stats(ours),
            "rank_bm25_get_scores_argsort": ms_stats(theirs),
            "speed_ratio_p50": round(median(theirs) / median(ours), 1),
        },
    }


# -- CMRC 2018 ----------------------------------------------------------------------------------
def bench_cmrc(path: Path, limit: int | None, tmp: Path) -> dict[str, Any]:
    data = json.loads(path.read_text("utf-8"))
    paragraphs = [p for article in data["data"] for p in article["paragraphs"]]
    if limit:
        paragraphs = paragraphs[:limit]
    user = "cmrc"
    base = datetime(2024, 1, 1, tzinfo=UTC)
    # As in the first run: one user, every paragraph a message of one thread (so the product
    # indexes each paragraph after the previous, unrelated, one).
    messages = [
        Message(
            str(p["id"]), user, "cmrc", "user", format_ts(base + timedelta(minutes=i)), p["context"]
        )
        for i, p in enumerate(paragraphs)
    ]
    questions = [(q["question"], str(p["id"])) for p in paragraphs for q in p["qas"]]
    memory, store, vectors = new_memory(tmp, "cmrc")  # Memory(store, vectors): no override
    unstemmed = Memory(store, vectors, tokenizer=Tokenizer())
    own = f"{user}+paragraph-threads"
    log(f"CMRC: {len(messages)} paragraphs, {len(questions)} questions; importing (embeds)")
    t0 = time.perf_counter()
    memory.add(messages)
    import_s = time.perf_counter() - t0
    # Variant: one thread per paragraph, so no paragraph is indexed after another one.
    memory.add(replace(m, user_id=own, thread_id=m.id) for m in messages)
    # The first run's lexical indexing: the bare paragraph text (BM25Index, product tokenizer).
    bare = BM25Index()
    bare.add_many(memory.tokenizer.tokens(m.text) for m in messages)
    runs: dict[str, list[list[str]]] = defaultdict(list)
    times: dict[str, list[float]] = defaultdict(list)
    quoted = sum(bool(parse_query(q, memory.tokenizer).phrases) for q, _ in questions)
    lexical, semantic = "product default: lexical_search", "product default: semantic_search"
    hybrid = f"product default: hybrid_search ({HYBRID_LABEL})"
    with progress_bar() as bar:
        task = bar.add_task("CMRC questions", total=len(questions))
        for q, _ in questions:
            with stopwatch(times["lexical_search"]):
                runs[lexical].append(lexical_ids(memory, user, q, 200))
            with stopwatch(times["semantic_search"]):
                runs[semantic].append(semantic_ids(memory, user, q, 200))
            with stopwatch(times["hybrid_search"]):
                runs[hybrid].append(hybrid_ids(memory, user, q, 50))
            runs["lexical_search, Tokenizer() (the first run's default)"].append(
                lexical_ids(unstemmed, user, q, 50)
            )
            name = "one thread per paragraph (no previous paragraph indexed)"
            runs[f"lexical_search, {name}"].append(lexical_ids(memory, own, q, 50))
            runs[f"semantic_search, {name}"].append(semantic_ids(memory, own, q, 50))
            runs[f"hybrid_search, {name}"].append(hybrid_ids(memory, own, q, 50))
            terms = parse_query(q, memory.tokenizer).terms
            runs["BM25Index, bare paragraph text (the first run's indexing)"].append(
                [messages[d].id for d, _ in bare.top(terms, 50)] if terms else []
            )
            bar.advance(task)
    for fdepth in FUSION_DEPTHS:
        for weights in FUSION_WEIGHTS:
            runs[f"RRF depth {fdepth}, weights {ratio(weights)}"] = [
                fused(lex, dense, fdepth, weights)
                for lex, dense in zip(runs[lexical], runs[semantic], strict=True)
            ]

    def score(ranked_lists: list[list[str]]) -> dict[str, float]:
        r1 = r5 = mrr = 0.0
        for (_, gold), ranked in zip(questions, ranked_lists, strict=True):
            r1 += gold in ranked[:1]
            r5 += gold in ranked[:5]
            if gold in ranked[:50]:
                mrr += 1 / (ranked.index(gold) + 1)
        n = max(len(questions), 1)
        return {
            "R@1": round(100 * r1 / n, 2),
            "R@5": round(100 * r5 / n, 2),
            "MRR@50": round(mrr / n, 4),
        }

    product_fusion = f"RRF depth 50, weights {ratio(HYBRID_WEIGHTS)}"
    same_hybrid = [a[:5] == b[:5] for a, b in zip(runs[product_fusion], runs[hybrid], strict=True)]
    return {
        "paragraphs": len(messages),
        "questions": len(questions),
        "product_tokenizer": repr(memory.tokenizer),
        "hybrid_weights": list(HYBRID_WEIGHTS),
        "bench_rrf_matches_hybrid_top5": round(float(np.mean(same_hybrid)), 4),
        "questions_with_quoted_phrases": quoted,
        "import_s": round(import_s, 1),
        "query_ms": {name: ms_stats(v) for name, v in times.items()},
        "retrievers": {name: score(ranked) for name, ranked in runs.items()},
    }


# -- speed ----------------------------------------------------------------------------------------
_EN_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")
_ZH_SENTENCE = re.compile(r"(?<=[。！？；])")


def speed_texts(root: Path) -> tuple[list[str], list[str], dict[str, int]]:
    """Unique real sentences (shuffled, seed 0) and real queries from the three datasets."""
    locomo = root / "locomo" / "locomo-dev5.json"
    turns = [m.text for m in read_messages_file(locomo, "speed")]
    samples = json.loads(locomo.read_text("utf-8"))
    l_queries = [q["question"] for s in samples for q in s["qa"]]
    sci = []
    with (root / "scifact" / "corpus.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            text = json.loads(line)["text"]
            sci += [s.strip() for s in _EN_SENTENCE.split(text) if len(s.strip()) >= 20]
    s_queries = [
        json.loads(line)["text"]
        for line in (root / "scifact" / "queries.jsonl").open(encoding="utf-8")
    ]
    cmrc = json.loads((root / "cmrc2018" / "cmrc2018_dev.json").read_text("utf-8"))
    zh = []
    c_queries = []
    for article in cmrc["data"]:
        for p in article["paragraphs"]:
            zh += [s.strip() for s in _ZH_SENTENCE.split(p["context"]) if len(s.strip()) >= 8]
            c_queries += [q["question"] for q in p["qas"]]
    counts = {"locomo_turns": len(turns), "scifact_sentences": len(sci), "cmrc_sentences": len(zh)}
    unique = list(dict.fromkeys(turns + sci + zh))
    counts["unique"] = len(unique)
    rng = random.Random(0)
    rng.shuffle(unique)
    queries: list[str] = []
    for group in (l_queries, s_queries, c_queries):
        rng.shuffle(group)
    # Interleave: LoCoMo, SciFact, CMRC, LoCoMo, ... so every slice mixes the three.
    for trio in zip(l_queries, s_queries, c_queries, strict=False):
        queries.extend(trio)
    return unique, queries, counts


TWO_YEARS = 2 * 365 * 86400.0
SPEED_T0 = datetime(2024, 1, 1, tzinfo=UTC).timestamp()


def speed_messages(user: str, n: int, unique: Sequence[str]) -> list[Message]:
    """``n`` messages cycling ``unique``, in time order over two years, roles 50/50 (seeded)."""
    rng = random.Random(n)
    step = TWO_YEARS / n
    out = []
    for i in range(n):
        ts = SPEED_T0 + i * step + rng.random() * step * 0.5
        role = "user" if rng.random() < 0.5 else "assistant"
        out.append(
            Message(f"m{i:06d}", user, f"t{i // 50:05d}", role, iso(ts), unique[i % len(unique)])
        )
    return out


def speed_filter(rng: random.Random) -> tuple[str, float, float]:
    """A role and a whole-second time window of 7 days to a year inside the two years."""
    role = rng.choice(["user", "assistant"])
    days = rng.choice([7, 30, 90, 365])
    since = float(int(SPEED_T0 + rng.random() * (TWO_YEARS - days * 86400)))
    return role, since, since + days * 86400


def bench_speed_size(
    n: int,
    memory: Memory,
    store: MessageStore,
    vectors: VectorIndex,
    unique: Sequence[str],
    queries: Sequence[str],
    embeddings: np.ndarray,
    reps: dict[str, int],
) -> dict[str, Any]:
    user = f"speed-{n}"
    row: dict[str, Any] = {"messages": n, "distinct_texts": min(n, len(unique))}
    messages = speed_messages(user, n, unique)
    t0 = time.perf_counter()
    for start in range(0, n, 5000):
        store.add(messages[start : start + 5000])
    row["store_bulk_insert_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task(f"Chroma bulk add, {n} precomputed vectors", total=n)
        for start in range(0, n, 4096):
            part = messages[start : start + 4096]
            vectors.add(
                user,
                ids=[m.id for m in part],
                texts=[m.text for m in part],
                roles=[m.role for m in part],
                ts=[m.ts_epoch for m in part],
                thread_ids=[m.thread_id for m in part],
                embeddings=embeddings[[(start + i) % len(unique) for i in range(len(part))]],
            )
            bar.advance(task, len(part))
    row["chroma_bulk_add_s"] = round(time.perf_counter() - t0, 2)

    # -- lexical ----------------------------------------------------------------------------
    tok = memory.tokenizer
    t0 = time.perf_counter()
    lexical_ids(memory, user, queries[0], 10)  # builds the user's BM25 index from the store
    row["lexicon_build_s"] = round(time.perf_counter() - t0, 2)
    in_order = list(store.iter_user(user))
    # The tokens the product indexes: indexed_text of each message after the previous message
    # of its thread (speaker = role here), so rank-bm25 ranks the same documents.
    docs = [tok.tokens(text) for text in product_texts(in_order)]
    t0 = time.perf_counter()
    oracle = BM25Okapi(docs)
    row["rank_bm25_build_s"] = round(time.perf_counter() - t0, 2)
    fresh = BM25Index()
    fresh.add_many(docs)
    lex_q = [q for q in queries if parse_query(q, tok).terms][: reps["lexical"]]
    ours: list[float] = []
    ours_filtered: list[float] = []
    theirs: list[float] = []
    identical = tool_same = 0
    max_diff = 0.0
    rng = random.Random(1)
    with progress_bar() as bar:
        task = bar.add_task(f"lexical vs rank-bm25, {n} messages", total=len(lex_q))
        for i, q in enumerate(lex_q):
            terms = list(parse_query(q, tok).terms)
            role, since, until = speed_filter(rng)
            flt = {"role": role, "time_range": {"since": iso(since), "until": iso(until)}}
            first_ours = i % 2 == 0  # alternate which goes first
            for turn in (0, 1):
                if (turn == 0) == first_ours:
                    with stopwatch(ours):
                        found = memory.lexical_search(
                            user, query_text=q, filter=ALL_TIME, page_size=10
                        )
                else:
                    with stopwatch(theirs):
                        scores = oracle.get_scores(terms)
                        order = np.argsort(-scores, kind="stable")[:10]
            del order
            with stopwatch(ours_filtered):
                memory.lexical_search(user, query_text=q, filter=flt, page_size=10)
            ref = stable_top(scores, 10)
            top = [d for d, _ in fresh.top(terms, 10)]
            identical += top == ref
            max_diff = max(max_diff, float(np.max(np.abs(fresh.scores(terms) - scores))))
            # The tool (phrases aside) must return the same ids as the index.
            if not parse_query(q, tok).phrases:
                tool_same += [h["message_id"] for h in found["hits"]] == [
                    in_order[d].id for d in top
                ]
            else:
                tool_same += 1
            bar.advance(task)
    row["lexical"] = {
        "queries": len(lex_q),
        "lexical_search_any_all_time": ms_stats(ours),
        "lexical_search_role_and_time": ms_stats(ours_filtered),
        "rank_bm25_get_scores_argsort": ms_stats(theirs),
        "ratio_p50": round(median(theirs) / median(ours), 1),
        "ratio_p95": round(p95(theirs) / p95(ours), 1),
        "target_ratio": SPEED_LEX_RATIO_TARGET,
        "top10_identical_to_rank_bm25": identical,
        "tool_top10_equals_index": tool_same,
        "max_abs_score_diff": max_diff,
    }
    row["lexical"]["pass"] = row["lexical"][
        "ratio_p50"
    ] >= SPEED_LEX_RATIO_TARGET and identical == len(lex_q)

    # -- semantic ---------------------------------------------------------------------------
    sem_q = list(queries[: reps["semantic"]])
    q_vectors = vectors.embed(sem_q)
    collection = vectors._collection(user, create=False)
    assert collection is not None
    rng = random.Random(2)
    role, since, until = speed_filter(rng)
    t0 = time.perf_counter()
    memory.semantic_search(  # the first filtered query loads the in-process copy
        user,
        query_embedding=q_vectors[0].tolist(),
        top_k=10,
        filter={"role": role, "time_range": {"since": iso(since), "until": iso(until)}},
    )
    row["semantic_cache_load_s"] = round(time.perf_counter() - t0, 2)
    mem_t: list[float] = []
    text_t: list[float] = []
    chroma_t: list[float] = []
    overlap: list[float] = []
    with progress_bar() as bar:
        task = bar.add_task(f"semantic vs Chroma where, {n} messages", total=len(sem_q))
        for i, (q, vec) in enumerate(zip(sem_q, q_vectors, strict=True)):
            role, since, until = speed_filter(rng)
            flt = {"role": role, "time_range": {"since": iso(since), "until": iso(until)}}
            where: Any = {"$and": [{"role": role}, {"ts": {"$gte": since}}, {"ts": {"$lt": until}}]}
            first_ours = i % 2 == 0
            for turn in (0, 1):
                if (turn == 0) == first_ours:
                    with stopwatch(mem_t):
                        found = memory.semantic_search(
                            user, query_embedding=vec.tolist(), filter=flt, top_k=10
                        )
                else:
                    with stopwatch(chroma_t):
                        result = collection.query(
                            query_embeddings=[vec],
                            n_results=10,
                            where=where,
                            include=["distances"],
                        )
            with stopwatch(text_t):
                memory.semantic_search(user, query_text=q, filter=flt, top_k=10)
            ids = [h["message_id"] for h in found["hits"]]
            if ids:
                overlap.append(len(set(ids) & set(result["ids"][0])) / len(ids))
            bar.advance(task)
    row["semantic"] = {
        "queries": len(sem_q),
        "semantic_search_embedding_given": ms_stats(mem_t),
        "semantic_search_query_text": ms_stats(text_t),
        "chroma_where_query": ms_stats(chroma_t),
        "ratio_p50": round(median(chroma_t) / median(mem_t), 1),
        "chroma_top10_overlap_with_exact": round(float(np.mean(overlap)), 4) if overlap else None,
        "target_p50_ms": SPEED_SEM_P50_TARGET_MS,
    }
    row["semantic"]["pass"] = (
        row["semantic"]["semantic_search_embedding_given"]["p50_ms"] <= SPEED_SEM_P50_TARGET_MS
    )

    # -- adding one message ------------------------------------------------------------------
    end = SPEED_T0 + TWO_YEARS
    adds = reps["add"]
    add_t: list[float] = []
    embed_t: list[float] = []
    insert_t: list[float] = []
    upsert_t: list[float] = []
    store_lex_t: list[float] = []
    lex_only = Memory(store, None, tokenizer=tok)
    t0 = time.perf_counter()
    lexical_ids(lex_only, user, queries[0], 10)
    row["lexicon_rebuild_s"] = round(time.perf_counter() - t0, 2)
    previous: Message | None = None
    with progress_bar() as bar:
        task = bar.add_task(f"Memory.add of one message, {n} messages", total=adds)
        for i in range(adds):
            text = unique[(n + 7 * i) % len(unique)]
            message = Message(
                f"add{i:04d}", user, "t-add", ("user", "assistant")[i % 2], iso(end + i), text
            )
            with stopwatch(add_t):
                memory.add([message])  # the product path: VectorIndex.add(..., new=True)
            # The Chroma write goes on in the background; finish it before the parts below, so
            # they measure their own cost, not a competing thread.
            vectors.flush(user)
            # The parts: embedding of the indexed text, Chroma insert of a given vector (the
            # product's new=True path), SQLite + previous-turn lookup + BM25 (no vectors). The
            # first run's path, get + upsert (new=False), for comparison.
            indexed = indexed_text(message, previous)
            previous = message
            with stopwatch(embed_t):
                vec = vectors.embed([indexed])
            meta: dict[str, Any] = {"texts": [indexed], "roles": ["user"], "ts": [end + i]}
            with stopwatch(insert_t):
                vectors.add(
                    user,
                    ids=[f"vec{i:04d}"],
                    thread_ids=["t-vec"],
                    embeddings=vec,
                    new=True,
                    **meta,
                )
                vectors.flush(user)  # the Chroma insert itself, done in the background in add
            with stopwatch(upsert_t):
                vectors.add(user, ids=[f"ups{i:04d}"], thread_ids=["t-vec"], embeddings=vec, **meta)
            with stopwatch(store_lex_t):
                lex_only.add([replace(message, id=f"lex{i:04d}", thread_id="t-lex")])
            bar.advance(task)
    row["add"] = {
        "memory_add_one": ms_stats(add_t),
        "part_embed_indexed_text": ms_stats(embed_t),
        "part_vectorindex_add_new_true": ms_stats(insert_t),
        "part_vectorindex_add_upsert_first_run_path": ms_stats(upsert_t),
        "part_sqlite_prev_lookup_bm25": ms_stats(store_lex_t),
        "thread": "new thread 't-add' (the previous-turn lookup finds at most 49 earlier adds)",
        "target_ms": SPEED_ADD_TARGET_MS,
    }
    row["add"]["pass"] = row["add"]["memory_add_one"]["p50_ms"] <= SPEED_ADD_TARGET_MS

    # -- the previous-turn lookup in one long thread -------------------------------------------
    # Memory.add looks up the previous message of the thread (MessageStore.previous_in_thread);
    # here every message of a store-only user is in one thread, as for an import without
    # thread ids (thread "default").
    long_user = f"{user}-one-thread"
    one_thread = [replace(m, user_id=long_user, thread_id="default") for m in messages]
    for start in range(0, n, 5000):
        store.add(one_thread[start : start + 5000])
    lookup_t: list[float] = []
    long_add_t: list[float] = []
    no_vectors = Memory(store, None, tokenizer=tok)  # its lexicon of long_user is never built
    for i in range(adds):
        with stopwatch(lookup_t):
            store.previous_in_thread(long_user, "default", 2**62)
        message = Message(f"long{i:04d}", long_user, "default", "user", iso(end + i), "a new turn")
        with stopwatch(long_add_t):
            no_vectors.add([message])
    row["long_thread"] = {
        "thread_messages": n,
        "previous_in_thread": ms_stats(lookup_t),
        "memory_add_one_without_vectors": ms_stats(long_add_t),
    }
    return row


def bench_speed(root: Path, limit: int | None, tmp: Path, cache: Path | None) -> dict[str, Any]:
    sizes = [10_000, 100_000]
    if limit:
        sizes = [max(limit // 10, 10), limit]
    unique, queries, counts = speed_texts(root)
    needed = min(max(sizes), len(unique))
    unique = unique[:needed]
    memory, store, vectors = new_memory(tmp, "speed")
    cache_file = cache or tmp / "speed-embeddings.npy"
    embeddings = None
    if cache_file.is_file():
        loaded = np.load(cache_file)
        if len(loaded) >= needed:
            embeddings = loaded[:needed]
            log(f"embeddings of {needed} texts loaded from {cache_file}")
    embed_s = None
    if embeddings is None:
        log(f"embedding {needed} distinct texts with USE (1 thread); cached in {cache_file}")
        t0 = time.perf_counter()
        embeddings = embed_all(vectors, unique, "USE embeddings")
        embed_s = round(time.perf_counter() - t0, 1)
        np.save(cache_file, embeddings)
    reps = {"lexical": 200, "semantic": 100, "add": 50}
    report: dict[str, Any] = {
        "sources": counts,
        "distinct_texts_used": needed,
        "embed_s": embed_s,
        "embed_per_s": round(needed / embed_s, 1) if embed_s else None,
        "query_pool": len(queries),
        "tokenizer": f"{memory.tokenizer!r} (product default)",
        "sizes": {},
    }
    for n in sizes:
        log(f"speed at {n} messages")
        report["sizes"][str(n)] = bench_speed_size(
            n, memory, store, vectors, unique, queries, embeddings, reps
        )
    return report


# -- report -------------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "[green]PASS[/green]" if ok else "[red]FAIL[/red]"


def print_locomo(out: Console, r: dict[str, Any]) -> None:
    table = Table(
        title=f"LoCoMo turn retrieval, recall of gold evidence (%), {r['questions']} "
        f"questions, {r['conversations']} conversations, {r['turns']} turns"
    )
    table.add_column("retriever")
    for k in LOCOMO_KS:
        table.add_column(f"R@{k}", justify="right")
    table.add_row("DRAGON (paper, reference)", *[f"{LOCOMO_DRAGON[k]:.1f}" for k in LOCOMO_KS])
    table.add_row(
        "target", *[f">= {LOCOMO_TARGETS[k]:.0f}" if k in LOCOMO_TARGETS else "" for k in LOCOMO_KS]
    )
    for name, res in {**r["retrievers"], **r["fusion_variants"]}.items():
        label = f"[bold]{name}[/bold]" if name == r["best_product_default"] else name
        table.add_row(label, *[f"{res['recall'][str(k)]:.1f}" for k in LOCOMO_KS])
    out.print(table)
    best = r["best_product_default"]
    out.print(
        f"best product-default retriever (Memory() as shipped, importer texts): {best}: "
        + ", ".join(
            f"R@{k} {r['retrievers'][best]['recall'][k]:.1f} {verdict(ok)}"
            for k, ok in r["pass"].items()
        )
    )
    best_any = r["best_overall_by_r10"]
    every = {**r["retrievers"], **r["fusion_variants"]}
    out.print(
        f"best of every variant by R@10: {best_any}: "
        + ", ".join(
            f"R@{k} {every[best_any]['recall'][k]:.1f} {verdict(ok)}"
            for k, ok in r["pass_best_variant"].items()
        )
    )
    cats = Table(title="by category, R@5 / R@10")
    cats.add_column("retriever")
    names = [
        "rank-bm25 whitespace lowercase (baseline)",
        "BM25Index, bare text, Tokenizer() (= the first run's product default lexical)",
        *PRODUCT_ROWS,
        f"lexical_search, {next(iter(TOKENIZER_ABLATIONS))}",
        f"lexical_search, {next(iter(THREADINGS))}",
        "BM25Index k1=0.9 b=0.4, product indexed text",
    ]
    first = r["retrievers"][names[0]]["by_category"]
    for c in first:
        cats.add_column(f"{c} (n={first[c]['n']})", justify="right")
    for name in names:
        bc = r["retrievers"][name]["by_category"]
        cats.add_row(name, *[f"{bc[c]['5']:.1f} / {bc[c]['10']:.1f}" for c in first])
    out.print(cats)
    convs = Table(title="by conversation, R@5 / R@10")
    convs.add_column("retriever")
    first = r["retrievers"][names[0]]["by_conversation"]
    for c in first:
        convs.add_column(c, justify="right")
    for name in names:
        bc = r["retrievers"][name]["by_conversation"]
        convs.add_row(name, *[f"{bc[c]['5']:.1f} / {bc[c]['10']:.1f}" for c in first])
    out.print(convs)
    out.print(
        f"evidence ids skipped (name no turn): {len(r['skipped_evidence_ids'])} questions; "
        f"questions without evidence: {r['questions_without_evidence']}; bench RRF = "
        f"hybrid_search top 10 on {100 * (r['bench_rrf_matches_hybrid_top10'] or 0):.1f}%; "
        f"BM25Index on indexed_text = lexical_search top 50 on "
        f"{100 * (r['bm25index_matches_lexical_top50'] or 0):.1f}%"
    )


def print_scifact(out: Console, r: dict[str, Any]) -> None:
    table = Table(title=f"SciFact BM25 nDCG@10, {r['queries']} queries ({r['qrels']})")
    for column in ("variant", "nDCG@10"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for name, v in r["variants"].items():
        label = f"[bold]{name}[/bold]" if name == r["best_on_these_qrels"] else name
        table.add_row(label, f"{v['ndcg@10']:.4f}")
    for name, v in r["published"].items():
        table.add_row(f"published: {name}", f"{v:.3f}")
    out.print(table)
    out.print(
        f"target >= {r['target']}: best {r['best_ndcg@10']:.4f} {verdict(r['pass_best'])}; "
        f"product default {r['product_default_ndcg@10']:.4f} "
        f"{verdict(r['pass_product_default'])}"
    )
    c = r["rank_bm25_crosscheck"]
    out.print(
        f"rank-bm25 cross-check ({c['tokenizer']}, {c['queries']} queries): top-10 "
        f"identical {c['top10_identical']}/{c['queries']}, max |score diff| "
        f"{c['max_abs_score_diff']:.2e}; p50 {c['bm25index_top10']['p50_ms']:.2f} ms vs "
        f"{c['rank_bm25_get_scores_argsort']['p50_ms']:.2f} ms ({c['speed_ratio_p50']}x)"
    )


def print_cmrc(out: Console, r: dict[str, Any]) -> None:
    table = Table(
        title=f"CMRC 2018 question -> paragraph, {r['questions']} questions, "
        f"{r['paragraphs']} paragraphs"
    )
    for column in ("retriever", "R@1", "R@5", "MRR@50"):
        table.add_column(column, justify="left" if column == "retriever" else "right")
    for name, v in r["retrievers"].items():
        table.add_row(name, f"{v['R@1']:.1f}", f"{v['R@5']:.1f}", f"{v['MRR@50']:.3f}")
    out.print(table)
    out.print(f"bench RRF = hybrid_search top 5 on {100 * r['bench_rrf_matches_hybrid_top5']:.1f}%")


def print_speed(out: Console, r: dict[str, Any]) -> None:
    table = Table(title="retrieval speed (ms, p50 / p95)")
    for column in ("measure", *r["sizes"], "target"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    sizes = list(r["sizes"].values())

    def cell(get: Callable[[dict[str, Any]], dict[str, float]]) -> list[str]:
        return [f"{get(s)['p50_ms']:.2f} / {get(s)['p95_ms']:.2f}" for s in sizes]

    table.add_row(
        "lexical_search top 10 (any, all time)",
        *cell(lambda s: s["lexical"]["lexical_search_any_all_time"]),
        "",
    )
    table.add_row(
        "rank-bm25 get_scores + argsort",
        *cell(lambda s: s["lexical"]["rank_bm25_get_scores_argsort"]),
        "",
    )
    table.add_row(
        "  speed ratio (p50)",
        *[f"{s['lexical']['ratio_p50']}x {verdict(s['lexical']['pass'])}" for s in sizes],
        f">= {SPEED_LEX_RATIO_TARGET:.0f}x",
    )
    table.add_row(
        "  top-10 identical to rank-bm25",
        *[
            f"{s['lexical']['top10_identical_to_rank_bm25']}/{s['lexical']['queries']}"
            for s in sizes
        ],
        "all",
    )
    table.add_row(
        "lexical_search role + time filter",
        *cell(lambda s: s["lexical"]["lexical_search_role_and_time"]),
        "",
    )
    table.add_row(
        "semantic_search role + time, embedding given",
        *cell(lambda s: s["semantic"]["semantic_search_embedding_given"]),
        f"p50 <= {SPEED_SEM_P50_TARGET_MS:.0f}",
    )
    table.add_row("  result", *[verdict(s["semantic"]["pass"]) for s in sizes], "")
    table.add_row(
        "Chroma collection.query with where",
        *cell(lambda s: s["semantic"]["chroma_where_query"]),
        "",
    )
    table.add_row(
        "  Chroma / semantic_search (p50)", *[f"{s['semantic']['ratio_p50']}x" for s in sizes], ""
    )
    table.add_row(
        "semantic_search role + time, query text",
        *cell(lambda s: s["semantic"]["semantic_search_query_text"]),
        "",
    )
    table.add_row(
        "Memory.add one message",
        *cell(lambda s: s["add"]["memory_add_one"]),
        f"p50 <= {SPEED_ADD_TARGET_MS:.0f}",
    )
    table.add_row("  result", *[verdict(s["add"]["pass"]) for s in sizes], "")
    parts = {
        "  part: USE embedding of the indexed text": "part_embed_indexed_text",
        "  part: VectorIndex.add, vector given, new=True (Chroma add)": (
            "part_vectorindex_add_new_true"
        ),
        "  (first run's path: new=False, Chroma get + upsert)": (
            "part_vectorindex_add_upsert_first_run_path"
        ),
        "  part: SQLite insert + previous-turn lookup + BM25 add": "part_sqlite_prev_lookup_bm25",
    }
    for label, key in parts.items():

        def part(s: dict[str, Any], key: str = key) -> dict[str, float]:
            return dict(s["add"][key])

        table.add_row(label, *cell(part), "")
    table.add_row(
        "previous_in_thread, end of a one-thread user",
        *cell(lambda s: s["long_thread"]["previous_in_thread"]),
        "",
    )
    table.add_row(
        "Memory.add to that thread, no vectors",
        *cell(lambda s: s["long_thread"]["memory_add_one_without_vectors"]),
        "",
    )
    out.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument(
        "--dataset", required=True, choices=["locomo", "scifact", "cmrc2018", "speed"]
    )
    parser.add_argument("--data", type=Path, help="dataset file or folder (see the docstring)")
    parser.add_argument("--qrels", type=Path, help="SciFact qrels (default qrels/train.tsv)")
    parser.add_argument("--limit", type=int, help="a smaller run (meaning per dataset)")
    parser.add_argument(
        "--embeddings-cache",
        type=Path,
        help="speed: .npy file to reuse embeddings across runs (outside the repo)",
    )
    args = parser.parse_args(argv)
    data = (args.data or DEFAULT_DATA[args.dataset]).resolve()
    if not data.exists():
        parser.error(f"no data at {data}")
    report: dict[str, Any] = {
        "dataset": args.dataset,
        "data": str(data),
        **report_header(limit=args.limit),
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="skilldeck-retrieval-") as name:
        tmp = Path(name)
        if args.dataset == "locomo":
            report["locomo"] = bench_locomo(data, args.limit, tmp)
        elif args.dataset == "scifact":
            qrels = args.qrels or data / "qrels" / "train.tsv"
            report["scifact"] = bench_scifact(data, qrels.resolve(), args.limit, tmp)
        elif args.dataset == "cmrc2018":
            report["cmrc2018"] = bench_cmrc(data, args.limit, tmp)
        else:
            report["speed"] = bench_speed(data, args.limit, tmp, args.embeddings_cache)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        out = Console(width=None if sys.stdout.isatty() else 140)
        {
            "locomo": print_locomo,
            "scifact": print_scifact,
            "cmrc2018": print_cmrc,
            "speed": print_speed,
        }[args.dataset](out, report[args.dataset])
        out.print(f"{report['date']}, {report['machine']}, wall {report['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
