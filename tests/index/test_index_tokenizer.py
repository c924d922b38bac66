"""Tokenizer: the classic word matching and the full-text tokens and queries."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.index import ENGLISH_STOP_WORDS, ParsedQuery, Phrase, Tokenizer, words
from mnemex.index.tokenizer import _TOKEN, _WORD, _raw_tokens


@pytest.mark.parametrize(("text", "expected"), [
    ("Hello, World!", ["hello", "world"]),
    ("I'm John; I write Java.", ["i", "m", "john", "i", "write", "java"]),
    ("Straße ÉTÉ naïve", ["strasse", "été", "naïve"]),
    ("\uff26\uff35\uff2c\uff2c width", ["full", "width"]),  # full-width letters
    ("snake_case and 42 numbers", ["snake_case", "and", "42", "numbers"]),
    ("日本語 テキスト", ["日本語", "テキスト"]),
    ("", []),
    ("  ...  ", []),
])
def test_words_are_casefolded_unicode_word_runs(text: str, expected: list[str]) -> None:
    assert words(text) == expected


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


def test_signature_names_the_settings() -> None:
    assert Tokenizer().signature != Tokenizer(stop_words=False).signature
    assert Tokenizer().signature == Tokenizer().signature


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
    assert tokenizer.signature.endswith("stem=snowball-en")


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
