"""``mentions`` keeps what it learns of each token and each gap between tokens
(issue 17, ingest speed). It must answer exactly as the plain reading does: the
reference below is that reading, one regular expression per token and no memo,
as it stood before (DETECTION_VERSION 1). Every answer is compared on LoCoMo-like
turns, on texts built from the characters that steer the reading (capitals,
joiners, sentence ends, apostrophes, dashes, possessives), and on any text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.knowledge import entities
from mnemex.knowledge.entities import (
    _JOINERS,
    _LONG_JOINERS,
    _SENTENCE_END,
    _SPEAKER,
    Mention,
    _clean,
    _common,
    _is_capitalised,
    _known_words,
    _name_like,
    is_acronym,
    mentions,
    name_key,
)

_TOKEN = re.compile(r"[^\W_][\w'\u2019\-+&.]*", re.UNICODE)


def reference_mentions(text: str, author: str | None = None, *, max_words: int = 6) -> list[Mention]:
    found: dict[str, Mention] = {}

    def note(surface: str, kind: str) -> None:
        surface = surface.strip()
        if surface and name_key.__wrapped__(surface) and surface not in found:
            found[surface] = Mention(surface, kind)

    if author and _is_capitalised(author.strip()) and not _common(author.strip()):
        note(author, "speaker")
    speaker = _SPEAKER.match(text)
    start = 0
    if speaker:
        note(speaker.group(1), "speaker")
        start = speaker.end()
    run: list[str] = []
    run_at_start = False
    sentence_start = True

    def close() -> None:
        nonlocal run
        while run and (run[-1].lower() in _JOINERS or run[-1].lower() in _LONG_JOINERS):
            run.pop()
        if run:
            if len(run) == 1:
                word = run[0]
                if is_acronym(word):
                    note(word, "acronym")
                elif not _common(word) and not run_at_start:
                    note(word, "name")
                elif not _common(word) and _name_like(word):
                    note(word, "weak" if word.lower() in _known_words() else "name")
            else:
                while run and _common(run[0]) and run_at_start:
                    run = run[1:]
                if len(run) == 1:
                    if not _common(run[0]):
                        note(run[0], "acronym" if is_acronym(run[0]) else "name")
                elif run:
                    note(" ".join(run[:max_words]), "name")
        run = []

    previous_end = start
    for match in _TOKEN.finditer(text, start):
        gap = text[previous_end:match.start()]
        previous_end = match.end()
        raw = match.group(0)
        ends_sentence = raw.endswith((".", "!", "?")) and not is_acronym(raw.rstrip("."))
        token = _clean(raw)
        if _SENTENCE_END.search(gap) or (gap.strip(" \t") not in ("", "-") and run):
            close()
        if gap and re.search(r"[.!?…]\s*$|\n", gap):
            sentence_start = True
        if run and token and _common(token) and token.lower() not in _JOINERS and \
                not (len(run) >= 2 and token.lower() in _LONG_JOINERS):
            close()
            run_at_start = False
        if token and (_is_capitalised(token) or (run and token.lower() in _JOINERS)
                      or (len(run) >= 2 and token.lower() in _LONG_JOINERS)):
            if not run:
                run_at_start = sentence_start
            run.append(token)
        else:
            close()
        sentence_start = ends_sentence
        if ends_sentence:
            close()
    close()
    return list(found.values())


TURNS = [
    "Caroline: I went to the LGBTQ+ support group yesterday and it was so powerful.",
    "Melanie: Wow, Caroline! That's great. Did you meet anyone from the Black Tower?",
    "Lord of the Rings is my favourite; Gandros's sword, though... NASA and the E.U. agree.",
    "Appreciate it! Working at National Aeronautics and Space Administration is hard.",
    "Yeah. OK They're here - John Smith and Jane Smith met at the Louvre in Paris.",
    "I'm reading “The Hobbit” (again) with Luna and Oliver; Mr. Brown said hi.\nNew line: Bob",
    "von Trapp, da Vinci, Leonardo da Vinci, the Wizard, WIZARD's hat, the wizard's.",
    "  Dr  Who:  hello there -- Doctor Who? ok. C3PO & R2-D2 for Star Wars fans!",
    "",
    "no capitals at all in this one, none.",
    "A B C D E F G H I J K L M N O P — Alpha Beta Gamma Delta Epsilon Zeta Eta Theta.",
]


def test_the_same_names_as_the_plain_reading_on_turns() -> None:
    for text in TURNS:
        for author in (None, "Caroline", "yeah", " Melanie ", "bob"):
            assert mentions(text, author) == reference_mentions(text, author), (text, author)
        assert mentions(text, max_words=2) == reference_mentions(text, max_words=2), text


_STEERING = st.sampled_from([
    "Anna", "Black", "Tower", "of", "the", "and", "for", "de", "NASA", "E.U.", "I'm", "OK", "Yeah",
    "Gandros's", "Paris'", "X", "ab", "Working", "Loved", "C3PO", "R2-D2", "LGBTQ+", "&", "Mr.", "hi",
    " ", "  ", ". ", "! ", "? ", "… ", ": ", "; ", "\n", " - ", "-", "--", "(", ")", '"', "“", "”",
    "'", "\u2019", "_", "\t", ",", "Ärzte", "東京", "über",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(_STEERING, max_size=30), st.sampled_from([None, "Anna", "yeah", "the Wizard"]))
def test_the_same_names_as_the_plain_reading_on_steering_pieces(pieces: list[str],
                                                                 author: str | None) -> None:
    text = "".join(pieces)
    assert mentions(text, author) == reference_mentions(text, author)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_the_same_names_as_the_plain_reading_on_any_text(text: str) -> None:
    assert mentions(text) == reference_mentions(text)


def test_what_is_kept_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entities, "_CACHE_LIMIT", 8)
    monkeypatch.setattr(entities, "_TOKENS", {})
    monkeypatch.setattr(entities, "_GAPS", {})
    text = " ".join(f"Name{i} word{i}.{' ' * (i % 12)}" for i in range(40))
    assert mentions(text) == reference_mentions(text)
    assert 0 < len(entities._TOKENS) <= 8 and 0 < len(entities._GAPS) <= 8


# In ASCII text mentions() passes over the tokens that are not capitalised in one match
# up to the next capitalised one: pieces that cut tokens where that could go wrong (a
# capital inside a token, "iPhone"; tokens joined by . - ' & + _; digits; sentence ends
# on small words; joiners after a run).
_ASCII_STEERING = st.sampled_from([
    "Anna", "Black", "Tower", "of", "the", "and", "for", "de", "NASA", "E.U.", "e.U.", "I'm", "OK", "Yeah",
    "iPhone", "eBay", "x-Men", "3M", "4th", "a_B", "_Ann", "mr.", "end.", "ok!", "why?", "Mr.", "it's",
    "Gandros's", "Paris'", "X", "ab", "Working", "C3PO", "R2-D2", "LGBTQ+", "&", "+", "q&A", "hi",
    " ", "  ", ". ", "! ", "? ", ": ", "; ", "\n", " - ", "-", "--", "(", ")", '"', "'", "_", "\t", ",",
    "...",
])


@settings(max_examples=600, deadline=None)
@given(st.lists(_ASCII_STEERING, max_size=40), st.sampled_from([None, "Anna", "the Wizard"]))
def test_the_same_names_as_the_plain_reading_on_ascii_pieces(pieces: list[str], author: str | None) -> None:
    text = "".join(pieces)
    assert mentions(text, author) == reference_mentions(text, author)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(max_codepoint=127), max_size=120))
def test_the_same_names_as_the_plain_reading_on_any_ascii_text(text: str) -> None:
    assert mentions(text) == reference_mentions(text)
