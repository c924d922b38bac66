"""The snapshot file format: header, body checks, sidecars, fallback."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import CorruptData, InvalidInput
from mnemex.persistence.snapshot import (
    decode_snapshot,
    encode_snapshot,
    load_newest_snapshot,
    read_sidecars,
    write_snapshot_files,
)

KEY = ("chat", "alice")
records_strategy = st.lists(st.binary(max_size=40).map(lambda raw: raw.replace(b"\n", b" ")), max_size=20)


def snapshot_bytes(seq: int, records: list[bytes], **kwargs: object) -> bytes:
    header, body = encode_snapshot("scope", KEY, seq, 1_000 + seq, records, created=5_000, **kwargs)  # type: ignore[arg-type]
    return b"".join([header, *body])


def write(folder: Path, seq: int, records: list[bytes], sidecars: dict[str, bytes] | None = None) -> Path:
    header, body = encode_snapshot("scope", KEY, seq, 1_000 + seq, records, created=5_000, sidecars=sidecars)
    write_snapshot_files(folder, seq, header, body, sidecars)
    return folder / f"snapshot-{seq}.jsonl"


@settings(max_examples=100)
@given(records=records_strategy, seq=st.integers(0, 2**40))
def test_records_round_trip_byte_for_byte(records: list[bytes], seq: int) -> None:
    header, decoded = decode_snapshot(snapshot_bytes(seq, records, extra={"embedder": "hash-64"}), "s")
    assert list(decoded) == records
    assert [decoded[i] for i in range(-len(records), len(records))] == records + records
    assert decoded[1:] == records[1:]
    assert (header.seq, header.ts, header.created, header.count) == (seq, 1_000 + seq, 5_000, len(records))
    assert (header.kind, header.key, header.extra) == ("scope", KEY, {"embedder": "hash-64"})


def test_the_header_holds_exactly_the_documented_fields() -> None:
    data = snapshot_bytes(7, [b'{"a":1}', b'{"b":2}'], extra={"memories": 2})
    header_line, body = data.split(b"\n", 1)
    assert orjson.loads(header_line) == {
        "format": 1, "kind": "scope", "key": ["chat", "alice"], "seq": 7, "ts": 1_007, "created": 5_000,
        "count": 2, "bytes": len(body), "crc": zlib.crc32(body), "extra": {"memories": 2},
    }
    assert body == b'{"a":1}\n{"b":2}\n'


@pytest.mark.parametrize(("records", "kwargs"), [
    ([b"a\nb"], {}),
    ([b"ok", b"\n"], {}),
    (["text"], {}),
    ([b"ok"], {"extra": {"x": object()}}),
    ([b"ok"], {"sidecars": {"Bad Name": b""}}),
    ([b"ok"], {"sidecars": {"../x": b""}}),
    ([b"ok"], {"sidecars": {"ok": "text"}}),
])
def test_malformed_snapshots_are_invalid_input(records: list[bytes], kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        snapshot_bytes(1, records, **kwargs)


def damaged(data: bytes, how: str) -> bytes:
    header_line, body = data.split(b"\n", 1)
    header = orjson.loads(header_line)
    if how == "flip":
        return data[:-3] + bytes([data[-3] ^ 0x20]) + data[-2:]
    if how == "truncated":
        return data[:-4]
    if how == "count":
        header["count"] += 1
    elif how == "format":
        header["format"] = 2
    elif how == "kind":
        header["kind"] = 3
    elif how == "no-header":
        return b'{"format":1'
    return orjson.dumps(header) + b"\n" + body


@pytest.mark.parametrize("how", ["flip", "truncated", "count", "format", "kind", "no-header"])
def test_any_disagreement_is_corrupt_data(how: str) -> None:
    data = snapshot_bytes(3, [b'{"a":1}', b'{"bb":22}'])
    with pytest.raises(CorruptData):
        decode_snapshot(damaged(data, how), "s")


def test_a_damaged_newest_snapshot_falls_back_to_the_older_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path, 10, [b"old"])
    newest = write(tmp_path, 20, [b"new-1", b"new-2"])
    newest.write_bytes(damaged(newest.read_bytes(), "flip"))
    with caplog.at_level(logging.WARNING, logger="mnemex.persistence"):
        loaded = load_newest_snapshot(tmp_path, "scope", KEY)
    assert loaded is not None
    assert (loaded[0].seq, list(loaded[1])) == (10, [b"old"])
    assert "snapshot-20.jsonl" in caplog.text


def test_a_leftover_tmp_file_is_ignored(tmp_path: Path) -> None:
    write(tmp_path, 10, [b"done"])
    (tmp_path / "snapshot-20.jsonl.tmp").write_bytes(snapshot_bytes(20, [b"half"])[:-3])
    loaded = load_newest_snapshot(tmp_path, "scope", KEY)
    assert loaded is not None and loaded[0].seq == 10


def test_a_snapshot_of_another_actor_is_not_used(tmp_path: Path) -> None:
    write(tmp_path, 10, [b"mine"])
    assert load_newest_snapshot(tmp_path, "scope", ("chat", "bob")) is None
    assert load_newest_snapshot(tmp_path, "agent", KEY) is None


def test_no_snapshot_is_none(tmp_path: Path) -> None:
    assert load_newest_snapshot(tmp_path / "missing", "scope", KEY) is None


def test_sidecars_that_are_missing_or_damaged_are_left_out(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path, 4, [b"r"], sidecars={"hnsw": b"\x00\x01" * 100, "ids": b"abc", "gone": b"zz"})
    (tmp_path / "snapshot-4.ids.bin").write_bytes(b"abd")
    (tmp_path / "snapshot-4.gone.bin").unlink()
    loaded = load_newest_snapshot(tmp_path, "scope", KEY)
    assert loaded is not None
    with caplog.at_level(logging.WARNING, logger="mnemex.persistence"):
        found = read_sidecars(tmp_path, loaded[0])
    assert found == {"hnsw": b"\x00\x01" * 100}
    assert "snapshot-4.ids.bin" in caplog.text and "snapshot-4.gone.bin" in caplog.text


def test_a_large_sidecar_is_checked_a_chunk_at_a_time_and_a_flip_in_any_chunk_is_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mmap

    from mnemex.persistence import snapshot as module

    # a mapped sidecar's pages are let go of chunk by chunk as its checksum is read
    monkeypatch.setattr(module, "_CHECK_CHUNK", mmap.PAGESIZE)
    blob = bytes(range(256)) * (3 * mmap.PAGESIZE // 256) + b"tail"  # three chunks and a bit
    write(tmp_path, 4, [b"r"], sidecars={"big": blob})
    loaded = load_newest_snapshot(tmp_path, "scope", KEY)
    assert loaded is not None
    found = read_sidecars(tmp_path, loaded[0])
    assert bytes(found["big"]) == blob  # read back after its pages were let go of
    path = tmp_path / "snapshot-4.big.bin"
    for at in (5, mmap.PAGESIZE + 7, 3 * mmap.PAGESIZE + 1):
        damaged = bytearray(blob)
        damaged[at] ^= 0x01
        path.write_bytes(bytes(damaged))
        assert read_sidecars(tmp_path, loaded[0]) == {}


def rss_file_kb() -> int | None:
    try:
        with open("/proc/self/status") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("RssFile:")), None)
    except OSError:
        return None


@pytest.mark.skipif(rss_file_kb() is None, reason="no RssFile in /proc/self/status")
def test_a_restores_mapped_files_leave_the_process_once_read(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import mmap

    from mnemex.persistence import snapshot as module
    from mnemex.persistence.snapshot import let_pages_go, map_file

    let_go: list[tuple[int, int]] = []
    real = module._let_range_go

    def noted(data: object, begin: int, end: int) -> None:
        let_go.append((begin, end))
        real(data, begin, end)

    monkeypatch.setattr(module, "_let_range_go", noted)
    monkeypatch.setattr(module, "_CHECK_CHUNK", module._SCAN)  # (8 MB: six chunks of the body)

    line = b"x" * 999
    path = write(tmp_path, 3, [line] * 48_000)  # a body of 48 MB
    data = map_file(path)
    assert isinstance(data, mmap.mmap)
    before = rss_file_kb()
    header, lines = decode_snapshot(data, str(path))  # (checksummed and counted: every page read)
    assert header.count == len(lines) == 48_000
    counted = rss_file_kb()
    assert before is not None and counted is not None and counted < before + 10_000
    # each pass over the body (its checksum, then its lines counted) lets its pages go as
    # it goes, not at its end: neither holds the whole body in the process
    body = len(data) - data.find(b"\n") - 1
    assert len(let_go) >= 2 * -(-body // module._SCAN)
    assert all(end - begin <= module._SCAN for begin, end in let_go)

    def read_all() -> int:
        assert sum(len(one) for one in lines) == 48_000 * 999 and lines[47_999] == line
        found = rss_file_kb()
        assert found is not None and found > counted + 30_000
        return found

    for part in (lines, memoryview(data)[10:]):  # (the lines, and a sidecar's view of its file)
        read = read_all()
        let_pages_go(part, b"bytes are left alone")
        after = rss_file_kb()
        assert after is not None and after < read - 30_000
    assert lines[123] == line  # (read back from the page cache)
    # a private copy's pages may hold writes: left alone
    with open(path, "rb") as handle:
        private = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    private[:6] = b"HEADER"
    let_pages_go(private)
    assert private[:6] == b"HEADER"


def test_a_snapshot_with_no_records_round_trips(tmp_path: Path) -> None:
    write(tmp_path, 0, [])
    loaded = load_newest_snapshot(tmp_path, "scope", KEY)
    assert loaded is not None and list(loaded[1]) == [] and loaded[0].bytes == 0


def test_records_from_a_generator_read_a_chunk_at_a_time_give_the_same_file() -> None:
    from mnemex.persistence import snapshot as module

    records = [b'{"n":%d}' % n for n in range(3 * module._CHUNK_RECORDS + 7)]  # several chunks and a tail
    assert snapshot_bytes(4, records) == snapshot_bytes(4, (line for line in records))  # type: ignore[arg-type]
    header, body = encode_snapshot("scope", KEY, 4, 1_004, iter(records), created=5_000)
    assert orjson.loads(header)["count"] == len(records) and len(body) == 4
    bad = [*records[:-1], b"torn\nline"]
    with pytest.raises(InvalidInput, match=f"snapshot record {len(records) - 1} holds a newline"):
        encode_snapshot("scope", KEY, 4, 1_004, iter(bad), created=5_000)
