"""The tolerant parser of an extraction answer: whatever a model wrote, either
facts or an ``ExtractionError(reason="malformed")`` that says exactly what is wrong
(the extractor sends that message back to the model in its one retry).

What is tolerated, because models do it: ``<think>`` blocks (closed or not, or only
their end), code fences, prose before and after the JSON, trailing commas, a bare
list of facts instead of ``{"facts": [...]}``, one fact object on its own, facts as
plain sentences, numbers as strings, scores out of range (clamped), unknown
relations (dropped), a ``target`` that is not an offered number (relation and
target dropped, the fact kept), message numbers that were not shown (dropped),
categories and confidences of different lengths, repeated entities, ``valid_at`` as
ISO 8601, a year, or seconds since the epoch.

What is not: no text, no JSON, JSON that does not parse even repaired (an answer cut
off at the token limit included), the JSON Schema echoed back, an object without a
``facts`` key, items none of which is a fact. ``{"facts": []}`` is not an error: it
is "nothing to extract", which an ``ExtractionError`` never means.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator
from typing import Any, Final

import msgspec

from mnemex._time import seconds
from mnemex.errors import ExtractionError, InvalidInput
from mnemex.knowledge.facts import ExtractedFact, Relation

__all__ = ["parse_facts"]

_THINK_BLOCK: Final = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN: Final = re.compile(r"<(?:think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE: Final = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
_FENCE: Final = re.compile(r"```[\w+-]*[^\S\n]*\n?(.*?)```", re.DOTALL)
_MAX_CANDIDATES: Final = 64
"""Openings of a JSON value tried in one answer (prose may have many brackets)."""
_CONTENT_KEYS: Final = ("content", "fact", "text", "memory", "statement")
_RELATIONS: Final[dict[str, Relation]] = {
    "duplicate": "duplicate", "duplicates": "duplicate", "same": "duplicate",
    "updates": "updates", "update": "updates", "supersedes": "updates", "replaces": "updates",
    "contradicts": "updates",
    "extends": "extends", "extend": "extends", "adds": "extends", "elaborates": "extends",
}
DEFAULT_IMPORTANCE: Final = 0.5
DEFAULT_CONFIDENCE: Final = 0.5
"""The confidence of a category given without one."""
_decode: Final = msgspec.json.Decoder()


def parse_facts(text: str, *, offered_numbers: Collection[int], positions: Collection[int],
                finish_reason: str | None = None) -> list[ExtractedFact]:
    """The facts in ``text``, a model's answer to the extraction prompt. A relation
    may only target one of ``offered_numbers``; a fact may only cite messages at
    ``positions``. ``finish_reason`` is the completion's (``length``: cut off at the
    token limit, said in the error). Raises ExtractionError(reason="malformed") when
    nothing usable parses; an empty list means nothing to extract."""
    cut = " (the answer was cut off at the token limit: finish_reason 'length')" \
        if finish_reason == "length" else ""
    body, thinking = _without_thinking(text)
    if not body.strip():
        what = "only an unfinished <think> block" if thinking else "empty"
        raise ExtractionError(f"the answer is {what}; it must be the JSON object {{\"facts\": [...]}}{cut}",
                              reason="malformed")
    items = _items(body, cut)
    usable = [item for item in items if _is_fact_like(item)]
    if items and not usable:
        raise ExtractionError(f"none of the {len(items)} items of \"facts\" is a fact (an object with "
                              f"\"content\", or a sentence): {_excerpt(items)}{cut}", reason="malformed")
    facts: list[ExtractedFact] = []
    for item in usable:
        fact = _fact(item, offered_numbers, positions)
        if fact is not None:
            facts.append(fact)
    return facts


# -- finding the JSON ----------------------------------------------------------------------
def _without_thinking(text: str) -> tuple[str, bool]:
    """``text`` without reasoning blocks, and whether it had any."""
    body = _THINK_BLOCK.sub(" ", text)
    thinking = body != text
    closing = list(_THINK_CLOSE.finditer(body))
    if closing:  # the opening tag was in the chat template: everything before the end is thinking
        body = body[closing[-1].end():]
        thinking = True
    opening = _THINK_OPEN.search(body)
    if opening:  # never closed: the rest is thinking (cut off, as a rule)
        body = body[:opening.start()]
        thinking = True
    return body, thinking


def _items(body: str, cut: str) -> list[Any]:
    """The list of would-be facts the answer holds; raises ExtractionError saying why
    there is none."""
    shape_problem: str | None = None
    parse_problem: tuple[int, str] | None = None  # (length of the candidate, what failed)
    unclosed = False
    for candidate in _candidates(body):
        if candidate is None:
            unclosed = True
            continue
        try:
            value = _decode_repaired(candidate)
        except msgspec.DecodeError as exc:
            if candidate[0] in "{[" and (parse_problem is None or len(candidate) > parse_problem[0]):
                parse_problem = (len(candidate), f"its JSON does not parse ({exc}): {_excerpt(candidate)}")
            continue
        if unclosed and _facts_key(value) is None:
            continue  # inside a value cut off: a piece of it is not the answer
        items = _as_items(value)
        if isinstance(items, list):
            return items
        shape_problem = shape_problem or items
    if shape_problem is not None:
        problem = shape_problem
    elif unclosed:
        problem = f"its JSON never closes: {_excerpt(body)}"
    elif parse_problem is not None:
        problem = parse_problem[1]
    else:
        problem = f"it holds no JSON object: {_excerpt(body)}"
    raise ExtractionError(f"the answer is not the JSON object {{\"facts\": [...]}}: {problem}{cut}",
                          reason="malformed")


def _candidates(body: str) -> Iterator[str | None]:
    """Texts that may be the answer's JSON, most likely first: the whole answer, the
    insides of code fences, then each balanced {...} or [...] in it. None stands for
    a value that opens and never closes: what follows may be a piece of it."""
    seen: set[str] = set()
    whole = body.strip()
    if whole:
        seen.add(whole)
        yield whole
    for fence in _FENCE.finditer(body):
        inside = fence.group(1).strip()
        if inside and inside not in seen:
            seen.add(inside)
            yield inside
    start, tried = 0, 0
    while tried < _MAX_CANDIDATES:
        opening = _next_opening(body, start)
        if opening < 0:
            return
        tried += 1
        end = _closing(body, opening)
        if end is None:  # a bracket in prose closed by the wrong kind: try the next one
            start = opening + 1
        elif end < 0:  # cut off, or an unpaired bracket in prose before the answer
            yield None
            start = opening + 1
        else:
            span = body[opening:end + 1]
            if span not in seen:
                seen.add(span)
                yield span
            start = end + 1


def _next_opening(text: str, start: int) -> int:
    brace, bracket = text.find("{", start), text.find("[", start)
    if brace < 0 or bracket < 0:
        return max(brace, bracket)
    return min(brace, bracket)


_CLOSER: Final = {"{": "}", "[": "]"}


def _structure(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """(index, character) of each character of ``text`` from ``start`` that is not
    inside a JSON string (the quotes themselves left out)."""
    in_string = escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        else:
            yield index, char


def _closing(text: str, opening: int) -> int | None:
    """The index of the bracket closing the one at ``opening``; None when a wrong
    kind of bracket closes it first, -1 when the text ends before it closes."""
    expected: list[str] = []
    for index, char in _structure(text, opening):
        if char in _CLOSER:
            expected.append(_CLOSER[char])
        elif char in "}]":
            if char != expected.pop():
                return None
            if not expected:
                return index
    return -1


def _decode_repaired(candidate: str) -> Any:
    try:
        return _decode.decode(candidate)
    except msgspec.DecodeError:
        repaired = _without_trailing_commas(candidate)
        if repaired == candidate:
            raise
        return _decode.decode(repaired)


def _without_trailing_commas(text: str) -> str:
    """``text`` without the commas that only a closing bracket follows (outside strings)."""
    dropped = {index for index, char in _structure(text)
               if char == "," and text[index + 1:index + 1 + 64].lstrip()[:1] in ("}", "]")}
    # (a bounded look ahead: indentation)
    return "".join(char for index, char in enumerate(text) if index not in dropped)


def _facts_key(value: Any) -> str | None:
    """The key of ``value`` that holds the facts (``facts``, in any case), if any."""
    if isinstance(value, dict):
        for key in value:
            if isinstance(key, str) and key.strip().casefold() == "facts":
                return key
    return None


def _as_items(value: Any) -> list[Any] | str:
    """The would-be facts in a decoded JSON value, or what is wrong with its shape."""
    if isinstance(value, list):
        if value and not any(_is_fact_like(item) for item in value):
            return f"a JSON array of no facts: {_excerpt(value)}"
        return value
    if not isinstance(value, dict):
        return f"its JSON is {_excerpt(value)}, not an object"
    key = _facts_key(value)
    if key is not None:
        inside = value[key]
        if isinstance(inside, list):
            return inside
        if inside is None or isinstance(inside, dict | str):
            return [inside] if inside else []
        return f"\"facts\" is {_excerpt(inside)}, not a list"
    if "properties" in value or "$schema" in value or value.get("type") == "object":
        return "it echoes the JSON schema instead of giving facts"
    if _is_fact_like(value):
        return [value]
    if not value:
        return "its JSON is an empty object, without \"facts\""
    return f"its JSON object has no \"facts\" key (its keys: {', '.join(map(str, list(value)[:8]))})"


def _excerpt(value: Any) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    text = " ".join(text.split())
    return repr(text if len(text) <= 160 else text[:160] + "...")


# -- one fact -------------------------------------------------------------------------------
def _content_of(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        for key in _CONTENT_KEYS:
            if isinstance(item.get(key), str):
                return str(item[key])
    return None


def _is_fact_like(item: Any) -> bool:
    return _content_of(item) is not None


def _fact(item: Any, offered: Collection[int], positions: Collection[int]) -> ExtractedFact | None:
    content = " ".join((_content_of(item) or "").split())
    if not content:
        return None
    if isinstance(item, str):
        return ExtractedFact(content=content)
    categories, confidences = _categories(item.get("categories", item.get("category")),
                                          item.get("confidences", item.get("confidence")))
    relation = _relation(item.get("relation"))
    target = _integer(item.get("target"))
    if relation is None or target is None or target not in offered:
        relation, target = None, None
    kind = item.get("kind")
    attributed = item.get("attributed_to")
    actor = item.get("actor_id", item.get("actor"))
    entities = _names(item.get("entities"))
    relations = _entity_relations(item.get("relations"))
    if relations:  # a relation's ends are entities the fact names
        known = {name.casefold() for name in entities}
        extra = [name for rel in relations for name in (rel[0], rel[2]) if name.casefold() not in known]
        entities = _names([*entities, *extra])
    return ExtractedFact(
        content=content,
        kind=kind.strip().lower() if isinstance(kind, str) and kind.strip() else "fact",
        categories=categories,
        confidences=confidences,
        importance=_unit(item.get("importance"), DEFAULT_IMPORTANCE),
        entities=entities,
        entity_types=_entity_types(item.get("entities")),
        entity_relations=relations,
        relation=relation,
        target=target,
        attributed_to=(attributed.strip() or None) if isinstance(attributed, str) else None,
        valid_at=_moment(item.get("valid_at")),
        messages=_positions(item.get("messages"), positions),
        actor_id=(actor.strip()[:256] or None) if isinstance(actor, str) else None,
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an integer past the floats: no score, no time
            return None
    elif isinstance(value, str):
        text = value.strip()
        scale = 100.0 if text.endswith("%") else 1.0
        try:
            number = float(text.rstrip("%")) / scale
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _unit(value: Any, default: float) -> float:
    number = _number(value)
    return default if number is None else min(1.0, max(0.0, number))


def _integer(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        value = value.strip().strip("[]#").strip()
        return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None
    number = _number(value)
    return int(number) if number is not None and number.is_integer() else None


def _relation(value: Any) -> Relation | None:
    return _RELATIONS.get(value.strip().lower()) if isinstance(value, str) else None


def _entity_types(value: Any) -> dict[str, str]:
    """The types of the entities given as ``{"name", "type"}`` objects (lowercase
    words; other shapes give none), by their name as ``_names`` keeps it."""
    out: dict[str, str] = {}
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, dict):
            continue
        name, kind = item.get("name"), item.get("type")
        if isinstance(name, str) and name.strip() and isinstance(kind, str):
            word = "_".join(kind.strip().lower().split())
            if word and len(word) <= 64 and word.replace("_", "").replace("-", "").isalnum():
                out.setdefault(" ".join(name.split()), word)
    return out


MAX_RELATIONS: Final = 16
"""Typed relations one fact keeps at most."""


def _entity_relations(value: Any) -> tuple[tuple[str, str, str], ...]:
    """Typed relations between entities, each ``{"source", "type", "target"}`` (also
    ``relation`` for type, ``subject``/``object`` for the ends): names with their
    spacing cut, the type a lowercase word of letters, digits and ``_`` (``lives in``
    is ``lives_in``); a relation of an entity to itself, or with a part missing, is
    dropped, and so are repeats."""
    out: dict[tuple[str, str, str], None] = {}
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, dict):
            continue
        source = item.get("source", item.get("subject"))
        target = item.get("target", item.get("object"))
        kind = item.get("type", item.get("relation"))
        if not (isinstance(source, str) and isinstance(target, str) and isinstance(kind, str)):
            continue
        source, target = " ".join(source.split())[:200], " ".join(target.split())[:200]
        word = "_".join(kind.strip().lower().replace("-", " ").split())[:64]
        if source and target and word and word.replace("_", "").isalnum() and \
                source.casefold() != target.casefold():
            out.setdefault((source, word, target), None)
        if len(out) >= MAX_RELATIONS:
            break
    return tuple(out)


def _names(value: Any) -> tuple[str, ...]:
    """Distinct names (case-insensitively, the first spelling kept) from a list or one string."""
    given = value if isinstance(value, list) else [value]
    names: dict[str, str] = {}
    for item in given:
        name = item.get("name") if isinstance(item, dict) else item
        if isinstance(name, str) and name.strip():
            clean = " ".join(name.split())
            names.setdefault(clean.casefold(), clean)
    return tuple(names.values())


def _categories(value: Any, scores: Any) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """Categories with one confidence each: from parallel lists, one name, a
    ``{name: confidence}`` object or ``[{"name", "confidence"}]``; missing
    confidences are DEFAULT_CONFIDENCE, extra ones dropped, repeated names merged."""
    pairs: list[tuple[Any, Any]]
    if isinstance(value, dict):
        pairs = list(value.items())
    else:
        given = value if isinstance(value, list) else [value] if value is not None else []
        if isinstance(scores, list):
            pairs = [(name, scores[i] if i < len(scores) else None) for i, name in enumerate(given)]
        else:  # one confidence for all, or none
            pairs = [(name, scores) for name in given]
        pairs = [(item.get("name", item.get("category")), item.get("confidence", score))
                 if isinstance(item, dict) else (item, score) for item, score in pairs]
    chosen: dict[str, tuple[str, float]] = {}
    for name, score in pairs:
        if isinstance(name, str) and name.strip():
            clean = name.strip()
            chosen.setdefault(clean.casefold(), (clean, _unit(score, DEFAULT_CONFIDENCE)))
    return tuple(n for n, _ in chosen.values()), tuple(c for _, c in chosen.values())


_YEAR: Final = re.compile(r"\d{4}")
_MONTH: Final = re.compile(r"\d{4}-\d{2}")
_EPOCH: Final = re.compile(r"\d{9,}(?:\.\d*)?")


def _moment(value: Any) -> float | None:
    """A time as seconds since the epoch: ISO 8601 (or a year, or year and month), or a
    number of seconds; None when absent or not a time."""
    if isinstance(value, str):
        text = value.strip()
        if _YEAR.fullmatch(text):
            value = f"{text}-01-01"
        elif _MONTH.fullmatch(text):
            value = f"{text}-01"
        elif _EPOCH.fullmatch(text):
            value = float(text)
        elif not text[:4].isdigit():  # "null", "unknown", "yesterday": not a time
            return None
    else:
        value = _number(value)
        if value is None:
            return None
        if value >= 1e11:  # past the year 5000 in seconds: milliseconds, as JavaScript counts
            value /= 1000
    try:
        return seconds(value, "valid_at")
    except InvalidInput:
        return None


def _positions(value: Any, shown: Collection[int]) -> tuple[int, ...]:
    given = value if isinstance(value, list) else [value]
    found = {number for number in map(_integer, given) if number is not None and number in shown}
    return tuple(sorted(found))
