"""How Ray will host ``Shard`` (no cluster needed): as a threaded actor."""

from __future__ import annotations

import inspect

from mnemex.ray.shard import Shard


def test_the_shard_class_has_no_coroutine_method_so_ray_hosts_it_threaded() -> None:
    # one coroutine method (even a private one) makes Ray run the class as an asyncio
    # actor: its plain methods then run on the one event loop, one call at a time, and
    # a stream poll waiting for chunks holds up every command of the shard
    found = [name for name, member in inspect.getmembers(Shard)
             if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)]
    assert found == []
