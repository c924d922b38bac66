"""Request ids: a write retried after a lost reply is applied once.

Ray's transport is at most once: a call whose reply is lost (the shard died after
committing, the node went away) tells the caller nothing about whether it was
applied. The client retries it with the same request id, and the shard answers a
repeated id with the reply of its first application instead of applying it again.

The id is journaled with the command, so the table of recent ids survives a
crash: ``deduplicating(kind)`` wraps an actor kind so that a ``Requested(id,
command)`` is journaled as ``{"type":"mnemex.request","id":...,"cmd":<the
command's own line>}``, and its behaviour keeps, per actor, the ids of its last
``limit`` requested writes with their replies (JSON, as they cross the wire).
Only journaled writes are recorded, every one of them (so that replaying the
journal rebuilds exactly the table the actor had): a write answered by an effect
(a Forward, a Job with ``answers``) is recorded as applied without a reply, and a
repeat of it is refused rather than applied again. A read sent with an id is
handled as a plain read: its id only names what it sends on (``derived_id``:
the Forwards and Tells of a step carry ids made from their command's, so that a
retried command's effects are deduplicated by their receivers too).

Replaying the journal rebuilds the table; a snapshot carries it in its header
(``extra["mnemex.requests"]``), so a shard that takes over a virtual shard from a
snapshot (a rebalance) knows the ids its predecessor applied. Lines of plain
commands read as before, so data directories of single-process runtimes open
under a cluster unchanged; a data directory a cluster wrote opens in one process
with ``open_runtime(config, kinds=mnemex.ray.request_kinds(config))``.

Sans-io, like the behaviours it wraps: no trio, no Ray.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from mnemex import Config, InvalidInput, MnemexError
from mnemex.lowlevel import (
    ActorKind,
    Behaviour,
    Forward,
    Image,
    Job,
    Key,
    ScopeKind,
    SnapshotData,
    Step,
    agent_kind,
    checkpoint_kind,
    scope_kind,
)

__all__ = ["REQUESTS_FIELD", "Deduplicating", "Repeated", "Requested", "deduplicating", "derived_id",
           "request_kinds"]

log = logging.getLogger("mnemex.ray")

REQUESTS_FIELD: Final = "mnemex.requests"
"""The snapshot header field holding an actor's recent request ids and replies."""
DEFAULT_LIMIT: Final = 256
"""Request ids remembered per actor: a retry of a write older than the actor's last
``limit`` requested writes is applied again (clients retry within seconds)."""
_TAG: Final = b'{"type":"mnemex.request",'
_MAX_ID: Final = 128
_ELSEWHERE: Final = b""
"""The recorded reply of a write answered by an effect: applied, its reply not kept
(every reply kept is JSON, never empty)."""


@dataclass(frozen=True, slots=True)
class Requested:
    """``command`` sent with the caller's request id: applied at most once per id."""

    id: str
    command: Any


@dataclass(frozen=True, slots=True)
class Repeated:
    """The answer to a request id seen before: the first reply, as JSON."""

    reply: bytes


class _Line(msgspec.Struct, frozen=True):
    type: str
    id: str
    cmd: msgspec.Raw


_decode_line = msgspec.json.Decoder(_Line).decode
_encode_json = msgspec.json.Encoder().encode


def check_request_id(value: object) -> str:
    """``value`` if it is a usable request id (printable ASCII, 1 to 128 characters)."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_ID or not value.isascii() \
            or not value.isprintable():
        raise InvalidInput(f"a request id must be 1 to {_MAX_ID} printable ASCII characters, got {value!r}",
                           field="request_id")
    return value


def derived_id(request_id: str, position: int) -> str:
    """The request id of the effect at ``position`` of the step of request
    ``request_id``: the same every time that command is handled again (a retry), so
    the effect's receiver deduplicates it. A chain of them stays within the id limit
    (a long one is hashed)."""
    derived = f"{request_id}.{position}"
    if len(derived) <= _MAX_ID:
        return derived
    return "h." + hashlib.blake2b(derived.encode(), digest_size=24).hexdigest()


class Deduplicating:
    """A behaviour with a table of the request ids it applied (see the module doc).
    ``is_journaled`` tells the kind's writes (None: every command is one)."""

    __slots__ = ("inner", "is_journaled", "limit", "recent")

    def __init__(self, inner: Behaviour, limit: int, recent: Iterable[tuple[str, bytes]] = (), *,
                 is_journaled: Callable[[Any], bool] | None = None) -> None:
        self.inner = inner
        self.limit = limit
        self.is_journaled = is_journaled
        # oldest first: a dict keeps the order ids were recorded in (each id is recorded
        # once), at a fraction of an OrderedDict's bytes (one table per live actor)
        self.recent: dict[str, bytes] = dict(recent)
        while len(self.recent) > limit:
            del self.recent[next(iter(self.recent))]

    def handle(self, command: Any) -> Any:
        if type(command) is not Requested:
            return self.inner.handle(command)
        if self.is_journaled is not None and not self.is_journaled(command.command):
            # a read (or what starts work, as archiving and extraction do): nothing is
            # journaled, so nothing is recorded; what it sends on carries derived ids
            return self.inner.handle(command.command)
        seen = self.recent.get(command.id)
        if seen is not None:
            if seen == _ELSEWHERE:
                raise MnemexError(f"request {command.id!r} ({type(command.command).__name__}) was applied "
                                  f"already; its answer came from another actor or a job and is not kept "
                                  f"here: read the result instead of retrying")
            return Step(Repeated(seen), unchanged=True)  # nothing journaled, nothing applied
        out = self.inner.handle(command.command)  # a refusal raises: nothing recorded
        if type(out) is Step:
            if out.unchanged:
                return out  # changed nothing: its line is cut, as if it never came
            if any(type(e) is Forward or (type(e) is Job and e.answers) for e in out.effects):
                # journaled, answered by an effect whose reply this table never sees:
                # recorded as applied, so that a retry does not apply it again (and so
                # that replay, which records every journaled request, agrees)
                self._record(command.id, _ELSEWHERE)
                return out
            reply = out.reply
        else:
            reply = out
        self._record(command.id, _encode_json(reply))
        return out

    def _record(self, request_id: str, reply: bytes) -> None:
        recent = self.recent
        recent[request_id] = reply
        if len(recent) > self.limit:
            del recent[next(iter(recent))]

    def snapshot(self) -> SnapshotData:
        return self._with_requests(self.inner.snapshot())

    def final_snapshot(self) -> SnapshotData:
        """The inner behaviour's :meth:`final_snapshot` (its ``snapshot`` if it has
        none), with the table of requests answered."""
        final = getattr(type(self.inner), "final_snapshot", None)
        return self._with_requests(final(self.inner) if final is not None else self.inner.snapshot())

    def _with_requests(self, data: SnapshotData) -> SnapshotData:
        if not self.recent:
            return data
        table = [[rid, reply.decode()] for rid, reply in self.recent.items()]
        return dataclasses.replace(data, extra={**data.extra, REQUESTS_FIELD: table})

    def live_bytes(self) -> int:
        measure = getattr(self.inner, "live_bytes", None)
        own = sum(len(rid) + len(reply) + 64 for rid, reply in self.recent.items())
        return (int(measure()) if callable(measure) else 0) + own

    def __getattr__(self, name: str) -> Any:  # what else a host reads of the behaviour
        return getattr(self.inner, name)


def _encoder(inner: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def encode(command: Any) -> bytes:
        if type(command) is Requested:
            return b"".join((_TAG, b'"id":', _encode_json(check_request_id(command.id)), b',"cmd":',
                             inner(command.command), b"}"))
        return inner(command)

    return encode


def _decoder(inner: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(payload: bytes) -> Any:
        if payload.startswith(_TAG):
            line = _decode_line(payload)
            return Requested(line.id, inner(bytes(line.cmd)))
        return inner(payload)

    return decode


def _journaled(inner: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def is_journaled(command: Any) -> bool:
        return inner(command.command if type(command) is Requested else command)

    return is_journaled


def _restorer(inner: Callable[[Key, Image], Behaviour], limit: int,
              is_journaled: Callable[[Any], bool]) -> Callable[[Key, Image], Behaviour]:
    def restore(key: Key, image: Image) -> Behaviour:
        table = image.extra.get(REQUESTS_FIELD)
        recent: list[tuple[str, bytes]] = []
        if table is not None:
            extra = {name: value for name, value in image.extra.items() if name != REQUESTS_FIELD}
            image = dataclasses.replace(image, extra=extra)
            recent = [(str(rid), str(reply).encode()) for rid, reply in table]
        return Deduplicating(inner(key, image), limit, recent, is_journaled=is_journaled)

    return restore


def _applying(known: Iterable[str], items: list[Any], limit: int) -> list[int]:
    """The positions of the requests of ``items`` (journal lines, in order) that were
    applied: those whose id the table did not hold when they came. The table's
    membership is followed without replies (it holds the last ``limit`` applied ids,
    starting from ``known``); a line of a repeat of an id the table held is one
    written ahead of a repeat, then left by a kill: never applied."""
    members: OrderedDict[str, None] = OrderedDict.fromkeys(known)
    applied: list[int] = []
    for position, item in enumerate(items):
        if type(item) is not Requested or item.id in members:
            continue
        members[item.id] = None
        if len(members) > limit:
            members.popitem(last=False)
        applied.append(position)
    return applied


def _replayer(inner: Callable[[Behaviour, Iterable[Any]], None],
              limit: int) -> Callable[[Behaviour, Iterable[Any]], None]:
    def replay(behaviour: Behaviour, commands: Iterable[Any]) -> None:
        if not isinstance(behaviour, Deduplicating):
            raise TypeError(f"a deduplicating kind replays into Deduplicating, not "
                            f"{type(behaviour).__name__}")
        items = list(commands)
        applied = _applying(behaviour.recent, items, limit)
        # Every applied request was recorded when it came (see Deduplicating.handle),
        # so the table is the last `limit` of them: the commands before the first of
        # those replay at the inner kind's own (batched) pace, unwrapped, and the rest
        # one by one, recording their replies. A request that was not applied (a
        # repeat's line written ahead, then a kill) is never replayed. (A refused
        # command's line is cut when it is refused; one left by a kill before the cut
        # is refused again here and recorded by neither.)
        tail = applied[-limit] if len(applied) >= limit else (applied[0] if applied else len(items))
        applies = set(applied)
        head: list[Any] = []
        for position in range(tail):
            item = items[position]
            if type(item) is not Requested:
                head.append(item)
            elif position in applies:
                head.append(item.command)
        if head:
            inner(behaviour.inner, head)
        rest = [item for position, item in enumerate(items[tail:], tail)
                if type(item) is not Requested or position in applies]
        for run in _runs(rest):
            if type(run) is Requested:
                try:
                    behaviour.handle(run)
                except MnemexError as exc:
                    log.warning("replay: %s refused, as it would have been when it arrived: %s",
                                type(run.command).__name__, exc)
            else:
                inner(behaviour.inner, run)

    return replay


def _runs(items: list[Any]) -> Iterator[Any]:
    """Each Requested alone, the plain commands between them as lists."""
    run: list[Any] = []
    for command in items:
        if type(command) is Requested:
            if run:
                yield run
                run = []
            yield command
        else:
            run.append(command)
    if run:
        yield run


def _wrapped(kind: ActorKind, limit: int) -> dict[str, Any]:
    create = kind.create

    def fresh(key: Key) -> Behaviour:
        return Deduplicating(create(key), limit, is_journaled=kind.is_journaled)

    return {"create": fresh, "restore": _restorer(kind.restore, limit, kind.is_journaled),
            "encode": _encoder(kind.encode),
            "decode": _decoder(kind.decode), "is_journaled": _journaled(kind.is_journaled),
            "replay": _replayer(kind.replay, limit)}


@dataclass(frozen=True, slots=True)
class _DeduplicatingScopeKind(ScopeKind):
    """A scope kind that stays deduplicating when a runtime serves it (``served_by``
    rebuilds the kind around the runtime's batcher)."""

    limit: int = DEFAULT_LIMIT

    def served_by(self, embed: Any, extract: Any = None, timer: Any = None,
                  graph_builder: Any = None, row_files: Any = None, *,
                  record_files: Any = None) -> ScopeKind:
        served = deduplicating(ScopeKind.served_by(self, embed, extract, timer, graph_builder, row_files,
                                                   record_files=record_files), self.limit)
        assert isinstance(served, ScopeKind)
        return served


def deduplicating(kind: ActorKind, limit: int = DEFAULT_LIMIT) -> ActorKind:
    """``kind`` whose actors take ``Requested`` commands and apply each id once
    (remembering the last ``limit`` per actor); plain commands work as before."""
    if type(limit) is not int or limit < 1:
        raise InvalidInput(f"limit must be an int >= 1, got {limit!r}", field="limit")
    if isinstance(kind, _DeduplicatingScopeKind):
        return kind
    if isinstance(kind, ScopeKind):
        return _DeduplicatingScopeKind(name=kind.name, embedder=kind.embedder, settings=kind.settings,
                                       limit=limit, **_wrapped(kind, limit))
    return dataclasses.replace(kind, **_wrapped(kind, limit))


def request_kinds(config: Config | None = None, limit: int = DEFAULT_LIMIT) -> list[ActorKind]:
    """mnemex's kinds that write (agents, scopes, checkpoints), deduplicating: what a
    shard serves, and what opens a cluster's data directory in one process
    (``open_runtime(config, kinds=request_kinds(config))``)."""
    return [deduplicating(agent_kind(config), limit), deduplicating(scope_kind(config), limit),
            deduplicating(checkpoint_kind(), limit)]
