"""``mnemex.DEFAULT`` leaves an argument to the configuration (or to what an actor
already has); ``None`` always means *none*: no timeout, no TTL, no score cut."""

from __future__ import annotations

import pytest

import mnemex


def config(**overrides: object) -> mnemex.Config:
    return mnemex.Config(data_dir=None, embedder="hashing", **overrides)


async def test_an_agent_keeps_its_ttl_under_default_and_drops_it_under_none() -> None:
    async with mnemex.open_runtime(config(agent_session_ttl=600.0)) as rt:
        assert (await rt.agent("a").stats()).ttl == 600.0  # DEFAULT: the configured one
        assert (await rt.agent("a", ttl=60.0).stats()).ttl == 60.0
        assert (await rt.agent("a").stats()).ttl == 60.0  # DEFAULT leaves what it has
        assert (await rt.agent("a", ttl=None).stats()).ttl is None  # None: sessions never expire
        assert (await rt.agent("a").stats()).ttl is None


async def test_an_agent_policy_of_none_returns_to_the_configured_default() -> None:
    async with mnemex.open_runtime(config(agent_max_messages=7)) as rt:
        assert (await rt.agent("a", policy=mnemex.KeepAll()).stats()).policy == mnemex.KeepAll()
        assert (await rt.agent("a").stats()).policy == mnemex.KeepAll()
        assert (await rt.agent("a", policy=None).stats()).policy == mnemex.MaxMessages(7)
        with pytest.raises(mnemex.InvalidInput, match="DEFAULT"):
            rt.agent("a", policy="keep_all")  # type: ignore[arg-type]


async def test_a_search_cuts_at_the_modes_score_by_default_and_nowhere_under_none() -> None:
    async with mnemex.open_runtime(config()) as rt:
        scope = rt.scope(user_id="u", app_name="app")
        await scope.remember("the user writes Java at a bank in Lisbon")
        await scope.remember("a cat sleeps on the sofa")
        # the vector cut (0.25 on the calibrated scale): an unrelated query finds nothing
        assert (await scope.search("weather forecast", mode="vector")).hits == []
        everything = await scope.search("weather forecast", mode="vector", min_score=None)
        assert len(everything.hits) == 2
        assert (await scope.search("Java", mode=mnemex.DEFAULT)).mode == rt.config.memories.search_mode
        with pytest.raises(mnemex.InvalidInput, match="mode is None"):
            await scope.search("Java", mode=None)  # type: ignore[arg-type]


def test_default_is_one_named_value_never_none() -> None:
    assert mnemex.DEFAULT is not None and repr(mnemex.DEFAULT) == "mnemex.DEFAULT"
    assert mnemex.DEFAULT == mnemex.config.UseDefault.DEFAULT
