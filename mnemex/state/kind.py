"""The ``state`` actor kind: KeyValueState behaviours and their codec."""

from __future__ import annotations

from typing import Any, Final

from mnemex.config import Config
from mnemex.effects import Key
from mnemex.kernel import ActorKind
from mnemex.state.behaviour import KeyValueState, StateSettings, is_state_write, state_codec

__all__ = ["STATE_KIND", "state_kind"]

STATE_KIND: Final = "state"


def state_kind(config: Config | None = None, *, name: str = STATE_KIND) -> ActorKind:
    """The ``state`` actor kind: one key-value store per key, ``(app_name,)`` or
    ``(app_name, user_id)``."""
    settings = StateSettings.from_config(config if config is not None else Config())

    def create(key: Key) -> KeyValueState:
        return KeyValueState(key, settings)

    def restore(key: Key, image: Any) -> KeyValueState:
        return KeyValueState.restore(key, image, settings)

    return ActorKind(name=name, create=create, restore=restore, encode=state_codec.encode,
                     decode=state_codec.decode, is_journaled=is_state_write)
