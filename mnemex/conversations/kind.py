"""The ``agent`` actor kind: AgentMemory behaviours and their codec, and the sweep
that expires idle sessions of live agents."""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from mnemex._host import Host
from mnemex.config import Config
from mnemex.conversations.behaviour import (
    AgentMemory,
    AgentSettings,
    agent_codec,
    encode_agent_command,
    is_agent_write,
)
from mnemex.conversations.protocol import AppendItems, AppendMessages, ExpireSessions, FindExpired
from mnemex.conversations.summaries import Summarizer
from mnemex.conversations.tokens import TokenCounter
from mnemex.effects import Key
from mnemex.errors import MnemexError
from mnemex.kernel import ActorKind

__all__ = ["AGENT_KIND", "agent_kind", "sweep_expired_sessions"]

log = logging.getLogger("mnemex.agent")

AGENT_KIND: Final = "agent"


def agent_kind(config: Config | None = None, *, summarizer: Summarizer | None = None,
               token_counter: TokenCounter | None = None, name: str = AGENT_KIND) -> ActorKind:
    """The ``agent`` actor kind: AgentMemory behaviours set up from ``config``.

    ``summarizer`` and ``token_counter`` replace the configured ones (pass the kind
    to ``open_runtime(config, kinds=[agent_kind(config, summarizer=...)])``; it takes
    the place of the built-in one).
    """
    settings = AgentSettings.from_config(config if config is not None else Config(),
                                         summarizer=summarizer, token_counter=token_counter)

    def create(key: Key) -> AgentMemory:
        return AgentMemory(key[0], settings)

    def restore(key: Key, image: Any) -> AgentMemory:
        return AgentMemory.restore(key[0], image, settings)

    return ActorKind(name=name, create=create, restore=restore, encode=encode_agent_command,
                     decode=agent_codec.decode, is_journaled=is_agent_write, inline_write=_appends)


def _appends(command: Any) -> bool:
    """Appends change the agent and give no effects but Emits (the appended entries, and
    the end of sessions their timestamp expires): the kernel may take them inline."""
    return type(command) is AppendMessages or type(command) is AppendItems


async def sweep_expired_sessions(host: Host, kind: str = AGENT_KIND, *,
                                 now: float | None = None) -> int:
    """Expire the sessions whose TTL passed (at ``now``, default the wall clock) in
    every live agent; returns how many agents had some. Agents with nothing to
    expire journal nothing."""
    now = time.time() if now is None else now
    swept = 0
    for _, key in host.live_keys(kind):
        try:
            expired = await host.ask(kind, key, FindExpired(now=now))
            if expired:
                await host.tell(kind, key, ExpireSessions(now=now))
                swept += 1
        except MnemexError as exc:
            log.debug("TTL sweep of agent %r skipped: %s", key, exc)
    return swept
