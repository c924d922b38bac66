"""What a live scope of one memory costs, in bytes that do not depend on the CPU:
tracemalloc over --scopes scopes of one memory each, stored through the public API
(``mnemex.open_runtime`` with a data directory, the hashing embedder, a scope per
user as bench/users.py makes them through HTTP), after a few scopes made first (what
the process makes once). Reports the bytes and allocations a scope, the scopes' own
``live_bytes()`` estimate, and the largest owners: each allocation is charged to the
line of ``ScopeMemory`` it came from (the component it builds or fills), else to the
mnemex file that made it (the kernel, the store, the embedder's caches...).

Run: python bench/scope_bytes.py [--scopes 1000] [--text "user {i} keeps bees near Lisbon"] [--top 25]

``{i}`` in --text is the user's number (a word of its own in each memory, as in
bench/users.py; without one every scope stores the same text, and the process's
caches of new words stay out of the figures). It imports the mnemex of this tree, or
of PYTHONPATH when set to another checkout's root (a before/after comparison).
Writes bench/results/scope_bytes.json.
"""

from __future__ import annotations

import argparse
import gc
import linecache
import os
import sys
import tempfile
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

# bench/ goes last on the path: its http.py would otherwise hide the standard library's
_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(_BENCH.parent))
sys.path.append(str(_BENCH))

import trio  # noqa: E402
from _common import machine, table, write_results  # noqa: E402

import mnemex  # noqa: E402

WARM = 20


def owner(trace: tracemalloc.Traceback) -> str:
    """The line of ScopeMemory that led to the allocation, else the mnemex file that made it."""
    ours = [frame for frame in trace if f"{os.sep}mnemex{os.sep}" in frame.filename]
    for frame in reversed(ours):
        name = frame.filename.rsplit(f"{os.sep}mnemex{os.sep}", 1)[1]
        if name == "memories/behaviour.py":
            return f"{name}:{frame.lineno} {linecache.getline(frame.filename, frame.lineno).strip()[:70]}"
    if ours:
        return ours[-1].filename.rsplit(f"{os.sep}mnemex{os.sep}", 1)[1]
    return "(outside mnemex)"


async def measure(scopes: int, text: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mnemex-scope-bytes-") as tmp:
        async with mnemex.open_runtime(mnemex.Config(data_dir=tmp, embedder="hashing")) as rt:
            for i in range(WARM):
                await rt.scope(user_id=f"warm-{i}", app_name="bench").remember(text.format(i=-1 - i))
            gc.collect()
            tracemalloc.start(30)
            try:
                before = tracemalloc.take_snapshot()
                for i in range(scopes):
                    await rt.scope(user_id=f"user-{i}", app_name="bench").remember(text.format(i=i))
                await trio.sleep(0.5)  # the names' vectors come back from a job
                gc.collect()
                after = tracemalloc.take_snapshot()
            finally:
                tracemalloc.stop()
            cells = rt.kernel._cells
            estimate = sum(cells[("scope", ("bench", f"user-{i}"))].behaviour.live_bytes()
                           for i in range(scopes))
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    sizes: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for stat in after.filter_traces(ignore).compare_to(before.filter_traces(ignore), "traceback"):
        key = owner(stat.traceback)
        sizes[key] += stat.size_diff
        counts[key] += stat.count_diff
    return {"bytes": sum(sizes.values()) / scopes, "allocations": sum(counts.values()) / scopes,
            "live_bytes": estimate / scopes,
            "owners": [{"owner": key, "bytes": size / scopes, "allocations": counts[key] / scopes}
                       for key, size in sizes.most_common()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scopes", type=int, default=1000)
    parser.add_argument("--text", default="user {i} keeps bees near Lisbon")
    parser.add_argument("--top", type=int, default=25, help="owners to show")
    args = parser.parse_args()
    found = trio.run(measure, args.scopes, args.text)
    print(f"{args.scopes:,} scopes of one memory ({args.text!r}), mnemex from {Path(mnemex.__file__).parent}")
    print(f"traced: {found['bytes']:,.0f} bytes, {found['allocations']:.1f} allocations a scope; "
          f"live_bytes(): {found['live_bytes']:,.0f} bytes a scope\n")
    rows = [[entry["owner"], f"{entry['bytes']:,.0f}", f"{entry['allocations']:.1f}"]
            for entry in found["owners"][: args.top]]
    print(table(["owner", "bytes a scope", "allocations"], rows))
    path = write_results("scope_bytes", {"machine": machine(), "scopes": args.scopes, "text": args.text,
                                         **found})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
