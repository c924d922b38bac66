"""A shard's way to the actors other shards hold: Tells and Forwards across shards.

A behaviour's ``Tell`` or ``Forward`` to an actor of a virtual shard this shard
does not hold (an agent archiving a session into a scope another shard serves),
and the runtime's own tells (automatic extraction telling a scope), are handed
over by the kernel (``Runtime.elsewhere``) to ``Forwarder``, which sends each to
the shard serving that actor (``Shard.deliver``) the way the client sends a call:
re-routed on NotOwner, sent again once a dead shard is restarted, until it is
answered or ``kernel.ask_timeout`` passes (a Forward also stops when its caller
gave up). A Forward's reply, or its error, answers the command that forwarded it.

Delivery is at least once, deduplicated: every attempt of one hand-over carries
one request id, derived from the request id of the command whose step made the
effect and the effect's place in that step (``requests.derived_id``), so a
command retried by its client makes the same ids again, and the receiver applies
a journaled command once per id (``mnemex.ray.requests``). A command the
receiver does not journal (``StoreSession``, which embeds and then stores an
``AddSession``; ``ExtractSession``) is idempotent by construction: sent twice, it
stores nothing twice. A tell without such an origin gets an id of its own.

The kernel performs effects once the step's line is written, before it is
durable (as it does between its own actors): an effect made just before its
shard is killed may reach its receiver although the step that made it is lost.
The effects mnemex makes across shards are archiving (the agent's step changes
nothing: only the scope's AddSession is written, by the receiver) and starting
extraction (which reads the agent's journaled messages): neither depends on a
line that can be lost. A hand-over in flight when its shard dies is lost with it:
the client's retry of the command makes it again, with the same id.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import trio

from mnemex import MnemexError, MnemexRuntime, NotOwner
from mnemex.lowlevel import HandOver, vshard_of
from mnemex.ray.requests import Requested, derived_id
from mnemex.remote import crossing

__all__ = ["Forwarder"]

log = logging.getLogger("mnemex.ray")


class Forwarder:
    """``Runtime.elsewhere`` of a shard's runtime ``rt``: hands each message to the
    shard holding its actor, in a task of ``nursery``, through the router ``host()``
    gives (a ``RayHost`` over the cluster's shards)."""

    def __init__(self, rt: MnemexRuntime, nursery: trio.Nursery, host: Callable[[], Any]) -> None:
        self._rt = rt
        self._nursery = nursery
        self._host = host
        self.handed = 0
        """Messages handed to other shards so far."""
        self.failed = 0
        """Of those, how many were not delivered (their error answered a Forward's caller or was logged)."""

    def __call__(self, message: HandOver) -> None:
        self.handed += 1
        self._nursery.start_soon(self._hand_over, message, name=f"hand over to {message.kind}")

    async def _hand_over(self, message: HandOver) -> None:
        caller = message.caller
        origin = message.origin
        command = message.command
        what = type(command).__name__
        request_id = (derived_id(origin.id, message.position) if type(origin) is Requested
                      else uuid.uuid4().hex)
        try:
            payload = crossing.encode_crossing(command, self._rt.kinds[message.kind].encode)
            host = await self._host()
            reply = await host.deliver(message.kind, message.key, payload, request_id,
                                       limit=self._rt.config.kernel.ask_timeout, what=what,
                                       gone=None if caller is None else lambda: caller.done)
        except MnemexError as exc:
            self.failed += 1
            if caller is not None:
                caller.resolve(exc)
            else:
                log.warning("%s for %s %r not delivered to its shard: %s", what, message.kind,
                            "/".join(message.key), exc)
            return
        if caller is not None:
            caller.resolve(crossing.Relayed(reply))

    async def ask_agent(self, kind: str, name: str, command: Any) -> Any:
        """Ask agent ``name`` ``command`` here when this shard holds it, else on the
        shard that does (an extraction job reading a session of another shard)."""
        key = (name,)
        ownership = self._rt.kernel.ownership
        if ownership is None or ownership.serves(vshard_of(kind, key)):
            try:
                return await self._rt.kernel.ask(kind, key, command)
            except NotOwner:
                pass  # given up meanwhile: its new owner answers
        host = await self._host()
        return await host.ask(kind, key, command)
