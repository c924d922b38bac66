"""The bounded set of open journals: least recently used closed first, a closed
journal reopened by its next write or fsync, never more descriptors open than the
limit, and a descriptor in use never closed under its user."""

from __future__ import annotations

import os
import random
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import mnemex
from mnemex.errors import InvalidInput
from mnemex.persistence import DataDir, FileStore
from mnemex.persistence.openfiles import RESERVED_FILES, OpenFile, OpenFiles, open_files_limit

Opener = Callable[[str], Callable[[], int]]
T0 = 1_700_000_000_000


def entry(seq: int) -> tuple[int, int, bytes]:
    return seq, T0 + seq, b'{"t":"counter.add","n":%d}' % seq


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def holds(fd: int, name: str) -> bool:
    """True if ``fd`` is open on the file ``name`` (a closed number may be reused)."""
    try:
        return os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == name
    except OSError:
        return False


@pytest.fixture
def files_in(tmp_path: Path) -> Iterator[Opener]:
    """An opener per name: opens ``tmp_path/<name>`` and records what it opened."""
    opened: list[tuple[int, str]] = []

    def opener(name: str) -> Callable[[], int]:
        def open_fd() -> int:
            fd = os.open(tmp_path / name, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            opened.append((fd, name))
            return fd
        return open_fd

    yield opener
    for fd, name in opened:
        if holds(fd, name):  # left open by a test that failed
            os.close(fd)


class Owner:
    """What a store does with its journal, on a file of its own: its lock, its
    OpenFile, and asking for a new one when the runtime closed it."""

    def __init__(self, files: OpenFiles, name: str, opener: Opener) -> None:
        self.files = files
        self.name = name
        self.opener = opener(name)
        self.lock = threading.Lock()
        self.file: OpenFile | None = None

    def fd(self) -> int:
        """The descriptor; valid while ``self.lock`` is held (as here)."""
        fd = self.file.use() if self.file is not None else -1
        if fd < 0:
            self.file = self.files.open(self.name, self.lock, self.opener)
            fd = self.file.fd
        return fd


OWNERS: dict[tuple[int, str], Owner] = {}


def owner(files: OpenFiles, name: str, opener: Opener) -> Owner:
    return OWNERS.setdefault((id(files), name), Owner(files, name, opener))


def use(files: OpenFiles, name: str, opener: Opener) -> int:
    """The owner's descriptor, asked for with the owner's lock held, as a store does."""
    who = owner(files, name, opener)
    with who.lock:
        return who.fd()


def lock_of(files: OpenFiles, name: str, opener: Opener) -> threading.Lock:
    return owner(files, name, opener).lock


# -- the cache itself ---------------------------------------------------------------------


def test_the_least_recently_used_descriptor_is_closed_first(files_in: Opener) -> None:
    files = OpenFiles(3)
    fds = {name: use(files, name, files_in) for name in "abc"}
    use(files, "a", files_in)  # a is now the most recently used: b is the oldest
    use(files, "d", files_in)
    assert not files.is_open("b") and not holds(fds["b"], "b")
    assert all(files.is_open(name) for name in "acd") and holds(fds["a"], "a") and holds(fds["c"], "c")
    use(files, "e", files_in)
    assert not files.is_open("c") and files.is_open("a")
    assert len(files) == 3 and files.evicted == 2 and files.opened == 5


@pytest.mark.parametrize(("limit", "names", "discards"), [(4, 10, 0.05), (20, 30, 0.4), (1, 3, 0.1)])
def test_what_stays_open_is_exactly_what_an_lru_model_keeps(files_in: Opener, limit: int, names: int,
                                                              discards: float) -> None:
    files = OpenFiles(limit)
    model: OrderedDict[str, None] = OrderedDict()
    rng = random.Random(limit)
    for _ in range(3000):
        name = f"f{rng.randrange(names)}"
        if rng.random() < discards:  # a store closed (its actor passivated)
            with lock_of(files, name, files_in):
                files.discard(name)
            model.pop(name, None)
        else:
            use(files, name, files_in)
            model[name] = None
            model.move_to_end(name)
            while len(model) > limit:
                model.popitem(last=False)
        assert set(model) == {f"f{n}" for n in range(names) if files.is_open(f"f{n}")}
    assert len(files) == len(model)


def test_a_closed_descriptor_is_opened_again_on_the_next_use(files_in: Opener) -> None:
    files = OpenFiles(1)
    os.write(use(files, "a", files_in), b"one\n")
    use(files, "b", files_in)
    assert not files.is_open("a")
    again = use(files, "a", files_in)
    os.write(again, b"two\n")
    assert files.opened == 3
    with open(os.readlink(f"/proc/self/fd/{again}"), "rb") as handle:
        assert handle.read() == b"one\ntwo\n"


def test_a_descriptor_whose_owner_is_using_it_is_never_closed(files_in: Opener) -> None:
    files = OpenFiles(1)
    a = owner(files, "a", files_in)
    with a.lock:  # a store in the middle of a write (or a journal cut) holds its lock
        busy = a.fd()
        use(files, "b", files_in)  # no room but a's: one over the limit, for now
        assert holds(busy, "a") and files.is_open("a") and len(files) == 2
    use(files, "c", files_in)  # room is made from the owners not using theirs, down to the limit
    assert len(files) == 1 and files.is_open("c") and not holds(busy, "a")


def test_a_descriptor_replaced_or_discarded_is_closed(files_in: Opener) -> None:
    files = OpenFiles(4)
    old = use(files, "a", files_in)
    new = files_in("a2")()
    with lock_of(files, "a", files_in):
        assert files.swap("a", new)
    assert not holds(old, "a") and holds(new, "a2") and len(files) == 1
    assert use(files, "a", files_in) == new
    assert not files.swap("nobody", new)  # nothing open for that owner: the caller keeps its fd
    with lock_of(files, "a", files_in):
        files.discard("a")
    assert not holds(new, "a2") and not files.is_open("a") and len(files) == 0


def test_a_pinned_descriptor_stays_open_until_its_last_unpin(files_in: Opener) -> None:
    """An fsync pins the descriptor and runs without the owner's lock: neither room
    for others, a journal cut's swap, a discard nor the runtime's close closes it
    under the fsync; the last unpin closes what was replaced or discarded."""
    files = OpenFiles(1)
    a = owner(files, "a", files_in)
    with a.lock:
        a.fd()
        file = a.file
        assert file is not None
        pinned_fd = files.pin(file)
        assert files.pin(file) == pinned_fd  # two syncs at once
    use(files, "b", files_in)  # no room but a's, and a's is pinned: one over the limit
    assert holds(pinned_fd, "a") and files.is_open("a") and len(files) == 2
    new = files_in("a2")()
    with a.lock:
        assert files.swap("a", new)  # a journal cut under the fsync
    assert holds(pinned_fd, "a") and file.fd == new
    with a.lock:
        files.unpin(file)
    assert holds(pinned_fd, "a")  # one pin left
    with a.lock:
        files.discard("a")  # the store closed (its actor passivated)
    files.close()
    assert holds(pinned_fd, "a") and holds(new, "a2")
    with a.lock:
        files.unpin(file)
    assert not holds(pinned_fd, "a") and not holds(new, "a2") and file.retired is None
    use(files, "c", files_in)  # not pinned: closed to make room as usual
    assert not files.is_open("b") and len(files) == 1


def test_at_most_the_limit_is_open_under_random_use(files_in: Opener) -> None:
    files = OpenFiles(5)
    before = len(open_fds())
    rng = random.Random(17)
    for _ in range(500):
        name = f"f{rng.randrange(20)}"
        if rng.random() < 0.1:
            with lock_of(files, name, files_in):
                files.discard(name)
        else:
            use(files, name, files_in)
        assert len(files) <= 5
        assert len(open_fds()) - before <= 5
    files.close()
    assert len(open_fds()) == before and len(files) == 0


def test_a_failed_open_takes_no_room(files_in: Opener) -> None:
    files = OpenFiles(2)

    def refuse() -> int:
        raise OSError(24, "Too many open files")

    with pytest.raises(OSError):
        files.open("a", threading.Lock(), refuse)
    assert len(files) == 0 and not files.is_open("a")
    use(files, "b", files_in)
    use(files, "c", files_in)
    assert len(files) == 2 and files.evicted == 0


# -- stores sharing one cache -------------------------------------------------------------


def test_many_stores_write_through_few_descriptors_and_lose_nothing(tmp_path: Path) -> None:
    files = OpenFiles(4)
    stores = [FileStore(tmp_path, "counter", (f"c{n}",), files=files) for n in range(30)]
    written = [0] * len(stores)
    before = len(open_fds())
    rng = random.Random(3)
    for _ in range(600):
        n = rng.randrange(len(stores))
        written[n] += 1
        stores[n].append([entry(written[n])])
        if rng.random() < 0.2:
            stores[rng.randrange(len(stores))].sync()
        assert len(files) <= 4 and len(open_fds()) - before <= 4
    assert files.evicted > 100  # the stores really took turns
    for n, store in enumerate(stores):
        store.sync()
        store.close()
        recovered = FileStore(tmp_path, "counter", (f"c{n}",)).recover()
        assert [e.seq for e in recovered.journal] == list(range(1, written[n] + 1))
    assert len(files) == 0 and len(open_fds()) == before


def test_an_fsync_after_the_journal_was_closed_reopens_it(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    files = OpenFiles(1)
    first = FileStore(tmp_path, "counter", ("first",), files=files)
    second = FileStore(tmp_path, "counter", ("second",), files=files)
    first.append([entry(1)])
    second.append([entry(1)])  # closes first's journal to make room
    assert not files.is_open(first)
    synced: list[str] = []
    real = os.fdatasync

    def record(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", record)
    first.sync()
    assert synced == [str(first.path / "journal.jsonl")]
    first.sync()  # nothing written since: nothing to reopen
    assert synced == [str(first.path / "journal.jsonl")]
    first.close()
    second.close()


def test_a_snapshot_cuts_the_journal_whether_its_descriptor_is_open_or_not(tmp_path: Path) -> None:
    files = OpenFiles(1)
    store = FileStore(tmp_path, "counter", ("a",), files=files)
    other = FileStore(tmp_path, "counter", ("b",), files=files)
    store.append([entry(1), entry(2)])
    store.write_snapshot(2, T0, [b"2"], created=T0)  # open: the new journal takes its place
    store.append([entry(3)])
    other.append([entry(1)])
    assert not files.is_open(store)
    store.write_snapshot(3, T0, [b"3"], created=T0)  # closed: the cut leaves it closed
    assert not files.is_open(store)
    store.append([entry(4)])
    store.sync()
    store.close()
    other.close()
    recovered = FileStore(tmp_path, "counter", ("a",)).recover()
    assert recovered.header is not None and recovered.header.seq == 3
    assert [e.seq for e in recovered.journal] == [4]
    assert len(files) == 0


def test_threads_writing_syncing_and_snapshotting_through_few_descriptors_lose_nothing(
        tmp_path: Path) -> None:
    files = OpenFiles(3)
    stores = [FileStore(tmp_path, "counter", (f"c{n}",), keep=1000, files=files) for n in range(8)]
    locks = [threading.Lock() for _ in stores]
    written = [0] * len(stores)
    errors: list[BaseException] = []
    done = threading.Event()

    def writer(mine: list[int], seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(400):
                n = rng.choice(mine)
                with locks[n]:  # one writer per store at a time, as the kernel guarantees
                    count = rng.randint(1, 3)
                    stores[n].append([entry(written[n] + i) for i in range(1, count + 1)])
                    written[n] += count
        except BaseException as exc:
            errors.append(exc)

    def syncer(seed: int, snapshots: bool) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set():
                n = rng.randrange(len(stores))
                if not snapshots or rng.random() < 0.7:
                    stores[n].sync()
                else:
                    seq = written[n]
                    stores[n].write_snapshot(seq, T0, [b"%d" % seq], created=T0)
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=([n for n in range(8) if n % 2 == k], k)) for k in (0, 1)]
    helpers = [threading.Thread(target=syncer, args=(seed, seed == 6)) for seed in (5, 6)]  # one snapshots
    for thread in writers + helpers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    for thread in helpers:
        thread.join()
    assert errors == []
    for n, store in enumerate(stores):
        store.sync()
        store.close()
        recovered = FileStore(tmp_path, "counter", (f"c{n}",)).recover()
        assert recovered.last_seq == written[n]
        first = recovered.header.seq + 1 if recovered.header is not None else 1
        assert [e.seq for e in recovered.journal] == list(range(first, written[n] + 1))
    assert len(files) == 0


# -- the limit ----------------------------------------------------------------------------


def fake_limit(monkeypatch: pytest.MonkeyPatch, soft: int) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, resource.RLIM_INFINITY))


@pytest.mark.parametrize(("soft", "expected"), [(256, 128), (1024, 512), (65_536, 4096),
                                                (resource.RLIM_INFINITY, 4096), (200, 72)])
def test_the_default_is_half_the_process_limit_and_at_most_4096(monkeypatch: pytest.MonkeyPatch, soft: int,
                                                                 expected: int) -> None:
    fake_limit(monkeypatch, soft)
    assert open_files_limit(None) == expected


def test_a_limit_that_leaves_too_few_descriptors_is_refused_naming_the_setting(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_limit(monkeypatch, 1024)
    assert open_files_limit(1024 - RESERVED_FILES) == 1024 - RESERVED_FILES
    with pytest.raises(InvalidInput, match=r"max_open_files is 1,000.*1,024 files.*at most 896") as caught:
        open_files_limit(1000)
    assert caught.value.field == "storage.max_open_files"
    with pytest.raises(InvalidInput, match="max_open_files is 1,000"):
        DataDir(tmp_path / "data", max_open_files=1000)
    assert not (tmp_path / "data").exists()  # refused before anything was created


def test_the_setting_is_checked_like_the_others() -> None:
    with pytest.raises(InvalidInput, match=r"config\.storage\.max_open_files is 0; it must be"):
        mnemex.Config(max_open_files=0)
    assert mnemex.Config(max_open_files=64).storage.max_open_files == 64
    assert mnemex.Config().storage.max_open_files is None


async def test_the_runtime_keeps_its_journals_within_the_limit(tmp_path: Path) -> None:
    from mnemex.testing import Add, Get, counter_kind

    cfg = mnemex.Config(data_dir=str(tmp_path), max_open_files=8)
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        before = len(open_fds())
        for n in range(100):
            await rt.ask("counter", f"c{n}", Add(n))
        health = rt.journal_health()
        assert health["max_open_files"] == 8 and health["open_files"] <= 8
        assert health["open_files_evicted"] >= 92
        assert len(open_fds()) <= before + 8
        assert await rt.ask("counter", "c5", Add(1)) == 6  # its journal reopened
    async with mnemex.open_runtime(cfg, kinds=[counter_kind()]) as rt:
        assert [await rt.ask("counter", f"c{n}", Get()) for n in (0, 5, 99)] == [(0, 1), (6, 2), (99, 1)]
