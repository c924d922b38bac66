"""What a runtime's shutdown did to the actors live then: the report ``aclose``
returns, so that nothing claims every actor was snapshotted when some were not."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ShutdownReport", "ShutdownTally"]

_NAMED = 5


@dataclass(frozen=True, slots=True)
class ShutdownReport:
    """The actors a shutdown closed, and which of their final snapshots failed.

    An actor whose final snapshot failed lost nothing: its journal holds every
    command it accepted, replayed when it next loads (which takes longer).
    """

    closed: int = 0
    """Actors closed by the shutdown."""
    snapshots: int = 0
    """Final snapshots written (an actor with nothing new since its last one needs none)."""
    failed: tuple[tuple[str, str], ...] = ()
    """(actor, error) of every final snapshot that failed."""
    unfinished: int = 0
    """Actors still closing when ``config.kernel.shutdown_timeout`` ran out."""
    journaled: int = 0
    """Actors left with a journal too short to be worth a final snapshot
    (``config.storage.snapshot_min_growth``): it is replayed when they next load."""

    @property
    def ok(self) -> bool:
        """True if every actor closed with its state snapshotted (or nothing new since its
        snapshot, or a short journal since it: ``journaled``)."""
        return not self.failed and not self.unfinished

    def describe(self) -> str:
        """One line for the log: the counts, and the first few actors that failed."""
        text = f"{_count(self.closed, 'actor')} closed, {_count(self.snapshots, 'final snapshot')} written"
        if self.journaled:
            text += (f", {_count(self.journaled, 'actor')} left to a short journal since its last "
                     f"snapshot (config.storage.snapshot_min_growth)")
        if self.ok:
            return f"{text}: {'every state kept' if self.journaled else 'every actor snapshotted'}"
        problems: list[str] = []
        if self.failed:
            named = "; ".join(f"{actor}: {error}" for actor, error in self.failed[:_NAMED])
            more = f"; and {len(self.failed) - _NAMED:,} more" if len(self.failed) > _NAMED else ""
            problems.append(f"{_count(len(self.failed), 'final snapshot')} FAILED ({named}{more})")
        if self.unfinished:
            problems.append(f"{_count(self.unfinished, 'actor')} still closing when "
                            f"config.kernel.shutdown_timeout ran out")
        return (f"{text}, {', '.join(problems)}; their journals hold every accepted command, "
                f"replayed when they next load")


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


@dataclass(slots=True)
class ShutdownTally:
    """Counts what closing each actor does once the shutdown has begun."""

    closed: int = 0
    snapshots: int = 0
    journaled: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)

    def report(self, unfinished: int = 0) -> ShutdownReport:
        return ShutdownReport(self.closed, self.snapshots, tuple(self.failed), unfinished, self.journaled)
