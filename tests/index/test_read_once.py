"""A memory's text is read once for the full-text terms and the keyword index's
words (issue 17, ingest speed): ``Tokenizer.analysed`` must give exactly what
``positioned`` and ``words`` give apart, and a keyword index handed those words
must hold exactly what one that reads the texts itself holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.index import KeywordIndex, Tokenizer, words
from mnemex.persistence.snapshot import sidecar_bytes

TEXTS = ["Caroline's café isn't open", "don't 'quote' me o'neil's ''", "it's 'tis rock'n'roll'",
         "plain words only", "'", "a'b'c", "東京で友達 don't", "Straße' ÉCOLE's", "", "x'  y''z"]
TOKENIZERS = [Tokenizer(), Tokenizer(stem=True), Tokenizer(stem=True, fold_accents=True),
              Tokenizer(stop_words=False, fold_accents=True)]
PIECES = st.sampled_from(["don't", "'", "''", "Caroline's", "it's", "a", "the", "Zoë", "東京", " ", "-", ".",
                          "'s", "O'Neil", "rock'n'roll", "x_y", "42", "ÉCOLE"])


def _check(text: str) -> None:
    for tokenizer in TOKENIZERS:
        for fold in (False, True):
            terms, positions, found = tokenizer.analysed(text, fold)
            assert (terms, positions) == tokenizer.positioned(text)
            assert found == words(text, unigrams=True, fold_accents=fold)


def test_terms_and_words_read_once_are_those_read_apart() -> None:
    for text in TEXTS:
        _check(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=12).map("".join) | st.text(max_size=40))
def test_terms_and_words_read_once_are_those_read_apart_on_any_text(text: str) -> None:
    _check(text)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(PIECES, min_size=1, max_size=8).map(" ".join), min_size=1, max_size=8),
       st.booleans())
def test_a_keyword_index_given_the_words_holds_what_reading_the_texts_builds(texts: list[str],
                                                                           fold: bool) -> None:
    tokenizer = Tokenizer(stem=True, fold_accents=fold)
    given_words = {text: tokenizer.analysed(text, fold)[2] for text in texts[::2]}  # some given, some read
    reading, given_index = KeywordIndex(fold_accents=fold), KeywordIndex(fold_accents=fold)
    docs = list(range(len(texts)))
    stamps = [float(doc) for doc in docs]
    reading.add_many(docs, texts, stamps)
    given_index.add_many(docs, texts, stamps, given_words)
    assert sidecar_bytes(given_index.to_sidecar()) == sidecar_bytes(reading.to_sidecar())
    for text in texts:
        assert given_index.search(text, top_k=20) == reading.search(text, top_k=20)
