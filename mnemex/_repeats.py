"""One object for each value a load decodes many equal copies of.

Decoding a snapshot makes a new string or tuple for every occurrence of a value
(a category, a classifier's name, an entity's name in each memory that mentions
it), where a scope built memory by memory shares one: the detectors and
classifiers hand out the same objects. :class:`Repeats` gives a load that sharing
back, one dict look-up per value.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Repeats"]


class Repeats(dict[Any, Any]):
    """Values kept once, by equality. ``repeats.setdefault(value, value)`` is the value
    kept equal to ``value``; ``repeats.get(given) or repeats.tuple_of(given)`` the tuple
    kept equal to the (non-empty) tuple ``given``, whose items are kept once too. The
    two bound methods are what a loop over millions of values should hold."""

    def tuple_of(self, given: tuple[Any, ...]) -> tuple[Any, ...]:
        """``given`` as a tuple of the items kept, kept for the next equal to it."""
        kept = self[given] = tuple([self.setdefault(item, item) for item in given])
        return kept
