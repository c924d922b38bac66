"""Many users under a low open-file limit, in a process of its own.

python tests/crash/many_users.py DATA_DIR write|read SCOPES AGENTS FSYNC_METHOD

Sets RLIMIT_NOFILE to 256 first, then opens a runtime on DATA_DIR. ``write``:
every scope remembers one memory and every agent appends one message, all at
once; then every tenth of them writes a second time (its journal was closed to
make room meanwhile). ``read``: reads every one of them back. Prints one JSON
line: the errors met, the most journals and descriptors seen open at once, the
journals' limit, what is missing (read) and the shutdown report.
"""

from __future__ import annotations

import json
import os
import resource
import sys

LIMIT = 256
resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))

import trio  # noqa: E402 - the limit is set before anything opens files

import mnemex  # noqa: E402


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def main(data_dir: str, phase: str, scopes: int, agents: int, method: str) -> None:
    cfg = mnemex.Config(data_dir=data_dir, embedder="hashing", fsync_method=method)
    errors: list[str] = []
    missing: list[str] = []
    most_journals = most_descriptors = 0
    async with mnemex.open_runtime(cfg) as rt:

        async def watch() -> None:
            nonlocal most_journals, most_descriptors
            while True:
                most_journals = max(most_journals, rt.journal_health()["open_files"])
                most_descriptors = max(most_descriptors, open_descriptors())
                await trio.sleep(0.005)

        async def write(i: int, round_: int) -> None:
            try:
                if i < scopes:
                    await rt.scope(user_id=f"u{i}", app_name="app").remember(f"user {i} note {round_}")
                else:
                    await rt.agent(f"a{i}").append("s1", [{"role": "user", "content": f"agent {i} {round_}"}])
            except Exception as exc:
                errors.append(f"{i}: {exc!r}")

        async def read(i: int) -> None:
            try:
                if i < scopes:
                    page = await rt.scope(user_id=f"u{i}", app_name="app").memories()
                    found = {m.content for m in page.memories}
                else:
                    messages = await rt.agent(f"a{i}").messages("s1")
                    found = {m.message["content"] for m in messages.messages}
            except Exception as exc:
                errors.append(f"{i}: {exc!r}")
                return
            expected = ({f"user {i} note {r}" for r in range(1 + (i % 10 == 0))} if i < scopes
                        else {f"agent {i} {r}" for r in range(1 + (i % 10 == 0))})
            if found != expected:
                missing.append(f"{i}: {sorted(expected - found)}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            async with trio.open_nursery() as users:
                for i in range(scopes + agents):
                    if phase == "write":
                        users.start_soon(write, i, 0)
                    else:
                        users.start_soon(read, i)
            if phase == "write":
                async with trio.open_nursery() as users:
                    for i in range(0, scopes + agents, 10):
                        users.start_soon(write, i, 1)
            nursery.cancel_scope.cancel()
        limit = rt.journal_health()["max_open_files"]
    report = rt.shutdown_report
    assert report is not None
    print(json.dumps({"errors": errors[:5], "error_count": len(errors), "missing": missing[:5],
                      "missing_count": len(missing), "most_journals_open": most_journals,
                      "most_descriptors_open": most_descriptors, "max_open_files": limit,
                      "closed": report.closed, "snapshots": report.snapshots, "ok": report.ok}))


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
