"""One turn of an actor: one command through its behaviour (sans-io).

Shared by the kernel and by ``mnemex.testing.Simulation``, so the simulation the
property tests trust runs exactly the kernel's turn. A turn decides; the caller
acts: it journals ``payload``, answers the caller, performs ``effects``, and on a
``crash`` rebuilds the behaviour from its store.

Order matters and is fixed here: a journaled command is encoded *before* the
handler runs (``encode_turn``), so a command that cannot be journaled (one carrying
a value JSON has no form for, say) is refused with InvalidInput without touching the
state, and the kernel can write the line before the handler applies the command;
and a handler that raises a MnemexError has changed nothing (behaviours validate
before they mutate), so nothing is journaled and no effect is done.
"""

from __future__ import annotations

from typing import Any, Final

from mnemex._gcpause import collector_paused
from mnemex.effects import Behaviour, Effect, Forward, Job, Step
from mnemex.errors import InvalidInput, MnemexError
from mnemex.kernel._kind import ActorKind

__all__ = ["TurnResult", "encode_turn", "take_turn"]

_NO_EFFECTS: Final[tuple[Effect, ...]] = ()
_LARGE_PAYLOAD: Final = 1 << 16
"""Bytes of a journal line from which its command runs with the cyclic collector
paused (a batch of memories: most of what it allocates lives on, and the
collector would otherwise pass over the growing batch hundreds of times in one
turn); cycles made meanwhile are found when it resumes."""


class _Encode:
    """take_turn's default payload: encode the command itself."""


_ENCODE: Final = _Encode()


class TurnResult:
    """What one command did.

    * ``reply``: the handler's reply, or the MnemexError it raised (``refused``).
    * ``payload``: the journal line's payload when the command was accepted and
      changes state, else None.
    * ``effects``: what to perform, in order. ``answering`` is the one that answers
      the caller in place of ``reply`` (a Forward, or a Job with ``answers``), if any;
      ``ignored_answers`` counts further answering effects, performed but answering
      nobody (a behaviour bug worth a log line).
    * ``crash``: the exception of a handler bug (not a MnemexError): the state may be
      half changed, so the actor must be rebuilt from its store.
    """

    __slots__ = ("answering", "crash", "effects", "ignored_answers", "payload", "refused", "reply")

    def __init__(self, reply: Any, *, payload: bytes | None = None, effects: tuple[Effect, ...] = _NO_EFFECTS,
                 answering: Effect | None = None, ignored_answers: int = 0, refused: bool = False,
                 crash: Exception | None = None) -> None:
        self.reply = reply
        self.payload = payload
        self.effects = effects
        self.answering = answering
        self.ignored_answers = ignored_answers
        self.refused = refused
        self.crash = crash


def encode_turn(kind: ActorKind, command: Any) -> bytes | TurnResult | None:
    """The journal payload ``command`` gets if the handler accepts it, None for a
    command that is never journaled (a read), or the refusal (a TurnResult) of a
    command that cannot be journaled."""
    try:
        return kind.encode(command) if kind.is_journaled(command) else None
    except MnemexError as exc:
        return TurnResult(exc, refused=True)
    except (TypeError, ValueError, OverflowError) as exc:  # the command's fault, not the behaviour's
        return TurnResult(InvalidInput(f"{type(command).__name__} cannot be journaled: {exc}"), refused=True)


def take_turn(kind: ActorKind, behaviour: Behaviour, command: Any,
              payload: bytes | _Encode | None = _ENCODE) -> TurnResult:
    """Handle ``command`` with ``behaviour`` of ``kind``; never raises for what the
    handler does (a MnemexError is the reply, anything else a ``crash``). ``payload``
    is what ``encode_turn`` gave, when the caller encoded the command already."""
    if isinstance(payload, _Encode):
        encoded = encode_turn(kind, command)
        if isinstance(encoded, TurnResult):
            return encoded
        payload = encoded
    try:
        if payload is not None and len(payload) >= _LARGE_PAYLOAD:
            with collector_paused():
                out = behaviour.handle(command)
        else:
            out = behaviour.handle(command)
    except MnemexError as exc:
        return TurnResult(exc, refused=True)
    except Exception as exc:
        return TurnResult(None, crash=exc)
    if type(out) is not Step:
        return TurnResult(out, payload=payload)
    if out.unchanged:
        payload = None
    answering: Effect | None = None
    ignored = 0
    for effect in out.effects:
        if type(effect) is Forward or (type(effect) is Job and effect.answers):
            if answering is None:
                answering = effect
            else:
                ignored += 1
    return TurnResult(out.reply, payload=payload, effects=out.effects, answering=answering,
                      ignored_answers=ignored)
