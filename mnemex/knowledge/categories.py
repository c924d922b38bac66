"""Categories: the catalog a scope classifies its memories into, and the offline
classifier that needs no LLM.

A catalog is a list of :class:`Category` (a name, a description, optional cue
words). Every scope starts with :data:`DEFAULT_CATEGORIES` (what a personal
assistant and a game master both need); an app extends it (new categories,
better descriptions, its own cue words) through the scope's journaled
``SetCategories``. ``misc`` is not in the catalog: it is what a memory nothing
classified with enough confidence gets.

:class:`Classifier` scores a text against each category from cue words, read
the way full-text search reads text (the scope's tokenizer: folded, stemmed):
a category's own cue words weigh :data:`CUE_WEIGHT`, the words of its name and
description :data:`DESCRIPTION_WEIGHT`, and a text's confidence in a category is
``1 - exp(-sum of the weights of the distinct cues it holds)`` (one cue word 0.63,
two 0.86; a description word alone 0.30). The categories at or above the
threshold (``knowledge.category_threshold``, chosen on the labelled set in
``tests/knowledge/category_examples.py``: see bench/knowledge.py) are kept, best
first, at most :data:`MAX_CATEGORIES`. Pure, deterministic and fast (a few
microseconds per memory): the scope runs it inside its handler, so a memory is
stored with its categories in the same command; :data:`CLASSIFIER` names its
version, recorded on every memory it classified.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from mnemex._checks import check_text
from mnemex.errors import InvalidInput, TooLarge
from mnemex.index import Tokenizer

__all__ = [
    "CLASSIFIER",
    "CUE_WEIGHT",
    "DEFAULT_CATEGORIES",
    "DEFAULT_THRESHOLD",
    "DESCRIPTION_WEIGHT",
    "MAX_CATEGORIES",
    "MAX_CATALOG",
    "MISC",
    "RELATIVE",
    "Category",
    "Classifier",
    "check_catalog",
    "check_category_name",
    "merged_catalog",
    "shared_classifier",
]

CLASSIFIER: Final = "rules-classifier:c1"
"""The offline classifier's name and version (``MemoryRecord.classified_by``)."""
MISC: Final = "misc"
"""The category of a memory no category fits with enough confidence."""
CUE_WEIGHT: Final = 1.0
DESCRIPTION_WEIGHT: Final = 0.35
DEFAULT_THRESHOLD: Final = 0.5
"""``knowledge.category_threshold``'s default (see the module doc)."""
RELATIVE: Final = 0.75
"""A category besides the best one is kept only when its cues weigh at least this
share of the best one's (one cue beside two is noise more often than not)."""
MAX_CATEGORIES: Final = 3
"""Categories the offline classifier gives one memory at most."""
MAX_CATALOG: Final = 256
"""Categories a catalog holds at most."""
_MAX_DESCRIPTION: Final = 2000
_MAX_CUES: Final = 200
_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


class Category(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """One category of a catalog: ``name`` (lower-case letters, digits, ``_``, ``-``;
    at most 64), what belongs in it (``description``, shown to the LLM extractor and
    read by the offline classifier) and ``keywords``: words (or short phrases, each
    word counted) whose presence says a memory belongs in it."""

    name: str
    description: str = ""
    keywords: tuple[str, ...] = ()


def _c(name: str, description: str, keywords: str) -> Category:
    return Category(name, description, tuple(keywords.split()))


DEFAULT_CATEGORIES: Final[tuple[Category, ...]] = (
    _c("personal_details", "Who the person is: name, age, birthday, where they live or come from, "
       "languages, looks",
       "name named age aged birthday born live lives living moved home address hometown country "
       "nationality citizen speak speaks language languages tall height"),
    _c("preferences", "What someone likes, loves, prefers or dislikes; tastes and favourites",
       "like likes liked love loves loved prefer prefers preferred favourite favorite enjoy enjoys fan "
       "hate hates dislike dislikes taste tastes rather adore"),
    _c("plans", "Intentions, goals and arrangements for the future",
       "plan plans planning going intend intends will tomorrow upcoming schedule scheduled "
       "appointment goal goals hope hopes want wants wish trip booked booking someday later soon"),
    _c("relationships", "Family, friends, partners, pets and how people are related",
       "wife husband partner girlfriend boyfriend married marry engaged divorced sister brother "
       "mother mom mum father dad parent parents daughter son child children kids family cousin "
       "aunt uncle grandmother grandfather friend friends best pet dog cat neighbour neighbor"),
    _c("work", "Job, employer, profession, career, colleagues and work projects",
       "job work works working worked employer company office boss colleague colleagues coworker "
       "career profession salary hired fired promotion promoted manager engineer developer nurse "
       "teacher doctor lawyer startup client clients meeting deadline"),
    _c("education", "Schools, studies, degrees, courses and what someone learns",
       "school university college degree study studies studying student course class classes "
       "graduated graduate exam exams thesis phd master bachelor learn learning teacher"),
    _c("health", "Health, illness, allergies, diet, fitness, medication and medical care",
       "health healthy sick ill illness allergy allergic medication medicine pills doctor hospital "
       "surgery pain injury injured diagnosed diabetes asthma diet vegan vegetarian gluten "
       "exercise gym run running sleep therapy therapist pregnant"),
    _c("events", "Things that happened at a time: meetings, trips, celebrations, incidents",
       "happened yesterday ago visited went attended wedding celebrated ceremony funeral "
       "concert festival accident met arrived battle fought"),
    _c("lore", "The world's history, myths, legends, gods, factions and magic",
       "legend legends myth myths ancient history kingdom empire realm god gods goddess deity "
       "prophecy artifact artefact relic magic curse cursed dragon dragons order guild cult "
       "faction war age era"),
    _c("rules", "Game rules, house rules and mechanics: dice, checks, turns, what is allowed",
       "rule rules house roll rolls dice die d20 d6 check checks saving throw advantage "
       "disadvantage initiative turn turns round action bonus modifier spell slot slots "
       "allowed forbidden must mechanic mechanics damage hit points hp"),
    _c("quests", "Quests, missions and tasks: objectives, rewards, who gave them",
       "quest quests mission missions task tasks objective objectives reward rewards bounty "
       "retrieve rescue escort deliver hunt hunting investigate assignment contract"),
    _c("npc_relationship", "How a non-player character stands with the party: ally, rival, "
       "enemy, trust, grudges",
       "npc npcs ally allies allied enemy enemies rival rivals trust trusts distrust hostile "
       "friendly loyal loyalty betrayed betrayal grudge suspicious reputation attitude respect"),
    _c("location", "Places: towns, buildings, regions, landmarks, where things are",
       "place town city village tower castle keep fortress tavern inn temple shrine dungeon cave "
       "forest mountain mountains river lake sea harbor harbour port road bridge north south "
       "east west map region island ruins"),
    _c("favor_owed", "Favours, debts and promises: who owes whom what",
       "owe owes owed owing favour favor favours favors debt debts indebted repay repaid promise "
       "promised obligation obliged pledge oath"),
    _c("items", "Possessions, inventory, gear, treasure and money",
       "item items inventory carry carries carrying own owns owned bought sold gear sword shield "
       "armor armour potion potions ring amulet gold coins treasure money key map scroll"),
)
"""The catalog every scope starts with."""


def check_category_name(value: Any, what: str = "category") -> str:
    """A category name: lower-case letters, digits, ``_`` or ``-``, at most 64."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidInput(f"{what} must be a name of lower-case letters, digits, _ or - (at most 64, "
                           f"such as quests or favor_owed), got {value!r}", field=what)
    if value == MISC:
        raise InvalidInput(f"{what} {MISC!r} is reserved for memories no category fits", field=what)
    return value


def _check_category(value: Any, index: int) -> Category:
    where = f"categories[{index}]"
    if isinstance(value, Mapping):
        try:
            value = msgspec.convert(value, Category)
        except msgspec.ValidationError as exc:
            raise InvalidInput(f"{where}: {exc}", field=where) from exc
    if not isinstance(value, Category):
        raise InvalidInput(f"{where} must be a Category (name, description, keywords), got "
                           f"{type(value).__name__}", field=where)
    name = check_category_name(value.name, f"{where}.name")
    description = check_text(value.description or None, f"{where}.description", _MAX_DESCRIPTION) or ""
    keywords = value.keywords
    if isinstance(keywords, str) or not isinstance(keywords, list | tuple):
        raise InvalidInput(f"{where}.keywords must be a list of words, got {keywords!r}",
                           field=f"{where}.keywords")
    if len(keywords) > _MAX_CUES:
        raise TooLarge(f"{where}.keywords has {len(keywords)} words; the limit is {_MAX_CUES}",
                       field=f"{where}.keywords")
    cues = tuple(dict.fromkeys(check_text(k, f"{where}.keywords", 200, optional=False) or ""
                               for k in keywords))
    return Category(name, description, cues)


def check_catalog(categories: Any) -> tuple[Category, ...]:
    """Categories as given (Category or dicts), checked: names unique."""
    if isinstance(categories, str | bytes | Mapping) or not isinstance(categories, list | tuple):
        raise InvalidInput("categories must be a list of categories", field="categories")
    if len(categories) > MAX_CATALOG:
        raise TooLarge(f"{len(categories)} categories; a catalog holds at most {MAX_CATALOG}",
                       field="categories")
    checked = [_check_category(value, i) for i, value in enumerate(categories)]
    seen: set[str] = set()
    for category in checked:
        if category.name in seen:
            raise InvalidInput(f"category {category.name!r} is given twice", field="categories")
        seen.add(category.name)
    return tuple(checked)


def merged_catalog(current: Sequence[Category], given: Sequence[Category], remove: Iterable[str],
                   replace: bool) -> tuple[Category, ...]:
    """The catalog after a change: ``given`` replaces the categories of the same
    name and adds the others (``replace``: becomes the whole catalog); ``remove``
    names categories to drop. Order: the current order, new ones at the end."""
    gone = set(remove)
    by_name = {} if replace else {category.name: category for category in current}
    for category in given:
        by_name[category.name] = category
    out = [by_name.pop(category.name) for category in current if category.name in by_name]
    out.extend(by_name.values())
    catalog = tuple(category for category in out if category.name not in gone)
    if len(catalog) > MAX_CATALOG:
        raise TooLarge(f"the catalog would hold {len(catalog)} categories; the limit is {MAX_CATALOG}",
                       field="categories")
    return catalog


_ANSWERS_MAX: Final = 4096
"""Sets of cues a classifier keeps the answer of at most (emptied when full)."""
_SHARED: dict[tuple[tuple[Category, ...], float, str], Classifier] = {}
_SHARED_MAX = 64


def shared_classifier(catalog: Sequence[Category], threshold: float = DEFAULT_THRESHOLD,
                      tokenizer: Tokenizer | None = None) -> Classifier:
    """The Classifier of ``catalog``, made once per (catalog, threshold, tokenizer
    settings) and shared by every scope that has them: most scopes keep the default
    catalog, and a classifier's cue table costs about 90 KB. A classifier's answers
    never change once it is made (it only keeps them: at most _ANSWERS_MAX sets of
    cues, up to ~2 MB). At most _SHARED_MAX are kept (the oldest made is dropped)."""
    tokenizer = tokenizer if tokenizer is not None else Tokenizer(stem=True)
    key = (tuple(catalog), threshold, tokenizer.signature)
    classifier = _SHARED.get(key)
    if classifier is None:
        if len(_SHARED) >= _SHARED_MAX:
            del _SHARED[next(iter(_SHARED))]
        classifier = _SHARED[key] = Classifier(catalog, threshold, tokenizer)
    return classifier


class Classifier:
    """The offline classifier over one catalog (see the module doc)."""

    __slots__ = ("answers", "catalog", "cues", "names", "threshold", "tokenizer")

    def __init__(self, catalog: Sequence[Category], threshold: float = DEFAULT_THRESHOLD,
                 tokenizer: Tokenizer | None = None) -> None:
        self.catalog = tuple(catalog)
        self.names = tuple(category.name for category in self.catalog)
        self.threshold = threshold
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer(stem=True)
        # stem -> [(category index, weight)]: a cue word's own weight beats a description word's
        weights: dict[str, dict[int, float]] = {}
        for index, category in enumerate(self.catalog):
            described = (category.name.replace("_", " ").replace("-", " "), category.description)
            for text, weight in ((" ".join(category.keywords), CUE_WEIGHT),
                                 *((part, DESCRIPTION_WEIGHT) for part in described)):
                for token in self.tokenizer.tokens(text):
                    held = weights.setdefault(token, {})
                    held[index] = max(held.get(index, 0.0), weight)
        self.cues = {token: tuple(held.items()) for token, held in weights.items()}
        # the answer of classify per set of distinct cues (a text's answer depends on
        # them alone): most memories hold one of a few thousand sets
        self.answers: dict[frozenset[str], tuple[tuple[str, ...], tuple[float, ...]]] = {}

    def scores(self, text: str) -> list[tuple[str, float]]:
        """Every category the text holds a cue of, with its confidence, best first."""
        return [(self.names[index], round(1.0 - math.exp(-total), 4)) for index, total in self._weights(text)]

    def _cues_in(self, text: str, tokens: Sequence[str] | None) -> frozenset[str]:
        """The distinct cue words of the text (one look-up per token, in C)."""
        return frozenset(self.cues.keys() & (self.tokenizer.tokens(text) if tokens is None else tokens))

    def _weights(self, text: str, tokens: Sequence[str] | None = None,
                 cues: frozenset[str] | None = None) -> list[tuple[int, float]]:
        totals: dict[int, float] = {}
        # summed in the cues' sorted order: the same float sums in every process
        for token in sorted(self._cues_in(text, tokens) if cues is None else cues):
            for index, weight in self.cues[token]:
                totals[index] = totals.get(index, 0.0) + weight
        return sorted(totals.items(), key=lambda item: (-item[1], item[0]))

    def classify(self, text: str,
                 tokens: Sequence[str] | None = None) -> tuple[tuple[str, ...], tuple[float, ...]]:
        """The categories of ``text`` at or above the threshold and within
        ``RELATIVE`` of the best (at most ``MAX_CATEGORIES``, best first) with their
        confidences; ``misc`` with ``1 - best`` when none is. ``tokens``: the text's
        tokens as this classifier's tokenizer (or one of equal ``signature``) gives
        them, when the caller has them already. (The answer depends on the text's
        distinct cue words alone, so it is kept for the sets of cues seen last.)"""
        cues = self._cues_in(text, tokens)
        known = self.answers.get(cues)
        if known is not None:
            return known
        weights = self._weights(text, cues=cues)
        best = weights[0][1] if weights else 0.0
        kept = [(self.names[index], round(1.0 - math.exp(-total), 4)) for index, total in weights
                if total >= RELATIVE * best][:MAX_CATEGORIES]
        kept = [(name, score) for name, score in kept if score >= self.threshold]
        answer: tuple[tuple[str, ...], tuple[float, ...]] = (
            ((MISC,), (round(math.exp(-best), 4),)) if not kept
            else (tuple(name for name, _ in kept), tuple(score for _, score in kept)))
        if len(self.answers) >= _ANSWERS_MAX:
            self.answers.clear()
        self.answers[cues] = answer
        return answer
