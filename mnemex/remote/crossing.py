"""What crosses between two processes that each host part of one runtime (the
shards of a cluster): the command of a Tell or a Forward, or of an extraction,
handed from the process that made it to the one holding its actor.

A command crosses as its kind's journal encoding (``ActorKind.encode``), which
every kind has for the commands it journals and most have for the rest; the
receiver decodes it with the same kind. ``ExtractSession`` carries a callable (how
to read the session), which cannot cross: one reading an agent's session crosses
as ``ExtractAgentSession`` (the agent, the session, the offsets) and the receiver
makes the same reader over its own way to that agent. The reply comes back as
JSON and is handed on as it came (``Relayed``), not decoded and encoded again.

No trio, no transport (the reader made for an extraction reads the wall clock,
as an AgentRef's does).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from mnemex.conversations.protocol import ListMessages
from mnemex.errors import InvalidInput
from mnemex.knowledge.ref import AgentReader, agent_reader, extract_session
from mnemex.memories.extraction import ExtractSession
from mnemex.memories.protocol import Extracted

__all__ = ["AskAgent", "ExtractAgentSession", "Relayed", "decode_crossing", "encode_crossing",
           "extract_agent_session"]


@dataclass(frozen=True, slots=True)
class Relayed:
    """A reply that came from the process holding the actor, as JSON."""

    reply: bytes


class ExtractAgentSession(msgspec.Struct, frozen=True, tag_field="type", tag="mnemex.extract_agent_session"):
    """``ExtractSession`` reading session ``session_id`` of agent ``agent`` (of kind
    ``agent_kind``), as it crosses."""

    agent_kind: str
    agent: str
    session_id: str
    known: int
    now: float
    tokens: int = 0
    mode: Literal["now", "flush", "if_needed"] = "now"
    upto: int | None = None


AskAgent = Callable[[str, str, Any], Awaitable[Any]]
"""Asks agent ``name`` of kind ``kind`` a command, wherever it lives: ``ask(kind, name, command)``."""

_EXTRACT_TAG: Final = b'{"type":"mnemex.extract_agent_session"'
_encode = msgspec.json.Encoder().encode
_decode_extract = msgspec.json.Decoder(ExtractAgentSession).decode


def encode_crossing(command: Any, encode: Callable[[Any], bytes]) -> bytes:
    """``command`` as it crosses; ``encode`` is its kind's. InvalidInput for an
    extraction whose reader is not an agent's session (a caller's own list or
    callable stays in the process that has it)."""
    if isinstance(command, ExtractSession):
        read = command.read
        if not isinstance(read, AgentReader) or read.agent is None:
            raise InvalidInput("an extraction reading the caller's own messages (scope.extract_from) "
                               "cannot be sent to another process; extract from an agent's session "
                               "instead", field="read")
        kind, name = read.agent
        return _encode(ExtractAgentSession(agent_kind=kind, agent=name, session_id=command.session_id,
                                           known=command.known, now=command.now, tokens=command.tokens,
                                           mode=command.mode, upto=command.upto))
    return encode(command)


def decode_crossing(payload: bytes, decode: Callable[[bytes], Any], ask_agent: AskAgent) -> Any:
    """The command ``payload`` stands for (``decode``: its kind's); an extraction
    gets a reader that asks the agent through ``ask_agent``."""
    if not payload.startswith(_EXTRACT_TAG):
        return decode(payload)
    try:
        said = _decode_extract(payload)
    except msgspec.MsgspecError as exc:
        raise InvalidInput(f"an extraction that crossed does not decode: {exc}", field="command") from exc
    kind, name = said.agent_kind, said.agent

    async def entries(session_id: str | None, query_id: str | None, limit: int | None, offset: int) -> Any:
        return await ask_agent(kind, name, ListMessages(session_id=session_id, query_id=query_id, limit=limit,
                                                        offset=offset, now=time.time()))

    read = agent_reader(entries, said.session_id, (kind, name))
    return ExtractSession(session_id=said.session_id, read=read, known=said.known, now=said.now,
                          tokens=said.tokens, mode=said.mode, upto=said.upto)


def _not_encoded(command: Any) -> bytes:
    raise InvalidInput(f"{type(command).__name__} does not cross here", field="command")


async def extract_agent_session(deliver: Callable[[bytes], Awaitable[bytes]],
                                entries: Callable[..., Awaitable[Any]], agent: tuple[str, str],
                                session_id: str, known: int, *, if_needed: bool = False) -> Extracted:
    """``MnemexRuntime.extract`` from a process that holds neither the agent nor the
    scope: each ExtractSession crosses (``deliver`` sends it to the scope's process
    and returns the reply's JSON), the scope's job reads the agent where it lives;
    ``entries`` reads the agent from here (only its name crosses)."""
    read = agent_reader(entries, session_id, agent)

    async def ask(command: Any) -> Extracted:
        reply = await deliver(encode_crossing(command, _not_encoded))
        try:
            return msgspec.json.decode(reply, type=Extracted)
        except msgspec.MsgspecError as exc:
            raise InvalidInput(f"an extraction was answered with what is not an Extracted: {exc}") from exc

    return await extract_session(ask, session_id, read, known, mode="if_needed" if if_needed else "now")
