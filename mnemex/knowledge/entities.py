"""Entity names in a text without a model: the offline half of the entity graph.

``mentions(text, author)`` finds the names a memory mentions with a few patterns
that need no LLM, a short list of common words and the English words of the
package's WordPiece vocabulary:

* a speaker label at the start (``"Caroline: ..."``) names a person;
* runs of capitalised words (``"Gandros"``, ``"Black Tower"``, ``"Lord of Ash"``:
  ``of``/``the``/``de``... may join two of them, ``and``/``for`` a longer name);
  a single word opening a sentence is no name when it is a common word
  (``"Yeah"``, ``"Thanks"``) or a verb form, and only a *weak* one when it is an
  English word (``"Appreciate"``: it counts where another memory writes it as a
  name);
* acronyms (``"NASA"``, ``"LGBTQ+"``): two to eight capitals, digits after them;
* possessives are the name (``"Gandros's"`` is ``"Gandros"``).

Names are compared by their *key* (:func:`name_key`): the normalised words of the
name (as the full-text tokenizer makes them) without a leading article or a
trailing possessive, so ``"the Wizard"``, ``"wizard"`` and ``"WIZARD's"`` are one
name. :func:`initials` gives the acronym a multi-word name would have, which lets
``"NASA"`` and ``"National Aeronautics and Space Administration"`` resolve to one
entity (``knowledge.graph``).

Pure functions: no clock, no I/O, the same answer for the same text.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from typing import Final, NamedTuple

from mnemex.index import ENGLISH_STOP_WORDS, normalize_phrase

__all__ = ["ARTICLES", "COMMON_CAPITALISED", "DETECTION_VERSION", "Mention", "initials", "is_acronym",
           "mentions", "name_key"]

DETECTION_VERSION: Final = 1
"""Changes whenever ``mentions`` or ``name_key`` would answer differently for some
text: a graph sidecar of another version is not used (the mentions are found again)."""

ARTICLES: Final = frozenset({"the", "a", "an"})
"""Words a name key never starts with."""

_JOINERS: Final = frozenset({"of", "the", "de", "du", "la", "le", "von", "van", "der", "da", "di"})
"""Small words inside a name (``Lord of the Rings``); ``and`` parts two names."""
_LONG_JOINERS: Final = frozenset({"and", "for"})
"""Joiners inside a name of two words or more only (``National Aeronautics and Space
Administration``), where ``Luna and Oliver`` are two."""
_INITIAL_SKIPS: Final = _JOINERS | _LONG_JOINERS | {"&"}

_COMMON_WORDS: Final = """
yeah yes yep yup no nope ok okay oh ah aw aww wow hey hi hello bye thanks thank congrats congratulations
sure great awesome cool nice good bad well so just also really totally absolutely definitely wait
sorry please lol haha hmm um uh omg gosh cheers welcome sounds glad love loved happy sad amazing
that this these those there here it its what when where who why how which whatever anyway btw
i i'm i've i'll i'd im ive me my mine we us our you your he him his she her they them their
and but or if then because since though although while after before until unless maybe perhaps
today tomorrow yesterday tonight morning evening night weekend week month year last next first
monday tuesday wednesday thursday friday saturday sunday january february march april may june july
august september october november december mr mrs ms dr sir madam mom mum dad mother father
sounds looks seems feels thinks wanted want like liked take took make made do did does done
let lets let's can could would should will shall must might have has had having be been being
is are was were am not never always sometimes often every all any some many much more most
one two three four five six seven eight nine ten new old big small little best better
right left true false exactly indeed actually honestly seriously speaking talking
"""
COMMON_CAPITALISED: Final = frozenset(_COMMON_WORDS.split())
"""Capitalised words that begin sentences without being names (with the stop words)."""

# a token, with the text before it (what cannot start one): (gap, token) pairs
_GAP_TOKEN = re.compile(r"([\W_]*)([^\W_][\w'\u2019\-+&.]*)", re.UNICODE)
# The expressions that read ASCII text are compiled ASCII: there ``\w`` and ``\W`` name
# the same characters as in Unicode, and a character's class is one table look-up
# instead of several in Unicode's database (most of the time of the matches).
_ASCII_GAP_TOKEN = re.compile(_GAP_TOKEN.pattern, re.ASCII)
# In ASCII text: the tokens that open no name (a small letter or a digit first), the
# last of them kept, then the gap before the next capitalised token and that token.
# Possessive throughout: the tokens are cut exactly as _GAP_TOKEN cuts them, never
# re-cut to find a capital inside one ("iPhone").
_TO_CAPITAL = re.compile(r"(?:[\W_]*+([a-z0-9][\w'\u2019\-+&.]*+))*+([\W_]*+)([A-Z][\w'\u2019\-+&.]*+)",
                         re.ASCII)
_SPEAKER = re.compile(r"^\s*([A-Z][\w'\u2019\-]*(?:\s+[A-Z][\w'\u2019\-]*){0,2})\s*:\s")
_SENTENCE_END = re.compile(r"[.!?…:;\"“”()\[\]]\s*$")
_ACRONYM = re.compile(r"^[A-Z][A-Z0-9&]{1,7}\+?$")
_POSSESSIVE = re.compile(r"['\u2019]s?$")


class Mention(NamedTuple):
    """One name in a text: as written (``surface``, possessive cut) and its ``kind``:
    ``speaker`` (a label ``"Name: "`` at the start, or the author), ``acronym``,
    ``name``, or ``weak``: one capitalised word opening a sentence, which may be
    any word (``"Appreciate it!"``): the graph counts it only for a name that some
    memory writes as one elsewhere (a word of no English vocabulary, ``Gandros``, is a
  ``name`` there too)."""

    surface: str
    kind: str


@functools.lru_cache(maxsize=65_536)
def name_key(name: str, *, fold_accents: bool = True) -> str:
    """The form names are compared in: normalised words, no leading article, no
    trailing possessive ``s``; empty when nothing is left. (Kept for the names seen
    last: every memory naming someone asks for the key of that name again.)"""
    parts = normalize_phrase(_POSSESSIVE.sub("", name.strip()), fold_accents=fold_accents).split(" ")
    while parts and parts[0] in ARTICLES:
        parts = parts[1:]
    if len(parts) > 1 and parts[-1] == "s":
        parts = parts[:-1]
    return " ".join(p for p in parts if p)


def is_acronym(surface: str) -> bool:
    return bool(_ACRONYM.match(surface)) and sum(c.isalpha() for c in surface) >= 2


def initials(key: str) -> str:
    """The acronym of a multi-word name key (the first letters of its words but the
    joiners): ``"national aeronautics and space administration"`` -> ``"nasa"``;
    empty for a name of one word."""
    parts = [p for p in key.split(" ") if p and p not in _INITIAL_SKIPS]
    return "".join(p[0] for p in parts) if len(parts) >= 2 else ""


def _clean(token: str) -> str:
    token = token.rstrip(".-&")
    return _POSSESSIVE.sub("", token) if len(token) > 2 else token


def _is_capitalised(token: str) -> bool:
    return token[:1].isupper()


@functools.cache
def _known_words() -> frozenset[str]:
    """Common English words: the whole words of BERT's uncased vocabulary (the
    package's data/vocab.txt), about 20,000 of them. A capitalised word opening a
    sentence that is none of them (``Gandros``) is taken for a name at once."""
    text = (importlib.resources.files("mnemex") / "data" / "vocab.txt").read_text(encoding="utf-8")
    return frozenset(line for line in text.splitlines() if line.isalpha() and line.islower())


def _name_like(word: str) -> bool:
    """Whether a capitalised word opening a sentence may be a name: not a verb or
    adverb form (``Working``, ``Loved``, ``Honestly``), not too short."""
    low = word.lower()
    return len(word) > 2 and not low.endswith(("ing", "ed", "ly", "'s", "n't"))


def _common(token: str) -> bool:
    low = token.lower().replace("\u2019", "'")
    return low in COMMON_CAPITALISED or low in ENGLISH_STOP_WORDS


_GAP_STARTS: Final = re.compile(r"[.!?…]\s*$|\n")
_CACHE_LIMIT: Final = 65_536


class _Token(NamedTuple):
    """What ``mentions`` needs of one token as matched (a pure function of it)."""

    token: str          # cleaned: trailing ``.-&`` and a possessive cut
    ends_sentence: bool
    capitalised: bool
    common: bool
    joiner: bool        # one of _JOINERS
    long_joiner: bool   # one of _LONG_JOINERS
    acronym: bool       # is_acronym(token)
    opener: int         # what it is alone, opening a sentence: 0 no name, 1 weak, 2 name


class _Gap(NamedTuple):
    """What ``mentions`` needs of the text between two tokens."""

    ends_run: bool        # ends a sentence (punctuation), so a run closes
    breaks_run: bool      # anything but blanks or a dash: a run open before it closes
    starts_sentence: bool


_TOKENS: dict[str, _Token] = {}
_GAPS: dict[str, _Gap] = {}
_SPACE_GAP: Final = _Gap(False, False, False)


def _token_info(raw: str) -> _Token:
    info = _TOKENS.get(raw)
    if info is None:
        token = _clean(raw)
        low = token.lower()
        common = _common(token)
        opener = 0 if common or not _name_like(token) else (1 if low in _known_words() else 2)
        info = _Token(token, raw.endswith((".", "!", "?")) and not is_acronym(raw.rstrip(".")),
                      _is_capitalised(token), common, low in _JOINERS, low in _LONG_JOINERS,
                      is_acronym(token), opener)
        if len(_TOKENS) >= _CACHE_LIMIT:
            _TOKENS.clear()
        _TOKENS[raw] = info
    return info


def _gap_info(gap: str) -> _Gap:
    info = _GAPS.get(gap)
    if info is None:
        info = _Gap(_SENTENCE_END.search(gap) is not None, gap.strip(" \t") not in ("", "-"),
                    bool(gap) and _GAP_STARTS.search(gap) is not None)
        if len(_GAPS) >= _CACHE_LIMIT:
            _GAPS.clear()
        _GAPS[gap] = info
    return info


def mentions(text: str, author: str | None = None, *, max_words: int = 6) -> list[Mention]:
    """The names ``text`` mentions, in order of first appearance, each once (by
    surface). ``author``, when it is a capitalised name, is a speaker too.

    What is learnt of a token or of the text between two tokens depends on it
    alone, so it is kept (``_token_info``, ``_gap_info``) and each later memory
    reads most of its words with one look-up; in ASCII text the words outside a
    name run that are not capitalised, most words, are passed over in one regular
    expression match up to the next capitalised word."""
    found: dict[str, Mention] = {}
    if author and _is_capitalised(author.strip()) and not _common(author.strip()):
        _note(found, author, "speaker")
    speaker = _SPEAKER.match(text)
    at = 0
    if speaker:
        _note(found, speaker.group(1), "speaker")
        at = speaker.end()
    run: list[_Token] = []  # the capitalised words (and joiners) read since the last name ended
    run_at_start = False    # whether the run opened a sentence
    sentence_start = True
    known = _TOKENS.get
    # Outside a run a token that is not capitalised changes nothing but whether a
    # sentence ends with it, so in ASCII text those are skipped in one match up to the
    # next capitalised token (other text is read token by token); the tokens of a run
    # are read one by one.
    plain = text.isascii()
    hop_pattern = _TO_CAPITAL if plain else _NEXT_TOKEN
    gap_pattern = _ASCII_GAP_TOKEN if plain else _GAP_TOKEN
    while hop := hop_pattern.match(text, at):
        skipped, gap, raw = hop.groups()
        if skipped is not None:  # (a token opening small is no acronym)
            sentence_start = skipped[-1] in ".!?"
        at = hop.end()
        while True:  # one token: what it does to the run
            info = known(raw) or _token_info(raw)
            if gap != " ":  # (one space, the usual gap, changes nothing)
                between = _gap_info(gap) if gap else _SPACE_GAP
                if run and (between.ends_run or between.breaks_run):
                    _close(run, run_at_start, found, max_words)
                if between.starts_sentence:
                    sentence_start = True
            if run and info.common and not info.joiner and not (len(run) >= 2 and info.long_joiner):
                # "Knowing I'm", "OK They're": a common word ends a name
                _close(run, run_at_start, found, max_words)
                run_at_start = False
            if info.capitalised or (run and info.joiner) or (len(run) >= 2 and info.long_joiner):
                if not run:
                    run_at_start = sentence_start
                run.append(info)
            elif run:
                if len(run) > 1 or not run[0].common or run[0].acronym:  # (else: no name, as _close finds)
                    _close(run, run_at_start, found, max_words)
                else:
                    run.clear()
            sentence_start = info.ends_sentence
            if sentence_start and run:
                _close(run, run_at_start, found, max_words)
            if not run:
                break
            step = gap_pattern.match(text, at)
            if step is None:
                break
            gap, raw = step.groups()
            at = step.end()
    if run:
        _close(run, run_at_start, found, max_words)
    return list(found.values())


# a token with the text before it, as _GAP_TOKEN reads them, behind a group that never
# matches: the same groups as _TO_CAPITAL, which skips nothing
_NEXT_TOKEN = re.compile(r"(\b\B)?" + _GAP_TOKEN.pattern, re.UNICODE)


def _close(run: list[_Token], at_start: bool, found: dict[str, Mention], max_words: int) -> None:
    """Note the name a run of tokens makes, if any (joiners at its end dropped; a
    common word opening a sentence is no part of a name), and empty the run."""
    while run and (run[-1].joiner or run[-1].long_joiner):
        run.pop()
    if len(run) == 1:
        first = run[0]
        if first.acronym:
            _note(found, first.token, "acronym")
        elif not first.common and not at_start:
            _note(found, first.token, "name")
        elif first.opener:
            # a known word opening a sentence is a name only if written so elsewhere too
            _note(found, first.token, "weak" if first.opener == 1 else "name")
    elif run:
        begin = 0
        if at_start:
            while begin < len(run) and run[begin].common:
                begin += 1
        rest = run[begin:]
        if len(rest) == 1:
            if not rest[0].common:
                _note(found, rest[0].token, "acronym" if rest[0].acronym else "name")
        elif rest:
            _note(found, " ".join(t.token for t in rest[:max_words]), "name")
    run.clear()


def _note(found: dict[str, Mention], surface: str, kind: str) -> None:
    surface = surface.strip()
    if surface and surface not in found and _keyed(surface):
        found[surface] = Mention(surface, kind)


@functools.lru_cache(maxsize=_CACHE_LIMIT)
def _keyed(surface: str) -> bool:
    """Whether ``surface`` has a name key (words left once articles are cut)."""
    return bool(name_key(surface))
