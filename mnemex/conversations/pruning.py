"""Pruning policies and the context views they give.

The policies are data (msgspec Structs defined with the agent messages, so a
policy travels in a journaled command); this module computes what each one
keeps. Every view keeps the rules a chat API enforces: a tool result is never
sent without the assistant message that called it, and a non-empty session
never gives an empty context (when even the newest message or tool chain is
larger than the budget, it is sent alone and the view says ``over_budget``).

Costs: O(log n + size of the view) for any policy, from a Conversation's prefix
sums; no view rescans the history.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import msgspec

from mnemex.conversations.conversation import Conversation
from mnemex.conversations.protocol import (
    ContextWindow,
    KeepAll,
    MaxMessages,
    Policy,
    PruningPolicy,
    Stateless,
    TokenBudget,
)
from mnemex.conversations.tokens import MESSAGE_OVERHEAD

__all__ = [
    "KeepAll",
    "MaxMessages",
    "Policy",
    "PruningPolicy",
    "Stateless",
    "TokenBudget",
    "View",
    "compression_cut",
    "context_window",
    "max_messages_start",
    "summary_pair_budget",
    "summary_target",
    "view_of",
]

# the framing of an injected summary: the tool call and the markers around the text
_PAIR_FRAMING = 2 * MESSAGE_OVERHEAD + 30


@dataclass(frozen=True, slots=True)
class View:
    """Which entries a context holds: the system entries in [lo, start), the summary
    pair when ``with_summary``, then every entry from ``start`` on."""

    lo: int
    start: int
    with_summary: bool
    tokens: int
    over_budget: bool


def summary_target(policy: TokenBudget) -> int:
    """Tokens a summary should take: ``policy.summary_tokens`` (min(4000, max(500,
    window / 10))), but never more than a quarter of the window, so that small
    windows keep room for the recent turns."""
    return min(policy.summary_tokens, max(16, policy.max_context_tokens // 4))


def summary_pair_budget(policy: TokenBudget) -> int:
    """Tokens an injected summary of the target size is expected to take."""
    return summary_target(policy) + _PAIR_FRAMING


def max_messages_start(conv: Conversation, n_max: int) -> int:
    """Where a view of every system entry (wherever it stands) plus the newest
    ``n_max`` other entries starts."""
    n = len(conv)
    systems = conv.sys_idx
    drop = (n - len(systems)) - n_max  # non-system entries to leave out
    if drop <= 0:
        return 0
    # smallest position with `drop` non-system entries before it
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if mid - bisect.bisect_left(systems, mid) >= drop:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _advance_to_chain_start(conv: Conversation, index: int) -> int:
    n = len(conv)
    while index < n and not conv.is_chain_start(index):
        index += 1
    return index


def _fit(conv: Conversation, lo: int, start: int, budget: int | None, fixed: int) -> tuple[int, int, bool]:
    """The view's start at or after ``start`` for a budget: (start, tokens, over_budget).

    System entries in [lo, n) and ``fixed`` tokens are always counted; from the
    non-system entries the newest that fit are kept, starting on a chain start.
    """
    n = len(conv)
    cum = conv.cum
    base = fixed + conv.system_tokens(lo, n)
    if budget is not None and base + cum[n] - cum[start] > budget:
        start = max(start, min(n, bisect.bisect_left(cum, cum[n] - (budget - base))))
    start = _advance_to_chain_start(conv, start)
    if start >= n:
        # nothing valid fits: the newest unit alone (a non-empty session never gives
        # an empty context)
        start = conv.last_unit_start(lo)
    tokens = base + cum[n] - cum[min(start, n)]
    return start, tokens, budget is not None and tokens > budget


def view_of(conv: Conversation, policy: Policy, max_tokens: int | None) -> View:
    """The view ``policy`` gives of ``conv``, optionally cut further to ``max_tokens``."""
    match policy:
        case TokenBudget(max_context_tokens=window):
            budget = window if max_tokens is None else max_tokens
            t = conv.summary_index()
            start, tokens, over = _fit(conv, 0, t, budget, conv.pair_tokens)
            return View(0, start, conv.summary is not None, tokens, over)
        case MaxMessages(n=n_max):
            room = max(0, n_max - len(conv.sys_idx))  # the system messages take their places first
            start = _advance_to_chain_start(conv, max_messages_start(conv, room))
            start, tokens, over = _fit(conv, 0, start, max_tokens, 0)
            return View(0, start, False, tokens, over)
        case KeepAll():
            start, tokens, over = _fit(conv, 0, 0, max_tokens, 0)
            return View(0, start, False, tokens, over)
        case Stateless():
            lo = conv.last_append
            while 0 < lo < len(conv) and conv.entries[lo].joined:
                lo -= 1  # an item joined to the one before it brings that one (one model response)
            start, tokens, over = _fit(conv, lo, lo, max_tokens, 0)
            return View(lo, start, False, tokens, over)
        case _:
            raise TypeError(f"unknown pruning policy {policy!r}")


def context_window(conv: Conversation, policy: Policy, max_tokens: int | None,
                   pending: bool) -> ContextWindow:
    """The ContextWindow reply for a view (messages as raw JSON)."""
    view = view_of(conv, policy, max_tokens)
    entries = conv.entries
    systems = conv.systems_before(view.lo, view.start)
    messages: list[msgspec.Raw] = [entries[i].message for i in systems]
    summarized = 0
    version = 0
    if view.with_summary and conv.pair is not None and conv.summary is not None:
        messages.extend(conv.pair)
        summarized, version = conv.summary.covered, conv.summary.version
    messages.extend(entry.message for entry in entries[view.start:])
    budget = max_tokens
    if budget is None and isinstance(policy, TokenBudget):
        budget = policy.max_context_tokens
    return ContextWindow(
        messages=messages,
        tokens=view.tokens,
        stored=len(entries),
        kept=len(systems) + max(0, len(entries) - view.start),
        summarized=summarized,
        summary_version=version,
        pending_summary=pending,
        over_budget=view.over_budget,
        budget=budget,
        policy=policy,
    )


def compression_cut(conv: Conversation, policy: TokenBudget) -> int | None:
    """Where a new summary should end (an entry index), or None when the context is
    below the trigger or there is nothing new to summarize.

    Keeps the last ``keep_recent_turns`` user turns with everything after them, fewer
    when they alone would keep the context above the trigger, down to the newest
    tool chain; the cut is always a chain start, so no tool call is split from its
    results.
    """
    n = len(conv)
    if n == 0:
        return None
    cum = conv.cum
    t = conv.summary_index()
    trigger = policy.trigger_ratio * policy.max_context_tokens
    systems = conv.system_tokens(0, n)
    if systems + conv.pair_tokens + cum[n] - cum[t] < trigger:
        return None
    users = conv.user_idx
    k = policy.keep_recent_turns
    cut = users[-k] if len(users) >= k else (users[0] if users else t)
    cut = max(cut, t)
    room = trigger - systems - summary_pair_budget(policy)
    if cum[n] - cum[cut] > room:
        fitting = bisect.bisect_left(cum, cum[n] - room) if room > 0 else n
        cut = _advance_to_chain_start(conv, max(cut, min(n, fitting)))
        if cut >= n:
            cut = conv.last_unit_start(t)
    cut = min(cut, conv.last_unit_start(t))
    if cut <= t or cut >= n or cum[cut] == cum[t]:
        return None
    return cut
