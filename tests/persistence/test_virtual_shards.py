"""Virtual shards: a stable hash places every actor, its folder sits under its
virtual shard's folder, and a data directory of the layout before them moves."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput, StorageError
from mnemex.persistence import ActorLocation, DataDir, FileStore, find_actors
from mnemex.persistence.layout import check_kind, encode_key, legacy_actor_dir
from mnemex.persistence.shards import VSHARDS, shard_dir, split_vshards, vshard_of

FIXTURE = Path(__file__).parents[1] / "fixtures" / "datadir-0.1" / "data"


def test_the_hash_is_pinned() -> None:
    # Changing any of these moves keys between shards and breaks every cluster's data: never.
    assert [vshard_of("agent", ("assistant",)), vshard_of("scope", ("chat", "alice")),
            vshard_of("scope", ("chat", "Alice")), vshard_of("scope", ("chat.alice",))] == PINNED


PINNED = [3984, 41, 3660, 2197]


def test_keys_spread_over_every_virtual_shard() -> None:
    counts = Counter(vshard_of("scope", (f"user-{i}", "app")) for i in range(40_960))
    assert len(counts) >= VSHARDS - 4  # 10 a shard expected: an empty one is rare (e^-10)
    assert max(counts.values()) < 35  # a bad hash piles keys up


@settings(max_examples=200)
@given(kind=st.sampled_from(["agent", "scope", "state"]),
       key=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=3).map(tuple))
def test_vshard_depends_on_kind_and_key_only(kind: str, key: tuple[str, ...]) -> None:
    vshard = vshard_of(kind, key)
    assert 0 <= vshard < VSHARDS and vshard == vshard_of(kind, tuple(list(key)))


@pytest.mark.parametrize("shards", [1, 2, 3, 7, 4096])
def test_split_deals_every_vshard_once_in_runs(shards: int) -> None:
    parts = split_vshards(shards)
    assert [v for part in parts for v in part] == list(range(VSHARDS))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize("bad", [0, -1, 4097, 1.5, "2"])
def test_split_refuses_a_bad_count(bad: object) -> None:
    with pytest.raises(InvalidInput, match="shards must be"):
        split_vshards(bad)  # type: ignore[arg-type]


def test_shard_folder_names() -> None:
    assert shard_dir(Path("/d"), 0) == Path("/d/shards/000")
    assert shard_dir(Path("/d"), 4095) == Path("/d/shards/fff")
    with pytest.raises(InvalidInput, match="virtual shard"):
        shard_dir(Path("/d"), 4096)


def test_kind_shard_is_reserved() -> None:
    with pytest.raises(InvalidInput, match="reserved"):
        check_kind("shard")


def _legacy_copy(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    return data


def test_an_old_layout_moves_into_virtual_shards_on_open(tmp_path: Path) -> None:
    data = _legacy_copy(tmp_path)
    before = {(loc.kind, loc.key): sorted(os.listdir(loc.path)) for loc in find_actors(data)}
    assert len(before) == 3 and all(loc.path.parent.parent == data for loc in find_actors(data))
    with DataDir(data) as opened:
        after = {(loc.kind, loc.key): loc for loc in opened.actors()}
    assert set(after) == set(before)
    for (kind, key), location in after.items():
        assert location.path == shard_dir(data, vshard_of(kind, key)) / f"{kind}s" / encode_key(key)
        assert sorted(os.listdir(location.path)) == before[(kind, key)]  # moved whole
    assert not (data / "scopes").exists() and not (data / "agents").exists()


def test_a_move_cut_short_is_finished_by_the_next_open(tmp_path: Path) -> None:
    data = _legacy_copy(tmp_path)
    first = next(iter(find_actors(data)))
    target = FileStore(data, first.kind, first.key).path
    target.parent.mkdir(parents=True)
    os.rename(first.path, target)  # the crash came after one rename
    with DataDir(data) as opened:
        assert len(list(opened.actors())) == 3
    assert all(loc.path.is_relative_to(data / "shards") for loc in find_actors(data))


def test_an_actor_in_both_places_is_refused_not_guessed(tmp_path: Path) -> None:
    data = _legacy_copy(tmp_path)
    first = next(iter(find_actors(data)))
    shutil.copytree(first.path, FileStore(data, first.kind, first.key).path)
    with pytest.raises(StorageError, match="both exist"):
        DataDir(data)
    assert (data / "LOCK").exists()
    with DataDir(tmp_path / "other"):  # the failed open released its lock
        pass


def test_an_old_folder_of_unknown_key_moves_when_its_actor_opens(tmp_path: Path) -> None:
    data = tmp_path / "data"
    key = ("app", "u" * 300)  # a shortened, hashed folder name: its key is only in key.json
    old = legacy_actor_dir(data, "scope", key)
    old.mkdir(parents=True)
    (old / "journal.jsonl").write_bytes(b"")  # and no key.json: nothing says whose it is
    with DataDir(data) as opened:
        assert old.exists() and list(opened.actors()) == []
        store = opened.store("scope", key)
        assert not old.exists() and (store.path / "journal.jsonl").exists()
        store.append([(1, 0, b"{}")])
        assert [loc for loc in opened.actors()] == [ActorLocation("scope", key, store.path)]
