"""Config is checked when it is built, in Python exactly as from TOML or JSON, from
the constraints declared on its sections' fields; the flat names of earlier versions
keep working as shortcuts."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

import mnemex
from mnemex.config import SHORTCUTS, MemoriesConfig, ServerConfig, StorageConfig

BAD: list[tuple[str, Any, str]] = [
    ("fsync", "sometimes", "one of 'always', 'batch', 'never'"),
    ("overload", "drop", "one of 'wait', 'fail'"),
    ("search_mode", "semantic", "one of 'keyword', 'fulltext', 'vector', 'hybrid'"),
    ("embedder", "bert", "one of 'hashing', 'minilm'"),
    ("fusion", "sum", "one of 'weighted', 'rrf'"),
    ("agent_policy", "forever", "'stateless'"),
    ("mailbox_size", 0, "an integer >= 1"),
    ("mailbox_size", "10", "an integer >= 1"),
    ("mailbox_size", 2.5, "an integer >= 1"),
    ("mailbox_size", True, "an integer >= 1"),
    ("max_content_bytes", -1, "an integer >= 1"),
    ("ask_timeout", 0, "a number > 0"),
    ("ask_timeout", float("nan"), "a number > 0"),
    ("ask_timeout", float("inf"), "a number > 0"),
    ("agent_session_ttl", -1.0, "a number > 0 or None"),
    ("snapshot_growth", -0.5, "a number >= 0"),
    ("fusion_vector_weight", -1, "a number >= 0"),
    ("gc_freeze", "yes", "true or false"),
    ("data_dir", 3, "a string or None"),
]


@pytest.mark.parametrize(("field", "value", "allowed"), BAD, ids=[f"{f}={v!r}" for f, v, _ in BAD])
def test_a_bad_value_built_in_python_fails_naming_the_field_and_what_is_allowed(
        field: str, value: Any, allowed: str) -> None:
    path = ".".join(SHORTCUTS[field])
    with pytest.raises(mnemex.InvalidInput, match=f"config.{path} is") as error:
        mnemex.Config(**{field: value})
    assert allowed in str(error.value) and error.value.field == path
    assert (f"(set as {field})" in str(error.value)) == (field != path)


TOML_BAD = [(f, v) for f, v, _ in BAD if isinstance(v, str | int) and not isinstance(v, bool)
            and f != "data_dir"]


@pytest.mark.parametrize(("field", "value"), TOML_BAD, ids=[f"{f}={v!r}" for f, v in TOML_BAD])
def test_the_same_bad_value_from_toml_fails_naming_the_field(field: str, value: Any) -> None:
    text = f"{field} = {value!r}\n".replace("'", '"')
    with pytest.raises(mnemex.InvalidInput, match=field) as error:
        mnemex.load_config(text)
    assert error.value.field == ".".join(SHORTCUTS[field])
    section, name = SHORTCUTS[field]
    with pytest.raises(mnemex.InvalidInput, match=f"config.{section}.{name}"):
        mnemex.load_config(f"[{section}]\n{name} = {value!r}\n".replace("'", '"'))


def test_good_values_pass_and_ints_stand_for_floats() -> None:
    config = mnemex.Config(fsync="always", search_mode="keyword", ask_timeout=5, agent_session_ttl=None,
                           agent_policy="keep_all", mailbox_size=1)
    assert (config.fsync, config.ask_timeout, config.mailbox_size) == ("always", 5, 1)
    assert mnemex.load_config('fsync = "never"\nask_timeout = 2\n') == mnemex.Config(fsync="never", ask_timeout=2)


def test_cross_field_rules_still_hold() -> None:
    with pytest.raises(mnemex.InvalidInput, match="both 0"):
        mnemex.Config(fusion_fulltext_weight=0, fusion_vector_weight=0)
    with pytest.raises(mnemex.InvalidInput, match="rank_importance_weight"):
        mnemex.Config(rank_importance_weight=1.5)


def test_sections_and_shortcuts_build_the_same_config() -> None:
    by_section = mnemex.Config(storage=StorageConfig(data_dir=None, fsync="always"),
                               memories=MemoriesConfig(max_top_k=50))
    flat = mnemex.Config(data_dir=None, fsync="always", max_top_k=50)
    assert by_section == flat and hash(by_section) == hash(flat)
    assert flat.storage.fsync == flat.fsync == "always" and flat.memories.max_top_k == 50
    assert mnemex.Config(agent_policy="keep_all").conversations.policy == "keep_all"
    # a shortcut overrides one field of a section given whole, and leaves the rest
    mixed = mnemex.Config(storage=StorageConfig(fsync="never", snapshots_kept=5), data_dir="elsewhere")
    assert (mixed.storage.fsync, mixed.storage.snapshots_kept, mixed.data_dir) == ("never", 5, "elsewhere")
    assert repr(mnemex.Config()) == "Config()"
    assert "max_top_k=50" in repr(flat)


def test_unknown_names_and_wrong_section_types_are_refused() -> None:
    with pytest.raises(mnemex.InvalidInput, match="no setting 'fsyncs'") as error:
        mnemex.Config(fsyncs="always")
    assert error.value.field == "fsyncs"
    with pytest.raises(mnemex.InvalidInput, match="config.storage is MemoriesConfig"):
        mnemex.Config(storage=MemoriesConfig())  # type: ignore[arg-type]
    with pytest.raises(mnemex.InvalidInput, match="unknown field `fsyncs`"):
        mnemex.load_config('[storage]\nfsyncs = "always"\n')
    with pytest.raises(mnemex.InvalidInput, match="must be a table"):
        mnemex.load_config('storage = 3\n')
    with pytest.raises(mnemex.InvalidInput, match="not valid toml"):
        mnemex.load_config("fsync = \n")
    with pytest.raises(AttributeError, match="frozen"):
        mnemex.Config().kernel = None  # type: ignore[misc]
    with pytest.raises(AttributeError, match="no attribute 'fsyncs'"):
        mnemex.Config().fsyncs  # noqa: B018


def test_a_file_may_mix_tables_and_flat_keys_but_never_set_a_field_twice() -> None:
    text = 'fsync = "never"\nembedder = "hashing"\n[memories]\nmax_top_k = 7\n[server]\nport = 0\n'
    config = mnemex.load_config(text)
    assert (config.storage.fsync, config.models.embedder, config.memories.max_top_k) == ("never", "hashing", 7)
    assert config.server == ServerConfig(port=0)
    with pytest.raises(mnemex.InvalidInput, match="sets memories.max_top_k twice, as max_top_k and as "
                                                  "memories.max_top_k") as error:
        mnemex.load_config("max_top_k = 3\n[memories]\nmax_top_k = 5\n")
    assert error.value.field == "memories.max_top_k"


def test_a_config_round_trips_through_plain_data_json_and_pickle() -> None:
    config = mnemex.Config(data_dir=None, embedder="hashing", agent_max_messages=7, server=ServerConfig(port=0))
    assert mnemex.load_config(config.to_dict()) == config
    assert mnemex.load_config(json.dumps(config.to_dict()), fmt="json") == config
    assert pickle.loads(pickle.dumps(config)) == config
    assert config.replace(max_top_k=9).memories.max_top_k == 9
    assert config.replace(memories=MemoriesConfig(max_top_k=4)).memories.max_top_k == 4
    assert config.memories.max_top_k == 1000  # replace made a copy


def test_every_field_but_the_servers_has_exactly_one_flat_name() -> None:
    paths = sorted(SHORTCUTS.values())
    assert len(paths) == len(set(paths))
    for name, section in mnemex.Config().sections():
        if name != "server":
            assert {(name, field) for field in section.__struct_fields__} <= set(paths)


def test_the_postgres_backend_needs_a_dsn_a_snapshot_folder_and_a_plain_schema_name() -> None:
    config = mnemex.load_config("""
    [storage]
    backend = "postgres"
    postgres_dsn = "host=db user=mnemex dbname=mnemex"
    data_dir = "/shared/snapshots"
    """)
    assert (config.storage.backend, config.storage.postgres_schema) == ("postgres", "mnemex")
    with pytest.raises(mnemex.InvalidInput, match="postgres_dsn is not set"):
        StorageConfig(backend="postgres")
    with pytest.raises(mnemex.InvalidInput, match="keeps snapshots in data_dir"):
        StorageConfig(backend="postgres", postgres_dsn="host=db", data_dir=None)
    with pytest.raises(mnemex.InvalidInput, match="postgres_schema must be a lower-case SQL identifier"):
        StorageConfig(postgres_schema="Mnemex; DROP")
    with pytest.raises(mnemex.InvalidInput, match="backend"):
        StorageConfig(backend="sqlite")  # type: ignore[arg-type]
    assert StorageConfig().backend == "files"  # nothing changes for a data directory
