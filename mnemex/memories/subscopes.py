"""Parts of one user's memory in one app: global, campaign, session and actor
memories (any kind an app names), and a search over several at once.

Each memory belongs to one part, given when it is stored (``scope_kind`` and
``scope_id``; default: ``global``): its label is ``global`` or
``<scope_kind>:<scope_id>`` (``MemoryRecord.scope_label``). A search over
several parts is one search of the scope with a filter on the labels (the
filter key ``scope``), so it has one ranking and each hit carries its label; a
memory of a part not named is never seen, whatever its score. Without parts
named, a search sees the whole scope.

A part is named ``global``, ``<kind>:<id>``, or a bare kind whose id ``ids``
gives (``scopes=["global", "campaign", "session"]`` with ``ids={"campaign":
"ash", "session": "s1"}``, as an HTTP request names them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mnemex.errors import InvalidInput
from mnemex.memories.fields import check_scope_part

__all__ = ["scope_labels", "with_scope_labels"]

_MAX_PARTS = 100


def _label(name: Any, ids: Mapping[str, Any], where: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where} must be a non-empty string (global, campaign:<id>, ...), got {name!r}",
                           field=where)
    kind, colon, given = name.partition(":")
    if not colon:
        if kind == "global":
            return "global"
        if kind not in ids:
            raise InvalidInput(f"{where} {name!r} needs its id: name it {name}:<id>, or give scope_ids "
                               f"{{{name!r}: ...}}", field=where)
        given = ids[kind]
    if kind == "global":
        raise InvalidInput(f"{where}: global has no id, got {name!r}", field=where)
    try:
        checked_kind, part = check_scope_part(kind, given)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}", field=where) from exc
    return f"{checked_kind}:{part}"


def scope_labels(scopes: Iterable[str], ids: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The labels of the parts ``scopes`` names (see the module doc), each once.
    InvalidInput naming the part that is wrong."""
    if isinstance(scopes, str | bytes) or not isinstance(scopes, Iterable):
        raise InvalidInput("scopes must be a list of parts (global, campaign:<id>, ...)", field="scopes")
    given = dict(ids or {})
    for kind, value in given.items():
        if not isinstance(kind, str) or not isinstance(value, str):
            raise InvalidInput(f"scope_ids must map kinds to ids (strings), got {kind!r}: {value!r}",
                               field="scope_ids")
    names = list(scopes)
    if not names:
        raise InvalidInput("scopes is empty: name at least one part (global, campaign:<id>, ...)",
                           field="scopes")
    if len(names) > _MAX_PARTS:
        raise InvalidInput(f"{len(names)} parts named; at most {_MAX_PARTS}", field="scopes")
    return tuple(dict.fromkeys(_label(name, given, f"scopes[{i}]") for i, name in enumerate(names)))


def with_scope_labels(spec: Mapping[str, Any] | None,
                      labels: tuple[str, ...] | None) -> dict[str, Any] | None:
    """A search filter narrowed to the parts ``labels`` (None: unchanged)."""
    if labels is None:
        return dict(spec) if spec else None
    if spec and spec.get("scope") is not None:
        raise InvalidInput("give the parts of the scope once: in scopes, or in the filter's scope key",
                           field="filter.scope")
    return {**(spec or {}), "scope": list(labels)}
