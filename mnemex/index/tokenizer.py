"""Tokenizers: the classic word matching and the full-text tokenizer with phrases.

Two tokenizations live here, for two kinds of search:

* :func:`words` is the classic matching of the two-call memory service: every run
  of word characters (unicode-aware, ``\\w``), case-folded. Nothing is dropped.
* :class:`Tokenizer` feeds BM25: the same word runs, normalised (NFKC for
  non-ASCII text, case-folded, curly apostrophes straightened, possessive ``'s``
  cut), minus English stop words, optionally stemmed. It keeps each token's
  position in the original word stream, stop words counted, so that a quoted
  phrase such as ``"state of the art"`` still means "``state`` then, three words
  later, ``art``".

Everything here is pure and deterministic.
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

from mnemex.errors import InvalidInput

__all__ = ["ENGLISH_STOP_WORDS", "ParsedQuery", "Phrase", "Tokenizer", "words"]

_WORD = re.compile(r"\w+")
# A word run that may carry inner apostrophes ("don't", "o'neil"); a possessive
# "'s" at its end is matched but left out of the group ("caroline's" -> "caroline").
_TOKEN = re.compile(r"(\w+(?:'(?!s\b)\w+)*)(?:'s\b)?")
_QUOTED = re.compile(r'"([^"]*)"')
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\uff07": "'"})
# Every ASCII character that is not a word character (``\w`` there is [A-Za-z0-9_]) as
# a space: for ASCII text, ``split()`` after this table gives the word runs the
# regular expressions above find, about three times faster.
_ASCII_BREAKS: Final = str.maketrans({chr(c): " " for c in range(128)
                                      if not (chr(c).isalnum() or chr(c) == "_")})
_ASCII_TOKEN_BREAKS: Final = str.maketrans({chr(c): " " for c in range(128)
                                            if not (chr(c).isalnum() or chr(c) in "_'")})

# Written for this project: function words that carry no topic in English text,
# in their case-folded form, contractions with a straight apostrophe.
ENGLISH_STOP_WORDS: Final[frozenset[str]] = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "aren't", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but",
    "by", "can", "can't", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't",
    "doing", "don't", "down", "during", "each", "few", "for", "from", "further", "had", "hadn't", "has",
    "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's",
    "hers", "herself", "him", "himself", "his", "how", "how's", "i", "i'd", "i'll", "i'm", "i've", "if",
    "in", "into", "is", "isn't", "it", "it's", "its", "itself", "just", "let's", "me", "more", "most",
    "mustn't", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or",
    "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "same", "shan't", "she",
    "she'd", "she'll", "she's", "should", "shouldn't", "so", "some", "such", "than", "that", "that's",
    "the", "their", "theirs", "them", "themselves", "then", "there", "there's", "these", "they",
    "they'd", "they'll", "they're", "they've", "this", "those", "through", "to", "too", "under",
    "until", "up", "very", "was", "wasn't", "we", "we'd", "we'll", "we're", "we've", "were", "weren't",
    "what", "what's", "when", "when's", "where", "where's", "which", "while", "who", "who's", "whom",
    "why", "why's", "will", "with", "won't", "would", "wouldn't", "you", "you'd", "you'll", "you're",
    "you've", "your", "yours", "yourself", "yourselves", "also", "could've", "might", "must", "shall",
    "should've", "would've", "may", "might've", "yes", "yeah", "oh", "ok", "okay", "let", "s", "t", "d",
    "ll", "m", "re", "ve"
))


def _normalise(text: str) -> str:
    # NFKC folds compatibility forms (full-width letters, ligatures) before casefold;
    # ASCII text needs neither step, and it is most text, so it skips the cost.
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)
    return text.casefold()


def words(text: str) -> list[str]:
    """Case-folded word tokens of *text* (runs of unicode word characters), in order,
    repeats kept. The classic keyword matching compares these."""
    if text.isascii():
        return text.lower().translate(_ASCII_BREAKS).split()
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _raw_tokens(text: str) -> list[str]:
    """The full-text tokens of *text* before stop words and stemming."""
    if not text.isascii():
        return _TOKEN.findall(_normalise(text))
    lowered = text.lower()
    if "'" not in lowered:  # a token is a plain word run
        return lowered.translate(_ASCII_BREAKS).split()
    # A token never spans a character that is neither a word character nor an
    # apostrophe: only the runs holding an apostrophe need the regular expression.
    tokens: list[str] = []
    for run in lowered.translate(_ASCII_TOKEN_BREAKS).split():
        if "'" in run:
            tokens += _TOKEN.findall(run)
        else:
            tokens.append(run)
    return tokens


class Phrase(NamedTuple):
    """A quoted phrase of a query, tokenized like document text.

    ``tokens[i]`` must occur ``offsets[i]`` words after ``tokens[0]`` (stop words
    count as words, so a phrase made of stop words only has no tokens and is
    ignored). ``text`` is the phrase as written, without its quotes."""

    text: str
    tokens: tuple[str, ...]
    offsets: tuple[int, ...]


class ParsedQuery(NamedTuple):
    """A full-text query: free terms (outside quotes, in order, repeats kept) and
    quoted phrases. ``all_terms`` is every distinct term to score, free or quoted."""

    terms: tuple[str, ...]
    phrases: tuple[Phrase, ...]

    @property
    def all_terms(self) -> tuple[str, ...]:
        seen: dict[str, None] = dict.fromkeys(self.terms)
        for phrase in self.phrases:
            seen.update(dict.fromkeys(phrase.tokens))
        return tuple(seen)


class Tokenizer:
    """The full-text tokenizer: unicode word runs, case-folded, English stop words
    removed (``stop_words=True``, or any iterable of words), optionally stemmed
    with the Snowball English stemmer (``stem=True``; needs the optional
    ``snowballstemmer`` package).

    Equal settings give equal tokens in every process: the tokenizer has no state
    beyond a cache of stems, which only saves time."""

    _STEM_CACHE_LIMIT: Final = 200_000

    def __init__(self, stop_words: bool | Iterable[str] = True, stem: bool = False) -> None:
        if stop_words is True:
            self.stop_words: frozenset[str] = ENGLISH_STOP_WORDS
        elif stop_words is False:
            self.stop_words = frozenset()
        else:
            self.stop_words = frozenset(_normalise(w) for w in stop_words)
        self.stem = stem
        self._stem_word: Callable[[str], str] | None = None
        self._stems: dict[str, str] = {}
        if stem:
            self._stem_word = _snowball_english()

    def __repr__(self) -> str:
        default = self.stop_words is ENGLISH_STOP_WORDS
        stops = "True" if default else f"<{len(self.stop_words)} words>"
        return f"Tokenizer(stop_words={stops}, stem={self.stem})"

    @property
    def signature(self) -> str:
        """A short text naming the settings; two tokenizers with equal signatures
        give equal tokens (used to refuse indexes built with other settings)."""
        stops = "en" if self.stop_words is ENGLISH_STOP_WORDS else f"custom{len(self.stop_words)}"
        if not self.stop_words:
            stops = "none"
        return f"tok1:stops={stops}:stem={'snowball-en' if self.stem else 'none'}"

    def tokens(self, text: str) -> list[str]:
        """Index terms of *text*, in order, repeats kept."""
        stops = self.stop_words
        kept = [w for w in _raw_tokens(text) if w not in stops]
        if self._stem_word is not None:
            stem = self._stem
            kept = [stem(w) for w in kept]
        return kept

    def positioned(self, text: str) -> tuple[list[str], list[int]]:
        """Index terms of *text* and the position of each in the word stream
        (stop words occupy positions too, so positions may skip)."""
        stops = self.stop_words
        raw = _raw_tokens(text)
        positions = [i for i, w in enumerate(raw) if w not in stops]
        if self._stem_word is not None:
            stem = self._stem
            return [stem(raw[i]) for i in positions], positions
        return [raw[i] for i in positions], positions

    def parse_query(self, text: str) -> ParsedQuery:
        """Split a query into free terms and double-quoted phrases. An unmatched
        quote is read as if it were not there."""
        terms: list[str] = []
        phrases: list[Phrase] = []
        cursor = 0
        for match in _QUOTED.finditer(text):
            terms.extend(self.tokens(text[cursor : match.start()]))
            cursor = match.end()
            inner = match.group(1)
            tokens, positions = self.positioned(inner)
            if not tokens:
                continue
            first = positions[0]
            phrases.append(Phrase(inner.strip(), tuple(tokens), tuple(p - first for p in positions)))
        terms.extend(self.tokens(text[cursor:].replace('"', " ")))
        return ParsedQuery(tuple(terms), tuple(phrases))

    def _stem(self, word: str) -> str:
        cached = self._stems.get(word)
        if cached is not None:
            return cached
        assert self._stem_word is not None
        stemmed = self._stem_word(word)
        if len(self._stems) >= self._STEM_CACHE_LIMIT:
            self._stems.clear()
        self._stems[word] = stemmed
        return stemmed


def _snowball_english() -> Callable[[str], str]:
    try:
        snowballstemmer = importlib.import_module("snowballstemmer")
    except ImportError as exc:
        raise InvalidInput(
            "stemming needs the optional package 'snowballstemmer' "
            "(pip install snowballstemmer); or build Tokenizer(stem=False)",
            field="stem",
        ) from exc
    stemmer = snowballstemmer.stemmer("english")
    stem_word: Callable[[str], str] = stemmer.stemWord
    return stem_word
