"""ScopeMemory, sans-io: records, validation, every search mode and filter, access
tracking, embedder safety, snapshots and the HNSW graph built beside the actor."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from scope_support import EMBEDDER, KEY, Driver, image_of, restored, run_work, settings, snapshot_image

import mnemex
from mnemex.effects import Image, JobResult, Step
from mnemex.index.vector import read_vectors_file
from mnemex.memories.behaviour import GraphReady, ScopeMemory, is_scope_write, scope_codec
from mnemex.memories.protocol import (
    AddSession,
    CountMemories,
    Forget,
    ForgetWhere,
    GetMemory,
    GetScopeStats,
    ListMemories,
    NewMemory,
    Remember,
    Search,
    Touch,
    UpdateMemory,
)
from mnemex.memories.snapshot import encode_vector
from mnemex.models.hashing import HashingEmbedder


def state(memory: ScopeMemory) -> tuple[list[bytes], dict[str, Any]]:
    image = snapshot_image(memory)
    return list(image.records), dict(image.extra)


# -- records --------------------------------------------------------------------------------
def test_remember_stores_every_field_and_get_returns_it() -> None:
    d = Driver()
    memory = d.new("I write Java", author="user", timestamp=50.0, importance=0.9, session_id="s1",
                   actor_id="a1", categories=("work", "work", "code"), entities=("Java",),
                   metadata={"lang": "en"}, source="chat")
    [mid] = d.remember(memory)
    record = d.send(GetMemory(id=mid))
    assert (record.content, record.author, record.timestamp, record.importance) == ("I write Java", "user",
                                                                                     50.0, 0.9)
    assert record.categories == ("work", "code")  # repeats dropped, order kept
    assert (record.session_id, record.actor_id, record.entities, record.metadata, record.source) == (
        "s1", "a1", ("Java",), {"lang": "en"}, "chat")
    assert record.created_at == d.now and record.access_count == 0


def test_exact_duplicate_content_returns_the_existing_id() -> None:
    d = Driver()
    [first] = d.remember("I like tea")
    again = d.remember("I like tea", "I like coffee", "I like coffee")
    assert again[0] == first
    assert again[1] == again[2] != first
    assert d.send(CountMemories()) == 2
    reply = d.send(Remember(memories=[d.new("I like tea")], embedder=EMBEDDER.name, dim=EMBEDDER.dim,
                            now=d.tick()))
    assert reply.created == [False]


def test_timestamp_defaults_to_the_command_time() -> None:
    d = Driver()
    [mid] = d.remember("no time given")
    assert d.send(GetMemory(id=mid)).timestamp == d.now


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"content": "x" * 10_241}, mnemex.TooLarge, "10,241 bytes; the limit is 10,240"),
        ({"content": "   "}, mnemex.InvalidInput, "content is empty"),
        ({"importance": 1.5}, mnemex.InvalidInput, "importance must be a number in 0..1"),
        ({"importance": float("nan")}, mnemex.InvalidInput, "importance"),
        ({"timestamp": -1.0}, mnemex.InvalidInput, "timestamp must be seconds"),
        ({"metadata": {"k": "v" * 20_000}}, mnemex.TooLarge, "metadata is 20,"),
        ({"entities": ("!!!",)}, mnemex.InvalidInput, "no word characters"),
        ({"categories": ("",)}, mnemex.InvalidInput, "categories must be a non-empty string"),
        ({"id": ""}, mnemex.InvalidInput, "id must be a non-empty string"),
        ({"id": "a\nb"}, mnemex.InvalidInput, "control character"),
        ({"author": "x" * 2000}, mnemex.TooLarge, "author is 2,000 bytes"),
    ],
)
def test_invalid_memories_are_refused_and_nothing_changes(fields: dict[str, Any], error: type[Exception],
                                                          match: str) -> None:
    d = Driver()
    d.remember("already here")
    before = state(d.memory)
    content = fields.pop("content", "fine content")
    good = d.new("another good one")
    bad = NewMemory(id=fields.pop("id", "bad-1"), content=content,
                    vector=encode_vector(EMBEDDER.embed([content])[0]), **fields)
    with pytest.raises(error, match=match):
        d.send(Remember(memories=[good, bad], embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=d.tick()))
    assert state(d.memory) == before


def test_a_taken_id_with_other_content_is_refused() -> None:
    d = Driver()
    d.remember(d.new("first", id="same"))
    with pytest.raises(mnemex.InvalidInput, match="taken by other content"):
        d.remember(d.new("second", id="same"))


def test_too_many_memories_in_one_command_is_refused() -> None:
    d = Driver(max_memories_per_command=2)
    with pytest.raises(mnemex.TooLarge, match="limit is 2"):
        d.remember("a", "b", "c")


def test_a_vector_of_the_wrong_size_is_refused() -> None:
    d = Driver()
    memory = NewMemory(id="x", content="hello", vector=b"\x00" * 12)
    with pytest.raises(mnemex.InvalidInput, match="32 float32 values"):
        d.send(Remember(memories=[memory], embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=1.0))


def test_vectors_of_another_embedder_are_never_mixed() -> None:
    d = Driver()
    d.remember("made by the first model")
    other = HashingEmbedder(dim=16)
    memory = NewMemory(id="x", content="made by another", vector=encode_vector(other.embed(["x"])[0]))
    with pytest.raises(mnemex.InvalidInput, match="never mixed"):
        d.send(Remember(memories=[memory], embedder=other.name, dim=16, now=d.tick()))
    with pytest.raises(mnemex.InvalidInput, match="holds vectors of embedder"):
        d.send(Search(query="x", vector=encode_vector(other.embed(["x"])[0]), embedder=other.name, dim=16,
                      mode="vector", now=d.now))
    # a runtime configured with another model: the error says what to do
    moved = ScopeMemory.restore(KEY, snapshot_image(d.memory), settings(embedder_name=other.name, embedder_dim=other.dim))
    with pytest.raises(mnemex.InvalidInput, match=r"set config\.models\.embedder back"):
        moved.handle(Remember(memories=[memory], embedder=other.name, dim=16, now=d.tick()))
    # keyword and full-text search still work on that scope
    assert moved.handle(Search(query="first model", mode="fulltext", now=d.now)).hits


def test_update_changes_fields_and_reindexes() -> None:
    d = Driver()
    [mid] = d.remember("I live in Berlin", categories=("home",))
    vector = encode_vector(EMBEDDER.embed(["I live in Lisbon"])[0])
    updated = d.send(UpdateMemory(id=mid, now=d.tick(), content="I live in Lisbon", vector=vector,
                                  embedder=EMBEDDER.name, dim=EMBEDDER.dim, importance=0.8, categories=()))
    assert (updated.memory.content, updated.memory.importance, updated.memory.categories) == (
        "I live in Lisbon", 0.8, ())
    assert not d.search("Berlin", "keyword").hits
    assert [h.memory.id for h in d.search("Lisbon", "keyword").hits] == [mid]
    assert [h.memory.id for h in d.search("Lisbon", "fulltext").hits] == [mid]
    assert d.send(CountMemories(filter={"categories": "home"})) == 0
    # the old content is free again, the new one is taken
    [other] = d.remember("I live in Berlin")
    assert other != mid
    with pytest.raises(mnemex.InvalidInput, match="already holds this content"):
        d.send(UpdateMemory(id=other, now=d.tick(), content="I live in Lisbon", vector=vector,
                            embedder=EMBEDDER.name, dim=EMBEDDER.dim))


def test_update_of_content_without_its_vector_is_refused() -> None:
    d = Driver()
    [mid] = d.remember("old text")
    before = state(d.memory)
    with pytest.raises(mnemex.InvalidInput, match="needs its new vector"):
        d.send(UpdateMemory(id=mid, now=d.tick(), content="new text"))
    assert state(d.memory) == before
    with pytest.raises(mnemex.NotFound):
        d.send(UpdateMemory(id="nope", now=d.tick(), importance=0.1))


def test_forget_and_forget_where() -> None:
    d = Driver()
    a, b, c = d.remember("alpha one", "beta two", "gamma three")
    assert d.send(Forget(ids=[a, "unknown", a], now=d.tick())).ids == [a]
    assert d.send(CountMemories()) == 2
    with pytest.raises(mnemex.NotFound):
        d.send(GetMemory(id=a))
    assert not d.search("alpha", "keyword").hits
    d.send(UpdateMemory(id=b, now=d.tick(), importance=0.9))
    assert d.send(ForgetWhere(filter={"min_importance": 0.8}, now=d.tick())).ids == [b]
    assert d.send(CountMemories()) == 1
    with pytest.raises(mnemex.InvalidInput, match="empty filter"):
        d.send(ForgetWhere(filter={}, now=d.tick()))
    # freed doc ids are reused, and the content can come back
    [again] = d.remember("alpha one")
    assert [h.memory.id for h in d.search("alpha", "keyword").hits] == [again]
    assert d.send(CountMemories()) == 2 and c in d.memory.doc_of


def test_touch_counts_accesses_in_one_command() -> None:
    d = Driver()
    a, b = d.remember("first", "second")
    reply = d.send(Touch(ids=[a, b, "gone"], counts=[3, 1, 2], now=5_000.0))
    assert reply.count == 2
    assert d.send(GetMemory(id=a)).access_count == 3
    assert d.send(GetMemory(id=a)).last_accessed_at == 5_000.0
    d.send(Touch(ids=[a], now=4_000.0))  # an older time never moves last_accessed_at back
    record = d.send(GetMemory(id=a))
    assert (record.access_count, record.last_accessed_at) == (4, 5_000.0)
    with pytest.raises(mnemex.InvalidInput):
        d.send(Touch(ids=[a], counts=[0], now=1.0))


def test_list_pages_in_id_order_and_filters() -> None:
    d = Driver()
    ids = d.remember(*[f"memory number {i}" for i in range(7)])
    page = d.send(ListMemories(limit=3, offset=2))
    assert [m.id for m in page.memories] == sorted(ids)[2:5] and page.total == 7
    d.send(UpdateMemory(id=ids[4], now=d.tick(), importance=0.9))
    page = d.send(ListMemories(filter={"min_importance": 0.6}, limit=None))
    assert [m.id for m in page.memories] == [ids[4]]


def test_commands_are_journaled_only_when_they_write() -> None:
    d = Driver()
    writes = [Remember(), AddSession(session_id="s"), UpdateMemory(id="x"), Forget(), ForgetWhere(), Touch()]
    reads = [Search(query="q"), GetMemory(id="x"), CountMemories(), ListMemories(), GetScopeStats()]
    assert all(is_scope_write(c) for c in writes)
    assert not any(is_scope_write(c) for c in reads)
    assert not is_scope_write(GraphReady(None))
    for command in writes + reads:
        assert scope_codec.decode(scope_codec.encode(command)) == command
    del d


def test_add_session_memories_must_belong_to_the_session() -> None:
    d = Driver()
    good = d.new("hello from s1", session_id="s1")
    reply = d.send(AddSession(session_id="s1", memories=[good], embedder=EMBEDDER.name, dim=EMBEDDER.dim,
                              now=d.tick()))
    assert reply.added == 1
    stray = d.new("from elsewhere", session_id="s2")
    with pytest.raises(mnemex.InvalidInput, match="carries session_id"):
        d.send(AddSession(session_id="s1", memories=[stray], embedder=EMBEDDER.name, dim=EMBEDDER.dim,
                          now=d.tick()))


# -- search -------------------------------------------------------------------------------------
CORPUS = [
    "Caroline went to the LGBTQ support group yesterday",
    "Melanie painted a sunrise over the lake last year",
    "Caroline is researching adoption agencies",
    "Melanie ran a charity race for mental health",
    "The support group made Caroline feel accepted",
    "Melanie's kids love camping in the mountains",
]


def corpus_driver(**overrides: Any) -> Driver:
    d = Driver(**overrides)
    for i, text in enumerate(CORPUS):
        d.tick(100.0)
        d.remember(d.new(text, id=f"c{i}", importance=0.1 * (i + 1), author="Caroline" if "Caroline" in text
                         else "Melanie", categories=("lgbtq",) if "group" in text else (),
                         entities=("Caroline",) if "Caroline" in text else ()))
    return d


def test_keyword_ranks_by_words_matched_then_recency() -> None:
    d = corpus_driver()
    hits = d.search("Caroline support group", "keyword").hits
    assert [h.memory.id for h in hits[:2]] == ["c4", "c0"]  # 3 words each; c4 is newer
    assert hits[0].score == 1.0 and hits[0].scores["matched"] == 3
    assert [h.memory.id for h in hits[2:]] == ["c2"]
    assert d.search("zebra", "keyword").hits == []


def test_fulltext_uses_bm25_phrases_and_entities() -> None:
    d = corpus_driver()
    hits = d.search("charity race", "fulltext").hits
    assert hits[0].memory.id == "c3" and hits[0].score > 0.9  # both words; a little longer than average
    quoted = d.search('"support group" Caroline', "fulltext").hits
    assert {h.memory.id for h in quoted} == {"c0", "c4"}
    # an entity named in the query lifts the memories that carry it
    named = d.search("what did Caroline research", "fulltext").hits
    assert named[0].memory.id == "c2" and named[0].scores["entities"] == 1.0
    assert all(0.0 <= h.score <= 1.0 for h in named)


def test_vector_mode_scores_calibrated_cosines_and_cuts_at_0_25_by_default() -> None:
    d = corpus_driver()
    found = d.search("Melanie painted a sunrise over the lake", "vector").hits
    assert found and all(h.score >= 0.25 for h in found)
    hits = d.search("painted sunrise", "vector", min_score=-1.0).hits
    assert hits[0].memory.id == "c1" and len(hits) == len(CORPUS)
    assert hits[0].scores["vector"] == pytest.approx(hits[0].score, abs=1e-6)
    # the score rises with the cosine, which the breakdown keeps
    by_cosine = sorted(hits, key=lambda h: -h.scores["cosine"])
    assert [h.memory.id for h in hits] == [h.memory.id for h in by_cosine]
    everything = d.search("Melanie painted a sunrise over the lake", "vector", min_score=None).hits
    assert [h.memory.id for h in found] == [h.memory.id for h in everything if h.score >= 0.25]


def test_hybrid_shows_every_signal_and_its_weights() -> None:
    d = corpus_driver(rank_importance_weight=0.1, rank_recency_weight=0.1, rank_access_weight=0.1)
    hits = d.search("charity race for mental health", "hybrid", min_score=0.0).hits
    top = hits[0]
    assert top.memory.id == "c3"
    s = top.scores
    assert set(s) >= {"fulltext", "bm25", "vector", "relevance", "importance", "recency", "access"}
    assert s["relevance"] == pytest.approx(0.7 * s["fulltext"] + 0.3 * max(s["vector"], 0), abs=1e-5)
    factor = 1 + 0.1 * (2 * s["importance"] - 1) + 0.1 * (2 * s["recency"] - 1) + 0.1 * s["access"]
    assert s["factor"] == pytest.approx(factor, abs=1e-5)
    assert top.score == pytest.approx(s["relevance"] * factor, abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_the_ranking_factor_is_bounded_and_never_removes_a_candidate() -> None:
    d = corpus_driver(rank_importance_weight=1.0, rank_recency_weight=1.0, rank_access_weight=1.0)
    plain = corpus_driver()
    cut = 0.05
    with_factor = d.search("charity race for mental health", "hybrid", min_score=cut).hits
    without = plain.search("charity race for mental health", "hybrid", min_score=cut).hits
    assert {h.memory.id for h in with_factor} == {h.memory.id for h in without}
    assert all(0.3 - 1e-9 <= h.scores["factor"] <= 1.5 + 1e-9 for h in with_factor)


def test_importance_reorders_hits_of_equal_relevance() -> None:
    d = Driver(rank_importance_weight=0.5)
    [low] = d.remember("the user likes green tea", importance=0.1)
    [high] = d.remember("the user likes green tea a lot", importance=0.9)
    hits = d.search("green tea", "hybrid", min_score=0.0).hits
    assert hits[0].memory.id == high and hits[0].scores["factor"] > 1 > hits[1].scores["factor"]
    assert {h.memory.id for h in hits} == {low, high}


def test_hybrid_with_rrf_scores_in_0_to_1() -> None:
    d = corpus_driver(fusion="rrf")
    hits = d.search("Caroline support group", "hybrid", min_score=0.0).hits
    assert hits and all(0.0 <= h.score <= 1.0 for h in hits)
    assert hits[0].memory.id in ("c0", "c4")


def test_hybrid_drops_noise_below_its_default_min_score() -> None:
    d = corpus_driver()
    assert all(h.score >= 0.1 for h in d.search("Caroline adoption", "hybrid").hits)


@pytest.mark.parametrize("mode", ["keyword", "fulltext", "vector", "hybrid"])
def test_filters_apply_inside_the_search_not_after_the_cut(mode: str) -> None:
    d = Driver()
    # many strong matches outside the filter, one weak match inside it
    d.remember(*[f"pizza pizza pizza night {i}" for i in range(30)], importance=0.2)
    [inside] = d.remember("pizza once", importance=0.9)
    hits = d.search("pizza pizza night", mode, top_k=3, min_score=0.0,
                    filter={"min_importance": 0.5}).hits
    assert [h.memory.id for h in hits] == [inside]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"author": "Caroline"}, {"c0", "c2", "c4"}),
        ({"author": ["Melanie"], "min_importance": 0.5}, {"c5"}),
        ({"categories": "lgbtq"}, {"c0", "c4"}),
        ({"entities": {"$all": ["Caroline"]}}, {"c0", "c2", "c4"}),
        ({"created_after": 1_201.0, "created_before": 1_403.0}, {"c1", "c2"}),
        ({"timestamp_before": 1_101.0}, set()),
        ({"max_importance": 0.25}, {"c0", "c1"}),
    ],
)
def test_filters_select_what_count_and_search_see(spec: dict[str, Any], expected: set[str]) -> None:
    d = corpus_driver()
    assert d.send(CountMemories(filter=spec)) == len(expected)
    hits = d.search("Caroline Melanie group", "keyword", top_k=10, filter=spec).hits
    found = {h.memory.id for h in hits}
    assert found <= expected


def test_search_validates_its_arguments() -> None:
    d = corpus_driver()
    with pytest.raises(mnemex.InvalidInput, match="top_k"):
        d.search("x", "keyword", top_k=0)
    with pytest.raises(mnemex.InvalidInput, match="mode"):
        d.send(Search(query="x", mode="fuzzy", now=1.0))  # type: ignore[arg-type]
    with pytest.raises(mnemex.InvalidInput, match="needs the query's vector"):
        d.send(Search(query="x", mode="hybrid", now=1.0))
    with pytest.raises(mnemex.InvalidInput, match="unknown filter key"):
        d.search("x", "keyword", filter={"colour": "red"})
    with pytest.raises(mnemex.TooLarge):
        d.search("x" * 20_000, "keyword")


def test_hits_name_their_scope() -> None:
    d = corpus_driver()
    hit = d.search("Caroline", "keyword").hits[0]
    assert (hit.app_name, hit.user_id) == KEY


def test_stats_count_what_the_scope_holds() -> None:
    d = corpus_driver()
    stats = d.send(GetScopeStats(now=d.now))
    assert (stats.count, stats.embedder, stats.dim, stats.vector_mode) == (6, EMBEDDER.name, 32, "exact")
    assert stats.entities == 1 and stats.categories == 1 and stats.content_bytes == sum(map(len, CORPUS))


# -- snapshots ------------------------------------------------------------------------------------
def test_restore_gives_the_same_state_and_the_same_results() -> None:
    d = corpus_driver()
    d.send(Forget(ids=["c1"], now=d.tick()))
    d.send(Touch(ids=["c2"], now=d.tick()))
    again = Driver(restored(d.memory))
    again.now = d.now
    assert state(again.memory) == state(d.memory)
    for mode in ("keyword", "fulltext", "vector", "hybrid"):
        for query in ("Caroline group", "Melanie camping kids", "adoption"):
            assert again.search(query, mode, min_score=0.0) == d.search(query, mode, min_score=0.0)
    # doc ids (and so ties) survive: the freed id is reused the same way
    assert again.remember("new one") == d.remember("new one")
    assert again.memory.doc_of == d.memory.doc_of


def test_snapshot_lines_are_json_and_the_vectors_raw_in_a_required_sidecar() -> None:
    d = corpus_driver()
    data = d.memory.snapshot()
    assert data.required == {"vectors2"}
    image = image_of(data)
    assert image.extra["count"] == 6 and image.extra["embedder"] == EMBEDDER.name and image.extra["format"] == 2
    first = msgspec.json.decode(image.records[0])
    assert set(first) == {"d", "m"} and first["m"]["id"] == "c0"
    ids, rows = read_vectors_file(image.sidecars["vectors2"])
    assert d.memory.vectors is not None and sorted(ids.tolist()) == d.memory.vectors.doc_ids()
    assert np.array_equal(rows, d.memory.vectors.vectors(ids))
    # the lines and the vectors alone restore the scope
    alone = ScopeMemory.restore(KEY, Image(image.records, image.extra, {"vectors2": image.sidecars["vectors2"]}),
                                d.memory.settings)
    assert state(alone) == state(d.memory)
    # without the vectors a snapshot of memories cannot be restored (the store never hands one over)
    with pytest.raises(ValueError, match="vectors sidecar is missing"):
        ScopeMemory.restore(KEY, Image(image.records, image.extra, {}), d.memory.settings)


def test_the_records_sidecar_stands_in_for_the_lines_and_a_bad_one_is_passed_over(
        caplog: pytest.LogCaptureFixture) -> None:
    d = corpus_driver()
    d.send(Forget(ids=["c1"], now=d.tick()))
    image = snapshot_image(d.memory)
    assert "records2" in image.sidecars
    expected = state(d.memory)
    # the sidecar alone: the lines are not read (here: not even there) ...
    assert state(ScopeMemory.restore(KEY, Image([], image.extra, image.sidecars), d.memory.settings)) == expected
    # ... and without it the lines, in any order, with the vectors by doc
    no_records = {name: blob for name, blob in image.sidecars.items() if name != "records2"}
    restored_memory = ScopeMemory.restore(KEY, Image(list(reversed(image.records)), image.extra, no_records),
                                          d.memory.settings)
    assert state(restored_memory) == expected
    assert [h.memory.id for h in Driver(restored_memory).search("camping", "vector", min_score=-1).hits] == \
        [h.memory.id for h in d.search("camping", "vector", min_score=-1).hits]
    # a records sidecar that does not decode, or holds other counts, is passed over for the lines
    one = msgspec.msgpack.encode([[0], []])
    short = len(one).to_bytes(4, "little") + one
    for bad in (image.sidecars["records2"][:-3], short):
        with caplog.at_level("INFO"):
            other = ScopeMemory.restore(KEY, Image(image.records, image.extra, {**image.sidecars, "records2": bad}),
                                        d.memory.settings)
        assert state(other) == expected
    assert caplog.text.count("records sidecar") == 2


# -- the HNSW graph -----------------------------------------------------------------------------
def test_the_graph_is_built_beside_the_actor_and_keeps_recall() -> None:
    d = Driver(hnsw_threshold=300, hnsw_ef_search=64)
    rng = np.random.default_rng(3)
    vocabulary = [f"w{i}" for i in range(400)]
    texts = [" ".join(rng.choice(vocabulary, 8)) + f" n{i}" for i in range(600)]
    for start in range(0, 600, 100):
        d.remember(*texts[start:start + 100])
    assert d.memory.vectors is not None and d.memory.vectors.mode == "exact"
    assert d.jobs, "crossing the threshold plans a graph build"
    assert d.send(GetScopeStats(now=d.now)).graph_pending
    d.remember(*[f"late memory {i}" for i in range(20)])  # arrives while the graph is built
    d.run_jobs()
    assert d.memory.vectors.mode == "hnsw"
    queries = [" ".join(rng.choice(vocabulary, 4)) for _ in range(30)]
    found = 0
    for query in queries:
        vector = EMBEDDER.embed([query])[0]
        exact = {doc for doc, _ in d.memory.vectors.exact_search(vector, 10)}
        approx = {d.memory.doc_of[h.memory.id] for h in d.search(query, "vector", min_score=-1.0).hits}
        found += len(exact & approx)
    assert found / (10 * len(queries)) >= 0.9
    # the graph travels in a sidecar; without it the scope rebuilds
    with_sidecar = restored(d.memory)
    assert with_sidecar.vectors is not None and with_sidecar.vectors.mode == "hnsw"
    without = Driver(restored(d.memory, sidecars=False))
    assert without.memory.vectors is not None and without.memory.vectors.mode == "exact"
    without.now = d.now
    without.search("w1 w2", "vector")
    assert without.jobs
    without.run_jobs()
    assert without.memory.vectors.mode == "hnsw"


def test_a_build_planned_again_after_its_plan_was_taken_for_lost_is_waited_for() -> None:
    d = Driver(hnsw_threshold=50)
    d.remember(*[f"memory {i} about things" for i in range(60)])
    assert len(d.jobs) == 1
    d.tick(d.memory.settings.graph_stale + 10)  # the first build runs past the time a plan is given
    d.remember("one more memory about things")
    assert len(d.jobs) == 2  # planned again
    first, second = d.jobs
    d.jobs.clear()
    # the first build comes back: superseded, and nothing more is planned (planning again
    # would supersede the second in turn: two builds in flight for ever, none adopted)
    d.send(first.deliver(JobResult(value=run_work(first.work))))
    assert not d.jobs and d.memory.vectors is not None and d.memory.vectors.mode == "exact"
    assert d.memory.graph_pending_since is not None
    d.send(second.deliver(JobResult(value=run_work(second.work))))
    assert d.memory.vectors.mode == "hnsw" and d.memory.graph_pending_since is None
    assert len(d.memory.vectors) == 61 and not d.jobs


def test_a_superseded_builds_failure_leaves_the_adopted_graph_alone() -> None:
    d = Driver(hnsw_threshold=50)
    d.remember(*[f"memory {i} about things" for i in range(60)])
    first = d.jobs.pop()
    d.tick(d.memory.settings.graph_stale + 10)  # taken for lost: planned again
    d.remember("one more memory about things")
    second = d.jobs.pop()
    d.send(second.deliver(JobResult(value=run_work(second.work))))
    assert d.memory.vectors is not None and d.memory.vectors.mode == "hnsw"
    d.send(first.deliver(JobResult(error=MemoryError("the first build ran out of memory"))))
    assert d.memory.graph_failed_at is None and d.memory.graph_pending_since is None
    d.send(Forget(ids=list(d.memory.doc_of)[:20], now=d.tick()))  # tombstones past the ratio
    assert d.memory.vectors.wants_graph and d.jobs  # a rebuild is planned as usual


def test_a_build_planned_by_an_earlier_instance_of_the_scope_is_not_adopted() -> None:
    d = Driver(hnsw_threshold=50)
    d.remember(*[f"memory {i} about things" for i in range(60)])
    old = d.jobs.pop()  # planned; then the scope is passivated (or reloaded) while it runs
    later = d.remember(*[f"later memory {i} about rivers" for i in range(15)])
    successor = Driver(restored(d.memory))
    successor.now, successor.ids = d.now, d.ids
    successor.remember("one more memory about things")
    assert len(successor.jobs) == 1
    successor.send(old.deliver(JobResult(value=run_work(old.work))))  # comes back to the successor
    index = successor.memory.vectors
    assert index is not None and index.mode == "exact"  # not taken: it lacks the later memories
    successor.run_jobs()  # its own build
    assert index.mode == "hnsw" and len(index) == 76 and not index.pending
    for memory_id in later:
        content = successor.memory.docs[successor.memory.doc_of[memory_id]].content
        assert successor.search(content, "vector", top_k=1).hits[0].memory.id == memory_id


def test_a_replay_leaves_no_graph_build_taken_for_in_flight() -> None:
    d = Driver(hnsw_threshold=50)
    memories = [d.new(f"memory {i} about things") for i in range(60)]
    fresh = ScopeMemory(KEY, settings(hnsw_threshold=50))
    fresh.replay([Remember(memories=memories, embedder=EMBEDDER.name, dim=EMBEDDER.dim, now=1001.0),
                  Forget(ids=[memories[0].id], now=1002.0)])  # (handled as it came: it plans a build)
    assert fresh.vectors is not None and fresh.vectors.mode == "exact"
    assert fresh.graph_pending_since is None
    out = fresh.handle(Forget(ids=[memories[1].id], now=1003.0))  # the next command plans one at once
    assert isinstance(out, Step) and any(effect.name.startswith("scope.hnsw") for effect in out.effects)


def test_a_failed_graph_build_leaves_search_exact() -> None:
    d = Driver(hnsw_threshold=50)
    d.remember(*[f"memory {i} about things" for i in range(60)])
    assert d.jobs
    d.jobs.clear()
    d.send(GraphReady(None, "RuntimeError: boom"))
    assert d.memory.vectors is not None and d.memory.vectors.mode == "exact"
    assert d.search("memory things", "vector", min_score=0.0).hits
    d.remember("one more")
    assert not d.jobs  # not retried at once


@pytest.mark.parametrize("quantization", ["i8", "f16", "f32"])
def test_a_scopes_graph_holds_the_configured_quantization_and_scores_are_exact(quantization: str) -> None:
    exact = Driver(hnsw_threshold=10_000)
    graph = Driver(hnsw_threshold=50, hnsw_quantization=quantization)
    texts = [f"memory {i} about {['tea', 'lakes', 'trains', 'violins'][i % 4]} on day {i}" for i in range(120)]
    exact.remember(*texts)
    graph.remember(*texts)
    graph.run_jobs()
    assert graph.memory.vectors is not None and graph.memory.vectors.mode == "hnsw"
    assert graph.memory.vectors._params.quantization == quantization
    for query in ("tea on day 4", "violins", "lakes and trains"):
        hits = graph.search(query, "vector", min_score=0.0).hits
        got = [(h.memory.content, round(h.score, 6)) for h in hits]
        assert got == [(h.memory.content, round(h.score, 6))
                       for h in exact.search(query, "vector", min_score=0.0).hits]


# -- session context ----------------------------------------------------------------------------
def test_a_memorys_session_neighbours_rank_it_in_fulltext_search() -> None:
    driver = Driver()
    [q, a, far] = driver.remember(
        driver.new("Caroline: what did you paint last week?", session_id="s1"),
        driver.new("Melanie: a lake at sunrise, all orange", session_id="s1"),
        driver.new("Melanie: unrelated words entirely", session_id="s2"))
    [other] = driver.remember(driver.new("sunrise lake orange", session_id="s3"))

    def ranked(query: str, memory: Any = None) -> list[str]:
        searcher = driver if memory is None else Driver(memory)
        return [hit.memory.id for hit in searcher.search(query, mode="fulltext", min_score=0.0).hits]

    # the answer holds no word of the question, but its neighbour does: found, below exact matches
    assert ranked("what did Caroline paint") == [q, a]
    assert ranked("sunrise lake") == [other, a, q]
    assert far not in ranked("paint")
    # the same after a restore, with or without the text-index sidecars
    for sidecars in (True, False):
        assert ranked("what did Caroline paint", restored(driver.memory, sidecars=sidecars)) == [q, a]
    # forgetting the neighbour takes its words out of the context
    driver.send(Forget(ids=[q], now=driver.tick()))
    assert ranked("what did Caroline paint") == []


def test_context_window_zero_ranks_by_content_alone() -> None:
    driver = Driver(context_window=0)
    [q, _a] = driver.remember(driver.new("what did you paint?", session_id="s1"),
                              driver.new("a lake at sunrise", session_id="s1"))
    assert [hit.memory.id for hit in driver.search("paint", mode="fulltext", min_score=0.0).hits] == [q]


def test_text_index_sidecars_load_and_a_bad_or_stale_one_is_rebuilt(caplog: pytest.LogCaptureFixture) -> None:
    driver = Driver()
    driver.remember(*(driver.new(f"note {i} about tea and {w}", session_id=f"s{i % 3}", entities=(w,))
                      for i, w in enumerate(["Paris", "Oslo", "Rome", "Lima", "Kyiv", "Baku"])))
    image = snapshot_image(driver.memory)
    assert {"keyword", "bm25", "entities"} <= set(image.sidecars)

    def results(memory: ScopeMemory) -> list[Any]:
        searcher = Driver(memory)
        return [[(h.memory.id, h.score) for h in searcher.search(q, mode=m, min_score=0.0).hits]
                for q in ("tea Oslo", '"about tea"', "note 3") for m in ("keyword", "fulltext")]

    expected = results(driver.memory)
    assert results(ScopeMemory.restore(KEY, image, driver.memory.settings)) == expected
    damaged = dict(image.sidecars)
    damaged["bm25"] = damaged["bm25"][:-7] + b"garbage"
    with caplog.at_level("INFO"):
        assert results(ScopeMemory.restore(KEY, Image(image.records, image.extra, damaged),
                                           driver.memory.settings)) == expected
    assert "text-index sidecars not used" in caplog.text
    # a vectors sidecar that is not one is an error (the store's checksum keeps damaged ones away)
    vectors = image.sidecars["vectors2"]
    for bad in (vectors[:-4], b"MNXVEC00" + vectors[8:]):
        other = Image(image.records, image.extra, {**image.sidecars, "vectors2": bad})
        with pytest.raises(ValueError, match="vectors file"):
            ScopeMemory.restore(KEY, other, driver.memory.settings)
    # other BM25 settings: the sidecar is stale, the indexes are rebuilt with the new ones
    changed = settings(context_weight=0.9)
    fresh = ScopeMemory.restore(KEY, image, changed)
    assert fresh.bm25.context_weight == 0.9 and results(fresh)[0] == expected[0]
