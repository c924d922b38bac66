"""The write-ahead journal: one JSON line per accepted command.

Every line is exactly::

    {"seq":<int>,"ts":<epoch ms>,"crc":<int>,"cmd":<payload>}\\n

where the payload is the command's own compact JSON, kept byte for byte, and
``crc = zlib.crc32(b"%d:%d:" % (seq, ts) + payload)`` so a damaged seq or ts
is caught as well as a damaged command. Lines are read back by their fixed
prefix, never by re-serialising the payload, and seq grows by exactly one from
line to line.

A torn write is cut off: a last line with no newline at its end, after
lines that are unwritten space (empty, or only NUL bytes: blocks a crash left
allocated but never filled). A *complete* line (it ends with its newline) that
fails its check is not a torn write: the bytes of an acknowledged command were
damaged after they were written, and cutting it would lose that command
silently. It is CorruptData naming the file and line, as is any damage
followed by valid lines (replaying around it would skip accepted commands).

Cut-off prefixes are kept as archive segments ``journal-<first>-<last>.jsonl``
(same line format) for point-in-time replay and snapshot fallback.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mnemex.errors import CorruptData, InvalidInput, StorageError
from mnemex.persistence._files import describe_os_error, log, read_file
from mnemex.persistence.findings import Finding, Level

__all__ = [
    "JOURNAL",
    "JournalEntry",
    "JournalScan",
    "archive_name",
    "audit_journal",
    "check_entry",
    "cut_offset",
    "encode_entries",
    "encode_lines",
    "entry_crc",
    "list_archives",
    "read_journal",
    "scan_journal",
]

JOURNAL = "journal.jsonl"
"""File name of an actor's live journal."""

_LINE = re.compile(
    rb'\{"seq":(0|[1-9][0-9]{0,18}),"ts":(0|[1-9][0-9]{0,18}),"crc":(0|[1-9][0-9]{0,9}),"cmd":(.+)\}',
    re.DOTALL,
)
_SEQ_PREFIX = re.compile(rb'\{"seq":(0|[1-9][0-9]{0,18}),')
_ARCHIVE = re.compile(r"journal-([1-9][0-9]*)-([1-9][0-9]*)\.jsonl")
_MAX_INT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journaled command: its sequence number, its time (epoch milliseconds)
    and its payload, the command's compact JSON exactly as it was written."""

    seq: int
    ts: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class JournalScan:
    """What reading a journal found."""

    entries: list[JournalEntry]
    """The valid lines, in order; seq grows by one from each to the next."""
    good_bytes: int
    """Bytes from the start of the file to the end of the last valid line."""
    size: int
    """Bytes in the file."""
    torn_line: int | None = None
    """1-based number of the first line of a damaged tail (to be cut), or None."""
    torn_reason: str = ""
    """Why that line is damaged."""

    @property
    def is_torn(self) -> bool:
        """True if the file ends with a damaged (torn) tail."""
        return self.torn_line is not None


def entry_crc(seq: int, ts: int, payload: bytes) -> int:
    """The checksum of one line: ``crc32(b"<seq>:<ts>:" + payload)``."""
    return zlib.crc32(payload, zlib.crc32(b"%d:%d:" % (seq, ts)))


def _check_int(value: object, what: str, minimum: int) -> int:
    if type(value) is not int or not minimum <= value <= _MAX_INT:
        raise InvalidInput(f"journal entry {what} is {value!r}; it must be an int from {minimum:,} "
                           f"to 2**63-1", field=what)
    return value


def check_entry(seq: int, ts: int, payload: bytes, previous: int | None) -> int:
    """``seq`` if ``(seq, ts, payload)`` may follow the entry of seq ``previous``
    (None: any seq) in a journal, else InvalidInput (see encode_lines)."""
    if previous is not None and seq != previous + 1:
        raise InvalidInput(f"journal entries must have consecutive seqs; {seq!r} follows {previous}",
                           field="seq")
    _check_int(seq, "seq", 1)
    _check_int(ts, "ts", 0)
    if type(payload) is not bytes or not payload or b"\n" in payload:
        raise InvalidInput(f"journal payload of seq {seq} must be non-empty compact JSON bytes "
                           f"without a newline; got {payload[:60]!r}", field="payload")
    return seq


def encode_entries(entries: Sequence[tuple[int, int, bytes]]) -> bytes:
    """The journal lines for ``entries`` (``(seq, ts_ms, payload)``), joined (see encode_lines)."""
    return b"".join(encode_lines(entries))


def encode_lines(entries: Sequence[tuple[int, int, bytes]]) -> list[bytes]:
    """The journal line of each of ``entries`` (``(seq, ts_ms, payload)``), newline included.

    seq must grow by exactly one from entry to entry; ts is epoch milliseconds
    (>= 0); payload is non-empty compact JSON without a newline (it is written
    as is, not parsed). Raises InvalidInput otherwise.
    """
    lines: list[bytes] = []
    previous: int | None = None
    crc32 = zlib.crc32
    for seq, ts, payload in entries:
        previous = check_entry(seq, ts, payload, previous)
        lines.append(_LINE_FORMAT % (seq, ts, crc32(payload, crc32(b"%d:%d:" % (seq, ts))), payload))
    return lines


_LINE_FORMAT: Final = b'{"seq":%d,"ts":%d,"crc":%d,"cmd":%b}\n'
"""A journal line: the JSON object ``orjson.dumps`` writes for these keys, in this
order (compact, integers in decimal), with the payload as is (one % format is a
few times cheaper than building the dict and dumping it)."""


def _parse_line(line: bytes) -> JournalEntry | str:
    """The entry on ``line`` (without its newline), or why it is not a valid line."""
    match = _LINE.fullmatch(line)
    if match is None:
        if not line:
            return "empty line"
        return f"not a journal line (starts {line[:40]!r})"
    seq_digits, ts_digits, crc_digits, payload = match.groups()
    # The digits are canonical (no sign, no leading zero), so they are the %d text.
    if zlib.crc32(payload, zlib.crc32(seq_digits + b":" + ts_digits + b":")) != int(crc_digits):
        return "checksum mismatch"
    return JournalEntry(int(seq_digits), int(ts_digits), payload)


def _damaged_complete(source: Path | str, number: int, reason: str) -> str:
    return (f"{source}: line {number}: damaged ({reason}) although complete (it ends with its newline): "
            f"an accepted command's bytes changed after they were written, which a torn write cannot do; "
            f"the journal needs repair (`mnemex inspect` lists every problem)")


def _damaged_before(source: Path | str, number: int, reason: str, following: str) -> str:
    return (f"{source}: line {number}: damaged ({reason}) but {following} follow it; replaying around it "
            f"would skip accepted commands, so the journal needs repair (`mnemex inspect` lists every "
            f"problem)")


def _seq_break(source: Path | str, number: int, seq: int, previous: int) -> str:
    return (f"{source}: line {number}: seq {seq} follows seq {previous}; commands are missing or "
            f"repeated, so the journal cannot be replayed")


_UNWRITTEN = "unwritten space (a torn write)"
_UNTERMINATED = "no newline at its end"


def scan_journal(data: bytes, source: Path | str) -> JournalScan:
    """Parse a journal's bytes. A damaged tail is reported in the result (not cut);
    damage followed by a valid line, or a seq that does not follow its
    predecessor, raises CorruptData naming ``source`` and the line.
    :func:`audit_journal` applies the same rules and lists every problem."""
    lines = data.split(b"\n")
    unterminated = lines.pop()
    entries: list[JournalEntry] = []
    append = entries.append
    parse = _parse_line
    good_bytes = 0
    bad_line: int | None = None
    bad_reason = ""
    previous = -1
    for number, line in enumerate(lines, 1):
        parsed = parse(line)
        if isinstance(parsed, str):
            if line.strip(b"\x00"):  # content that fails its check, and its newline was written
                raise CorruptData(_damaged_complete(source, number, parsed))
            if bad_line is None:
                bad_line, bad_reason = number, _UNWRITTEN
            continue
        if bad_line is not None:
            raise CorruptData(_damaged_before(source, bad_line, bad_reason,
                                              f"valid lines (line {number}, seq {parsed.seq})"))
        if previous >= 0 and parsed.seq != previous + 1:
            raise CorruptData(_seq_break(source, number, parsed.seq, previous))
        previous = parsed.seq
        append(parsed)
        good_bytes += len(line) + 1
    if unterminated and bad_line is None:
        bad_line, bad_reason = len(lines) + 1, _UNTERMINATED
    return JournalScan(entries, good_bytes, len(data), bad_line, bad_reason)


def audit_journal(data: bytes, source: Path, *, is_archive: bool = False,
                  ) -> tuple[list[JournalEntry], list[Finding]]:
    """Every valid entry and every problem of a journal (or, with ``is_archive``,
    an archive segment), without raising.

    The rules are :func:`scan_journal`'s: a complete line (it ends with its
    newline) that fails its check, unwritten space followed by more lines, and
    a seq that does not follow its predecessor are errors; a torn tail (an
    unterminated last line, or unwritten space up to the end) is a note, since
    a crash leaves it and the next load cuts it. An archive segment is written
    whole and never appended to, so a torn tail there is an error too.
    """
    lines = data.split(b"\n")
    unterminated = lines.pop()
    entries: list[JournalEntry] = []
    findings: list[Finding] = []
    previous: int | None = None
    blank: tuple[int, int] | None = None  # (line, offset) where a run of unwritten space starts
    offset = 0
    for number, line in enumerate(lines, 1):
        start, offset = offset, offset + len(line) + 1
        parsed = _parse_line(line)
        if isinstance(parsed, str) and not line.strip(b"\x00"):
            if blank is None:
                blank = number, start
            continue
        if blank is not None:
            following = (f"valid lines (line {number}, seq {parsed.seq})" if isinstance(parsed, JournalEntry)
                         else f"more lines (line {number})")
            findings.append(Finding(Level.ERROR, source, blank[0],
                                    _damaged_before(source, blank[0], _UNWRITTEN, following)))
            blank = None
        if isinstance(parsed, str):
            findings.append(Finding(Level.ERROR, source, number, _damaged_complete(source, number, parsed)))
            previous = None  # the next line's seq follows a damaged one: not a second problem
            continue
        if previous is not None and parsed.seq != previous + 1:
            findings.append(Finding(Level.ERROR, source, number,
                                    _seq_break(source, number, parsed.seq, previous)))
        previous = parsed.seq
        entries.append(parsed)
    if blank is not None or unterminated:
        number, start = blank if blank is not None else (len(lines) + 1, offset)
        reason = _UNWRITTEN if blank is not None else _UNTERMINATED
        after = f"seq {entries[-1].seq}" if entries else "the start"
        if is_archive:
            findings.append(Finding(Level.ERROR, source, number, (
                f"{source}: line {number}: damaged ({reason}), {len(data) - start:,} bytes after {after}; "
                f"an archive segment is written whole, so this is not a torn write: its end was lost")))
        else:
            findings.append(Finding(Level.NOTE, source, number, (
                f"{source}: line {number}: torn tail ({reason}), {len(data) - start:,} bytes after {after}: "
                f"what a crash during a write leaves, not corruption; cut when the actor is next loaded")))
    return entries, findings


def read_journal(path: Path, *, repair: bool) -> JournalScan:
    """Read and check the journal at ``path`` (a missing file is an empty journal).

    With ``repair``, a torn tail is cut off the file (truncated to the end of the
    last valid line, fsynced) and logged; without it the file is left untouched
    and the tail is only reported. Raises CorruptData for damage before the end,
    StorageError if the file cannot be read or cut.
    """
    data = read_file(path, "journal", missing_ok=True)
    scan = scan_journal(data, path)
    if repair and scan.is_torn:
        cut_tail(path, scan)
    return scan


def cut_tail(path: Path, scan: JournalScan) -> None:
    """Truncate the journal at ``path`` to ``scan.good_bytes`` (its torn tail
    removed), fsync it and log what was cut."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.ftruncate(fd, scan.good_bytes)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"could not cut the torn tail of journal {path}: "
                           f"{describe_os_error(exc)}") from exc
    log.warning("%s: cut a torn tail from line %d (%s): %d bytes after seq %s removed", path,
                scan.torn_line, scan.torn_reason, scan.size - scan.good_bytes,
                scan.entries[-1].seq if scan.entries else "none")


def cut_offset(data: bytes, seq: int) -> tuple[int, int | None, int | None]:
    """Where journal ``data`` stops holding complete lines with seq <= ``seq``:
    ``(byte offset, first seq, last seq)`` of that prefix (seqs None if empty).
    Reads only each line's ``{"seq":N,`` prefix; stops at anything else."""
    position = 0
    first: int | None = None
    last: int | None = None
    match_prefix = _SEQ_PREFIX.match
    find = data.find
    while True:
        match = match_prefix(data, position)
        if match is None:
            break
        line_seq = int(match.group(1))
        end = find(b"\n", position)
        if line_seq > seq or end < 0:
            break
        if first is None:
            first = line_seq
        last = line_seq
        position = end + 1
    return position, first, last


def archive_name(first: int, last: int) -> str:
    """File name of the archive segment holding seqs ``first`` to ``last``."""
    return f"journal-{first}-{last}.jsonl"


def list_archives(folder: Path) -> list[tuple[int, int, Path]]:
    """The archive segments in ``folder`` as ``(first, last, path)``, by first seq."""
    return sorted(_iter_archives(folder))


def _iter_archives(folder: Path) -> Iterator[tuple[int, int, Path]]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    for name in names:
        match = _ARCHIVE.fullmatch(name)
        if match is not None:
            first, last = int(match.group(1)), int(match.group(2))
            if first <= last:
                yield first, last, folder / name
