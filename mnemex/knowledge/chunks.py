"""Pages of text into chunks: the pieces of a document stored as memories.

``chunk_pages`` cuts a document's pages (``knowledge.documents.Page``) into
chunks of at most ``max_chars`` characters (and ``max_bytes`` UTF-8 bytes, the
memory content limit), each a whole number of paragraphs where they fit, else
of lines, sentences, words, and only past that of characters. What it promises:

* **Markdown headings**: a chunk never straddles a top-level heading (the
  highest level the document uses: ``#`` when it has one, else ``##``...); a
  deeper heading starts a new chunk when the current one is half full, and a
  chunk never ends on a heading (it moves to the next chunk, with what it
  heads). Each chunk keeps the heading path where its own text begins
  (``("Guide", "Install")``). Headings inside fenced code blocks are code.
* **Overlap**: a chunk cut because it was full begins with the end of the one
  before (whole sentences up to ``overlap`` characters, else its last words),
  within the same section only: after a heading nothing is repeated.
* **Pages**: each chunk lists the first and last page its text comes from (one
  number when the same, none for a document without pages).

Deterministic and pure: the same pages and settings give the same chunks.
``title_of`` finds the title a Markdown document gives itself (front matter
``title:``, else its first ``#`` heading); front matter is not chunked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec

from mnemex.errors import InvalidInput
from mnemex.knowledge.documents import Page

__all__ = ["Chunk", "chunk_pages", "title_of"]


class Chunk(msgspec.Struct, frozen=True, omit_defaults=True):
    """One chunk of a document: its ``index`` (from 0, in reading order), its text,
    the first and last page of that text (``(3,)`` when both are 3; ``()`` without
    pages) and the heading path where its own text begins."""

    index: int
    text: str
    pages: tuple[int, ...] = ()
    headings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Unit:
    """A piece of a paragraph, the smallest thing chunks are made of. ``level``: 1-6
    for a heading, 0 for body text; ``para``: its paragraph's number (pieces of one
    paragraph join with ``sep``, paragraphs with a blank line); ``carried``: repeated
    from the chunk before (overlap)."""

    text: str
    size: int
    page: int | None
    path: tuple[str, ...]
    level: int
    para: int
    sep: str
    carried: bool = False


_FENCE: Final = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX: Final = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT: Final = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FRONT_MATTER: Final = re.compile(r"\A---[ \t]*\n(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_FRONT_TITLE: Final = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.M)
_SENTENCE: Final = re.compile(
    r"\s*(.+?(?:[.!?\u2026]+[\"'\u2019\u201d)\]]*(?=\s|\Z)|[\u3002\uff01\uff1f]+[\"'\u2019\u201d)\]\u300d\u300f]*|\Z))",
    re.S)
_MAX_HEADING: Final = 200


def title_of(pages: Sequence[Page], markdown: bool) -> str | None:
    """The title a Markdown document gives itself: front matter's ``title:``, else
    its first level-1 heading; None otherwise (and for other documents)."""
    if not markdown or not pages:
        return None
    text = pages[0].text
    front = _FRONT_MATTER.match(text)
    if front is not None:
        found = _FRONT_TITLE.search(front.group(1))
        if found is not None:
            return found.group(1).strip("'\" ")[:_MAX_HEADING] or None
        text = text[front.end():]
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            heading = _ATX.match(line)
            if heading is not None and len(heading.group(1)) == 1 and heading.group(2):
                return heading.group(2).strip()[:_MAX_HEADING]
    return None


def chunk_pages(pages: Sequence[Page], *, markdown: bool = False, max_chars: int = 800, overlap: int = 100,
                max_bytes: int = 10_240) -> list[Chunk]:
    """The chunks of ``pages`` (see the module doc). ``markdown``: read headings and
    fenced code; otherwise paragraphs are separated by blank lines and nothing is a
    heading."""
    if max_chars < 20 or max_bytes < 80:
        raise InvalidInput(f"a chunk must hold at least 20 characters and 80 bytes, got {max_chars} and "
                           f"{max_bytes}", field="chunk_chars")
    if not 0 <= overlap <= max_chars // 2:
        raise InvalidInput(f"overlap is {overlap}; it must be from 0 to half a chunk ({max_chars // 2})",
                           field="chunk_overlap")
    units = list(_units(pages, markdown, _Limits(max_chars, max_bytes)))
    return _Packer(units, _Limits(max_chars, max_bytes), overlap).chunks()


@dataclass(frozen=True, slots=True)
class _Limits:
    chars: int
    bytes: int

    def fits(self, text: str) -> bool:
        return len(text) <= self.chars and (text.isascii() or len(text.encode("utf-8", "surrogatepass")) <=
                                            self.bytes)

    @property
    def hard(self) -> int:
        """Characters a hard cut takes at most: within both limits whatever the text."""
        return max(1, min(self.chars, self.bytes // 4))


# -- pages into units ---------------------------------------------------------------------------
def _units(pages: Sequence[Page], markdown: bool, limits: _Limits) -> Iterator[_Unit]:
    path: list[tuple[int, str]] = []
    para = 0
    for number, page in enumerate(pages):
        text = page.text
        if markdown and number == 0:
            front = _FRONT_MATTER.match(text)
            if front is not None:
                text = text[front.end():]
        for block, level, sep in (_markdown_blocks(text) if markdown else _plain_blocks(text)):
            if level:
                title = _heading_text(block)
                while path and path[-1][0] >= level:
                    path.pop()
                path.append((level, title))
            heads = tuple(title for _, title in path)
            para += 1
            for piece, piece_sep in _pieces(block, sep, limits):
                yield _Unit(piece, len(piece), page.number, heads, level, para, piece_sep)


def _heading_text(line: str) -> str:
    found = _ATX.match(line)
    title = found.group(2) or "" if found is not None else line
    return " ".join(title.split())[:_MAX_HEADING]


def _plain_blocks(text: str) -> Iterator[tuple[str, int, str]]:
    """(paragraph, 0, separator of its lines) for each paragraph of plain text."""
    for block in re.split(r"\n[ \t]*\n", text):
        lines = [line.rstrip() for line in block.split("\n") if line.strip()]
        if lines:
            yield "\n".join(lines), 0, "\n"


def _markdown_blocks(text: str) -> Iterator[tuple[str, int, str]]:
    """(block, heading level or 0, separator of its lines) for each heading,
    paragraph and fenced code block of Markdown text."""
    lines: list[str] = []
    fence: str | None = None
    for raw in text.split("\n"):
        line = raw.rstrip()
        if fence is not None:
            lines.append(line)
            if line.lstrip().startswith(fence):
                yield "\n".join(lines), 0, "\n"
                lines, fence = [], None
            continue
        opened = _FENCE.match(line)
        if opened is not None:
            if lines:
                yield "\n".join(lines), 0, "\n"
            lines, fence = [line], opened.group(1)
            continue
        if not line.strip():
            if lines:
                yield "\n".join(lines), 0, "\n"
                lines = []
            continue
        if _ATX.match(line):
            if lines:
                yield "\n".join(lines), 0, "\n"
                lines = []
            yield line.strip(), len(_ATX.match(line).group(1)), "\n"  # type: ignore[union-attr]
            continue
        underline = _SETEXT.match(line)
        if underline is not None and len(lines) == 1 and not lines[0].lstrip().startswith(("-", "*", ">")):
            yield lines[0].strip(), 1 if underline.group(1)[0] == "=" else 2, "\n"
            lines = []
            continue
        lines.append(line)
    if lines:
        yield "\n".join(lines), 0, "\n"


def _pieces(text: str, sep: str, limits: _Limits) -> Iterator[tuple[str, str]]:
    """``text`` whole when it fits, else cut at lines, then sentences, then words,
    then characters: (piece, what joins it to the piece before)."""
    if limits.fits(text):
        yield text, sep
        return
    if "\n" in text:
        for line in text.split("\n"):
            if line.strip():
                yield from _pieces(line, "\n", limits)
        return
    sentences = [found.group(1) for found in _SENTENCE.finditer(text) if found.group(1).strip()]
    if len(sentences) > 1:
        for sentence in sentences:
            yield from _pieces(sentence, " ", limits)
        return
    words = text.split(" ")
    if len(words) > 1:
        current = ""
        for word in words:
            if not word:
                continue
            joined = f"{current} {word}" if current else word
            if limits.fits(joined):
                current = joined
                continue
            if current:
                yield current, " "
            if limits.fits(word):
                current = word
            else:
                yield from _pieces(word, " ", limits)
                current = ""
        if current:
            yield current, " "
        return
    step = limits.hard
    for start in range(0, len(text), step):
        yield text[start:start + step], ""


# -- units into chunks --------------------------------------------------------------------------
class _Packer:
    def __init__(self, units: list[_Unit], limits: _Limits, overlap: int) -> None:
        self.units = units
        self.limits = limits
        self.overlap = overlap
        levels = [unit.level for unit in units if unit.level]
        self.top = min(levels) if levels else 0
        self.out: list[Chunk] = []

    def chunks(self) -> list[Chunk]:
        current: list[_Unit] = []
        for unit in self.units:
            if current and unit.level and (unit.level <= self.top or
                                           _chars(current) >= self.limits.chars // 2):
                current = self._emit(current, [])
            elif current and not self.limits.fits(_joined([*current, unit])):
                current = self._emit(current, self._carried(current, unit))
                while current and current[0].carried and not self.limits.fits(_joined([*current, unit])):
                    current = current[1:]
                if current and not self.limits.fits(_joined([*current, unit])):
                    current = self._emit(current, [])  # headings too long to go with what they head
            current.append(unit)
        if current:
            self._emit(current, [])
        return self.out

    def _emit(self, units: list[_Unit], carried: list[_Unit]) -> list[_Unit]:
        """Write ``units`` as a chunk, but for the headings it ends on (they head the
        next one); what the next chunk starts with."""
        end = len(units)
        while end > 0 and units[end - 1].level and not units[end - 1].carried:
            end -= 1
        if end == 0 or all(unit.carried for unit in units[:end]):
            end = len(units)  # nothing but headings: they are the chunk
        body, rest = units[:end], units[end:]
        own = [unit for unit in body if not unit.carried] or body
        pages = sorted({unit.page for unit in body if unit.page is not None})
        span = tuple(dict.fromkeys((pages[0], pages[-1]))) if pages else ()
        self.out.append(Chunk(index=len(self.out), text=_joined(body), pages=span, headings=own[0].path))
        return rest if rest else carried

    def _carried(self, units: list[_Unit], following: _Unit) -> list[_Unit]:
        """The end of ``units`` repeated at the start of the next chunk: whole body
        pieces of ``following``'s section up to ``overlap`` characters, else the last
        words of the last one."""
        if self.overlap <= 0 or following.level:
            return []
        taken: list[_Unit] = []
        size = 0
        for unit in reversed(units):
            if unit.level or unit.path != following.path:
                break
            if size + unit.size + 1 > self.overlap:
                break
            taken.insert(0, unit)
            size += unit.size + 1
        if not taken:
            last = units[-1]
            if last.level or last.path != following.path:
                return []
            words = last.text.split(" ")
            tail: list[str] = []
            for word in reversed(words[1:]):
                if sum(len(w) + 1 for w in tail) + len(word) > self.overlap:
                    break
                tail.insert(0, word)
            if not tail:
                return []
            text = " ".join(tail)
            taken = [_Unit(text, len(text), last.page, last.path, 0, last.para, last.sep)]
        return [_Unit(u.text, u.size, u.page, u.path, u.level, u.para, u.sep, carried=True) for u in taken]


def _joined(units: Sequence[_Unit]) -> str:
    parts: list[str] = []
    previous: _Unit | None = None
    for unit in units:
        if previous is not None:
            parts.append(unit.sep if unit.para == previous.para else "\n\n")
        parts.append(unit.text)
        previous = unit
    return "".join(parts)


def _chars(units: Sequence[_Unit]) -> int:
    return len(_joined(units))
