"""The semantic message index: USE embeddings and VectorIndex on a real embedded Chroma."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, cast

import chromadb
import numpy as np
import numpy.typing as npt
import pytest
from chromadb.api import ClientAPI
from chromadb.api.types import Documents, Embeddings, Where

from skilldeck.tools.embeddings import (
    OpenAICompatibleEmbeddingFunction,
    USEEmbeddingFunction,
    default_embedding_function,
)
from skilldeck.tools.vectors import VectorHit, VectorIndex, open_chroma

pytestmark = [pytest.mark.L2, pytest.mark.stores]

SPICY_EN = "I don't eat spicy food"
SPICY_ZH = "我不吃辣"
TRAIN = "The train leaves at noon"
T0 = 1_700_000_000.0
USER = "user-a"


class Corpus(NamedTuple):
    ids: list[str]
    texts: list[str]
    roles: list[str]
    ts: list[float]
    thread_ids: list[str]


def _corpus() -> Corpus:
    """320 template sentences, a minute apart, roles alternating, plus the spicy-food pair."""
    subjects = ["My sister", "Our neighbour", "The new manager", "A friend from school", "My uncle"]
    activities = [
        "plays tennis on weekends",
        "is learning to bake bread",
        "works night shifts at the hospital",
        "collects old postage stamps",
        "moved to Berlin for a job",
        "drives a red delivery truck",
        "writes poems about the sea",
        "repairs vintage bicycles",
    ]
    endings = ["", " these days", " since March", " with great care"]
    endings += [", or so I heard", " and loves it", " but wants a change", " every evening"]
    texts = [f"{s} {a}{e}." for s, a, e in itertools.product(subjects, activities, endings)]
    texts += [SPICY_ZH, TRAIN]
    n = len(texts)
    return Corpus(
        ids=[f"m{i:04d}" for i in range(n)],
        texts=texts,
        roles=["user" if i % 2 == 0 else "assistant" for i in range(n)],
        ts=[T0 + 60.0 * i for i in range(n)],
        thread_ids=[f"t{i % 7}" for i in range(n)],
    )


CORPUS = _corpus()
ROLE = dict(zip(CORPUS.ids, CORPUS.roles, strict=True))
TS = dict(zip(CORPUS.ids, CORPUS.ts, strict=True))
SPICY_ZH_ID = CORPUS.ids[CORPUS.texts.index(SPICY_ZH)]


def _client(path: Path) -> ClientAPI:
    return open_chroma(path=path)


def _add(index: VectorIndex) -> int:
    """Index CORPUS for USER, embedding its texts."""
    return index.add(USER, *CORPUS)


@pytest.fixture(scope="module")
def corpus_vectors() -> npt.NDArray[np.float32]:
    """CORPUS embedded once for the module (``add`` embeds texts itself in the tests below)."""
    return np.asarray(default_embedding_function()(CORPUS.texts), dtype=np.float32)


@pytest.fixture
def index(tmp_path: Path, corpus_vectors: npt.NDArray[np.float32]) -> VectorIndex:
    """An index of CORPUS for USER on a fresh embedded Chroma."""
    vectors = VectorIndex(_client(tmp_path / "chroma"))
    assert vectors.add(USER, *CORPUS, embeddings=corpus_vectors) == len(CORPUS.ids)
    return vectors


def _brute_force(
    index: VectorIndex, query: str, *, role: str, since: float, until: float, top_k: int
) -> list[tuple[str, float]]:
    """Exact cosine ranking over the filtered corpus, computed independently in float64 from
    the vectors at half precision (as the index's copy holds them)."""
    keep = [
        i
        for i in range(len(CORPUS.ids))
        if CORPUS.roles[i] == role and since <= CORPUS.ts[i] < until
    ]
    matrix = index.embed([CORPUS.texts[i] for i in keep]).astype(np.float16).astype(np.float64)
    scores = matrix @ index.embed([query])[0].astype(np.float64)
    ranked = sorted(zip([CORPUS.ids[i] for i in keep], scores, strict=True), key=lambda h: -h[1])
    return [(item_id, float(score)) for item_id, score in ranked[:top_k]]


class CountingEmbeddingFunction(USEEmbeddingFunction):
    """The USE model, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.texts: list[str] = []

    def __call__(self, input: Documents) -> Embeddings:
        self.texts.extend(input)
        return super().__call__(input)

    @staticmethod
    def name() -> str:
        return "skilldeck-test-counting-usem3"


# -- USE embeddings ---------------------------------------------------------------------------


def test_use_vectors_have_512_float32_unit_dimensions() -> None:
    vectors = np.asarray(default_embedding_function()([SPICY_EN, SPICY_ZH, TRAIN]))
    assert vectors.shape == (3, 512)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_use_paraphrase_across_languages_beats_an_unrelated_sentence() -> None:
    en, zh, train = np.asarray(USEEmbeddingFunction()([SPICY_EN, SPICY_ZH, TRAIN]))
    assert float(en @ zh) > float(en @ train) + 0.3
    assert float(en @ zh) > float(zh @ train) + 0.3


def test_use_same_text_gives_the_same_vector() -> None:
    ef = USEEmbeddingFunction()
    first, again = np.asarray(ef([SPICY_EN, SPICY_EN]))
    alone = np.asarray(ef([SPICY_EN]))[0]
    assert np.allclose(first, again, atol=1e-6)
    assert np.allclose(first, alone, atol=1e-6)


def test_use_config_round_trips() -> None:
    ef = USEEmbeddingFunction(threads=2)
    rebuilt = USEEmbeddingFunction.build_from_config(ef.get_config())
    assert rebuilt.threads == 2
    assert not ef.is_legacy()
    with pytest.raises(ValueError, match="threads"):
        USEEmbeddingFunction(threads=0)


def test_collection_records_our_embedding_function_not_chromas_default(
    index: VectorIndex, tmp_path: Path
) -> None:
    """Chroma's default function downloads a model; ours is the one persisted and rebuilt."""
    (collection,) = _client(tmp_path / "chroma").list_collections()
    assert collection.metadata["user_id"] == USER
    assert collection.configuration_json["embedding_function"]["type"] == "known"
    assert collection.configuration_json["embedding_function"]["name"] == "skilldeck-usem3"
    assert collection.configuration_json["hnsw"]["space"] == "cosine"
    assert isinstance(collection.configuration["embedding_function"], USEEmbeddingFunction)


def test_openai_compatible_config_never_holds_the_key() -> None:
    ef = OpenAICompatibleEmbeddingFunction(
        "nomic-embed-text", base_url="http://127.0.0.1:9/v1", api_key="sk-secret", batch_size=64
    )
    config = ef.get_config()
    assert "sk-secret" not in json.dumps(config)
    assert config["model"] == "nomic-embed-text"
    rebuilt = OpenAICompatibleEmbeddingFunction.build_from_config(config)
    assert rebuilt.get_config() == config
    assert rebuilt.name() == "skilldeck-openai-compatible"


# -- VectorIndex ------------------------------------------------------------------------------


def test_unfiltered_query_finds_the_cross_language_paraphrase_first(index: VectorIndex) -> None:
    hits = index.query(USER, text=SPICY_EN, top_k=5)
    assert hits[0].id == SPICY_ZH_ID
    assert hits[0].score > 0.6
    assert all(isinstance(hit, VectorHit) for hit in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert index.count(USER) == len(CORPUS.ids)


def test_role_filter_keeps_only_that_role(index: VectorIndex) -> None:
    hits = index.query(USER, text="who works at the hospital", top_k=20, role="assistant")
    assert len(hits) == 20
    assert {ROLE[h.id] for h in hits} == {"assistant"}
    assert index.query(USER, text=SPICY_EN, role="user")[0].id == SPICY_ZH_ID
    assert index.query(USER, text=SPICY_EN, role="tool") == []


def test_role_any_is_no_filter(index: VectorIndex) -> None:
    assert index.query(USER, text=TRAIN, role="any") == index.query(USER, text=TRAIN)


def test_time_range_since_is_inclusive_and_until_exclusive(index: VectorIndex) -> None:
    since, until = CORPUS.ts[10], CORPUS.ts[20]
    hits = index.query(USER, text="bicycles", top_k=100, since=since, until=until)
    assert {h.id for h in hits} == set(CORPUS.ids[10:20])
    only_since = index.query(USER, text="bicycles", top_k=1000, since=CORPUS.ts[-3])
    assert {h.id for h in only_since} == set(CORPUS.ids[-3:])
    only_until = index.query(USER, text="bicycles", top_k=1000, until=CORPUS.ts[2])
    assert {h.id for h in only_until} == set(CORPUS.ids[:2])
    assert index.query(USER, text="bicycles", since=until, until=since) == []


def test_role_and_time_together(index: VectorIndex) -> None:
    since, until = CORPUS.ts[100], CORPUS.ts[200]
    hits = index.query(USER, text="stamps", top_k=500, role="user", since=since, until=until)
    expected = {i for i, t in TS.items() if ROLE[i] == "user" and since <= t < until}
    assert {h.id for h in hits} == expected
    assert len(hits) == 50


def test_min_score_drops_weak_hits_on_both_paths(index: VectorIndex) -> None:
    for role in (None, "user"):
        hits = index.query(USER, text=SPICY_EN, top_k=50, role=role)
        strong = index.query(USER, text=SPICY_EN, top_k=50, role=role, min_score=0.5)
        assert strong == [h for h in hits if h.score >= 0.5]
        assert strong[0].id == SPICY_ZH_ID
        assert index.query(USER, text=SPICY_EN, role=role, min_score=1.01) == []


def test_query_by_embedding_matches_query_by_text(index: VectorIndex) -> None:
    vector = index.embed([SPICY_EN])[0].tolist()
    for role in (None, "user"):
        by_text = index.query(USER, text=SPICY_EN, role=role)
        by_vector = index.query(USER, embedding=vector, role=role)
        assert [h.id for h in by_vector] == [h.id for h in by_text]
        assert np.allclose([h.score for h in by_vector], [h.score for h in by_text], atol=1e-5)


def test_users_never_see_each_other(index: VectorIndex) -> None:
    assert index.query("user-b", text=SPICY_EN) == []
    assert index.query("user-b", text=SPICY_EN, role="user", since=T0) == []
    assert index.count("user-b") == 0
    index.add(
        "user-b", ["b1", "b2"], ["我不吃辣的菜", TRAIN], ["user", "user"], [T0, T0], ["x", "x"]
    )
    for role in (None, "user"):
        assert {h.id for h in index.query("user-b", text=SPICY_EN, top_k=50, role=role)} == {
            "b1",
            "b2",
        }
        assert "b1" not in {h.id for h in index.query(USER, text=SPICY_EN, top_k=500, role=role)}
    assert index.count(USER) == len(CORPUS.ids)


def test_re_adding_the_same_ids_is_idempotent(index: VectorIndex) -> None:
    before = index.query(USER, text=SPICY_EN, top_k=500, role="user")  # loads the cache
    assert _add(index) == 0
    assert index.count(USER) == len(CORPUS.ids)
    after = index.query(USER, text=SPICY_EN, top_k=500, role="user")
    assert [h.id for h in after] == [h.id for h in before]
    assert len({h.id for h in after}) == len(after)
    # An upsert overwrites: the message now counts as an assistant's.
    index.add(USER, [SPICY_ZH_ID], [SPICY_ZH], ["assistant"], [T0], ["t0"])
    assert SPICY_ZH_ID not in {h.id for h in index.query(USER, text=SPICY_EN, role="user")}
    assert index.query(USER, text=SPICY_EN, role="assistant")[0].id == SPICY_ZH_ID


def test_each_text_is_embedded_exactly_once(tmp_path: Path) -> None:
    ef = CountingEmbeddingFunction()
    index = VectorIndex(_client(tmp_path), embedding_function=ef)
    assert _add(index) == len(CORPUS.ids)
    assert sorted(ef.texts) == sorted(CORPUS.texts)
    assert index.query(USER, text=SPICY_EN, role="user")[0].id == SPICY_ZH_ID
    assert len(ef.texts) == len(CORPUS.texts) + 1


def test_a_new_process_sees_the_same_results(index: VectorIndex, tmp_path: Path) -> None:

    def searches(vectors: VectorIndex) -> list[list[str]]:
        unfiltered = vectors.query(USER, text=SPICY_EN)
        filtered = vectors.query(
            USER, text=SPICY_EN, role="user", since=CORPUS.ts[50], until=CORPUS.ts[250]
        )
        return [[h.id for h in unfiltered], [h.id for h in filtered]]

    reopened = VectorIndex(_client(tmp_path / "chroma"))
    assert searches(reopened) == searches(index)
    assert reopened.count(USER) == len(CORPUS.ids)


@pytest.mark.parametrize(
    ("query", "role", "first", "last"),
    [("bread and baking", "user", 0, 321), ("night shifts", "assistant", 40, 200)],
)
def test_filtered_fast_path_is_exact(
    index: VectorIndex, tmp_path: Path, query: str, role: str, first: int, last: int
) -> None:
    since, until = CORPUS.ts[first], CORPUS.ts[last]
    hits = index.query(USER, text=query, top_k=15, role=role, since=since, until=until)
    expected = _brute_force(index, query, role=role, since=since, until=until, top_k=15)
    assert [h.id for h in hits] == [item_id for item_id, _ in expected]
    assert np.allclose([h.score for h in hits], [s for _, s in expected], atol=1e-5)
    # Chroma's own metadata filter agrees on the set.
    collection = _client(tmp_path / "chroma").list_collections()[0]
    where = cast(Where, {"$and": [{"role": role}, {"ts": {"$gte": since}}, {"ts": {"$lt": until}}]})
    chroma = collection.query(query_embeddings=index.embed([query]), n_results=15, where=where)
    assert set(chroma["ids"][0]) == {h.id for h in hits}


@pytest.mark.parametrize(
    ("role", "since", "until"),
    [("tool", 0.0, 600.0), ("user", 100.0, 300.0), ("assistant", 0.0, 600.0), (None, 50.0, 60.0)],
    ids=["sparse-gather", "narrow-span", "dense", "time-only"],
)
def test_fast_path_matches_numpy_on_sparse_and_dense_filters(
    tmp_path: Path, role: str | None, since: float, until: float
) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(600, 32)).astype(np.float32)
    roles = ["tool" if i % 20 == 0 else "user" if i % 2 else "assistant" for i in range(600)]
    ids = [f"r{i:03d}" for i in range(600)]
    index = VectorIndex(_client(tmp_path))
    index.add(
        USER,
        ids,
        [""] * 600,
        roles,
        [float(i) for i in range(600)],
        ["t"] * 600,
        embeddings=vectors,
    )
    query = rng.normal(size=32)
    unit = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float16)
    scores = unit.astype(np.float64) @ (query / np.linalg.norm(query))
    keep = [i for i in range(600) if role in (None, roles[i]) and since <= i < until]
    expected = sorted(keep, key=lambda i: -scores[i])[:10]
    hits = index.query(USER, embedding=query.tolist(), role=role, since=since, until=until)
    assert [h.id for h in hits] == [ids[i] for i in expected]
    assert np.allclose([h.score for h in hits], scores[expected], atol=1e-5)


def test_cache_catches_up_when_another_index_adds(index: VectorIndex, tmp_path: Path) -> None:
    assert index.query(USER, text=SPICY_EN, role="user")[0].id == SPICY_ZH_ID  # cache loaded
    other = VectorIndex(_client(tmp_path / "chroma"))
    other.add(USER, ["late"], ["I never eat spicy food at all"], ["user"], [T0], ["t9"])
    hits = index.query(USER, text=SPICY_EN, role="user", since=T0 - 1)
    assert hits[0].id == "late"
    # Interleaved: the other index adds, this one adds, then this one must see both.
    other.add(USER, ["x1"], ["Spicy food is not for me"], ["user"], [T0 + 1], ["t9"])
    index.add(USER, ["x2"], ["I avoid chili peppers"], ["user"], [T0 + 2], ["t9"])

    def search(vectors: VectorIndex) -> list[VectorHit]:
        return vectors.query(USER, text=SPICY_EN, top_k=30, role="user", since=T0, until=T0 + 60)

    assert {"late", "x1", "x2"} <= {h.id for h in search(index)}
    assert search(index) == search(VectorIndex(_client(tmp_path / "chroma")))  # a full load
    assert index.count(USER) == len(CORPUS.ids) + 3


def test_reset_deletes_the_user_and_other_indexes_recover(
    index: VectorIndex, tmp_path: Path
) -> None:
    other = VectorIndex(_client(tmp_path / "chroma"))
    assert other.query(USER, text=SPICY_EN, role="user")  # holds a handle and a cache
    index.reset(USER)
    assert index.count(USER) == 0
    assert index.query(USER, text=SPICY_EN) == []
    assert other.query(USER, text=SPICY_EN, role="user") == []
    assert other.count(USER) == 0
    index.add(USER, ["again"], [SPICY_ZH], ["user"], [T0], ["t0"])
    assert [h.id for h in other.query(USER, text=SPICY_EN, role="user")] == ["again"]


def test_add_accepts_precomputed_embeddings(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(600, 16)).astype(np.float32)
    index = VectorIndex(_client(tmp_path))
    ids = [f"r{i}" for i in range(600)]
    roles = ["user", "assistant", "tool"] * 200
    ts = [float(i) for i in range(600)]
    assert index.add(USER, ids, [""] * 600, roles, ts, ["t"] * 600, embeddings=vectors) == 600
    query = vectors[7] * 3.0  # not normalised: the index normalises it
    hits = index.query(USER, embedding=query.tolist(), top_k=3, role="assistant", until=300.0)
    assert hits[0].id == "r7"
    assert hits[0].score == pytest.approx(1.0, abs=1e-3)  # the copy is at half precision
    assert index.query(USER, embedding=query.tolist(), top_k=1)[0].id == "r7"


@pytest.mark.parametrize(
    ("text", "embedding"), [(SPICY_EN, [0.1] * 512), (None, None)], ids=["both", "neither"]
)
def test_query_needs_exactly_one_of_text_or_embedding(
    index: VectorIndex, text: str | None, embedding: Sequence[float] | None
) -> None:
    with pytest.raises(ValueError, match="exactly one of text or embedding"):
        index.query(USER, text=text, embedding=embedding)


def test_bad_arguments_are_refused(index: VectorIndex, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="same length"):
        index.add(USER, ["a", "b"], ["x"], ["user"], [T0], ["t"])
    with pytest.raises(ValueError, match="distinct"):
        index.add(USER, ["a", "a"], ["x", "y"], ["user"] * 2, [T0] * 2, ["t"] * 2)
    with pytest.raises(ValueError, match="top_k"):
        index.query(USER, text=TRAIN, top_k=0)
    with pytest.raises(ValueError, match="dimensions"):
        index.query(USER, embedding=[1.0, 0.0], role="user")
    with pytest.raises(ValueError, match="http://host:port"):
        open_chroma(path=tmp_path, url="ftp://example.org")
    with pytest.raises(ValueError, match="path"):
        open_chroma(url="http://127.0.0.1:8000/chroma")
    assert index.add(USER, [], [], [], [], []) == 0


def test_open_chroma_turns_telemetry_off(tmp_path: Path) -> None:
    client = open_chroma(path=tmp_path)
    assert isinstance(client, chromadb.api.ClientAPI)
    assert client.get_settings().anonymized_telemetry is False
