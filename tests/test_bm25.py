"""BM25Index against rank-bm25 as the oracle: scores, ranking, masks, paging, increments."""

from __future__ import annotations

import itertools
import random

import numpy as np
import numpy.typing as npt
import pytest
from rank_bm25 import BM25Okapi

from skilldeck.tools.bm25 import BM25Index, IndexPart, index_part, merge_parts

pytestmark = pytest.mark.L2

VOCAB = [f"w{i}" for i in range(45)]
COMMON = ["the", "and", "of", "is", "to"]  # in most documents: idf < 0, floored by epsilon

Corpus = list[list[str]]


def random_doc(rng: random.Random) -> list[str]:
    doc = [w for w in COMMON if rng.random() < 0.8]
    # Zipf-like weights: a few frequent words, many rare ones.
    doc += rng.choices(
        VOCAB, weights=[1 / (i + 1) for i in range(len(VOCAB))], k=rng.randint(0, 25)
    )
    rng.shuffle(doc)
    return doc


def random_corpus(rng: random.Random, size: int) -> Corpus:
    corpus = [random_doc(rng) for _ in range(size)]
    if not any(corpus):  # rank-bm25 divides by the average length, so it must not be 0
        corpus[0] = ["w0"]
    return corpus


def random_query(rng: random.Random) -> list[str]:
    terms = rng.choices([*VOCAB, *COMMON, "unknown", "nowhere"], k=rng.randint(1, 6))
    if rng.random() < 0.5:
        terms.append(rng.choice(terms))  # a repeated term counts twice
    return terms


def oracle_ranking(
    scores: npt.NDArray[np.float64], mask: npt.NDArray[np.bool_] | None = None
) -> list[int]:
    allowed = range(len(scores)) if mask is None else np.flatnonzero(mask).tolist()
    return sorted((i for i in allowed if scores[i] > 0), key=lambda i: (-scores[i], i))


def assert_scores_equal(index: BM25Index, oracle: BM25Okapi, terms: list[str]) -> None:
    ours = index.scores(terms)
    assert ours.dtype == np.float64
    assert np.allclose(ours, oracle.get_scores(terms), rtol=1e-9, atol=1e-12), terms


def build(corpus: Corpus, **params: float) -> BM25Index:
    index = BM25Index(**params)
    assert index.add_many(corpus) == range(len(corpus))
    return index


@pytest.mark.parametrize("seed", range(30))
def test_scores_equal_rank_bm25_on_random_corpora(seed: int) -> None:
    rng = random.Random(seed)
    corpus = random_corpus(rng, rng.randint(1, 300))
    index, oracle = build(corpus), BM25Okapi(corpus)
    for _ in range(15):
        assert_scores_equal(index, oracle, random_query(rng))


@pytest.mark.parametrize("seed", range(10))
def test_scores_equal_rank_bm25_after_incremental_batches(seed: int) -> None:
    rng = random.Random(1000 + seed)
    corpus = random_corpus(rng, rng.randint(1, 300))
    index = BM25Index()
    start = 0
    while start < len(corpus):
        stop = min(len(corpus), start + rng.randint(1, 80))
        assert index.add_many(corpus[start:stop]) == range(start, stop)
        if any(corpus[:stop]):
            oracle = BM25Okapi(corpus[:stop])
            for _ in range(5):
                assert_scores_equal(index, oracle, random_query(rng))
        start = stop


@pytest.mark.parametrize(
    ("k1", "b", "epsilon"), [(1.2, 0.75, 0.25), (2.0, 0.3, 0.5), (0.9, 1.0, 0)]
)
def test_parameters_are_those_of_rank_bm25(k1: float, b: float, epsilon: float) -> None:
    rng = random.Random(7)
    corpus = random_corpus(rng, 120)
    index, oracle = (
        build(corpus, k1=k1, b=b, epsilon=epsilon),
        BM25Okapi(corpus, k1=k1, b=b, epsilon=epsilon),
    )
    for _ in range(20):
        assert_scores_equal(index, oracle, random_query(rng))


def test_a_term_in_most_documents_is_floored_at_epsilon_times_the_mean_idf() -> None:
    corpus = [["a", "b"], ["a", "c"], ["a", "d", "d"], ["e"]]
    index, oracle = build(corpus), BM25Okapi(corpus)
    assert oracle.idf["a"] == pytest.approx(0.25 * oracle.average_idf)
    for terms in (["a"], ["a", "a", "d"], ["b", "zzz"], ["zzz"], []):
        assert_scores_equal(index, oracle, terms)


def test_repeated_terms_count_once_per_occurrence() -> None:
    index = build([["a", "b"], ["b", "c"], ["c"]])
    assert np.allclose(index.scores(["a", "a", "c"]), 2 * index.scores(["a"]) + index.scores(["c"]))


@pytest.mark.parametrize("seed", range(15))
def test_top_is_the_oracle_ranking_of_positive_scores(seed: int) -> None:
    rng = random.Random(2000 + seed)
    corpus = random_corpus(rng, rng.randint(1, 300))
    corpus += corpus[: rng.randint(0, 10)]  # duplicated documents tie: the lower index wins
    index, oracle = build(corpus), BM25Okapi(corpus)
    for _ in range(10):
        terms = random_query(rng)
        expected = oracle_ranking(oracle.get_scores(terms))
        for k in (1, 3, 10, len(corpus)):
            top = index.top(terms, k)
            assert [doc for doc, _ in top] == expected[:k]
            assert all(score > 0 for _, score in top)
        assert index.count_matches(terms) == len(expected)


def test_ties_are_broken_by_index() -> None:
    index = build([["x"], ["a", "b"], ["a", "b"], ["y"], ["a", "b"], ["z"], ["v"], ["w"]])
    top = index.top(["a"], 10)
    assert [doc for doc, _ in top] == [1, 2, 4]
    assert top[0][1] == top[1][1] == top[2][1]
    # The tied documents straddle the cut of k = 2: the lower indexes must be kept.
    assert [doc for doc, _ in index.top(["a"], 2)] == [1, 2]
    assert [doc for doc, _ in index.top(["a"], 1, offset=2)] == [4]


def test_mask_applies_before_ranking() -> None:
    rare = [["gold", "gold", "gold"], ["gold", "gold"], ["gold"]]
    filler = [[f"f{i}"] for i in range(10)]
    weak = [["gold", "x", "y", "z", "w", "v"], ["gold", "x", "y", "z", "w", "v", "u"]]
    index = build([*rare, *filler, *weak])
    mask = np.ones(len(index), dtype=bool)
    mask[:3] = False  # the three best documents are not allowed
    top = index.top(["gold"], 3, mask=mask)
    assert [doc for doc, _ in top] == [13, 14]
    assert index.count_matches(["gold"], mask=mask) == 2
    assert [doc for doc, _ in index.top(["gold"], 3)] == [0, 1, 2]
    assert index.top(["gold"], 3, mask=np.zeros(len(index), dtype=bool)) == []


@pytest.mark.parametrize("seed", range(10))
def test_masked_top_and_counts_match_the_oracle(seed: int) -> None:
    rng = random.Random(3000 + seed)
    corpus = random_corpus(rng, rng.randint(1, 300))
    index, oracle = build(corpus), BM25Okapi(corpus)
    for _ in range(10):
        terms = random_query(rng)
        mask = np.array([rng.random() < 0.5 for _ in corpus], dtype=bool)
        expected = oracle_ranking(oracle.get_scores(terms), mask)
        assert [doc for doc, _ in index.top(terms, 7, mask=mask)] == expected[:7]
        assert index.count_matches(terms, mask=mask) == len(expected)


@pytest.mark.parametrize("page_size", [1, 3, 10])
def test_pages_cover_the_ranking_without_gaps_or_repeats(page_size: int) -> None:
    rng = random.Random(4000 + page_size)
    corpus = random_corpus(rng, 200)
    corpus += corpus[:20]
    index = build(corpus)
    terms = ["w3", "w10", "w20"]
    full = index.top(terms, len(index))
    pages: list[tuple[int, float]] = []
    offset = 0
    while page := index.top(terms, page_size, offset=offset):
        assert len(page) <= page_size
        pages += page
        offset += page_size
    assert pages == full
    assert len({doc for doc, _ in pages}) == len(pages) == index.count_matches(terms)
    assert index.top(terms, page_size, offset=len(full) + 5) == []


def test_top_rejects_bad_arguments() -> None:
    index = build([["a"], ["b"]])
    assert index.top(["a"], 0) == []
    with pytest.raises(ValueError):
        index.top(["a"], -1)
    with pytest.raises(ValueError):
        index.top(["a"], 1, offset=-1)
    with pytest.raises(ValueError):
        index.top(["a"], 1, mask=np.ones(3, dtype=bool))
    with pytest.raises(ValueError):
        index.count_matches(["a"], mask=np.ones(2, dtype=np.int64))


@pytest.mark.parametrize("seed", range(5))
def test_docs_with_all_is_the_intersection(seed: int) -> None:
    rng = random.Random(5000 + seed)
    corpus = random_corpus(rng, rng.randint(1, 300))
    index = build(corpus)
    for _ in range(20):
        terms = rng.sample([*VOCAB[:10], *COMMON], k=rng.randint(1, 3))
        found = index.docs_with_all(terms)
        assert found.tolist() == [i for i, doc in enumerate(corpus) if set(terms) <= set(doc)]
        assert np.issubdtype(found.dtype, np.integer)
    assert index.docs_with_all(["w0", "unknown"]).size == 0
    assert index.docs_with_all([]).tolist() == list(range(len(corpus)))


def test_docs_with_all_returns_a_copy() -> None:
    index = build([["a"], ["a", "b"]])
    index.docs_with_all(["a"])[:] = 99
    assert index.docs_with_all(["a"]).tolist() == [0, 1]


def test_one_document() -> None:
    corpus = [["solo", "word", "word"]]
    index, oracle = build(corpus), BM25Okapi(corpus)
    for terms in (["solo"], ["word", "word"], ["other"]):
        assert_scores_equal(index, oracle, terms)
    # In a one-document corpus every term is in "more than half" of it: idf is floored to a
    # negative value, so nothing scores above zero (as with rank-bm25).
    assert index.top(["solo"], 5) == []
    assert index.count_matches(["solo"]) == 0
    assert index.docs_with_all(["solo", "word"]).tolist() == [0]
    assert index.doc_length(0) == 3


def test_empty_index() -> None:
    index = BM25Index()
    assert len(index) == 0
    assert index.scores(["a"]).shape == (0,)
    assert index.top(["a"], 10) == []
    assert index.count_matches(["a"]) == 0
    assert index.docs_with_all(["a"]).size == 0
    with pytest.raises(IndexError):
        index.doc_length(0)


def test_empty_documents_count_as_documents() -> None:
    corpus: Corpus = [[], ["a", "b"], [], ["b"]]
    index, oracle = build(corpus), BM25Okapi(corpus)
    assert len(index) == 4
    assert index.doc_length(0) == 0
    for terms in (["a"], ["b"], ["a", "b", "c"]):
        assert_scores_equal(index, oracle, terms)


def test_add_returns_indexes_and_lengths() -> None:
    index = BM25Index()
    assert index.add(["a", "b", "a"]) == 0
    assert index.add(("c",)) == 1
    assert index.add_many([["d"], []]) == range(2, 4)
    assert index.add_many([]) == range(4, 4)
    assert [index.doc_length(i) for i in range(len(index))] == [3, 1, 1, 0]
    with pytest.raises(IndexError):
        index.doc_length(4)
    with pytest.raises(IndexError):
        index.doc_length(-1)
    with pytest.raises(TypeError):
        index.add("not tokens")


def test_rebuilding_gives_identical_scores() -> None:
    rng = random.Random(6000)
    corpus = random_corpus(rng, 250)
    incremental = BM25Index()
    queries = [random_query(rng) for _ in range(20)]
    for doc in corpus:
        incremental.add(doc)
        incremental.scores(queries[len(incremental) % len(queries)])  # queries in between
    rebuilt = build(corpus)
    for terms in queries:
        assert np.array_equal(incremental.scores(terms), rebuilt.scores(terms))
        assert incremental.top(terms, 10) == rebuilt.top(terms, 10)


def test_adding_one_by_one_does_not_rebuild() -> None:
    rng = random.Random(7000)
    words = [f"t{i}" for i in range(5000)]
    index = BM25Index()
    for i in range(20_000):
        assert index.add(rng.choices(words, k=12)) == i
    assert len(index) == 20_000
    assert index.count_matches(["t1"]) == index.docs_with_all(["t1"]).size > 0


def _split_at(corpus: Corpus, cuts: list[int]) -> tuple[list[str], list[IndexPart]]:
    """The parts of ``corpus`` cut before ``cuts``, each made knowing the terms before it."""
    vocabulary: dict[str, int] = {}
    parts = []
    for a, b in itertools.pairwise([0, *cuts, len(corpus)]):
        part, new = index_part(corpus[a:b], vocabulary, len(vocabulary))
        vocabulary.update(zip(new, itertools.count(len(vocabulary))))
        parts.append(part)
    return list(vocabulary), parts


@pytest.mark.parametrize("seed", range(10))
def test_an_index_opened_from_parts_or_merged_scores_bit_for_bit_as_one_built(seed: int) -> None:
    rng = random.Random(8000 + seed)
    corpus = random_corpus(rng, 300)
    cuts = sorted(rng.sample(range(1, 300), rng.randint(1, 6)))
    vocabulary, parts = _split_at(corpus, cuts)
    built = build(corpus)
    assert vocabulary == list(built.vocabulary)  # terms numbered as document by document
    opened = BM25Index.from_parts(vocabulary, parts)
    halves = [merge_parts(parts[:1]), merge_parts(parts[1:])]
    merged = BM25Index.from_parts(vocabulary, [merge_parts(halves)])
    assert len(opened) == len(merged) == len(built) == 300
    for terms in [random_query(rng) for _ in range(20)] + [COMMON]:  # floored terms too
        expected = built.scores(terms)
        assert np.array_equal(opened.scores(terms), expected), terms
        assert np.array_equal(merged.scores(terms), expected), terms
        assert opened.top(terms, 10) == merged.top(terms, 10) == built.top(terms, 10)
        assert np.array_equal(opened.docs_with_all(terms[:2]), built.docs_with_all(terms[:2]))
    # A document added to each after opening: still the same scores.
    for index in (opened, merged, built):
        index.add(["w1", "fresh", "the"])
    assert np.array_equal(opened.scores(["fresh", "w1"]), built.scores(["fresh", "w1"]))
    assert np.array_equal(merged.scores(["the", "w2"]), built.scores(["the", "w2"]))


def test_parts_may_be_narrow_and_read_only_and_are_checked() -> None:
    corpus = [["a", "b", "a"], ["b", "c"], ["a"]]
    built = build(corpus)
    part = built.to_part()
    narrow = IndexPart(
        part.term_ids.astype(np.uint8),
        part.offsets.astype(np.uint8),
        part.docs.astype(np.uint8),
        part.tfs.astype(np.uint8),
        part.lengths.astype(np.uint16),
    )
    for array in (narrow.docs, narrow.tfs):
        array.flags.writeable = False  # as read from a stored blob
    vocabulary = list(built.vocabulary)
    index = BM25Index.from_parts(vocabulary, [narrow, narrow])  # documents 3, 4, 5 too
    assert index.docs_with_all(["a"]).tolist() == [0, 2, 3, 5]
    index.add(["c"] * 300)  # a tf past uint8, appended to postings made from the parts
    expected = build([*corpus, *corpus, ["c"] * 300])
    assert np.array_equal(index.scores(["c", "a"]), expected.scores(["c", "a"]))
    assert narrow.docs.tolist() == part.docs.tolist()
    arrays = (part.docs, part.tfs, part.lengths)
    with pytest.raises(ValueError, match="offsets"):
        IndexPart(np.array([0]), np.array([0, 1, 2]), *arrays)
    with pytest.raises(ValueError, match="last offset"):
        IndexPart(np.array([0]), np.array([0, 9]), *arrays)
    with pytest.raises(ValueError, match="ascending"):
        IndexPart(np.array([1, 0, 2]), part.offsets, *arrays)
    with pytest.raises(ValueError, match="repeat"):
        BM25Index.from_parts(["a", "b", "a"], [part])
    with pytest.raises(ValueError, match="past the vocabulary"):
        BM25Index.from_parts(["a", "b"], [part])
    with pytest.raises(ValueError, match="at least one"):
        merge_parts([])
    assert len(BM25Index.from_parts([], [])) == 0


def test_a_part_of_documents_without_tokens_still_counts_them() -> None:
    corpus: Corpus = [[], [], ["a", "b"], []]
    vocabulary, parts = _split_at(corpus, [2, 3])
    assert [len(p.term_ids) for p in parts] == [0, 2, 0]
    opened = BM25Index.from_parts(vocabulary, parts)
    merged = BM25Index.from_parts(vocabulary, [merge_parts(parts)])
    for index in (opened, merged):
        assert len(index) == 4
        assert np.array_equal(index.scores(["a"]), build(corpus).scores(["a"]))
