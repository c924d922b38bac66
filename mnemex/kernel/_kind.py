"""What the kernel needs to know about an actor kind.

The kernel is generic: it moves commands (opaque objects) into mailboxes,
journals them as bytes through the kind's codec, and asks the behaviour for a
snapshot as record lines. It never learns what a memory or a conversation is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mnemex.effects import Behaviour, Beside, Image, Key
from mnemex.errors import MnemexError

__all__ = ["ActorKind", "handle_each"]


def _always(command: Any) -> bool:
    return True


log = logging.getLogger("mnemex.runtime")


def handle_each(behaviour: Behaviour, commands: Iterable[Any]) -> None:
    """Replay journaled commands by handling them one by one (the default).

    A command the behaviour refuses is skipped, as it was when it arrived: the
    kernel writes a command's line before handling it, and a process killed in
    between leaves the line of a command that was never answered, which may be one
    the handler refuses (the handler, deterministic, refuses it again and changes
    nothing). A kind with its own ``replay`` must do the same."""
    for command in commands:
        try:
            behaviour.handle(command)
        except MnemexError as exc:
            log.warning("replay: %s refused, as it would have been when it arrived: %s",
                        type(command).__name__, exc)


@dataclass(frozen=True, slots=True)
class ActorKind:
    """A registered kind of actor.

    ``create`` makes a fresh behaviour for a key; ``restore`` rebuilds one from an
    Image; ``encode``/``decode`` turn a command into its journal payload (compact
    JSON bytes) and back; ``is_journaled`` says which commands change state (reads
    skip the journal); ``replay`` applies journaled commands, in order, to a
    restored behaviour (a kind may apply a run of them faster than one by one, to
    the same state). The kind's folder on disk is ``<name>s``.

    ``inline_read`` (optional) names the reads that only look at the state: the
    handler changes nothing and returns no effects for them. A blocking caller's
    such read of an idle, loaded actor whose writes are all durable is answered at
    once, in the callback that brings it into the runtime's thread, without
    starting the actor's task (see ``Runtime.ask_nowait``). ``inline_write``
    (optional) names the writes whose handler returns no effects but Emits: such a
    write of an idle actor is handled in that callback too (journaled and applied
    there, its Emits performed, its reply released once durable, as the actor's
    task would). An ``ask`` from a task of the run is answered inline the same way:
    in the caller's task, with no mailbox round trip (see ``Runtime.ask``).

    ``inline_when`` (optional) narrows ``inline_read`` for reads that are plain
    reads in some states only: given the behaviour and a command ``inline_read``
    names, whether the handler would answer it now changing nothing, giving no
    effects, and quickly enough to run in a caller's task (None: every command
    ``inline_read`` names is). It must change nothing itself.

    ``read_beside`` (optional) takes the reads that may run beside the actor: given
    the behaviour and a command (on the actor's task, in mailbox order), it returns
    None (the command is handled as usual) or a ``Beside``, whose ``run`` the kernel
    calls in a worker thread (``kernel.read_threads`` of them at most), or, for a
    ``quick`` one alone in its run, in the actor's task when nothing else in the
    trio run is ready or due (see ``Beside.quick``). The reads of
    one run of such commands in a batch run side by side; the actor handles nothing
    else until all have returned, so each sees every command before it and none
    after it, and the replies keep their order.

    ``read_ahead`` (optional) is told of reads ``inline_read`` names that are about
    to be handled one after another, ``read_ahead_max`` at most at a time: those
    asked of an idle actor back to back (``Runtime.read_ahead``: a host's batch of
    searches of one scope), and each run of two or more in a batch the actor's task
    takes from its mailbox. Given the behaviour and the commands, it may prepare
    what they share (one pass over data for all of them) for its handler to take
    when each comes. Told of none (or of one), nothing more is coming: it may let
    what it prepared go.
    A hint only: the reads may come or not, in that order, with other commands
    between them; whatever it prepares must give each read the answer it would
    have had without it, and must be dropped when a command that changes the
    state is handled.
    """

    name: str
    create: Callable[[Key], Behaviour]
    restore: Callable[[Key, Image], Behaviour]
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    is_journaled: Callable[[Any], bool] = _always
    replay: Callable[[Behaviour, Iterable[Any]], None] = handle_each
    inline_read: Callable[[Any], bool] | None = None
    inline_write: Callable[[Any], bool] | None = None
    inline_when: Callable[[Behaviour, Any], bool] | None = None
    read_beside: Callable[[Behaviour, Any], Beside | None] | None = None
    read_ahead: Callable[[Behaviour, Sequence[Any]], None] | None = None
    read_ahead_max: int = 16
