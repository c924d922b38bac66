"""Token counting: a protocol and a fast default estimate.

Counts decide what fits a model's window. The default is an estimate that needs
no tokenizer: about four UTF-8 bytes per token, which is close for English with
BPE tokenizers and errs on the safe side for most other scripts. Swap in an
exact counter (tiktoken, a Hugging Face tokenizer) through the protocol.

A counter must be deterministic: counts are kept with the history, and a
journal replayed later must give the same counts. Its ``name`` is stored with
snapshots; a snapshot made under another name is recounted when loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Protocol, runtime_checkable

__all__ = [
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD",
    "EstimatedTokens",
    "TokenCounter",
    "content_text",
    "message_tokens",
]

MESSAGE_OVERHEAD: Final = 4
"""Tokens every message costs beyond its text (role, separators), as chat APIs bill it."""
IMAGE_TOKENS: Final = 85
"""Tokens counted for a content part that is not text (an image at low detail)."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text. ``name`` identifies the counting scheme."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class EstimatedTokens:
    """The default counter: ceil(UTF-8 bytes / 4). O(1) for ASCII text."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return "bytes/4"

    def count(self, text: str) -> int:
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        return (size + 3) // 4

    def __repr__(self) -> str:
        return "EstimatedTokens()"


def content_text(content: Any) -> tuple[str, int]:
    """The text of a message's ``content`` (a string, a list of parts or None) and the
    number of parts that are not text."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    texts: list[str] = []
    other = 0
    for part in content:
        text = part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
        if isinstance(text, str):
            texts.append(text)
        else:
            other += 1
    return "\n".join(texts), other


def message_tokens(counter: TokenCounter, text: str, other_parts: int = 0,
                   extra: Iterable[str] = ()) -> int:
    """Tokens of one message: the overhead, its text, its non-text parts and any extra
    strings (a name, tool call names and arguments)."""
    total = MESSAGE_OVERHEAD + counter.count(text) + other_parts * IMAGE_TOKENS
    for piece in extra:
        total += counter.count(piece)
    return total
