"""Replay and inspection of a data directory, for programs and for the CLI.

``replay_actor`` rebuilds one actor's behaviour from disk (optionally as of a
past moment) so a program can query it; ``replay_data_dir`` does it for every
actor and reports what it found. Both only read: no lock is taken, nothing is
cut or rewritten, so they are safe beside a running server.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mnemex.effects import Behaviour
from mnemex.errors import InvalidInput, MnemexError, NotFound
from mnemex.kernel import ActorKind, rebuild_behaviour
from mnemex.persistence import ActorLocation, Finding, find_actors, inspect_actor, read_history

__all__ = ["ActorReport", "parse_moment", "replay_actor", "replay_data_dir"]


@dataclass(slots=True)
class ActorReport:
    """What replay found for one actor."""

    kind: str
    key: tuple[str, ...]
    path: Path
    snapshot_seq: int | None
    first_seq: int | None
    last_seq: int
    journal_lines: int
    bytes: int
    records: int | None = None
    """Record lines of the rebuilt state (None when the kind is not known here)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The behaviour's own counts (sessions, messages, embedder...)."""
    findings: list[Finding] = field(default_factory=list)
    """What ``verify`` found wrong in the actor's files (see ``verify_actor``)."""
    error: str | None = None
    """Why the actor could not be rebuilt, if it could not."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "key": list(self.key), "path": str(self.path),
            "snapshot_seq": self.snapshot_seq, "first_seq": self.first_seq, "last_seq": self.last_seq,
            "journal_lines": self.journal_lines, "bytes": self.bytes, "records": self.records,
            "extra": self.extra, "findings": [finding.as_dict() for finding in self.findings],
            "error": self.error,
        }


def parse_moment(text: str) -> int:
    """Epoch milliseconds from an ISO 8601 time (``2026-11-21T10:00:00Z``; naive
    means UTC) or from epoch seconds (``1763719200.5``)."""
    try:
        return int(float(text) * 1000)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(f"--until {text!r} is neither an ISO 8601 time nor epoch seconds",
                           field="until") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def replay_actor(path: str | Path, kind: ActorKind, key: tuple[str, ...], *,
                 until_ms: int | None = None) -> Behaviour:
    """The behaviour of the actor stored at ``path``, rebuilt from its newest
    snapshot and journal (or as it was at ``until_ms``). Raises CorruptData when
    the files are damaged, NotFound/InvalidInput when ``until_ms`` is older than
    anything kept."""
    return rebuild_behaviour(kind, key, read_history(path, until_ms=until_ms))


def _records_of(behaviour: Behaviour) -> tuple[int, dict[str, Any]]:
    data = behaviour.snapshot()
    records = data.records() if callable(data.records) else data.records
    count = len(records) if isinstance(records, list | tuple) else sum(1 for _ in records)
    return count, dict(data.extra)


def matches(location: ActorLocation, selector: str | None) -> bool:
    """``selector`` is a key (parts joined by '/') or ``kind:key``."""
    if selector is None:
        return True
    kind, _, key = selector.rpartition(":") if ":" in selector else ("", "", selector)
    return (not kind or kind == location.kind) and key == "/".join(location.key)


def replay_data_dir(data_dir: str | Path, kinds: Iterable[ActorKind], *, until_ms: int | None = None,
                    actor: str | None = None, verify: bool = False,
                    progress: Callable[[int, int, int], None] | None = None) -> list[ActorReport]:
    """Rebuild every actor of ``data_dir`` (or the one ``actor`` selects) and report.

    A damaged actor is reported with its error; the others are still replayed.
    ``verify`` also checks every checksum and that snapshots and journal agree,
    and puts what it found in each report's ``findings``.
    ``progress(done, total, bytes_done)`` is called after each actor.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise NotFound(f"data directory {root} does not exist")
    known: Mapping[str, ActorKind] = {kind.name: kind for kind in kinds}
    locations = [loc for loc in find_actors(root) if matches(loc, actor)]
    if actor is not None and not locations:
        raise NotFound(f"no actor {actor!r} in {root}")
    reports: list[ActorReport] = []
    done_bytes = 0
    for index, location in enumerate(locations):
        info = inspect_actor(location.path, verify=verify)
        report = ActorReport(
            kind=location.kind, key=location.key, path=location.path, snapshot_seq=info.snapshot_seq,
            first_seq=info.journal_first, last_seq=info.journal_last or info.snapshot_seq or 0,
            journal_lines=info.journal_lines, bytes=info.total_bytes, findings=info.findings,
        )
        kind = known.get(location.kind)
        if kind is None:
            report.error = f"kind {location.kind!r} is not registered here; counted, not rebuilt"
        else:
            try:
                behaviour = replay_actor(location.path, kind, location.key, until_ms=until_ms)
                report.records, report.extra = _records_of(behaviour)
            except MnemexError as exc:
                report.error = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # a behaviour that cannot replay its own journal
                report.error = f"replay failed: {exc!r}"
        reports.append(report)
        done_bytes += report.bytes
        if progress is not None:
            progress(index + 1, len(locations), done_bytes)
    return reports


class ProgressBar:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str, *, stream: Any = None, every: float = 0.1) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every
        self._last = 0.0

    def __call__(self, done: int, total: int, done_bytes: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.every:
            return
        self._last = now
        width = 30
        filled = width * done // max(total, 1)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{done:,}/{total:,} actors, {done_bytes / 1e6:,.1f} MB")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
