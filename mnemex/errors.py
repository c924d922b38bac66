"""One exception hierarchy for everything mnemex raises on purpose.

::

    MnemexError                  root; catch this to catch every mnemex failure
    ├── InvalidInput             a caller passed something malformed (also a ValueError)
    │   ├── UnknownActorKind     an actor kind nobody registered
    │   └── TooLarge             a value over a configured limit (content, key, body)
    ├── NotFound                 the thing addressed does not exist (also a LookupError)
    ├── Busy                     a mailbox is full and the overload policy is "fail"
    ├── Timeout                  an ask got no answer in time (also a TimeoutError)
    ├── ActorClosed              the actor (or the whole runtime) was stopped; it did not break
    ├── ActorCrashed             the actor broke: a handler or restore raised; cause chained
    ├── ModelError               a model beside the actors failed (its cause chained)
    │   ├── EmbedderError        the embedder failed or answered vectors of the wrong shape
    │   ├── SummaryError         a summarizer could not summarize (endpoint down, timeout, bad answer)
    │   └── ExtractionError      an extractor could not answer (reason: timeout, unreachable, malformed...)
    ├── NotOwner                 this process does not own the key's virtual shard; retry at the hint
    ├── CorruptData              bytes on disk fail their checksum or do not parse
    └── StorageError             the disk refused: full, read-only, locked by another process
        └── DataDirLocked        another process holds the data directory's lock

Every message names the thing, the value and the limit where there is one.
Foreign exceptions are translated once, at the boundary that meets them, with
the cause chained (``raise InvalidInput(...) from exc``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActorClosed",
    "ActorCrashed",
    "Busy",
    "CorruptData",
    "DataDirLocked",
    "EmbedderError",
    "ExtractionError",
    "InvalidInput",
    "MnemexError",
    "ModelError",
    "NotFound",
    "NotOwner",
    "StorageError",
    "SummaryError",
    "Timeout",
    "TooLarge",
    "UnknownActorKind",
]


class MnemexError(Exception):
    """Root of every error mnemex raises on purpose."""


class InvalidInput(MnemexError, ValueError):
    """Raised when a caller passes a malformed value: a wrong type, an empty key,
    a message that fails validation. ``field`` names the offending field when known."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnknownActorKind(InvalidInput):
    """Raised when an actor is addressed by a kind that was never registered."""


class TooLarge(InvalidInput):
    """Raised when a value is over a configured limit; the message names the limit."""


class NotFound(MnemexError, LookupError):
    """Raised when the addressed record, session or actor does not exist."""


class Busy(MnemexError):
    """Raised when an actor's mailbox is full and ``config.kernel.overload == "fail"``;
    the caller may retry later."""


class Timeout(MnemexError, TimeoutError):
    """Raised when an ask got no answer within its timeout. The actor is not harmed:
    the command may still be applied, its answer is dropped."""


class ActorClosed(MnemexError):
    """Raised to everyone waiting on an actor that was stopped (shutdown, passivation
    race, runtime closed). Nothing broke; a new ask may spawn it again."""


class ActorCrashed(MnemexError):
    """Raised when an actor broke: its handler raised something that is not a
    MnemexError, or its state could not be restored. The cause is chained."""


class ModelError(MnemexError):
    """Raised when a model run beside the actors (an embedder, an LLM) failed: not
    the caller's fault, and the command that needed it changed nothing."""


class EmbedderError(ModelError):
    """Raised when the embedder raised, or returned vectors of the wrong shape; the
    message names the embedder and how many texts it was given."""


class SummaryError(ModelError):
    """Raised by a summarizer that could not produce a summary (endpoint down,
    timeout, an answer without text). The conversation stays usable: its context
    is cut to the budget until a later attempt succeeds."""


class ExtractionError(ModelError):
    """Raised when an extractor could not answer: ``reason`` is ``timeout``,
    ``unreachable``, ``http`` (an error status), ``malformed`` (an answer that does
    not parse as facts, even after the retry) or ``refused``. Distinct from an
    answer with no facts, which is "nothing to extract". ``usage``: the tokens the
    calls that did answer used (a ``knowledge.Usage``), when any did."""

    def __init__(self, message: str, *, reason: str = "malformed", usage: object = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.usage = usage


class CorruptData(MnemexError):
    """Raised when persisted bytes fail their checksum or do not parse; the message
    names the file and line."""


class StorageError(MnemexError):
    """Raised when the disk refuses: full, read-only, permissions."""


class DataDirLocked(StorageError):
    """Raised when another process already holds the data directory."""


class NotOwner(MnemexError):
    """Raised when a process is asked for, or tries to write, an actor of a virtual
    shard it does not own (any more): its lease was never taken, was lost, or was
    taken over by a newer owner. Nothing was done; send the request to ``owner``
    (a hint, None when unknown) and retry there.

    ``vshard`` is the virtual shard, ``epoch`` the newest lease epoch known to
    whoever raised it (None when unknown)."""

    def __init__(self, message: str, *, vshard: int, owner: str | None = None,
                 epoch: int | None = None) -> None:
        super().__init__(message)
        self.vshard = vshard
        self.owner = owner
        self.epoch = epoch

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (Ray) intact
        return (_not_owner, (str(self), self.vshard, self.owner, self.epoch))


def _not_owner(message: str, vshard: int, owner: str | None, epoch: int | None) -> NotOwner:
    return NotOwner(message, vshard=vshard, owner=owner, epoch=epoch)
