"""The journal line format, torn tails and mid-file damage."""

from __future__ import annotations

import logging
import random
import re
import zlib
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import CorruptData, InvalidInput
from mnemex.persistence import JournalEntry, Level
from mnemex.persistence.journal import audit_journal, encode_entries, encode_lines, read_journal, scan_journal

payloads = st.one_of(
    st.sampled_from([b"{}", b"[]", b"0", b'"x"', b'{"t":"scope.remember","content":"\\u00e9 \\n"}']),
    st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
                    max_size=4).map(orjson.dumps),
)


def entries_for(count: int, *, start: int = 1, ts: int = 1_700_000_000_000) -> list[tuple[int, int, bytes]]:
    return [(seq, ts + seq, b'{"n":%d}' % seq) for seq in range(start, start + count)]


def write_journal(path: Path, count: int) -> bytes:
    data = encode_entries(entries_for(count))
    path.write_bytes(data)
    return data


@settings(max_examples=200)
@given(seq=st.integers(1, 2**63 - 1), ts=st.integers(0, 2**63 - 1), payload=payloads)
def test_a_line_is_exactly_the_documented_layout(seq: int, ts: int, payload: bytes) -> None:
    line = encode_entries([(seq, ts, payload)])
    crc = zlib.crc32(b"%d:%d:" % (seq, ts) + payload)
    assert line == b'{"seq":%d,"ts":%d,"crc":%d,"cmd":%b}\n' % (seq, ts, crc, payload)
    assert scan_journal(line, "j").entries == [JournalEntry(seq, ts, payload)]


@settings(max_examples=50)
@given(start=st.integers(1, 10**12), items=st.lists(st.tuples(st.integers(0, 2**50), payloads), max_size=30))
def test_round_trip_keeps_every_entry_byte_for_byte(start: int, items: list[tuple[int, bytes]]) -> None:
    entries = [(start + index, ts, payload) for index, (ts, payload) in enumerate(items)]
    scan = scan_journal(encode_entries(entries), "j")
    assert [(e.seq, e.ts, e.payload) for e in scan.entries] == entries
    assert not scan.is_torn


def test_a_missing_journal_reads_as_empty(tmp_path: Path) -> None:
    scan = read_journal(tmp_path / "journal.jsonl", repair=True)
    assert scan.entries == []
    assert not (tmp_path / "journal.jsonl").exists()


def test_every_truncation_of_the_last_line_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "journal.jsonl"
    full = encode_entries(entries_for(3))
    good_end = full.rindex(b"\n", 0, len(full) - 1) + 1
    for cut in range(good_end, len(full)):
        path.write_bytes(full[:cut])
        with caplog.at_level(logging.WARNING, logger="mnemex.persistence"):
            caplog.clear()
            scan = read_journal(path, repair=True)
        assert [entry.seq for entry in scan.entries] == [1, 2]
        assert path.read_bytes() == full[:good_end]
        assert (cut == good_end) == (not caplog.records)
    path.write_bytes(full)
    assert [entry.seq for entry in read_journal(path, repair=True).entries] == [1, 2, 3]


@pytest.mark.parametrize("where", [b'"seq":3', b'"ts":', b'"crc":', b'"n":3'])
def test_a_damaged_last_line_with_its_newline_is_corrupt_data_not_a_torn_write(tmp_path: Path,
                                                                                where: bytes) -> None:
    # a torn write cannot end in a newline: a complete line that fails its check is an accepted
    # command damaged on disk, reported and kept, never cut as if it had not been written
    path = tmp_path / "journal.jsonl"
    data = bytearray(write_journal(path, 3))
    last_line = data.rindex(b"\n", 0, len(data) - 1) + 1
    position = data.index(where, last_line) + len(where) - 1
    data[position] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptData, match=r"journal\.jsonl: line 3: damaged .* although complete"):
        read_journal(path, repair=True)
    assert path.read_bytes() == bytes(data)  # nothing cut


def test_unwritten_space_at_the_end_is_a_torn_write_and_cut(tmp_path: Path) -> None:
    # a crash can leave blocks allocated but never filled: NUL bytes, even with a newline written
    path = tmp_path / "journal.jsonl"
    good = write_journal(path, 2)
    for tail in (b"\x00" * 40 + b"\n", b"\n", b"\x00" * 10 + b"\n" + b"\x00" * 7):
        path.write_bytes(good + tail)
        scan = read_journal(path, repair=True)
        assert [entry.seq for entry in scan.entries] == [1, 2]
        assert path.read_bytes() == good


def test_several_damaged_lines_at_the_end_are_all_cut(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    good = write_journal(path, 2)
    path.write_bytes(good + b"\x00" * 50 + b"\n" + b'{"seq":3,"ts":1,"cr')
    scan = read_journal(path, repair=True)
    assert [entry.seq for entry in scan.entries] == [1, 2]
    assert path.read_bytes() == good


def test_without_repair_a_torn_tail_is_reported_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    torn = write_journal(path, 3)[:-5]
    path.write_bytes(torn)
    scan = read_journal(path, repair=False)
    assert scan.is_torn and scan.torn_line == 3
    assert path.read_bytes() == torn


@pytest.mark.parametrize("damage", ["flip", "blank", "garbage"])
def test_damage_before_valid_lines_is_corrupt_data_naming_file_and_line(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "journal.jsonl"
    lines = write_journal(path, 5).split(b"\n")
    if damage == "flip":
        lines[1] = lines[1].replace(b'"n":2', b'"n":7')
    elif damage == "blank":
        lines[1] = b""
    else:
        lines[1] = b"\xff\xfe not json"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptData, match=r"journal\.jsonl: line 2: damaged") as caught:
        read_journal(path, repair=True)
    assert str(tmp_path) in str(caught.value)
    assert path.read_bytes() == b"\n".join(lines)  # nothing cut


@pytest.mark.parametrize(("seqs", "line"), [([1, 2, 4], 3), ([1, 3], 2), ([5, 6, 6], 3), ([2, 1], 2)])
def test_a_seq_that_does_not_follow_is_corrupt_data(tmp_path: Path, seqs: list[int], line: int) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(encode_entries([(seq, 1, b"{}")]) for seq in seqs))
    with pytest.raises(CorruptData, match=rf"line {line}: .*seq"):
        read_journal(path, repair=True)


@pytest.mark.parametrize("entries", [
    [(1, 0, b"")],
    [(1, 0, b'{"a":\n1}')],
    [(1, 0, "{}")],
    [(0, 0, b"{}")],
    [(1, -1, b"{}")],
    [(1, 1.5, b"{}")],
    [(True, 0, b"{}")],
    [(1, 0, b"{}"), (3, 0, b"{}")],
    [(2, 0, b"{}"), (1, 0, b"{}")],
    [(2**63, 0, b"{}")],
])
def test_malformed_entries_are_invalid_input(entries: list[tuple[int, int, bytes]]) -> None:
    with pytest.raises(InvalidInput):
        encode_entries(entries)


harms = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("cut"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("blank"), st.integers(0, 10**6), st.integers(0, 40)),
)


@settings(max_examples=300)
@given(count=st.integers(1, 6), harm=harms)
def test_audit_and_recovery_agree_on_what_is_torn_and_what_is_corrupt(
        count: int, harm: tuple[str, int, int]) -> None:
    # inspect and replay --verify (audit_journal) must call damage exactly what recovery
    # (scan_journal) refuses, and a torn tail exactly what recovery cuts
    data = bytearray(encode_entries(entries_for(count)))
    what, at, amount = harm
    at %= len(data)
    if what == "flip":
        data[at] ^= 1 << amount
    elif what == "cut":
        del data[at:]
    else:  # unwritten space (NULs, then a newline) in the middle of a line or between lines
        data[at:at] = b"\x00" * amount + b"\n"
    entries, findings = audit_journal(bytes(data), Path("j"))
    errors = [finding.line for finding in findings if finding.level is Level.ERROR]
    notes = [finding.line for finding in findings if finding.level is Level.NOTE]
    assert len(notes) <= 1 and all(finding.path == Path("j") for finding in findings)
    try:
        scan = scan_journal(bytes(data), "j")
    except CorruptData as exc:
        line = re.match(r"j: line (\d+):", str(exc))
        assert line is not None and int(line.group(1)) in errors, (str(exc), findings)
        return
    assert errors == [], findings
    assert notes == ([scan.torn_line] if scan.is_torn else [])
    assert entries == scan.entries


def test_audit_calls_a_torn_archive_damage(tmp_path: Path) -> None:
    # an archive segment is written whole (renamed into place), never appended to
    data = encode_entries(entries_for(3))[:-4]
    _entries, [live] = audit_journal(data, tmp_path / "journal.jsonl")
    _entries, [archived] = audit_journal(data, tmp_path / "journal-1-3.jsonl", is_archive=True)
    assert (live.level, live.line) == (Level.NOTE, 3) and "torn tail" in live.message
    assert (archived.level, archived.line) == (Level.ERROR, 3) and "not a torn write" in archived.message


def test_a_line_is_the_json_object_orjson_writes_for_it() -> None:
    """Lines are formatted directly, byte for byte the object ``orjson.dumps`` gives
    ``{"seq", "ts", "crc", "cmd"}`` (the format every reader parses), for seqs and
    times up to their largest and payloads of any JSON."""
    rng = random.Random(3)
    payloads = [b'{"t":"x"}', b"[]", b'"\\u2028 \xc3\xa9"', b'{"a":[1,2.5,null,true],"b":{"c":"\\n"}}', b"0"]
    for _ in range(3000):
        seq = rng.choice([1, 9, 10, rng.randrange(1, 2**63), 2**63 - 1])
        ts = rng.choice([0, 9, rng.randrange(2**63), 2**63 - 1])
        payload = rng.choice(payloads)
        crc = zlib.crc32(payload, zlib.crc32(b"%d:%d:" % (seq, ts)))
        expected = orjson.dumps({"seq": seq, "ts": ts, "crc": crc, "cmd": orjson.Fragment(payload)},
                                option=orjson.OPT_APPEND_NEWLINE)
        assert encode_lines([(seq, ts, payload)]) == [expected]
        assert scan_journal(expected, "test").entries == [JournalEntry(seq, ts, payload)]
