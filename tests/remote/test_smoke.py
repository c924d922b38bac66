from __future__ import annotations

from mnemex.remote import RemoteRuntime


async def test_smoke(remote: RemoteRuntime) -> None:
    scope = remote.scope(user_id="u", app_name="a")
    mid = await scope.remember("User writes Java")
    result = await scope.search("java")
    assert result.hits[0].memory.id == mid
    agent = remote.agent("bot")
    await agent.append("s1", [{"role": "user", "content": "hi"}])
    assert (await agent.history("s1"))[0].message["content"] == "hi"
