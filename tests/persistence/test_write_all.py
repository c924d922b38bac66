"""``write_all`` writes every byte of its chunks in order, gathering many small ones
into one ``writev`` (a closing scope's snapshot lends its indexes' buffers, a chunk a
word) and finishing whatever a short write left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.persistence import _files
from mnemex.persistence._files import write_all

chunk_lists = st.lists(st.binary(max_size=40), max_size=1500)


@settings(max_examples=60, deadline=None)
@given(chunks=chunk_lists, short=st.integers(0, 64))
def test_every_byte_is_written_in_order_whatever_a_call_takes(tmp_path_factory: pytest.TempPathFactory,
                                                             chunks: list[bytes], short: int) -> None:
    """``short``: each writev and write takes at most that many bytes more than
    nothing (0: whatever the kernel takes)."""
    path = tmp_path_factory.mktemp("w") / "out"
    calls: list[int] = []
    writev, write = os.writev, os.write

    def short_writev(fd: int, views: list[memoryview]) -> int:
        calls.append(len(views))
        assert len(views) <= _files._WRITEV_MAX
        if short:
            return write(fd, b"".join(views)[: 1 + len(calls) % short])
        return writev(fd, views)

    def short_write(fd: int, data: memoryview) -> int:
        return write(fd, data[: 1 + len(calls) % short] if short else data)

    mp = pytest.MonkeyPatch()
    mp.setattr(_files.os, "writev", short_writev)
    mp.setattr(_files.os, "write", short_write)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            views = [memoryview(chunk) if i % 2 else chunk for i, chunk in enumerate(chunks)]
            assert write_all(fd, iter(views)) == sum(map(len, chunks))
        finally:
            os.close(fd)
    finally:
        mp.undo()
    assert path.read_bytes() == b"".join(chunks)
    # many small chunks take one call per _WRITEV_MAX of them, not one each
    assert len(calls) <= -(-len(chunks) // _files._WRITEV_MAX)


def test_typed_views_are_written_as_their_bytes(tmp_path: Path) -> None:
    path = tmp_path / "out"
    ints = memoryview(bytearray(range(16))).cast("i")  # four int32s: len() counts items
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        assert write_all(fd, [ints, b"", b"tail", ints]) == 36
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(range(16)) + b"tail" + bytes(range(16))
