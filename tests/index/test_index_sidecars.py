"""Binary sidecars of the text indexes: an index read back from its sidecar
answers every search exactly as the original did, keeps doing so as both go on
changing alike, and a damaged, truncated or stale sidecar is refused."""

from __future__ import annotations

import gc
import struct
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import CorruptData
from mnemex.index import BM25Index, EntityIndex, KeywordIndex, Tokenizer, _sidecar
from mnemex.index._select import Allowed
from mnemex.index._sidecar import doc_ids_checksum, lent, pack_sidecar, unpack_sidecar
from mnemex.index.tokenizer import TOKENIZATION_VERSION

# Unicode, case and compatibility forms, stop words, apostrophes and possessives.
WORDS = ["cat", "dog", "state", "art", "new", "york", "the", "of", "a", "and", "café", "CAFÉ", "naïve",
         "straße", "東京", "état", "don't", "o'neil's", "ﬁne", "x1"]
NAMES = ["Caroline", "New York", "new-york", "York", "LGBTQ support group", "support group", "café crème"]
MAX_DOC = 17

Op: TypeAlias = tuple[str, int, tuple[Any, ...]]
Index: TypeAlias = Any   # KeywordIndex | BM25Index | EntityIndex: they share add/update/remove/in

texts = st.lists(st.sampled_from(WORDS), max_size=7).map(" ".join)
doc_ids = st.integers(0, MAX_DOC)
allowed_filters: st.SearchStrategy[Allowed] = st.one_of(
    st.none(),
    st.frozensets(st.integers(0, MAX_DOC + 2)),
    st.lists(st.booleans(), max_size=MAX_DOC + 2).map(lambda flags: np.array(flags, dtype=np.bool_)),
)


def operations(args: st.SearchStrategy[tuple[Any, ...]]) -> st.SearchStrategy[list[Op]]:
    return st.lists(st.tuples(st.sampled_from(["add", "remove", "update"]), doc_ids, args), max_size=40)


def play(index: Index, ops: Sequence[Op]) -> None:
    """Apply *ops*, turned valid: an add of a present doc updates it, an update of
    an absent one adds it, a remove of an absent one is skipped."""
    for name, doc, args in ops:
        if name == "remove":
            if doc in index:
                index.remove(doc)
        elif doc in index:
            index.update(doc, *args)
        else:
            index.add(doc, *args)


class Tiny(KeywordIndex):
    """Every keyword code path at toy sizes: words go dense at 4 documents and
    back to sparse at none, every match level is read off the recency order."""

    _dense_min = 4
    _dense_share = 10**9
    _few = 0


# -- BM25 -----------------------------------------------------------------------------

bm25_args = st.tuples(texts, st.none() | texts)
bm25_queries = st.one_of(texts, st.tuples(texts, texts).map(lambda pair: f'"{pair[0]}" {pair[1]}'),
                         st.tuples(texts, texts).map(lambda pair: f'{pair[0]} "{pair[1]}'))
searches = st.lists(st.tuples(bm25_queries, st.integers(1, 20), allowed_filters), min_size=1, max_size=6)


def assert_bm25_alike(original: BM25Index, loaded: BM25Index,
                      queries: Sequence[tuple[str, int, Allowed]]) -> None:
    assert loaded.doc_ids() == original.doc_ids()
    assert loaded.vocabulary_size == original.vocabulary_size
    for query, top_k, allowed in queries:
        assert loaded.search(query, top_k, allowed=allowed) == original.search(query, top_k, allowed=allowed)
        mine, theirs = loaded.score_all(query, allowed), original.score_all(query, allowed)
        assert (mine is None) == (theirs is None)
        if mine is not None and theirs is not None:
            assert np.array_equal(mine, theirs)
        for phrase in original.tokenizer.parse_query(query).phrases:
            assert loaded.phrase_docs(phrase) == original.phrase_docs(phrase)


@settings(max_examples=50, deadline=None)
@given(before=operations(bm25_args), after=operations(bm25_args), queries=searches)
def test_bm25_from_sidecar_searches_and_changes_like_the_original(
        before: list[Op], after: list[Op], queries: list[tuple[str, int, Allowed]]) -> None:
    original = BM25Index(k1=1.2, b=0.6, context_weight=0.7)
    play(original, before)
    blob = original.to_sidecar()
    loaded = BM25Index.from_sidecar(blob, k1=1.2, b=0.6, context_weight=0.7)
    assert_bm25_alike(original, loaded, queries)
    assert loaded.to_sidecar() == blob
    assert isinstance(loaded._postings._bounds, array)  # (8 bytes a term, not an int object)
    play(original, after)
    play(loaded, after)
    assert_bm25_alike(original, loaded, queries)
    assert loaded.to_sidecar() == original.to_sidecar()
    for index in (original, loaded):  # lent (restored terms, changed ones, runs with garbage): the same bytes
        assert b"".join(index.to_sidecar_chunks(lend=True)) == index.to_sidecar()


@pytest.mark.parametrize(("built", "wanted", "named"), [
    ({"k1": 1.2}, {"k1": 1.5}, "k1"),
    ({"b": 0.5}, {}, "b"),
    ({"context_weight": 0.0}, {"context_weight": 0.5}, "context_weight"),
    ({"tokenizer": Tokenizer(stop_words=False)}, {}, "tokenizer"),
    ({"tokenizer": Tokenizer(stop_words=["cat", "dog"])}, {"tokenizer": Tokenizer(stop_words=["cat", "art"])},
     "stop_words"),
    ({"tokenizer": Tokenizer(fold_accents=True)}, {}, "tokenizer"),
])
def test_bm25_sidecar_built_with_other_settings_is_refused_naming_them(
        built: dict[str, Any], wanted: dict[str, Any], named: str) -> None:
    index = BM25Index(**built)
    index.add(0, "the cat sat on the mat", "context words")
    with pytest.raises(CorruptData, match=rf"stale: it was built with .*\b{named}="):
        BM25Index.from_sidecar(index.to_sidecar(), **wanted)


def test_bm25_sidecar_with_equal_custom_settings_loads() -> None:
    tokenizer = Tokenizer(stop_words=["cat", "dog"])
    index = BM25Index(k1=0.9, b=0.3, tokenizer=tokenizer, context_weight=0.0)
    index.add(4, "cat and art", None)
    loaded = BM25Index.from_sidecar(index.to_sidecar(), k1=0.9, b=0.3,
                                    tokenizer=Tokenizer(stop_words=["dog", "cat"]), context_weight=0.0)
    assert loaded.search("art cat") == index.search("art cat") != []


# -- keyword --------------------------------------------------------------------------

keyword_args = st.tuples(texts, st.sampled_from([0.0, 1.0, 1.0, 2.5, -3.0]))
keyword_searches = st.lists(st.tuples(texts, st.integers(1, 20), allowed_filters), min_size=1, max_size=6)


def assert_keyword_alike(original: KeywordIndex, loaded: KeywordIndex,
                         queries: Sequence[tuple[str, int, Allowed]]) -> None:
    assert loaded.doc_ids() == original.doc_ids()
    assert [loaded.timestamp(d) for d in loaded.doc_ids()] == [
        original.timestamp(d) for d in original.doc_ids()]
    for query, top_k, allowed in queries:
        assert loaded.search(query, top_k, allowed=allowed) == original.search(query, top_k, allowed=allowed)


@pytest.mark.parametrize("cls", [KeywordIndex, Tiny], ids=["default", "tiny-thresholds"])
@settings(max_examples=50, deadline=None)
@given(before=operations(keyword_args), after=operations(keyword_args), queries=keyword_searches)
def test_keyword_from_sidecar_searches_and_changes_like_the_original(
        cls: type[KeywordIndex], before: list[Op], after: list[Op],
        queries: list[tuple[str, int, Allowed]]) -> None:
    original = cls()
    play(original, before)
    blob = original.to_sidecar()
    loaded = cls.from_sidecar(blob)
    assert type(loaded) is cls
    assert_keyword_alike(original, loaded, queries)
    assert loaded.to_sidecar() == blob
    play(original, after)
    play(loaded, after)
    assert_keyword_alike(original, loaded, queries)
    for index in (original, loaded):  # lent (restored words, changed ones, dense and sparse): the same bytes
        assert b"".join(index.to_sidecar_chunks(lend=True)) == index.to_sidecar()
    again = cls.from_sidecar(loaded.to_sidecar())
    assert_keyword_alike(original, again, queries)


def test_removing_a_restored_keyword_doc_forgets_exactly_its_words() -> None:
    original = Tiny()
    for doc, text in enumerate(["cat dog", "dog art", "cat", "art state", "cat dog art", "dog"]):
        original.add(doc, text, float(doc % 2))
    loaded = Tiny.from_sidecar(original.to_sidecar())
    for index in (original, loaded):
        index.remove(4)
        index.update(1, "state", 9.0)
    for query in ["cat", "dog", "art", "state", "cat dog art state"]:
        assert loaded.search(query, 10) == original.search(query, 10)
    assert loaded.search("dog", 10) == [(5, 1), (0, 1)]


def test_a_restored_keyword_index_keeps_its_postings_as_arrays_until_changed() -> None:
    # an int object per posting (40 bytes with its list slot) was most of what a large
    # restored index held: a restored word's postings stay one read-only array slice
    original = Tiny()
    for doc, text in enumerate(["cat dog", "dog art", "cat", "art state", "cat dog art", "dog"]):
        original.add(doc, text, float(doc))
    loaded = Tiny.from_sidecar(original.to_sidecar())
    restored = {word: postings for word, postings in loaded._sparse.items()}
    assert restored and all(isinstance(p, np.ndarray) and not p.flags.writeable for p in restored.values())
    for index in (original, loaded):
        index.add(6, "state cat", 6.0)  # adds to restored words: they become array('i')s
        index.remove(3)
    assert isinstance(loaded._sparse["state"], array) and isinstance(loaded._sparse["art"], array)
    assert loaded._sparse["state"].typecode == "i" and isinstance(original._sparse["state"], array)
    for query in ["cat", "dog", "art", "state", "cat dog art state"]:
        assert loaded.search(query, 10) == original.search(query, 10)
    assert Tiny.from_sidecar(loaded.to_sidecar()).search("state art", 10) == original.search("state art", 10)


# -- entities -------------------------------------------------------------------------

entity_args = st.tuples(st.lists(st.sampled_from(NAMES), max_size=3))
entity_queries = st.lists(st.sampled_from(NAMES + WORDS), max_size=5).map(" ".join)


def assert_entities_alike(original: EntityIndex, loaded: EntityIndex, queries: Sequence[str],
                          allowed: Allowed) -> None:
    assert len(loaded) == len(original)
    assert all((d in loaded) == (d in original) for d in range(MAX_DOC + 1))
    assert loaded.entities() == original.entities()
    for query in queries:
        assert loaded.find(query) == original.find(query)
        assert loaded.search(query, 20) == original.search(query, 20)
        assert loaded.search(query, 3, allowed=allowed) == original.search(query, 3, allowed=allowed)


@settings(max_examples=50, deadline=None)
@given(before=operations(entity_args), after=operations(entity_args),
       queries=st.lists(entity_queries, min_size=1, max_size=5), allowed=allowed_filters)
def test_entities_from_sidecar_search_and_change_like_the_original(
        before: list[Op], after: list[Op], queries: list[str], allowed: Allowed) -> None:
    original = EntityIndex()
    play(original, before)
    loaded = EntityIndex.from_sidecar(original.to_sidecar())
    assert_entities_alike(original, loaded, queries, allowed)
    play(original, after)
    play(loaded, after)
    assert_entities_alike(original, loaded, queries, allowed)


def test_a_restored_name_stays_findable_until_its_last_holder_goes() -> None:
    original = EntityIndex()
    for doc in range(3):
        original.add(doc, ["New York", f"person {doc}"])
    loaded = EntityIndex.from_sidecar(original.to_sidecar())
    for doc in (0, 1):
        loaded.remove(doc)
        assert loaded.find("back in new york") == {"new york"}
    assert loaded.search("new york") == [(2, 1)]
    loaded.remove(2)
    assert loaded.find("back in new york") == set()


# -- every kind -----------------------------------------------------------------------

def small_bm25() -> BM25Index:
    index = BM25Index()
    index.add(0, "the state of the art", "café")
    index.add(3, "naïve cat", None)
    return index


def small_keyword() -> KeywordIndex:
    index = Tiny()
    for doc in range(6):
        index.add(doc, "cat dog" if doc % 2 else "cat café", float(doc // 2))
    index.remove(2)
    return index


def small_entities() -> EntityIndex:
    index = EntityIndex()
    index.add(1, ["Caroline", "New York"])
    index.add(2, [])
    return index


Kind: TypeAlias = tuple[Callable[[], Index], Callable[[bytes], Index], str]
KINDS: list[Kind] = [
    (small_bm25, BM25Index.from_sidecar, "cat café"),
    (small_keyword, Tiny.from_sidecar, "cat café"),
    (small_entities, EntityIndex.from_sidecar, "caroline in new york"),
]
kinds = pytest.mark.parametrize(("make", "load", "query"), KINDS, ids=["bm25", "keyword", "entities"])


@kinds
def test_every_flipped_byte_is_refused(make: Callable[[], Index], load: Callable[[bytes], Index],
                                       query: str) -> None:
    blob = make().to_sidecar()
    for at in range(len(blob)):
        with pytest.raises(CorruptData):
            load(blob[:at] + bytes([blob[at] ^ 0x10]) + blob[at + 1 :])


@kinds
def test_every_truncation_is_refused(make: Callable[[], Index], load: Callable[[bytes], Index],
                                     query: str) -> None:
    blob = make().to_sidecar()
    for size in range(len(blob)):
        with pytest.raises(CorruptData):
            load(blob[:size])
    with pytest.raises(CorruptData, match="checksum"):
        load(blob + b"\0")


@kinds
def test_another_format_version_is_refused(make: Callable[[], Index], load: Callable[[bytes], Index],
                                           query: str) -> None:
    blob = make().to_sidecar()
    with pytest.raises(CorruptData, match="format version 2"):
        load(blob[:8] + struct.pack("<I", 2) + blob[12:])


@kinds
def test_empty_index_round_trips(make: Callable[[], Index], load: Callable[[bytes], Index],
                                 query: str) -> None:
    empty = type(make())()
    loaded = load(empty.to_sidecar())
    assert len(loaded) == 0
    assert loaded.search(query) == []
    full = make()
    args = ["cat café", 1.0] if isinstance(full, KeywordIndex) else ["cat café"] if isinstance(
        full, BM25Index) else [["Caroline"]]
    for index in (empty, loaded):
        index.add(7, *args)
        assert index.search(query) == empty.search(query) != []


@kinds
def test_sidecar_info_names_the_documents(make: Callable[[], Index], load: Callable[[bytes], Index],
                                          query: str) -> None:
    index = make()
    info = type(index).sidecar_info(index.to_sidecar())
    ids = [d for d in range(MAX_DOC + 1) if d in index]
    assert info["docs"] == len(ids) == len(index)
    assert info["ids_checksum"] == doc_ids_checksum(ids) == doc_ids_checksum(np.array(ids[::-1]))
    assert info["ids_checksum"] != doc_ids_checksum([*ids, 99])
    assert isinstance(info["params"], dict)
    assert load(index.to_sidecar()).search(query) == index.search(query)


@pytest.mark.parametrize(("blob", "load", "match"), [
    (small_bm25().to_sidecar(), KeywordIndex.from_sidecar, "not a sidecar of this index kind"),
    (small_keyword().to_sidecar(), EntityIndex.from_sidecar, "not a sidecar of this index kind"),
    (small_entities().to_sidecar(), BM25Index.sidecar_info, "not a sidecar of this index kind"),
    (b"", BM25Index.from_sidecar, "truncated"),
    ("not bytes", KeywordIndex.from_sidecar, "must be bytes"),
], ids=["bm25-as-keyword", "keyword-as-entities", "info-of-another-kind", "empty", "str"])
def test_a_blob_of_another_kind_is_refused(blob: bytes, load: Callable[[bytes], object], match: str) -> None:
    with pytest.raises(CorruptData, match=match):
        load(blob)


# -- sidecars of another tokenization ----------------------------------------------------
OLD_SCOPE = Path(__file__).parents[1] / "fixtures" / "datadir-0.1" / "data" / "scopes" / "chat.alice"


@pytest.mark.parametrize(("name", "load"), [
    ("keyword", KeywordIndex.from_sidecar),
    ("bm25", BM25Index.from_sidecar),
    ("entities", EntityIndex.from_sidecar),
])
def test_a_sidecar_written_by_the_first_tokenization_is_stale(name: str,
                                                              load: Callable[[bytes], Index]) -> None:
    blob = (OLD_SCOPE / f"snapshot-4.{name}.bin").read_bytes()   # written by mnemex 0.1 (tokenization 1)
    with pytest.raises(CorruptData, match=r"stale: it was built with .*(words1|tok1).*rebuild the index"):
        load(blob)


def with_params(index: Index, params: dict[str, Any]) -> bytes:
    """*index*'s sidecar with other settings in its header (and a checksum to match)."""
    kind = type(index)
    sidecar = unpack_sidecar(index.to_sidecar(), kind.sidecar_magic, "test", kind.sidecar_arrays)
    header = {key: value for key, value in sidecar.header.items() if key != "arrays"}
    return pack_sidecar(kind.sidecar_magic, {**header, "params": params}, sidecar.arrays)


@kinds
def test_a_sidecar_of_another_tokenization_version_or_folding_is_stale(
        make: Callable[[], Index], load: Callable[[bytes], Index], query: str) -> None:
    index = make()
    params = type(index).sidecar_info(index.to_sidecar())["params"]
    assert load(with_params(index, params)).search(query) == index.search(query)   # the repacking is sound
    key, prefix = ("tokenizer", "tok") if isinstance(index, BM25Index) else ("words", "words")
    for other in (params[key].replace(f"{prefix}{TOKENIZATION_VERSION}:", f"{prefix}1:"),
                  params[key].replace("fold=none", "fold=accents")):
        assert other != params[key]
        with pytest.raises(CorruptData, match="stale"):
            load(with_params(index, {**params, key: other}))


def test_keyword_and_entity_sidecars_load_only_with_the_folding_they_were_built_with() -> None:
    keyword = KeywordIndex(fold_accents=True)
    keyword.add(0, "Café", 0.0)
    entities = EntityIndex(fold_accents=True)
    entities.add(0, ["Zoë"])
    assert KeywordIndex.from_sidecar(keyword.to_sidecar(), fold_accents=True).search("cafe") == [(0, 1)]
    assert EntityIndex.from_sidecar(entities.to_sidecar(), fold_accents=True).search("zoe") == [(0, 1)]
    with pytest.raises(CorruptData, match="stale"):
        KeywordIndex.from_sidecar(keyword.to_sidecar())
    with pytest.raises(CorruptData, match="stale"):
        EntityIndex.from_sidecar(entities.to_sidecar())


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_leaves_the_garbage_collector_as_it_found_it(enabled: bool) -> None:
    blob = small_keyword().to_sidecar()
    was = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        Tiny.from_sidecar(blob)
        assert gc.isenabled() is enabled
        with pytest.raises(CorruptData):
            Tiny.from_sidecar(blob[:-1])
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()


def hikes(keyword: KeywordIndex, text: Callable[[int], str]) -> tuple[BM25Index, KeywordIndex]:
    """A BM25 index and ``keyword`` of 40 docs each (the keyword index's ``text(doc)``)."""
    bm25 = BM25Index()
    for doc in range(40):
        bm25.add(doc, f"caroline went hiking {doc} times in the mountains", "a trip")
        keyword.add(doc, text(doc), float(doc))
    return bm25, keyword


def test_text_sidecars_as_chunks_are_the_blob_and_outlive_changes_to_the_index() -> None:
    # a snapshot takes the chunks in the actor's turn and writes them later, in its
    # writer's thread, while the index takes more writes: the chunks must not change
    for index in hikes(KeywordIndex(), lambda doc: f"caroline went hiking {doc} times"):
        blob = index.to_sidecar()
        chunks = index.to_sidecar_chunks()
        assert len(chunks) > 2 and b"".join(chunks) == blob
        for doc in range(40, 60):  # the index grows and changes after the chunks were taken
            if isinstance(index, BM25Index):
                index.add(doc, "melanie painted a sunrise " * 3, "a new context")
            else:
                index.add(doc, "melanie painted a sunrise", 100.0 + doc)
        index.remove(3)
        assert b"".join(chunks) == blob
        assert type(index).from_sidecar(b"".join(chunks)).to_sidecar() == blob


def test_lent_sidecar_chunks_are_the_indexes_own_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    # a closing scope's snapshot lends its indexes' buffers (no copy): while the
    # chunks are held, a write that would grow one of them fails (which is why only
    # an index that does not change any more lends them); every one lent here, as
    # small as they are
    monkeypatch.setattr(_sidecar, "LEND_MIN", 1)
    for index in hikes(Tiny(), lambda doc: f"caroline went hiking {doc % 3} times w{doc}"):
        blob = index.to_sidecar()
        chunks = index.to_sidecar_chunks(lend=True)
        assert b"".join(chunks) == blob
        with pytest.raises(BufferError):  # (a word's array, or the runs' buffer)
            if isinstance(index, BM25Index):
                index.add(40, "caroline went hiking", "a trip")
            else:
                index.add(40, "w5", 40.0)  # (a rare word's docs: an array grown in place)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 7, 100, 4095, 4096, 9000]), max_size=30))
def test_buffers_are_lent_when_large_and_copied_together_when_small(sizes: list[int]) -> None:
    # int32 arrays when the size allows, bytes otherwise
    buffers = [array("i", range(size // 4)) if size % 4 == 0 else bytes(i % 251 for i in range(size))
               for size in sizes]
    parts = lent(buffers)
    assert b"".join(parts) == b"".join(bytes(buffer) for buffer in buffers)
    large = [buffer for buffer in buffers if memoryview(buffer).nbytes >= _sidecar.LEND_MIN]
    views = [part for part in parts if isinstance(part, memoryview)]
    assert len(views) == len(large)
    assert all(view.obj is buffer for view, buffer in zip(views, large, strict=True))  # lent, not copied
    assert len(parts) - len(views) <= len(views) + 1  # the small ones between two large ones: one part
