"""Tokenizers: the classic word matching and the full-text tokenizer with phrases.

Both read text the same way, at index time and at query time:

* **Normalisation.** NFKC (full-width letters, ligatures and other compatibility
  forms become plain ones: full-width ``"\uff21\uff22\uff23"`` is ``"abc"``,
  ``"ﬁne"`` is ``"fine"``), case folding (``"Straße"`` is ``"strasse"``), curly
  apostrophes straightened, invisible joiners removed (soft hyphen, ZWJ, ZWNJ,
  word joiner, BOM). ASCII text needs only lower-casing and skips the rest.
* **Accent folding**, optional (``fold_accents``, off here; a scope's indexes take
  ``config.memories.fold_accents``): the diacritics of Latin and Greek letters and
  every combining diacritical mark (U+0300-U+036F) are dropped and a few letters
  with a stroke read as their base (ø, đ, ł, ħ, ŧ, dotless i), so ``"café"``, ``"Cafe"``
  and ``"CAFÉ"`` are one word. Other scripts keep their marks: a Japanese dakuten
  or a Thai tone mark changes the word.
* **Words** are runs of word characters (``\\w``) with the combining marks that
  follow them (Python's ``\\w`` alone cuts "हिन्दी" or Arabic with its vowel
  signs into pieces), cut wherever a script written without spaces begins or ends.
* **Scripts written without spaces** (Chinese, Japanese kanji and kana, Korean
  Hangul, Thai, Lao, Khmer, Myanmar) hold several words in one run and no
  dictionary is shipped to find them, so a run of them is read as overlapping
  pairs of characters (a character being a base with its combining marks, so a
  Thai vowel or tone mark stays on its consonant): ``"太郎です"`` gives
  ``太郎 郎で です``. A word of two or more characters is then found wherever it
  occurs (its pairs are consecutive there too), with nothing to install and
  nothing to train. A run of one character is that character. Hangul is spaced,
  but its particles attach to the noun (``서울에서``, "in Seoul"), so it is read
  the same way. Latin words and digits inside such text are words of their own:
  ``"私はPythonでADKを使っています"`` holds ``python`` and ``adk``.

  What is indexed holds every character of such a run as well, interleaved with
  the pairs (``太 太郎 郎 郎で で です す``), so that a one-character query
  (``"猫"``) is found; a query keeps only the pairs (a single character where it
  stands alone), as Lucene's CJK bigram analysis does, so a two-character word
  is not matched by its characters scattered through unrelated text. The
  interleaved stream of a piece of a run is a stretch of the stream of the whole
  run, which keeps quoted phrases and entity names in these scripts whole-word
  matches, positions included.

Two tokenizations are built on this, for two kinds of search:

* :func:`words` is the classic matching of the two-call memory service: the words,
  nothing dropped (``unigrams=True`` for the indexed form).
* :class:`Tokenizer` feeds BM25: the words minus English stop words, possessive
  ``'s`` cut, words with inner apostrophes kept whole (``don't``), optionally
  stemmed (Snowball, per language). It keeps each token's position in the word
  stream, stop words counted, so that a quoted phrase such as ``"state of the
  art"`` still means "``state`` then, three words later, ``art``".

:data:`TOKENIZATION_VERSION` names all of this; indexes kept on disk record it,
and one built under another version is refused (and rebuilt from the records).

Everything here is pure and deterministic.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Final, NamedTuple

from mnemex.errors import InvalidInput

__all__ = ["ENGLISH_STOP_WORDS", "TOKENIZATION_VERSION", "ParsedQuery", "Phrase", "Tokenizer", "words",
           "words_scheme"]

TOKENIZATION_VERSION: Final = 2
"""Bumped whenever any token these functions give changes for some text, so that
an index stored under another version is not trusted. 1: ``\\w+`` runs. 2: marks
inside words, scripts without spaces as character pairs, joiners removed,
optional accent folding."""

_WORD = re.compile(r"\w+")
# A word run that may carry inner apostrophes ("don't", "o'neil"); a possessive
# "'s" at its end is matched but left out of the group ("caroline's" -> "caroline").
_TOKEN = re.compile(r"(\w+(?:'(?!s\b)\w+)*)(?:'s\b)?")
# The same for ASCII text, compiled ASCII: the same matches there (``\w`` names the same
# characters), each character's class one table look-up, not several in Unicode's database.
_ASCII_TOKEN = re.compile(_TOKEN.pattern, re.ASCII)
_QUOTED = re.compile(r'"([^"]*)"')
# Typographic apostrophes as the ASCII one (NFKC makes the full-width one ASCII);
# invisible characters that join or may split a word (soft hyphen, ZWNJ, ZWJ, word
# joiner, BOM) dropped.
_TYPOGRAPHY: Final = {"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u00ad": "", "\u200c": "",
                      "\u200d": "", "\u2060": "", "\ufeff": ""}
# Those and every character beyond the BMP: what normalising rewrites after NFKC (a
# search, then a substitution only where one is found: str.translate looks every
# character of non-ASCII text up in a dict, several times slower).
_REWRITTEN: Final = re.compile(f"[{''.join(_TYPOGRAPHY)}\U00010000-\U0010ffff]")
_ASTRAL: Final = re.compile("[\U00010000-\U0010ffff]")
# Every ASCII character that is not a word character (``\w`` there is [A-Za-z0-9_]) as
# a space, and every capital as its small letter: for ASCII text, ``split()`` after
# this table gives the word runs the regular expressions above find of the lower-cased
# text, about three times faster. Tables of bytes, read by ``bytes.translate`` (see
# ``_ascii_lowered``): ``str.translate`` looks characters up in a dict, and took as long
# as the rest of splitting a memory's text.
def _ascii_table(kept: str) -> bytes:
    """The table: an ASCII character neither alphanumeric nor in ``kept`` as a space,
    any other ASCII one as its small letter, bytes past ASCII as they are."""
    return bytes(code if code >= 128 else ord(" ") if not (chr(code).isalnum() or chr(code) in kept)
                 else ord(chr(code).lower()) for code in range(256))


_ASCII_BREAKS: Final = _ascii_table("_")
_ASCII_TOKEN_BREAKS: Final = _ascii_table("_'")

# The blocks of the scripts written without spaces (their word characters and marks
# are read as character pairs): Thai and Lao, Myanmar, Hangul jamo, Khmer, CJK
# radicals, the ideographic iteration and closing marks, kana, bopomofo, compatibility
# jamo and katakana extensions, CJK ideographs (extension A, unified, compatibility),
# Hangul jamo extensions, Myanmar extensions, Hangul syllables, half-width katakana,
# kana supplements, CJK extensions B and up.
_UNSPACED_BLOCKS: Final = (
    (0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1100, 0x11FF), (0x1780, 0x17FF), (0x19E0, 0x19FF),
    (0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3021, 0x302F), (0x3031, 0x3035), (0x3038, 0x303C),
    (0x3040, 0x30FF), (0x3100, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA960, 0xA97F),
    (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F), (0xAC00, 0xD7FF), (0xF900, 0xFAFF), (0xFF66, 0xFF9F),
    (0x1AFF0, 0x1B16F), (0x20000, 0x323AF),
)
# A block this large in the list above holds only ideographs or Hangul syllables (and
# unassigned code points, which never occur in text): taken whole, not looked up.
_WHOLE_BLOCK: Final = 4096

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


def words_scheme(fold_accents: bool = False) -> str:
    """A short text naming the tokenization of :func:`words` with these settings
    (what the keyword and entity indexes record in their sidecars)."""
    return f"words{TOKENIZATION_VERSION}:nfkc:casefold:marks:unspaced-pairs:fold={_fold_name(fold_accents)}"


def words(text: str, unigrams: bool = False, fold_accents: bool = False) -> list[str]:
    """The words of *text*, normalised, in order, repeats kept (see the module doc):
    what the classic keyword matching compares. A run of a script written without
    spaces gives its overlapping character pairs; ``unigrams=True`` (the indexed
    form) gives its single characters too, interleaved with the pairs."""
    if text.isascii():
        return _ascii_lowered(text, _ASCII_BREAKS).split()
    text = _normalise(text, fold_accents)
    if text.isascii():  # (accents folded away)
        return _ascii_lowered(text, _ASCII_BREAKS).split()
    patterns = _script_patterns(text)
    if patterns is None:
        return _WORD.findall(text)
    return _split_scripts(patterns, patterns.word, text, unigrams)


def _raw_tokens(text: str, unigrams: bool = True, fold_accents: bool = False) -> list[str]:
    """The full-text tokens of *text* before stop words and stemming."""
    if not text.isascii():
        text = _normalise(text, fold_accents)
        if not text.isascii():
            patterns = _script_patterns(text)
            if patterns is None:
                return _TOKEN.findall(text)
            return _split_scripts(patterns, patterns.token, text, unigrams)
    return _ascii_split(text, False)[0]


def _ascii_lowered(text: str, table: bytes) -> str:
    """ASCII ``text`` through one of the tables above."""
    return text.encode("ascii").translate(table).decode("ascii")


def _ascii_split(text: str, with_words: bool) -> tuple[list[str], list[str]]:
    """The full-text tokens of an ASCII text (lower-cased) and, ``with_words``, its
    words as :func:`words` gives them with ``unigrams=True`` (else an empty list; when
    the text holds no apostrophe, both are the same list: change neither)."""
    if "'" not in text:  # a token is a plain word run, and so is a word
        runs = _ascii_lowered(text, _ASCII_BREAKS).split()
        return runs, runs
    # A token never spans a character that is neither a word character nor an
    # apostrophe: only the runs holding an apostrophe need the regular expression.
    tokens: list[str] = []
    found: list[str] = []
    for run in _ascii_lowered(text, _ASCII_TOKEN_BREAKS).split():
        if "'" in run:
            tokens += _ASCII_TOKEN.findall(run)
            if with_words:
                found += [part for part in run.split("'") if part]  # (an apostrophe breaks a word)
        else:
            tokens.append(run)
            if with_words:
                found.append(run)
    return tokens, found


def _normalise(text: str, fold_accents: bool = False) -> str:
    # NFKC folds compatibility forms (full-width letters, ligatures) before casefold;
    # ASCII text needs neither step, and it is most text, so it skips the cost.
    if text.isascii():
        return text.lower()
    text = unicodedata.normalize("NFKC", text)
    if _REWRITTEN.search(text) is not None:
        text = _REWRITTEN.sub(_rewritten, text)
    text = text.casefold()
    return _fold(text) if fold_accents else text


def _rewritten(match: re.Match[str]) -> str:
    char = match.group()
    typography = _TYPOGRAPHY.get(char)
    if typography is not None:
        return typography
    # Emoji and other symbols beyond the BMP break words as a space does; as spaces they
    # leave most text to the expressions of BMP characters (see _script_patterns).
    return char if char.isalnum() or unicodedata.category(char)[0] == "M" else " "


def _script_patterns(text: str) -> _Patterns | None:
    """The expressions that read *text* (normalised, not ASCII) script by script, or
    None when the plain ones will do (it holds no character of a script without
    spaces and no mark). Text within the BMP gets expressions of BMP characters only,
    which the regular-expression engine checks with one table look-up per character
    (a class reaching beyond the BMP is checked range by range)."""
    patterns = _patterns(_ASTRAL.search(text) is not None)
    return patterns if patterns.special.search(text) is not None else None


def _fold(text: str) -> str:
    """*text* (normalised) with its accents folded."""
    if text.isascii():
        return text
    accented, table = _accents()
    return accented.sub(lambda match: table[match.group()], text) if accented.search(text) else text


def _fold_name(fold_accents: bool) -> str:
    return "accents" if fold_accents else "none"


def _split_scripts(patterns: _Patterns, pattern: re.Pattern[str], text: str, unigrams: bool) -> list[str]:
    """The runs ``pattern`` finds in ``text``: a word (or token) as it is, a run of a
    script without spaces as its character pairs."""
    found: list[str] = []
    for unspaced, word in pattern.findall(text):
        if word:
            found.append(word)
        else:
            _add_pairs(patterns, unspaced, unigrams, found)
    return found


def _add_pairs(patterns: _Patterns, run: str, unigrams: bool, out: list[str]) -> None:
    """Append the tokens of *run*, a run of a script written without spaces: its
    overlapping pairs of characters, with each character before its pair when
    *unigrams*; a run of one character is that character."""
    chars: str | list[str] = run
    if patterns.unspaced_mark.search(run) is not None:
        chars = patterns.cluster.findall(run)  # a base and its marks are one character
    if len(chars) <= 1:
        out += chars  # one character (or none: marks with no base)
        return
    append = out.append
    if isinstance(chars, str):  # a character per code point: a pair is a slice
        if not unigrams:
            out += [chars[i : i + 2] for i in range(len(chars) - 1)]
            return
        for i in range(len(chars) - 1):
            append(chars[i])
            append(chars[i : i + 2])
    else:
        for i in range(len(chars) - 1):
            if unigrams:
                append(chars[i])
            append(chars[i] + chars[i + 1])
    if unigrams:
        append(chars[-1])


class _Patterns(NamedTuple):
    special: re.Pattern[str]        # a character of a script without spaces, or a mark
    word: re.Pattern[str]           # (unspaced run, "") or ("", word)
    token: re.Pattern[str]          # (unspaced run, "") or ("", token with inner apostrophes)
    unspaced_mark: re.Pattern[str]  # a mark of a script without spaces
    cluster: re.Pattern[str]        # a base character of such a script and its marks


@functools.cache
def _patterns(wide: bool) -> _Patterns:
    """The regular expressions of the scripts without spaces and of marks, built on
    first use from this Python's Unicode database (about 30 ms, once per process;
    ASCII text never needs them); of characters in the BMP only unless *wide*."""
    whole: list[tuple[int, int]] = []
    unspaced: list[int] = []
    unspaced_marks: list[int] = []
    for start, stop in _UNSPACED_BLOCKS:
        if stop - start >= _WHOLE_BLOCK:  # ideographs or syllables only: taken whole
            whole.append((start, stop))
            continue
        for code in range(start, stop + 1):
            char = chr(code)
            is_mark = unicodedata.category(char)[0] == "M"
            if is_mark or char.isalnum():
                unspaced.append(code)
                if is_mark:
                    unspaced_marks.append(code)
    taken = set(unspaced)
    marks = [code for code in itertools.chain(range(0x300, 0x3400), range(0xA000, 0xAC00),
                                              range(0xD800, 0x20000), range(0xE0100, 0xE01F0))
             if unicodedata.category(chr(code))[0] == "M" and code not in taken]
    if not wide:
        whole = [(start, stop) for start, stop in whole if stop <= 0xFFFF]
        unspaced, unspaced_marks, marks = ([code for code in codes if code <= 0xFFFF]
                                           for codes in (unspaced, unspaced_marks, marks))
    big = _char_class(unspaced) + "".join(f"\\U{start:08x}-\\U{stop:08x}" for start, stop in whole)
    mark, big_mark = _char_class(marks), _char_class(unspaced_marks)
    # A word: a word character of no script without spaces, then such characters or marks.
    word = rf"[^\W{big}](?:[^\W{big}]|[{mark}])*"
    return _Patterns(
        special=re.compile(f"[{big}{mark}]"),
        word=re.compile(rf"([{big}]+)|({word})"),
        token=re.compile(rf"([{big}]+)(?:'s\b)?|({word}(?:'(?!s\b){word})*)(?:'s\b)?"),
        unspaced_mark=re.compile(f"[{big_mark}]"),
        cluster=re.compile(f"[^{big_mark}][{big_mark}]*"),
    )


def _char_class(codes: Iterable[int]) -> str:
    """The inside of a regular-expression class holding exactly *codes* (ascending)."""
    parts: list[str] = []
    start = previous = -2
    for code in [*codes, -2]:
        if code == previous + 1:
            previous = code
            continue
        if start >= 0:
            parts.append(f"\\U{start:08x}" if start == previous else f"\\U{start:08x}-\\U{previous:08x}")
        start = previous = code
    return "".join(parts)


@functools.cache
def _accents() -> tuple[re.Pattern[str], dict[str, str]]:
    """Accent folding (see the module doc): the characters it changes, and what each
    becomes."""
    table = dict.fromkeys(map(chr, range(0x300, 0x370)), "")
    for start, stop in ((0xC0, 0x250), (0x370, 0x400), (0x1E00, 0x2000)):  # Latin, Greek
        for code in range(start, stop):
            char = chr(code)
            base = "".join(c for c in unicodedata.normalize("NFD", char) if not unicodedata.combining(c))
            base = unicodedata.normalize("NFC", base)
            if base and base != char:
                table[char] = base
    table.update({"ø": "o", "đ": "d", "ł": "l", "ħ": "h", "ŧ": "t", "\u0131": "i"})
    return re.compile(f"[{_char_class(sorted(map(ord, table)))}]"), table


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
    """The full-text tokenizer: words (see the module doc), English stop words
    removed (``stop_words=True``, or any iterable of words), accents folded
    (``fold_accents=True``), optionally stemmed with a Snowball stemmer
    (``stem=True`` for English, or a language Snowball knows, ``"french"``;
    needs the optional ``snowballstemmer`` package). A stemmed word is folded
    after stemming (the stemmers read accents); stop words are compared folded.

    Equal settings give equal tokens in every process: the tokenizer has no state
    beyond a cache of stems, which only saves time."""

    _STEM_CACHE_LIMIT: Final = 200_000

    def __init__(self, stop_words: bool | Iterable[str] = True, stem: bool | str = False,
                 fold_accents: bool = False, *,
                 stem_guard: AbstractContextManager[Any] | None = None) -> None:
        self.fold_accents = bool(fold_accents)
        if stop_words is True:
            self.stop_words: frozenset[str] = ENGLISH_STOP_WORDS
        elif stop_words is False:
            self.stop_words = frozenset()
        else:
            self.stop_words = frozenset(_normalise(w, self.fold_accents) for w in stop_words)
        self.stem: str | None = None
        """The Snowball language words are stemmed in; None: no stemming."""
        if stem is True:
            self.stem = "english"
        elif isinstance(stem, str) and stem:
            self.stem = stem
        self._stem_word: Callable[[str], str] | None = None
        # word -> its term (stemmed, folded), or None for a stop word: shared by every
        # tokenizer of these settings in the process (see _shared_terms)
        self._terms_of: dict[str, str | None] = {}
        # A Snowball stemmer keeps the word it stems in itself: an owner whose threads
        # share this tokenizer (searches side by side) gives a lock for it.
        self._stem_guard: AbstractContextManager[Any] = (stem_guard if stem_guard is not None
                                                         else contextlib.nullcontext())
        if self.stem is not None:
            self._stem_word = _snowball(self.stem)
            self._terms_of = _shared_terms(self.stem, self.fold_accents, self.stop_words)
        # Folding the text before splitting it gives the same words as folding each
        # word; a stemmer must see the accents, so then each stem is folded instead.
        self._fold_text = self.fold_accents and self._stem_word is None

    def __repr__(self) -> str:
        default = self.stop_words is ENGLISH_STOP_WORDS
        stops = "True" if default else f"<{len(self.stop_words)} words>"
        return f"Tokenizer(stop_words={stops}, stem={self.stem!r}, fold_accents={self.fold_accents})"

    @property
    def signature(self) -> str:
        """A short text naming the settings; two tokenizers with equal signatures
        give equal tokens (used to refuse indexes built with other settings)."""
        stops = "en" if self.stop_words is ENGLISH_STOP_WORDS else f"custom{len(self.stop_words)}"
        if not self.stop_words:
            stops = "none"
        stem = f"snowball-{self.stem}" if self.stem else "none"
        return f"tok{TOKENIZATION_VERSION}:stops={stops}:fold={_fold_name(self.fold_accents)}:stem={stem}"

    def worded(self, query: str) -> bool:
        """Whether *query* is worded as a sentence (it holds a stop word: "Which bike
        is his?") rather than a list of keywords ("bike", "Python ADK")."""
        stops = self.stop_words
        return any(word in stops or _fold(word) in stops
                   for word in _raw_tokens(query, True, self._fold_text))

    def tokens(self, text: str) -> list[str]:
        """Index terms of *text*, in order, repeats kept (a script without spaces
        gives its characters and their pairs, see the module doc)."""
        return self._terms(_raw_tokens(text, True, self._fold_text))

    def positioned(self, text: str) -> tuple[list[str], list[int]]:
        """Index terms of *text* and the position of each in the word stream
        (stop words occupy positions too, so positions may skip)."""
        return self._positioned(_raw_tokens(text, True, self._fold_text))

    def analysed(self, text: str, fold_words: bool) -> tuple[list[str], list[int], list[str]]:
        """What :meth:`positioned` gives for *text*, and its words as :func:`words`
        gives them with ``unigrams=True`` and ``fold_accents=fold_words`` (what the
        keyword index reads): an ASCII text is lower-cased and split once for both.
        (The words may be the very list the terms were read from: change neither.)"""
        if not text.isascii():
            return (*self.positioned(text), words(text, True, fold_words))
        raw, found = _ascii_split(text, True)  # (folding changes no ASCII text)
        return (*self._positioned(raw), found)

    def _positioned(self, raw: list[str]) -> tuple[list[str], list[int]]:
        if self._stem_word is None:
            stops = self.stop_words
            positions = [i for i, w in enumerate(raw) if w not in stops]
            return [raw[i] for i in positions], positions
        known = self._terms_of.get
        terms = [known(w, _UNSEEN) for w in raw]
        if _UNSEEN in terms:  # a word not seen yet: find its term (and keep it)
            terms = [self._term(w) if term == _UNSEEN else term for w, term in zip(raw, terms, strict=True)]
        positions = [i for i, term in enumerate(terms) if term is not None]
        return [terms[i] for i in positions], positions  # type: ignore[misc]

    def query_tokens(self, text: str) -> list[str]:
        """Query terms of *text* (quotes not read): as :meth:`tokens`, but a run of
        a script without spaces gives only its character pairs."""
        return self._terms(_raw_tokens(text, False, self._fold_text))

    def parse_query(self, text: str) -> ParsedQuery:
        """Split a query into free terms and double-quoted phrases. An unmatched
        quote is read as if it were not there."""
        terms: list[str] = []
        phrases: list[Phrase] = []
        cursor = 0
        for match in _QUOTED.finditer(text):
            terms.extend(self.query_tokens(text[cursor : match.start()]))
            cursor = match.end()
            inner = match.group(1)
            tokens, positions = self.positioned(inner)
            if not tokens:
                continue
            first = positions[0]
            phrases.append(Phrase(inner.strip(), tuple(tokens), tuple(p - first for p in positions)))
        terms.extend(self.query_tokens(text[cursor:].replace('"', " ")))
        return ParsedQuery(tuple(terms), tuple(phrases))

    def _terms(self, raw: list[str]) -> list[str]:
        if self._stem_word is None:
            stops = self.stop_words
            return [w for w in raw if w not in stops]
        known = self._terms_of.get
        terms = [known(w, _UNSEEN) for w in raw]
        if _UNSEEN in terms:
            terms = [self._term(w) if term == _UNSEEN else term for w, term in zip(raw, terms, strict=True)]
        return [term for term in terms if term is not None]

    def _term(self, word: str) -> str | None:
        """The term of one word: None for a stop word, else its stem (folded when
        accents are)."""
        terms = self._terms_of
        # one look-up: the table is the process's, and another thread may clear it
        known = terms.get(word, _UNSEEN)
        if known != _UNSEEN:
            return known
        assert self._stem_word is not None
        stop = _fold(word) in self.stop_words if self.fold_accents else word in self.stop_words
        if stop:
            term = None
        else:
            with self._stem_guard:
                stemmed = self._stem_word(word)
            term = _fold(stemmed) if self.fold_accents else stemmed
        if len(terms) >= self._STEM_CACHE_LIMIT:
            terms.clear()
        terms[word] = term
        return term


_UNSEEN: Final = "\x00"
"""Stands for a word's term not known yet (no token holds a NUL character)."""
_TERMS: dict[tuple[str, bool, frozenset[str]], dict[str, str | None]] = {}


def _shared_terms(language: str, fold_accents: bool, stop_words: frozenset[str]) -> dict[str, str | None]:
    """The word -> term table of every stemming tokenizer of these settings: a
    scope's words are mostly another scope's too, and a Snowball stem costs tens of
    microseconds, so a new scope starts with the stems already known. (At most a
    few settings occur in a process: the table of each is kept.)"""
    key = (language, fold_accents, stop_words)
    table = _TERMS.get(key)
    if table is None:
        table = _TERMS[key] = {}
    return table


def _snowball(language: str) -> Callable[[str], str]:
    try:
        snowballstemmer = importlib.import_module("snowballstemmer")
    except ImportError as exc:
        raise InvalidInput(
            "stemming needs the optional package 'snowballstemmer' "
            "(pip install snowballstemmer); or build Tokenizer(stem=False)",
            field="stem",
        ) from exc
    known: list[str] = list(snowballstemmer.algorithms())
    if language not in known:
        raise InvalidInput(f"stem is {language!r}; Snowball stems {', '.join(known)} (or True: english)",
                           field="stem")
    stemmer = snowballstemmer.stemmer(language)
    stem_word: Callable[[str], str] = stemmer.stemWord
    return stem_word

