"""Config is checked when it is built, in Python exactly as from TOML or JSON, from
the constraints declared on its fields."""

from __future__ import annotations

from typing import Any

import pytest

import mnemex

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
    with pytest.raises(mnemex.InvalidInput, match=f"config.{field} is") as error:
        mnemex.Config(**{field: value})
    assert allowed in str(error.value) and error.value.field == field


TOML_BAD = [(f, v) for f, v, _ in BAD if isinstance(v, str | int) and not isinstance(v, bool)
            and f != "data_dir"]


@pytest.mark.parametrize(("field", "value"), TOML_BAD, ids=[f"{f}={v!r}" for f, v in TOML_BAD])
def test_the_same_bad_value_from_toml_fails_naming_the_field(field: str, value: Any) -> None:
    text = f"{field} = {value!r}\n".replace("'", '"')
    with pytest.raises(mnemex.InvalidInput, match=field):
        mnemex.load_config(text)


def test_good_values_pass_and_ints_stand_for_floats() -> None:
    config = mnemex.Config(fsync="always", search_mode="keyword", ask_timeout=5, agent_session_ttl=None,
                           agent_policy="keep_all", mailbox_size=1)
    assert (config.fsync, config.ask_timeout, config.mailbox_size) == ("always", 5, 1)
    assert mnemex.load_config('fsync = "never"\nask_timeout = 2\n') == mnemex.Config(fsync="never", ask_timeout=2)


def test_cross_field_rules_still_hold() -> None:
    with pytest.raises(mnemex.InvalidInput, match="both 0"):
        mnemex.Config(fusion_fulltext_weight=0, fusion_vector_weight=0)
    with pytest.raises(mnemex.InvalidInput, match="below 1"):
        mnemex.Config(rank_importance_weight=0.5, rank_recency_weight=0.5)
