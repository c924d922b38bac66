"""Actor keys map to safe, distinct folder names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.errors import InvalidInput
from mnemex.persistence import actor_dir, decode_key, encode_key
from mnemex.persistence.shards import vshard_of

SAFE_NAME = re.compile(r"[a-z0-9._~-]+")

tricky_text = st.sampled_from([
    ".", "..", "/", "../x", "a/../../b", "\x00", "a\x00b", "~", "_", "_61", "A", "a", "ß", "SS", "İ",
    "é", "e\u0301", "\U0001f600", " ", "-", "--", "x" * 10_000, "Ü" * 5_000, "CON", "nul", "a.b", "a_2eb",
])
component = st.one_of(tricky_text, st.text(min_size=1, max_size=40),
                      st.text(alphabet="aA._~/-\x00é", min_size=1, max_size=200))
keys = st.lists(component, min_size=1, max_size=3).map(tuple)


@settings(max_examples=300)
@given(key=keys)
def test_encoded_names_are_safe_short_and_decode_back(key: tuple[str, ...]) -> None:
    name = encode_key(key)
    assert SAFE_NAME.fullmatch(name)
    assert name not in {".", ".."}
    assert len(name.encode()) <= 255
    assert len(name) <= 120
    decoded = decode_key(name)
    if "~" in name:
        assert decoded is None
    else:
        assert decoded == key


@settings(max_examples=300)
@given(first=keys, second=keys)
def test_distinct_keys_never_share_a_name(first: tuple[str, ...], second: tuple[str, ...]) -> None:
    assert (encode_key(first) == encode_key(second)) == (first == second)


@settings(max_examples=100)
@given(text=st.text(min_size=1, max_size=30))
def test_case_variants_get_names_that_differ_beyond_case(text: str) -> None:
    for variant in {text.upper(), text.lower(), text.swapcase()} - {text}:
        if variant:
            assert encode_key((variant,)).lower() != encode_key((text,)).lower()


@settings(max_examples=100)
@given(key=keys)
def test_actor_dir_stays_inside_the_kind_folder_of_its_virtual_shard(key: tuple[str, ...]) -> None:
    data_dir = Path("/srv/mnemex-data")  # resolved lexically: nothing is created
    folder = actor_dir(data_dir, "scope", key)
    kind_folder = data_dir / "shards" / f"{vshard_of('scope', key):03x}" / "scopes"
    assert folder.parent == kind_folder
    assert folder.resolve().is_relative_to(kind_folder)


@pytest.mark.parametrize(("key", "name"), [
    (("assistant",), "assistant"),
    (("chat", "alice"), "chat.alice"),
    (("Alice",), "_41lice"),
    (("a.b",), "a_2eb"),
    (("../x",), "_2e_2e_2fx"),
    (("é",), "_c3_a9"),
    (("a", "b", "c-d"), "a.b.c-d"),
])
def test_known_names(key: tuple[str, ...], name: str) -> None:
    assert encode_key(key) == name
    assert decode_key(name) == key


def test_long_keys_are_shortened_with_a_hash() -> None:
    name = encode_key(("u" * 200,))
    assert len(name) == 80 + 1 + 32
    assert name.startswith("u" * 80 + "~")
    assert encode_key(("u" * 200,)) != encode_key(("u" * 201,))
    assert len(encode_key(("u" * 120,))) == 120  # exactly at the limit: not shortened


@pytest.mark.parametrize("name", ["_61", "A", "a..b", ".a", "a.", "", "_zz", "_c3", "a~b", "x" * 121, "_2"])
def test_names_encode_key_never_produces_do_not_decode(name: str) -> None:
    assert decode_key(name) is None


@pytest.mark.parametrize("key", [(), ("",), ("a", ""), ["a"], ("a", 1), ("\ud800",)])
def test_malformed_keys_are_invalid_input(key: object) -> None:
    with pytest.raises(InvalidInput):
        encode_key(key)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["", "Agent", "9x", "a/b", "..", "a" * 33])
def test_malformed_kinds_are_invalid_input(tmp_path: Path, kind: str) -> None:
    with pytest.raises(InvalidInput, match="kind"):
        actor_dir(tmp_path, kind, ("a",))
