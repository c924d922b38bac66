"""KeyValueState: the behaviour of a ``state`` actor, a small key-value store of JSON
values (an app's state, or one user's state in an app).

Every change is a journaled command carrying its own time; a read is answered from
the dict in memory, so nothing is replayed to read a value. The snapshot is one
line per key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from mnemex._protocol import JsonCodec
from mnemex._time import check_seconds
from mnemex.config import Config
from mnemex.effects import Image, SnapshotData, Step
from mnemex.errors import CorruptData, InvalidInput
from mnemex.state.protocol import ClearState, GetState, StateCommandType, StateValues, UpdateState
from mnemex.state.values import MAX_KEY_BYTES, apply_change, check_change

__all__ = ["KeyValueState", "StateSettings", "is_state_write", "state_codec"]

SNAPSHOT_FORMAT: Final = 1

state_codec: JsonCodec[StateCommandType] = JsonCodec(StateCommandType, "state command")


def is_state_write(command: Any) -> bool:
    """Whether a command changes a state actor (and so is journaled)."""
    return isinstance(command, UpdateState | ClearState)


@dataclass(frozen=True, slots=True)
class StateSettings:
    """``max_value_bytes``: the largest value, as JSON."""

    max_value_bytes: int = 1_048_576

    @classmethod
    def from_config(cls, config: Config) -> StateSettings:
        return cls(max_value_bytes=config.conversations.max_message_bytes)


class _Line(msgspec.Struct, frozen=True):
    k: str
    v: msgspec.Raw


_encode_line = msgspec.json.Encoder().encode
_decode_line = msgspec.json.Decoder(_Line).decode


class KeyValueState:
    """One state actor's values. Synchronous and deterministic."""

    def __init__(self, key: tuple[str, ...], settings: StateSettings) -> None:
        self.key = key
        self.settings = settings
        self.values: dict[str, msgspec.Raw] = {}
        self.updated_at = 0.0

    def live_bytes(self) -> int:
        """An estimate of what this state holds while live, for the runtime's
        ``kernel.max_live_bytes``: its keys and JSON values, and a constant per key."""
        return 3_000 + sum(200 + len(key) + len(value) for key, value in self.values.items())

    def __repr__(self) -> str:
        return f"KeyValueState({self.key!r}, keys={len(self.values)})"

    def handle(self, command: Any) -> Any:
        match command:
            case UpdateState(set=set_, remove=remove, timestamp=timestamp):
                timestamp = check_seconds(timestamp, "timestamp")
                checked, removed = check_change(set_, remove, self.settings.max_value_bytes)
                if not apply_change(self.values, checked, removed):
                    return Step(self._reply(), unchanged=True)
                self.updated_at = max(self.updated_at, timestamp)
                return self._reply(list(checked))
            case ClearState(timestamp=timestamp):
                timestamp = check_seconds(timestamp, "timestamp")
                if not self.values:
                    return Step(self._reply(), unchanged=True)
                self.values.clear()
                self.updated_at = max(self.updated_at, timestamp)
                return self._reply()
            case GetState(keys=keys):
                if keys is None:
                    return StateValues(values=dict(self.values), updated_at=self.updated_at)
                if isinstance(keys, str) or not isinstance(keys, list):
                    raise InvalidInput(f"keys must be a list of strings or None, got {keys!r}", field="keys")
                for key in keys:
                    if not isinstance(key, str) or len(key.encode()) > MAX_KEY_BYTES:
                        raise InvalidInput(f"state keys are strings of at most {MAX_KEY_BYTES} bytes, "
                                           f"got {key!r}", field="keys")
                found = {key: self.values[key] for key in keys if key in self.values}
                return StateValues(values=found, updated_at=self.updated_at)
            case _:
                raise TypeError(f"state actor {self.key!r} cannot handle {command!r}")

    def _reply(self, keys: Iterable[str] = ()) -> StateValues:
        values = self.values
        return StateValues(values={key: values[key] for key in keys if key in values},
                           updated_at=self.updated_at)

    def snapshot(self) -> SnapshotData:
        records = [_encode_line(_Line(key, value)) for key, value in self.values.items()]
        return SnapshotData(records=records, extra={"format": SNAPSHOT_FORMAT, "updated_at": self.updated_at,
                                                    "keys": len(self.values)})

    @classmethod
    def restore(cls, key: tuple[str, ...], image: Image, settings: StateSettings) -> KeyValueState:
        state = cls(key, settings)
        extra = image.extra
        if int(extra.get("format", SNAPSHOT_FORMAT)) > SNAPSHOT_FORMAT:
            raise CorruptData(f"state {key!r} snapshot has format {extra.get('format')}; this mnemex reads "
                              f"format {SNAPSHOT_FORMAT} (upgrade mnemex)")
        state.updated_at = float(extra.get("updated_at", 0.0))
        for number, line in enumerate(image.records):
            try:
                item = _decode_line(line)
            except msgspec.MsgspecError as exc:
                raise CorruptData(f"state {key!r} snapshot record {number}: {exc}") from exc
            state.values[item.k] = msgspec.Raw(bytes(item.v))  # not a view of the file
        return state
