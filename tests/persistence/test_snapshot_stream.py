"""Snapshots written streaming: the body as it is encoded with its header rewritten in
place, sidecars given as bytes, chunks or a writer, and required sidecars."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.persistence.snapshot import (
    decode_snapshot,
    encode_snapshot,
    read_sidecars,
    sidecar_bytes,
    write_snapshot_stream,
)
from mnemex.persistence.store import FileStore, MemoryStore

KEY = ("chat", "alice")
records_strategy = st.lists(st.binary(max_size=40).map(lambda raw: raw.replace(b"\n", b" ")), max_size=30)


def entries(first: int, last: int) -> list[tuple[int, int, bytes]]:
    return [(seq, 1_000 + seq, b'{"n":%d}' % seq) for seq in range(first, last + 1)]


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, seq=st.integers(0, 2**40), extra=st.dictionaries(st.text(max_size=5),
                                                                                  st.integers(-2**62, 2**62), max_size=3))
def test_a_streamed_snapshot_reads_back_as_the_encoded_one(tmp_path_factory: pytest.TempPathFactory,
                                                           records: list[bytes], seq: int,
                                                           extra: dict[str, int]) -> None:
    folder = tmp_path_factory.mktemp("stream")
    size = write_snapshot_stream(folder, iter(records), kind="scope", key=KEY, seq=seq, ts=7, created=9,
                                 extra=extra, sidecars={"blob": b"xyz"})
    data = (folder / f"snapshot-{seq}.jsonl").read_bytes()
    header, decoded = decode_snapshot(data, "streamed")
    line, body = encode_snapshot("scope", KEY, seq, 7, records, created=9, extra=extra, sidecars={"blob": b"xyz"})
    expected, _ = decode_snapshot(line + b"".join(body), "encoded")
    assert header == expected and list(decoded) == records and size == header.bytes
    # the header line was rewritten in place: the same JSON, padded with spaces
    first = data.split(b"\n", 1)[0]
    assert orjson.loads(first) == orjson.loads(line) and first.rstrip(b" ") == line.rstrip(b"\n")
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"snapshot-{seq}.jsonl", f"snapshot-{seq}.blob.bin"])


def test_sidecars_as_chunks_and_as_writers_are_checksummed_like_bytes(tmp_path: Path) -> None:
    made: list[str] = []

    def chunks() -> Iterator[bytes]:
        made.append("chunks")  # made as they are written, not before
        yield b"abc"
        yield b""
        yield b"defg"

    def writer(path: str) -> None:
        Path(path).write_bytes(b"written by a library")

    sidecars = {"plain": b"0123", "chunked": chunks(), "saved": writer}
    write_snapshot_stream(tmp_path, [b"{}"], kind="scope", key=KEY, seq=3, ts=1, created=2, sidecars=sidecars,
                          required=["saved"])
    header, _ = decode_snapshot((tmp_path / "snapshot-3.jsonl").read_bytes(), "s")
    expected = {"plain": b"0123", "chunked": b"abcdefg", "saved": b"written by a library"}
    assert header.sidecars == {name: (len(blob), zlib.crc32(blob)) for name, blob in expected.items()}
    assert header.required == ("saved",)
    assert {name: bytes(blob) for name, blob in read_sidecars(tmp_path, header).items()} == expected
    assert made == ["chunks"] and not list(tmp_path.glob("*.tmp"))
    # the same sidecars as bytes, for stores that keep snapshots in memory
    assert sidecar_bytes(iter([b"ab", b"c"])) == b"abc" and sidecar_bytes(writer) == b"written by a library"


@pytest.mark.parametrize(("records", "sidecars", "required", "words"), [
    ([b"ok", b"a\nb"], {}, (), "record 1 holds a newline"),
    (["text"], {}, (), "must be bytes"),
    ([b"ok"], {"ok": "text"}, (), "must be bytes, chunks of bytes or a writer"),
    ([b"ok"], {"ok": iter(["text"])}, (), "a chunk is str"),
    ([b"ok"], {"Bad Name": b""}, (), "sidecar name"),
    ([b"ok"], {}, ("vectors",), "required sidecar"),
])
def test_bad_input_is_refused_and_leaves_the_older_snapshot_alone(tmp_path: Path, records: list[object],
                                                                  sidecars: dict[str, object],
                                                                  required: tuple[str, ...], words: str) -> None:
    write_snapshot_stream(tmp_path, [b"old"], kind="scope", key=KEY, seq=1, ts=1, created=1)
    before = (tmp_path / "snapshot-1.jsonl").read_bytes()
    with pytest.raises(InvalidInput, match=words):
        write_snapshot_stream(tmp_path, records, kind="scope", key=KEY, seq=2, ts=2, created=2,  # type: ignore[arg-type]
                              sidecars=sidecars, required=required)  # type: ignore[arg-type]
    assert not (tmp_path / "snapshot-2.jsonl").exists() and not list(tmp_path.glob("*.tmp"))
    assert (tmp_path / "snapshot-1.jsonl").read_bytes() == before


def test_a_writer_that_fails_leaves_no_file_and_the_error_escapes(tmp_path: Path) -> None:
    def broken(path: str) -> None:
        Path(path).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_snapshot_stream(tmp_path, [b"{}"], kind="scope", key=KEY, seq=4, ts=1, created=1,
                              sidecars={"graph": broken})
    assert list(tmp_path.iterdir()) == []


def test_a_snapshot_whose_required_sidecar_is_damaged_is_passed_over_for_an_older_one(tmp_path: Path) -> None:
    store = FileStore(tmp_path, "scope", KEY, keep=2)
    store.append(entries(1, 3))
    store.sync()
    store.write_snapshot(2, 1_002, [b'{"at":2}'], created=1, sidecars={"v": b"two", "fast": b"x"}, required={"v"})
    store.append(entries(4, 5))
    store.sync()
    store.write_snapshot(4, 1_004, [b'{"at":4}'], created=1, sidecars={"v": b"four", "fast": b"y"},
                         required={"v"})
    recovered = store.recover()
    assert recovered.header is not None and recovered.header.seq == 4
    assert bytes(recovered.sidecars["v"]) == b"four"
    assert recovered.sidecar_paths["v"] == str(store.path / "snapshot-4.v.bin")
    # an optional sidecar lost: the same snapshot, without it
    (store.path / "snapshot-4.fast.bin").unlink()
    recovered = store.recover()
    assert recovered.header is not None and recovered.header.seq == 4 and "fast" not in recovered.sidecars
    # the required one damaged: the older snapshot and the journal after it
    damaged = store.path / "snapshot-4.v.bin"
    damaged.write_bytes(b"fouR")
    recovered = store.recover()
    assert recovered.header is not None and recovered.header.seq == 2
    assert list(recovered.records) == [b'{"at":2}'] and bytes(recovered.sidecars["v"]) == b"two"
    assert [entry.seq for entry in recovered.journal] == [3, 4, 5]
    store.close()


def test_a_memory_store_keeps_streamed_sidecars_as_bytes() -> None:
    store = MemoryStore("scope", KEY)
    store.append(entries(1, 1))

    def writer(path: str) -> None:
        Path(path).write_bytes(b"saved")

    store.write_snapshot(1, 1_001, iter([b"{}"]), created=1, sidecars={"g": writer, "c": iter([b"a", b"b"])},
                         required={"g"})
    recovered = store.recover()
    assert recovered.header is not None and recovered.header.required == ("g",)
    assert recovered.sidecars == {"g": b"saved", "c": b"ab"} and recovered.sidecar_paths == {}


@pytest.mark.parametrize("chunk", [7, 64, 1 << 23])
def test_the_journal_is_cut_a_chunk_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    import mnemex.persistence.store as store_module

    monkeypatch.setattr(store_module, "_CUT_CHUNK", chunk)
    store = FileStore(tmp_path, "scope", KEY, keep=2)
    store.append([(seq, 1_000 + seq, b'{"n":%d,"pad":"%s"}' % (seq, b"x" * (seq % 13))) for seq in range(1, 41)])
    store.sync()
    before = (store.path / "journal.jsonl").read_bytes()
    lines = before.splitlines(keepends=True)
    store.write_snapshot(10, 1_010, [b"{}"], created=1)
    store.write_snapshot(25, 1_025, [b"{}"], created=1)
    # the lines between the two snapshots kept are archived, the rest stay in the journal
    assert (store.path / "journal-11-25.jsonl").read_bytes() == b"".join(lines[10:25])
    assert (store.path / "journal.jsonl").read_bytes() == b"".join(lines[25:])
    store.append([(41, 1_041, b'{"n":41}')])
    store.sync()
    recovered = store.recover()
    assert recovered.header is not None and [e.seq for e in recovered.journal] == list(range(26, 42))
    store.close()
