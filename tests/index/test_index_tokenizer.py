"""Tokenizer: the classic word matching and the full-text tokens and queries, in
every script: normalisation, marks, scripts written without spaces, accents,
stemming per language. (How the indexes match with them: test_index_languages.)"""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.index import ENGLISH_STOP_WORDS, ParsedQuery, Phrase, Tokenizer, words
from mnemex.index.tokenizer import _TOKEN, _WORD, TOKENIZATION_VERSION, _patterns, _raw_tokens, words_scheme


@pytest.mark.parametrize(("text", "expected"), [
    ("Hello, World!", ["hello", "world"]),
    ("I'm John; I write Java.", ["i", "m", "john", "i", "write", "java"]),
    ("Straße ÉTÉ naïve", ["strasse", "été", "naïve"]),
    ("\uff26\uff35\uff2c\uff2c width", ["full", "width"]),  # full-width letters
    ("snake_case and 42 numbers", ["snake_case", "and", "42", "numbers"]),
    ("", []),
    ("  ...  ", []),
])
def test_words_are_casefolded_unicode_word_runs(text: str, expected: list[str]) -> None:
    assert words(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("\uff21\uff22\uff23 abc Abc", ["abc", "abc", "abc"]),            # full-width
    ("\ufb01ne \ufb02ow", ["fine", "flow"]),                            # ligatures
    ("\u2460 \u33a1", ["1", "m2"]),                                    # circled digit, squared unit
    ("ǅemal ΣΊΣΥΦΟΣ", ["džemal", "σίσυφοσ"]),                            # title case, final sigma
    ("soft\u00adhyphen zero\u200dwidth\u200cjoiners word\u2060joiner\ufeff",
     ["softhyphen", "zerowidthjoiners", "wordjoiner"]),
    ("don\u2019t O\u02bcNeil", ["don", "t", "o", "neil"]),                # read as the ASCII apostrophe
    ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),                                      # vowel signs and virama stay
    ("مَرْحَبًا بالعالم", ["مَرْحَبًا", "بالعالم"]),                              # harakat stay
    ("İstanbul", ["i\u0307stanbul"]),                                      # casefold's combining dot
    ("emoji ❤️ 👩\u200d💻 ok", ["emoji", "ok"]),                            # a variation selector is no word
])
def test_words_are_normalised_alike_whatever_the_form(text: str, expected: list[str]) -> None:
    assert words(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("太郎", ["太郎"]),
    ("猫", ["猫"]),
    ("私の名前は太郎です", ["私の", "の名", "名前", "前は", "は太", "太郎", "郎で", "です"]),
    ("私はPythonでADKを使っています",
     ["私は", "python", "で", "adk", "を使", "使っ", "って", "てい", "いま", "ます"]),
    ("日本語 テキスト", ["日本", "本語", "テキ", "キス", "スト"]),
    ("我住在北京。", ["我住", "住在", "在北", "北京"]),
    ("서울에서 살아요", ["서울", "울에", "에서", "살아", "아요"]),
    ("ｶﾀｶﾅ", ["カタ", "タカ", "カナ"]),                                    # half-width kana
    ("2024年3月15日", ["2024", "年", "3", "月", "15", "日"]),
    ("ข้าว", ["ข้า", "าว"]),                                               # marks stay on their consonant
    ("東京タワー's", ["東京", "京タ", "タワ", "ワー", "s"]),
])
def test_scripts_without_spaces_are_read_as_overlapping_pairs(text: str, expected: list[str]) -> None:
    assert words(text) == expected


def test_the_indexed_form_interleaves_the_characters_with_their_pairs() -> None:
    assert words("太郎です", unigrams=True) == ["太", "太郎", "郎", "郎で", "で", "です", "す"]
    assert words("猫 cat", unigrams=True) == ["猫", "cat"]
    assert words("ข้าว", unigrams=True) == ["ข้", "ข้า", "า", "าว", "ว"]
    assert Tokenizer().tokens("私は猫") == ["私", "私は", "は", "は猫", "猫"]
    assert Tokenizer().query_tokens("私は猫") == ["私は", "は猫"]
    assert Tokenizer().positioned("the 太郎") == (["太", "太郎", "郎"], [1, 2, 3])


@pytest.mark.parametrize(("text", "folded"), [
    ("café CAFÉ Cafe", ["cafe", "cafe", "cafe"]),
    ("Zoë naïve résumé Ångström", ["zoe", "naive", "resume", "angstrom"]),
    ("Øresund Łódź Đorđe", ["oresund", "lodz", "dorde"]),
    ("Ελλάδα ΆΝΘΡΩΠΟΣ", ["ελλαδα", "ανθρωποσ"]),
    ("Việt Nam", ["viet", "nam"]),
    ("q\u0303 o\u0301", ["q", "o"]),                # combining marks with no precomposed form
    ("がぎ ข้าว йод", ["がぎ", "ข้า", "าว", "йод"]),  # other scripts keep their marks
])
def test_accent_folding_reads_latin_and_greek_letters_as_their_base(text: str, folded: list[str]) -> None:
    assert words(text, fold_accents=True) == folded
    assert Tokenizer(stop_words=False, fold_accents=True).query_tokens(text) == folded


def test_accents_stay_unless_folding_is_asked_for() -> None:
    assert words("café") == ["café"]
    assert Tokenizer().tokens("café") == ["café"]
    assert Tokenizer(fold_accents=True).tokens("Café") == ["cafe"]
    assert Tokenizer(fold_accents=True).parse_query('"café crème" Zoë').all_terms == ("zoe", "cafe", "creme")
    assert Tokenizer(stop_words=["Thé"], fold_accents=True).tokens("the tea") == ["tea"]


@pytest.mark.parametrize(("text", "expected"), [
    ("The quick brown fox", ["quick", "brown", "fox"]),
    ("Caroline's painting", ["caroline", "painting"]),
    ("Caroline\u2019s painting", ["caroline", "painting"]),
    ("I don't know what I'm doing", ["know"]),
    ("MUSIC and Música", ["music", "música"]),
    ("the of and", []),
])
def test_tokens_drop_stop_words_and_possessives(text: str, expected: list[str]) -> None:
    assert Tokenizer().tokens(text) == expected


def test_positions_count_stop_words() -> None:
    assert Tokenizer().positioned("state of the art design") == (["state", "art", "design"], [0, 3, 4])


def test_stop_words_can_be_off_or_custom() -> None:
    assert Tokenizer(stop_words=False).tokens("The cat") == ["the", "cat"]
    assert Tokenizer(stop_words=["CAT"]).tokens("The cat sat") == ["the", "sat"]
    assert "the" in ENGLISH_STOP_WORDS


def test_signature_names_the_settings_and_the_tokenization_version() -> None:
    assert Tokenizer().signature != Tokenizer(stop_words=False).signature
    assert Tokenizer().signature != Tokenizer(fold_accents=True).signature
    assert Tokenizer().signature == Tokenizer().signature
    assert Tokenizer().signature.startswith(f"tok{TOKENIZATION_VERSION}:")
    assert words_scheme() != words_scheme(fold_accents=True)
    assert words_scheme().startswith(f"words{TOKENIZATION_VERSION}:")
    assert TOKENIZATION_VERSION == 2  # 1 read "太郎です" as one word: its sidecars are stale


@pytest.mark.parametrize(("query", "terms", "phrases"), [
    ("java coffee", ("java", "coffee"), ()),
    ('"New York" pizza', ("pizza",), (Phrase("New York", ("new", "york"), (0, 1)),)),
    ('best "state of the art" model', ("best", "model"),
     (Phrase("state of the art", ("state", "art"), (0, 3)),)),
    ('"the of" cats', ("cats",), ()),
    ('unclosed "quote here', ("unclosed", "quote"), ()),
    ('a "b c" d "e f"', ("d",), (Phrase("b c", ("b", "c"), (0, 1)), Phrase("e f", ("e", "f"), (0, 1)))),
])
def test_parse_query_honours_double_quoted_phrases(query: str, terms: tuple[str, ...],
                                                   phrases: tuple[Phrase, ...]) -> None:
    tokenizer = Tokenizer(stop_words=["a", "the", "of", "here"])
    parsed = tokenizer.parse_query(query)
    assert parsed == ParsedQuery(terms, phrases)


def test_all_terms_joins_free_and_phrase_terms_once() -> None:
    parsed = Tokenizer().parse_query('java "java island" coffee')
    assert parsed.all_terms == ("java", "coffee", "island")


def test_stemming_reduces_inflections() -> None:
    pytest.importorskip("snowballstemmer")
    tokenizer = Tokenizer(stem=True)
    assert tokenizer.tokens("running runs painted paintings") == ["run", "run", "paint", "paint"]
    assert tokenizer.signature.endswith("stem=snowball-english")


def test_stemming_takes_any_snowball_language_and_folds_after_stemming() -> None:
    pytest.importorskip("snowballstemmer")
    french = Tokenizer(stop_words=False, stem="french")
    assert french.tokens("Les éléphants étaient élégants") == ["le", "éleph", "étaient", "éleg"]
    assert french.signature.endswith("stem=snowball-french")
    folded = Tokenizer(stop_words=False, stem="french", fold_accents=True)
    assert folded.tokens("Les éléphants étaient élégants") == ["le", "eleph", "etaient", "eleg"]
    assert folded.query_tokens("ELEPHANTS") == folded.tokens("éléphant")
    spanish = Tokenizer(stop_words=False, stem="spanish", fold_accents=True)
    assert spanish.tokens("la nación, las naciones") == spanish.tokens("la nacion las nacion")
    assert spanish.positioned("the naciones") == (["the", "nacion"], [0, 1])
    with pytest.raises(InvalidInput, match=r"klingon.*french"):
        Tokenizer(stem="klingon")


def test_stemming_without_the_package_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def fake(name: str, package: str | None = None) -> object:
        if name == "snowballstemmer":
            raise ImportError("no snowballstemmer")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(InvalidInput, match="pip install snowballstemmer"):
        Tokenizer(stem=True)


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=127), max_size=60)
       | st.lists(st.sampled_from(["it's", "don't", "O'Neil", "a_b", "x1", "\x1f", "\t", "--", "'s", "'", "s",
                                   "''", "rock'n'roll", ".", "Anna's", "'tis"]))
       .flatmap(lambda parts: st.sampled_from([" ".join(parts), "".join(parts), "'".join(parts)])))
def test_the_ascii_fast_path_finds_what_the_regular_expressions_find(text: str) -> None:
    assert words(text) == _WORD.findall(text.casefold())
    assert _raw_tokens(text) == _TOKEN.findall(text.casefold())
    # and what the script-aware expressions of non-ASCII text find
    for patterns in (_patterns(False), _patterns(True)):
        assert words(text) == [word for _, word in patterns.word.findall(text.casefold())]
        assert _raw_tokens(text) == [token for _, token in patterns.token.findall(text.casefold())]


@pytest.mark.parametrize(("query", "worded"), [
    ("Which bike is his?", True), ("What is the user's job?", True), ("where do I live", True),
    ("bike", False), ("Python ADK", False), ("太郎", False), ("Café crème", False), ("", False),
    ("THE Bike", True),
])
def test_a_query_is_worded_when_it_holds_a_stop_word(query: str, worded: bool) -> None:
    assert Tokenizer().worded(query) is worded
    assert Tokenizer(stop_words=False).worded(query) is False


# -- the terms of stemming tokenizers are shared (issue 17: a new scope starts with them) ----------
def _plain_terms(text: str, fold: bool) -> list[str]:
    """The stemmed terms as read without any table: stop words out, Snowball, folding."""
    from mnemex.index.tokenizer import _fold, _raw_tokens, _snowball

    stem = _snowball("english")
    stops = ENGLISH_STOP_WORDS
    raw = _raw_tokens(text, True, False)
    if fold:
        return [_fold(stem(w)) for w in raw if _fold(w) not in stops]
    return [stem(w) for w in raw if w not in stops]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["running", "runs", "the", "Café", "cafés", "naïve", "x", "1", "a",
                                 "don't", "Caroline's", "東京", "über", "généralement", "s", "i'm"]),
                max_size=20), st.booleans())
def test_stemmed_terms_are_those_of_the_plain_reading(words_: list[str], fold: bool) -> None:
    text = " ".join(words_)
    first, second = Tokenizer(stem=True, fold_accents=fold), Tokenizer(stem=True, fold_accents=fold)
    expected = _plain_terms(text, fold)
    assert first.tokens(text) == expected
    assert second.tokens(text) == expected  # read from the table the first one filled
    terms, positions = second.positioned(text)
    assert terms == expected and len(positions) == len(terms)


def test_stemming_tokenizers_share_terms_only_with_equal_settings() -> None:
    plain, same = Tokenizer(stem=True), Tokenizer(stem=True)
    folded, custom = Tokenizer(stem=True, fold_accents=True), Tokenizer(stem=True, stop_words=["running"])
    assert plain._terms_of is same._terms_of
    assert plain._terms_of is not folded._terms_of and plain._terms_of is not custom._terms_of
    assert custom.tokens("running runs") == ["run"]  # its own stop word, not the shared table's term
    assert plain.tokens("running runs") == ["run", "run"]


def test_the_shared_term_table_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Tokenizer, "_STEM_CACHE_LIMIT", 4)
    tokenizer = Tokenizer(stem=True, stop_words=["zzz-only-here"])
    text = "alpha beta gamma delta epsilon zeta eta theta"
    assert tokenizer.tokens(text) == _plain_terms(text, False)
    assert 0 < len(tokenizer._terms_of) <= 4
