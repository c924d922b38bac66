"""The text indexes in every script: keyword, BM25 (quoted phrases included) and
entity matching find words in text written without spaces (Chinese, Japanese,
Korean, Thai), Latin words inside it, one-character queries and every normalised
form of a word; and whatever the text, a query equal to it finds it (what is
indexed and what is asked are tokenized alike)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.index import BM25Index, EntityIndex, KeywordIndex, Tokenizer, words

DOCS = {
    0: "私の名前は太郎です",
    1: "私はPythonでADKを使っています",
    2: "我住在北京\uff0c在一家银行工作。",
    3: "서울에서 소프트웨어 개발자로 일해요",
    4: "ผมชอบกินข้าวผัดกับไก่",
    5: "I live in Tokyo and love ramen",
    6: "猫が好きです",
    7: "東京タワーに行きました",
    8: "\uff21\uff22\uff23 Corp hired a ﬁnance lead",
}


def keyword_index() -> KeywordIndex:
    index = KeywordIndex()
    for doc, text in DOCS.items():
        index.add(doc, text, float(doc))
    return index


def bm25_index() -> BM25Index:
    index = BM25Index()
    index.add_many([(doc, text, None) for doc, text in DOCS.items()])
    return index


FOUND = [
    ("太郎", {0}),                    # ADK's own in-memory service finds both of these
    ("Python", {1}),
    ("ADK", {1}),
    ("python adk", {1}),
    ("北京", {2}),
    ("银行", {2}),
    ("서울", {3}),
    ("개발자", {3}),
    ("ข้าวผัด", {4}),
    ("ไก่", {4}),
    ("猫", {6}),                      # one character: found through the indexed characters
    ("東京", {7}),
    ("tokyo", {5}),
    ("\uff21\uff24\uff2b", {1}),                  # full-width
    ("abc FINANCE", {8}),            # full-width letters and the "fi" ligature in the document
    ("郎太", set()),                  # the characters, in the other order: no word of the text
    ("京東", set()),
    ("thon", set()),                 # part of a Latin word is no word
]


@pytest.mark.parametrize(("query", "expected"), FOUND)
def test_keyword_search_finds_words_in_every_script(query: str, expected: set[int]) -> None:
    hits = keyword_index().search(query, top_k=20)
    assert {doc for doc, _ in hits} == expected
    assert all(matched == len(set(words(query))) for _, matched in hits)  # every query word matched


@pytest.mark.parametrize(("query", "expected"), FOUND)
def test_fulltext_search_finds_words_in_every_script(query: str, expected: set[int]) -> None:
    assert {doc for doc, _ in bm25_index().search(query, top_k=20)} == expected


@pytest.mark.parametrize(("text", "query", "found"), [
    ("ダイビングが好き", "ダイビング", True),         # kana with voicing marks
    ("제 이름은 민준입니다", "민준", True),              # Hangul syllables, decomposed into jamo by NFD
    ("Rendez-vous au Café", "café", True),
    ("Встреча в кафе", "КАФЕ", True),
    ("我喜欢深度学习", "天气预报", False),
    ("私の名前は太郎です", "天気", False),
])
def test_decomposed_and_composed_forms_match_alike(text: str, query: str, found: bool) -> None:
    for stored, asked in ((text, query), (unicodedata.normalize("NFD", text), query),
                          (text, unicodedata.normalize("NFD", query))):
        keyword = KeywordIndex()
        keyword.add(0, stored, 0.0)
        assert bool(keyword.search(asked)) is found, (stored, asked)
        bm25 = BM25Index()
        bm25.add(0, stored)
        assert bool(bm25.search(asked)) is found, (stored, asked)


def test_a_one_character_query_finds_every_text_holding_the_character() -> None:
    assert {doc for doc, _ in keyword_index().search("私", top_k=20)} == {0, 1}
    assert {doc for doc, _ in bm25_index().search("私", top_k=20)} == {0, 1}


def test_a_longer_query_ranks_the_text_holding_all_of_it_first() -> None:
    index = BM25Index()
    texts = ["東京は大きい", "京都に住んでいます", "東京タワーは京都にない"]
    index.add_many([(doc, text, None) for doc, text in enumerate(texts)])
    assert [doc for doc, _ in index.search("東京タワー")] == [2, 0]   # 京都 shares only 京: no pair
    keyword = KeywordIndex()
    keyword.add_many([0, 1, 2], texts, [0.0, 0.0, 0.0])
    assert keyword.search("東京タワー") == [(2, 4), (0, 1)]


@pytest.mark.parametrize(("query", "expected"), [
    ('"太郎です"', {0}),
    ('"名前は太郎"', {0}),
    ('"です太郎"', set()),
    ('"太郎" "名前"', {0}),
    ('"私はPythonで"', {1}),
    ('"ADKを使って"', {1}),
    ('"PythonでADK"', {1}),
    ('"Python ADK"', set()),         # the words are not next to each other
    ('"東京タワー"', {7}),
    ('"タワー東京"', set()),
    ('"猫"', {6}),
    ('"ข้าวผัด"', {4}),
    ('"ผัดข้าว"', set()),
    ('"개발자로"', {3}),
    ('"北京" 银行', {2}),
    ('"北京" 太郎', {2}),              # the phrase is required, free terms only score
])
def test_quoted_phrases_match_in_scripts_without_spaces(query: str, expected: set[int]) -> None:
    assert {doc for doc, _ in bm25_index().search(query, top_k=20)} == expected


def test_phrase_positions_skip_stop_words_between_scripts() -> None:
    index = BM25Index()
    index.add_many([(0, "visit the 東京タワー today", None), (1, "東京 the タワー", None)])
    assert {doc for doc, _ in index.search('"visit the 東京"')} == {0}
    assert {doc for doc, _ in index.search('"東京 a タワー"')} == {1}   # a stop word matches any
    assert {doc for doc, _ in index.search('"東京タワー"')} == {0}


@pytest.mark.parametrize(("query", "expected"), [
    ("太郎さんは元気ですか", [0]),
    ("ADKについて教えて", [1]),
    ("北京大学", [2]),
    ("猫を飼っています", [6]),          # a one-character name
    ("東京に行く", []),                 # 東京タワー is not named
    ("서울 날씨", [3]),
    ("ข้าวผัดอร่อย", [4]),
])
def test_entity_names_are_found_in_queries_in_every_script(query: str, expected: list[int]) -> None:
    index = EntityIndex()
    for doc, names in {0: ["太郎"], 1: ["ADK", "Python"], 2: ["北京"], 3: ["서울"], 4: ["ข้าวผัด"],
                       6: ["猫"], 7: ["東京タワー"]}.items():
        index.add(doc, names)
    assert [doc for doc, _ in index.search(query)] == expected


def test_a_name_in_a_script_without_spaces_can_be_updated_and_removed() -> None:
    index = EntityIndex()
    index.add(0, ["東京タワー", "太郎"])
    index.update(0, ["東京タワー"])
    assert index.find("太郎と東京タワー") == {index.entities()[0]}
    index.remove(0)
    assert index.entities() == [] and index.find("東京タワー") == set()


@pytest.mark.parametrize(("query", "folded", "plain"), [
    ("cafe", {0}, set()),
    ("CAFÉ", {0}, {0}),
    ("creme", {0}, set()),
    ("zoe", {1}, set()),
    ("Zoë", {1}, {1}),
    ("angstrom", {2}, set()),
])
def test_accents_are_folded_when_the_index_folds_them(query: str, folded: set[int], plain: set[int]) -> None:
    texts = ["Café crème", "Zoë's notes", "Ångström units"]
    for fold, expected in ((True, folded), (False, plain)):
        keyword = KeywordIndex(fold_accents=fold)
        keyword.add_many([0, 1, 2], texts, [0.0, 0.0, 0.0])
        assert {doc for doc, _ in keyword.search(query)} == expected, ("keyword", fold)
        bm25 = BM25Index(tokenizer=Tokenizer(fold_accents=fold))
        bm25.add_many([(doc, text, None) for doc, text in enumerate(texts)])
        assert {doc for doc, _ in bm25.search(query)} == expected, ("bm25", fold)
        entities = EntityIndex(fold_accents=fold)
        for doc, text in enumerate(texts):
            entities.add(doc, [text.split()[0].removesuffix("'s")])
        assert {doc for doc, _ in entities.search(query)} <= expected, ("entities", fold)


def test_english_text_is_tokenized_as_before() -> None:
    text = "Caroline's LGBTQ support group, state-of-the-art: she didn't go!"
    assert words(text) == ["caroline", "s", "lgbtq", "support", "group", "state", "of", "the", "art", "she",
                           "didn", "t", "go"]
    assert words(text, unigrams=True, fold_accents=True) == words(text)
    assert Tokenizer().positioned(text) == (["caroline", "lgbtq", "support", "group", "state", "art", "go"],
                                            [0, 1, 2, 3, 4, 7, 10])
    assert Tokenizer(fold_accents=True).query_tokens(text) == Tokenizer().tokens(text)


# -- index time and query time agree, whatever the text -------------------------------------------
FRAGMENTS = ["太郎", "私", "は", "Python", "ADK", "で", "を使って", "東京", "タワー", "서울", "에서", "ข้าว",
             "ผัด", "ไก่", "café", "Zoë", "\uff21\uff22\uff23", "ﬁne", "don't", "Anna's", "the", "state",
             "of", "art",
             "हिन्दी", "مَرْحَبًا", "2024", "年", "ｶﾀｶﾅ", "々", "ー", "İ", " ", "-", "'", "\u2019", "\u0301",
             "\u200d", "\u00ad", "\U0001f600", "\ufe0f", "_", "x1", "ΣΊΣΥΦΟΣ", "ß"]
any_text = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(FRAGMENTS), max_size=8).flatmap(
        lambda parts: st.sampled_from(["".join(parts), " ".join(parts)])),
)


@settings(max_examples=300, deadline=None)
@given(text=any_text, fold=st.booleans())
def test_a_query_equal_to_a_text_finds_it_in_every_index(text: str, fold: bool) -> None:
    query = text.replace('"', " ")     # quotes are query syntax
    asked = set(words(query, fold_accents=fold))
    assert asked <= set(words(query, unigrams=True, fold_accents=fold))
    keyword = KeywordIndex(fold_accents=fold)
    keyword.add(0, query, 0.0)
    assert keyword.search(query) == ([(0, len(asked))] if asked else [])

    tokenizer = Tokenizer(fold_accents=fold)
    assert set(tokenizer.query_tokens(query)) <= set(tokenizer.tokens(query))
    bm25 = BM25Index(tokenizer=tokenizer)
    bm25.add(0, query)
    found = [doc for doc, _ in bm25.search(query)]
    assert found == ([0] if tokenizer.query_tokens(query) else [])
    if tokenizer.tokens(query):
        assert [doc for doc, _ in bm25.search(f'"{query}"')] == [0]

    entities = EntityIndex(fold_accents=fold)
    if asked:
        entities.add(0, [query])
        assert entities.search(query) == [(0, 1)]


# Characters of scripts without spaces, a base with its marks each (a Thai vowel or
# tone mark, a kana voicing mark): a text is cut only between them.
CHARACTERS = ["太", "郎", "東", "京", "私", "の", "は", "カ", "ガ", "か\u3099", "ー", "々", "서", "울", "에",
              "ข้", "า", "ว", "ผั", "ด", "ไ", "ก่", "น้ำ", "ເ", "ລ", "ក", "កា", "မ", "\u3400", "\U00020000"]


@settings(max_examples=300, deadline=None)
@given(chars=st.lists(st.sampled_from(CHARACTERS), min_size=1, max_size=12), data=st.data())
def test_any_stretch_of_a_text_without_spaces_finds_it(chars: list[str], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(chars) - 1))
    stop = data.draw(st.integers(start + 1, len(chars)))
    text, query = "".join(chars), "".join(chars[start:stop])
    keyword = KeywordIndex()
    keyword.add(0, f"{text} 🙂 other", 0.0)
    assert [doc for doc, _ in keyword.search(query)] == [0]
    bm25 = BM25Index()
    bm25.add(0, f"a {text} b")
    assert [doc for doc, _ in bm25.search(query)] == [0]
    assert [doc for doc, _ in bm25.search(f'"{query}"')] == [0]
    entities = EntityIndex()
    entities.add(0, [query])
    assert [doc for doc, _ in entities.search(f"x{text}y")] == [0]
