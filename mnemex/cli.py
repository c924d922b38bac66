"""The ``mnemex`` command: serve, inspect, replay, export and import a data directory.

    mnemex serve [--host H] [--port P] [--data-dir DIR] [--config FILE.toml] [--token T]
                 [--ray ADDRESS [--shards N] [--lease-ttl SECONDS] [--stop-shards]]
    mnemex mcp --data-dir DIR --user-id U --app-name A [--agent NAME] [--allow-scope-args] [--graph-tools]
               [--config FILE.toml] [--http [--host H] [--port P] [--token T]]
    mnemex inspect DATA_DIR [--json]
    mnemex shards DATA_DIR [--json]
    mnemex replay DATA_DIR [--until TIME] [--actor KEY] [--verify] [--kinds MODULE:FUNCTION] [--json]
    mnemex export DATA_DIR [--scope APP/USER ...] [--output FILE|-] [--no-vectors] [--config FILE.toml]
    mnemex import DATA_DIR FILE|- [--config FILE.toml] [--json]

``inspect``, ``shards`` and ``replay`` only read: they take no lock and change no file, so
they are safe beside a running server. ``inspect`` checks every byte of every
actor's files; ``replay --verify`` does too, then rebuilds each actor. Each problem
found is printed naming its file and line; the exit status is the worst of them
(see ``mnemex --help``).

``mcp`` serves one user's memory in one app to an MCP client (Claude Desktop,
Cursor...) on stdin and stdout, or over streamable HTTP with ``--http``; it needs
``pip install 'mnemex[mcp]'`` (see ``mnemex.integrations.mcp``).

``export`` and ``import`` open a runtime on the data directory, so they take its
lock (a running server's directory is refused: DataDirLocked) and exit 1 when they
fail, 2 on bad usage. ``export`` writes JSONL (see ``mnemex.memories.transfer``):
a header line, then every memory with its scope, whole record and vector;
``import`` reads it into another data directory with ids preserved, skipping what
is there already, so running it twice adds nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from mnemex.config import Config, load_config
from mnemex.errors import InvalidInput, MnemexError, NotFound, StorageError
from mnemex.kernel import ActorKind
from mnemex.persistence import Finding, Level, find_actors, inspect_actor, worst_level
from mnemex.runtime import MnemexRuntime, _builtin_kinds, open_runtime

if TYPE_CHECKING:
    from mnemex.kernel._replay import ActorReport

__all__ = ["main"]

T = TypeVar("T")

EXIT_DAMAGED = 1
EXIT_USAGE = 2
EXIT_SIDECARS = 3
_EXIT_HELP = f"""\
exit status of inspect and replay:
  0  no damage found; a torn journal tail (an unterminated last write, what a
     crash leaves; the next load cuts it) is printed as a note only
  {EXIT_DAMAGED}  damage: a journal, archive or snapshot line that fails its check (CorruptData),
     commands missing, or (replay) an actor that could not be rebuilt; or the
     command failed (no such data directory or actor)
  {EXIT_USAGE}  bad usage
  {EXIT_SIDECARS}  only snapshot sidecars (.bin) missing or damaged: each is left out at load and
     what it held rebuilt from the snapshot's lines, so nothing is lost, but the
     disk changed bytes (or a file was removed)
"""

_TRANSFER_HELP = f"""\
exit status of export and import:
  0  done (the summary is printed)
  {EXIT_DAMAGED}  failed, saying why: no such data directory or scope, a data directory a running
     runtime holds (DataDirLocked), a line of the export that is not valid (naming it;
     nothing was imported)
  {EXIT_USAGE}  bad usage
"""


def _exit_status(findings: Sequence[Finding], *, failed: bool = False) -> int:
    """The exit status of ``inspect`` or ``replay`` that found ``findings`` (and,
    with ``failed``, could not rebuild an actor): see :data:`_EXIT_HELP`."""
    worst = worst_level(findings)
    if failed or worst is Level.ERROR:
        return EXIT_DAMAGED
    return EXIT_SIDECARS if worst is Level.WARNING else 0


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
             for row in [header, ["-" * w for w in widths], *rows]]
    return "\n".join(line.rstrip() for line in lines)


def _load_kinds(specs: Sequence[str], config: Config) -> list[ActorKind]:
    extra: list[ActorKind] = []
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise SystemExit(f"mnemex: --kinds {spec!r} must be MODULE:FUNCTION")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise SystemExit(f"mnemex: --kinds {spec!r}: {exc}") from exc
        made = factory()
        extra.extend(made if isinstance(made, list | tuple) else [made])
    return [*_builtin_kinds(config, [kind.name for kind in extra]), *extra]


def _tally(findings: Sequence[Finding]) -> str:
    counts = [(sum(finding.level is level for finding in findings), level.value)
              for level in (Level.ERROR, Level.WARNING, Level.NOTE)]
    return ", ".join(f"{count:,} {name}{'s' if count > 1 else ''}" for count, name in counts if count)


def _print_findings(findings: Sequence[Finding], failures: Sequence[str] = ()) -> None:
    if findings or failures:
        print("\nfindings:")
        for finding in findings:
            print(f"  {finding.level.value:<8} {finding.message}")
        for failure in failures:
            print(f"  {'failed':<8} {failure}")


def cmd_inspect(args: argparse.Namespace) -> int:
    infos = [inspect_actor(location.path) for location in find_actors(args.data_dir)]
    findings = [finding for info in infos for finding in info.findings]
    if args.json:
        print(json.dumps([{
            "kind": i.kind, "key": list(i.key or ()), "path": str(i.path), "snapshots": i.snapshots,
            "snapshot_seq": i.snapshot_seq, "records": i.snapshot_count,
            "snapshot_created": i.snapshot_created, "journal_first": i.journal_first,
            "journal_last": i.journal_last, "journal_lines": i.journal_lines, "archives": i.archives,
            "bytes": i.total_bytes, "findings": [finding.as_dict() for finding in i.findings],
        } for i in infos], indent=2))
        return _exit_status(findings)
    rows = [[i.kind or "?", "/".join(i.key or ("?",)), str(i.snapshot_seq or "-"),
             f"{i.snapshot_count:,}" if i.snapshot_count is not None else "-",
             f"{i.journal_lines:,}",
             f"{i.journal_first}-{i.journal_last}" if i.journal_first is not None else "-",
             _when(i.snapshot_created), _size(i.total_bytes), _tally(i.findings) or "ok"] for i in infos]
    print(_table(rows, ["kind", "key", "snapshot", "records", "journal", "seqs", "snapshot taken", "size",
                        "findings"]))
    _print_findings(findings)
    total = sum(i.total_bytes for i in infos)
    print(f"\n{len(infos):,} actors, {_size(total)} in {args.data_dir}; "
          f"{_tally(findings) or 'no damage found'}")
    return _exit_status(findings)


def cmd_shards(args: argparse.Namespace) -> int:
    """The virtual shards of a data directory shared by a cluster: actors, bytes and
    the lease of each (who owns it, with which epoch, for how long)."""
    import time

    from mnemex.persistence.leases import FileLeases
    from mnemex.persistence.shards import SHARDS_DIR, iter_shard_dirs, vshard_of

    root = Path(args.data_dir)
    if not root.is_dir():
        print(f"mnemex shards: {root} is not a directory", file=sys.stderr)
        return 1
    leases, now = FileLeases(root), time.time()
    rows: list[dict[str, Any]] = []
    counts: dict[int, int] = {}
    legacy = 0  # actors still where they were before virtual shards (moved when opened)
    for location in find_actors(root):
        if location.path.is_relative_to(root / SHARDS_DIR):
            vshard = vshard_of(location.kind, location.key)
            counts[vshard] = counts.get(vshard, 0) + 1
        else:
            legacy += 1
    for vshard, folder in iter_shard_dirs(root):
        damaged: str | None = None
        try:
            lease = leases.holder(vshard)
        except MnemexError as exc:
            lease, damaged = None, str(exc)
        size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        rows.append({"vshard": vshard, "actors": counts.get(vshard, 0), "bytes": size,
                     "owner": lease.owner if lease else None, "epoch": lease.epoch if lease else None,
                     "expires_in_s": round(lease.expires - now, 1) if lease else None, "damaged": damaged})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 1 if any(row["damaged"] for row in rows) else 0
    table = [[f"{row['vshard']:03x} ({row['vshard']})", f"{row['actors']:,}", _size(row["bytes"]),
              row["owner"] or "-", str(row["epoch"] or "-"),
              "-" if row["expires_in_s"] is None else
              (f"{row['expires_in_s']:.1f} s" if row["expires_in_s"] > 0 else "lapsed"),
              row["damaged"] or ""] for row in rows]
    print(_table(table, ["vshard", "actors", "size", "owner", "epoch", "lease", "problem"]))
    owners: dict[str, int] = {}
    for row in rows:
        if row["owner"] and row["expires_in_s"] and row["expires_in_s"] > 0:
            owners[row["owner"]] = owners.get(row["owner"], 0) + 1
    held = ", ".join(f"{owner}: {n}" for owner, n in sorted(owners.items())) or "none"
    print(f"\n{len(rows):,} virtual shards with folders, {sum(r['actors'] for r in rows):,} actors; "
          f"leases held now: {held}")
    if legacy:
        print(f"{legacy:,} actors are still in the layout before virtual shards: they move into their "
              f"virtual shards' folders when the directory is next opened")
    return 1 if any(row["damaged"] for row in rows) else 0


def _is_failure(report: ActorReport) -> bool:
    """The actor could not be rebuilt (one of a kind not registered here is only counted)."""
    return report.error is not None and not report.error.startswith("kind ")


def cmd_replay(args: argparse.Namespace) -> int:
    from mnemex.kernel._replay import ProgressBar, parse_moment, replay_data_dir

    config = load_config(Path(args.config).read_bytes()) if args.config else Config()
    kinds = _load_kinds(args.kinds, config)
    until = parse_moment(args.until) if args.until else None
    reports = replay_data_dir(args.data_dir, kinds, until_ms=until, actor=args.actor, verify=args.verify,
                              progress=ProgressBar("replaying"))
    failures = [f"{r.kind} {'/'.join(r.key)} not rebuilt: {r.error}" for r in reports if _is_failure(r)]
    findings = [finding for r in reports for finding in r.findings]
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return _exit_status(findings, failed=bool(failures))
    rows = []
    for r in reports:
        counts = ", ".join(f"{k}={v}" for k, v in sorted(r.extra.items()) if isinstance(v, int | float | str))
        failed = "not rebuilt" if _is_failure(r) else r.error
        status = "; ".join(filter(None, [failed, _tally(r.findings)])) or (
            "verified" if args.verify else "ok")
        rows.append([r.kind, "/".join(r.key), f"{r.records:,}" if r.records is not None else "-",
                     f"{r.snapshot_seq or 0}..{r.last_seq}", f"{r.journal_lines:,}", _size(r.bytes),
                     counts[:60], status])
    print(_table(rows, ["kind", "key", "records", "seq range", "journal", "size", "counts", "status"]))
    _print_findings(findings, failures)
    as_of = f" as of {_when(until)}" if until is not None else ""
    records = sum(r.records or 0 for r in reports)
    found = f"; {_tally(findings) or 'no damage found'}" if args.verify else ""
    print(f"\n{len(reports):,} actors, {records:,} records, {_size(sum(r.bytes for r in reports))}{as_of}"
          f"{found}")
    return _exit_status(findings, failed=bool(failures))


def load_settings(args: argparse.Namespace) -> Config:
    """The Config of ``mnemex serve`` from, in rising priority: defaults, the TOML file
    (sections as tables, flat top-level keys as shortcuts; ``[server]`` is the server's),
    environment variables (MNEMEX_DATA_DIR, MNEMEX_HOST, MNEMEX_PORT, MNEMEX_TOKEN)
    and flags."""
    import os

    table = _config_table(args.config)
    server = dict(table.pop("server", {}) or {})
    storage = dict(table.pop("storage", {}) or {})
    env = os.environ
    data_dir = args.data_dir or env.get("MNEMEX_DATA_DIR")
    if data_dir:
        table.pop("data_dir", None)
        storage["data_dir"] = data_dir
    for name, key in (("MNEMEX_HOST", "host"), ("MNEMEX_TOKEN", "token"), ("MNEMEX_PORT", "port")):
        if name in env:
            server[key] = env[name]
    for key in ("host", "port", "token"):
        if getattr(args, key) is not None:
            server[key] = getattr(args, key)
    if "port" in server:
        try:
            server["port"] = int(server["port"])
        except ValueError:
            raise InvalidInput(f"port {server['port']!r} is not a number", field="server.port") from None
    return load_config({**table, "storage": storage, "server": server})


def _config_table(path: str | None) -> dict[str, Any]:
    """The TOML config file at ``path`` as a table (empty without one)."""
    import msgspec

    if not path:
        return {}
    try:
        table: dict[str, Any] = msgspec.toml.decode(Path(path).read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        raise InvalidInput(f"cannot read config {path}: {exc}", field="config") from None
    return table


def _data_dir_config(data_dir: str, path: str | None) -> Config:
    """The Config of ``export`` and ``import``: the TOML file's (embedder, limits), on
    ``data_dir``."""
    table = _config_table(path)
    table.pop("data_dir", None)
    storage = dict(table.pop("storage", {}) or {})
    storage["data_dir"] = data_dir
    return load_config({**table, "storage": storage})


def _on_runtime(config: Config, work: Callable[[MnemexRuntime], Awaitable[T]]) -> T:
    """``work(rt)`` on a runtime opened with ``config``; a MnemexError it raises comes
    out as itself (not inside the runtime's exception group)."""
    import trio

    async def run() -> T:
        failure: MnemexError | None = None
        async with open_runtime(config) as rt:
            try:
                return await work(rt)
            except MnemexError as exc:
                failure = exc
        assert failure is not None
        raise failure

    return trio.run(run)


def _counted(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def _scope_arg(text: str) -> tuple[str, str]:
    """``--scope APP/USER`` as (app_name, user_id): split at the first ``/``."""
    app_name, _, user_id = text.partition("/")
    if not app_name or not user_id:
        raise argparse.ArgumentTypeError(f"{text!r} is not APP/USER (an app name, '/', a user id)")
    return app_name, user_id


def cmd_export(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        raise NotFound(f"data directory {data_dir} does not exist")
    config = _data_dir_config(args.data_dir, args.config)
    scopes: list[tuple[str, str]] | None = list(dict.fromkeys(args.scope)) or None
    to_stdout = args.output == "-"

    async def export(out: IO[str], rt: MnemexRuntime) -> str:
        if scopes is not None:
            known = set(rt.scope_keys())
            for app_name, user_id in scopes:
                if (app_name, user_id) not in known:
                    names = ", ".join("/".join(key) for key in sorted(known)) or "none"
                    raise NotFound(f"no scope {app_name}/{user_id} in data directory {data_dir} "
                                   f"(its scopes: {names})")
        try:
            header = await rt.export_data(out, scopes, include_vectors=not args.no_vectors)
        except OSError as exc:
            raise StorageError(f"cannot write the export to {args.output}: {exc.strerror or exc}") from exc
        where = "standard output" if to_stdout else args.output
        vectors = "without vectors" if args.no_vectors else "with their vectors"
        return (f"exported {_counted(header.memories, 'memory', 'memories')} of "
                f"{_counted(header.scopes, 'scope')} {vectors} from {data_dir} to {where}")

    if to_stdout:
        summary = _on_runtime(config, lambda rt: export(sys.stdout, rt))
        sys.stdout.flush()
        print(summary, file=sys.stderr)
        return 0
    target = Path(args.output)
    partial = target.with_name(f"{target.name}.partial")  # the file appears whole, or not at all
    try:
        with partial.open("w", encoding="utf-8") as out:
            summary = _on_runtime(config, lambda rt: export(out, rt))
        partial.replace(target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise StorageError(f"cannot write {target}: {exc.strerror or exc}") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    print(summary)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    config = _data_dir_config(args.data_dir, args.config)

    def read(lines: Iterable[str]) -> dict[str, Any]:
        async def run(rt: MnemexRuntime) -> dict[str, Any]:
            try:
                report = await rt.import_data(lines)
            except UnicodeDecodeError as exc:
                raise InvalidInput(f"the export {args.file} is not UTF-8 text: {exc}", field="file") from exc
            except OSError as exc:
                raise StorageError(f"cannot read the export {args.file}: {exc.strerror or exc}") from exc
            return {"data_dir": args.data_dir, "scopes": report.scopes, "added": report.added,
                    "skipped": report.skipped, "reembedded": report.reembedded,
                    "embedder": rt.scope_services().embedder.name}

        return _on_runtime(config, run)

    if args.file == "-":
        done = read(sys.stdin)
    else:
        try:
            with open(args.file, encoding="utf-8") as lines:
                done = read(lines)
        except OSError as exc:
            raise StorageError(f"cannot read the export {args.file}: {exc.strerror or exc}") from exc
    if args.json:
        print(json.dumps(done))
    else:
        print(f"imported into {done['data_dir']}: {_counted(done['scopes'], 'scope')}, "
              f"{_counted(done['added'], 'memory', 'memories')} added, {done['skipped']:,} skipped (there "
              f"already), {done['reembedded']:,} re-embedded ({done['embedder']})")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    from mnemex.server import serve

    try:
        config = load_settings(args)
        opener = _cluster_opener(args)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        serve(config, opener=opener)
    except InvalidInput as exc:  # what the operator must fix: one line, no traceback
        print(f"mnemex serve: {exc}", file=sys.stderr)
        return 2
    return 0


def _cluster_opener(args: argparse.Namespace) -> Any:
    """``mnemex serve --ray``'s opener of the cluster's runtime; None without --ray."""
    if args.ray is None:
        if args.shards is not None or args.stop_shards or args.lease_ttl is not None:
            raise InvalidInput("--shards, --lease-ttl and --stop-shards go with --ray ADDRESS",
                               field="shards")
        return None
    try:
        from mnemex.ray.serving import serving
    except ImportError as exc:
        raise InvalidInput(f"--ray needs Ray ({exc}): pip install 'mnemex[ray]'", field="ray") from None
    leases = {} if args.lease_ttl is None else {"ttl": args.lease_ttl, "margin": min(2.0, args.lease_ttl / 4)}
    return serving(address=args.ray, shards=args.shards, stop_shards=args.stop_shards, **leases)


def cmd_mcp(args: argparse.Namespace) -> int:
    import logging
    import os

    try:
        from mnemex.integrations import mcp
    except ImportError as exc:
        print(f"mnemex mcp needs the MCP SDK ({exc}): pip install 'mnemex[mcp]'", file=sys.stderr)
        return EXIT_USAGE
    data_dir = args.data_dir or os.environ.get("MNEMEX_DATA_DIR")
    if not data_dir:
        print("mnemex mcp: give the data directory with --data-dir (or MNEMEX_DATA_DIR): an MCP client "
              "starts the server in a directory of its own choosing", file=sys.stderr)
        return EXIT_USAGE
    token = args.token or os.environ.get("MNEMEX_TOKEN")
    try:
        config = _data_dir_config(str(Path(data_dir).expanduser()),
                                  args.config and str(Path(args.config).expanduser()))
        settings = mcp.McpSettings(user_id=args.user_id, app_name=args.app_name, agent=args.agent,
                                   allow_scope_args=args.allow_scope_args, graph_tools=args.graph_tools)
        if args.http:
            mcp.check_http_binding(args.host, token)
    except InvalidInput as exc:  # what the operator must fix: one line, no traceback
        print(f"mnemex mcp: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # stdio: stdout is the protocol's, and logs go to stderr either way
    logging.basicConfig(level=logging.INFO if args.http else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    mcp.run(config, settings, http=args.http, host=args.host, port=args.port, token=token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mnemex", description="Memory for AI agents.",
                                     epilog=f"{_EXIT_HELP}\n{_TRANSFER_HELP}",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the HTTP API (data in ./mnemex-data by default)")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080; 0 picks a free one)")
    serve.add_argument("--data-dir", help="data directory (default ./mnemex-data)")
    serve.add_argument("--config", help="a TOML config file; the [server] table holds server settings")
    serve.add_argument("--token", help="require this bearer token (or set MNEMEX_TOKEN)")
    serve.add_argument("--ray", metavar="ADDRESS",
                       help="serve a cluster of shards on the Ray cluster at ADDRESS (host:port of its "
                            "head, auto, or local to start one here); --data-dir must be mounted at the same "
                            "path on every node")
    serve.add_argument("--shards", type=int,
                       help="with --ray: how many shards (default: as many as the data directory's cluster "
                            "has, else 2)")
    serve.add_argument("--lease-ttl", type=float, metavar="SECONDS",
                       help="with --ray: each virtual shard's lease (default 15): a shard whose process died "
                            "is served again by its restart within about this long")
    serve.add_argument("--stop-shards", action="store_true",
                       help="with --ray: shut the shards down when this server stops (by default they go on "
                            "serving other servers and the next start)")
    serve.set_defaults(run=cmd_serve)

    mcp = sub.add_parser(
        "mcp", help="serve one user's memory to an MCP client (Claude Desktop, Cursor...) on stdio or HTTP",
        description="Serve the memory of one user in one app as MCP tools (remember, search_memory,\n"
                    "list_memories, forget, memory_history, append, context, extract) on stdin and stdout,\n"
                    "or over streamable HTTP with --http. Needs pip install 'mnemex[mcp]'.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mcp.add_argument("--data-dir", help="data directory (or MNEMEX_DATA_DIR; required: '~' is expanded)")
    mcp.add_argument("--config", help="a TOML config file (embedder, LLM for extraction, limits)")
    mcp.add_argument("--user-id", help="the user whose memory every call uses")
    mcp.add_argument("--app-name", help="the app whose memory every call uses")
    mcp.add_argument("--agent", default="mcp",
                     help="the agent whose conversations append, context and extract use (default mcp)")
    mcp.add_argument("--allow-scope-args", action="store_true",
                     help="let each call name its user_id, app_name and agent (--user-id and --app-name are "
                          "then defaults); off, one user's assistant cannot reach another user's memory")
    mcp.add_argument("--graph-tools", action="store_true",
                     help="also serve the reference memory server's knowledge-graph tools (create_entities, "
                          "create_relations, add_observations, read_graph, search_nodes, open_nodes, "
                          "delete_*)")
    mcp.add_argument("--http", action="store_true",
                     help="serve streamable HTTP at http://HOST:PORT/mcp, not stdio")
    mcp.add_argument("--host", default="127.0.0.1",
                     help="with --http: address to bind (default 127.0.0.1; another needs --token)")
    mcp.add_argument("--port", type=int, default=8765,
                     help="with --http: port (default 8765; 0 picks a free one)")
    mcp.add_argument("--token", help="with --http: require this bearer token (or set MNEMEX_TOKEN)")
    mcp.set_defaults(run=cmd_mcp)

    inspect = sub.add_parser(
        "inspect", help="list the actors of a data directory with counts and sizes; check every file",
        description="List the actors of a data directory with counts and sizes, and check every byte of "
                    "their files: each problem found is printed naming its file and line.",
        epilog=_EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    inspect.add_argument("data_dir")
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    inspect.set_defaults(run=cmd_inspect)

    shards = sub.add_parser(
        "shards", help="list the virtual shards of a data directory, their actors and leases",
        description="List the virtual shards of a data directory (shards/<vvv>/): how many actors and bytes "
                    "each holds and, when a cluster shares the directory, who holds its lease, with which "
                    "fencing epoch, and for how long. Reads only; safe beside running shards. Exits 1 if "
                    "a lease file is damaged.")
    shards.add_argument("data_dir")
    shards.add_argument("--json", action="store_true", help="machine-readable output")
    shards.set_defaults(run=cmd_shards)

    replay = sub.add_parser("replay", help="rebuild state from disk and report what was found",
                            epilog=_EXIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    replay.add_argument("data_dir")
    replay.add_argument("--until", help="state as of this moment: ISO 8601 (UTC if naive) or epoch seconds")
    replay.add_argument("--actor", help="only this actor: its key (parts joined by '/') or KIND:KEY")
    replay.add_argument("--verify", action="store_true",
                        help="check every checksum and that snapshots and journal agree (what inspect "
                             "checks), then rebuild")
    replay.add_argument("--kinds", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="extra actor kinds to rebuild (a function returning an ActorKind or a list)")
    replay.add_argument("--config", help="a TOML config file (embedder, limits) for mnemex's own kinds")
    replay.add_argument("--json", action="store_true", help="machine-readable output")
    replay.set_defaults(run=cmd_replay)

    export = sub.add_parser(
        "export", help="write the memories of a data directory as JSONL (ids, history, entities, vectors)",
        description="Write every memory of a data directory (or of the --scope ones) as JSONL: a header\n"
                    "line, then one line per memory with its scope, its whole record and its vector.\n"
                    "Opens a runtime on DATA_DIR, so a directory a server is using is refused.",
        epilog=_TRANSFER_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    export.add_argument("data_dir")
    export.add_argument("--scope", action="append", default=[], type=_scope_arg, metavar="APP/USER",
                        help="only this scope (app name, '/', user id); repeat for several")
    export.add_argument("--output", "-o", default="-", metavar="FILE",
                        help="where to write (default '-': standard output; the summary then goes to "
                             "standard error)")
    export.add_argument("--no-vectors", action="store_true",
                        help="leave the vectors out (smaller; the import embeds the memories again)")
    export.add_argument("--config", help="a TOML config file (embedder, limits) for the runtime")
    export.set_defaults(run=cmd_export)

    imports = sub.add_parser(
        "import", help="read an export into a data directory, ids preserved (running it twice adds nothing)",
        description="Read an export (mnemex export) into DATA_DIR, created if needed: every line is\n"
                    "checked first, then each memory is stored as exported (id, status, history kept);\n"
                    "one whose id or content a scope holds already is skipped. Memories exported without\n"
                    "a vector, or by another embedder than this runtime's (--config), are embedded again.",
        epilog=_TRANSFER_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    imports.add_argument("data_dir")
    imports.add_argument("file", metavar="FILE", help="the export to read ('-': standard input)")
    imports.add_argument("--config", help="a TOML config file (embedder, limits) for the runtime")
    imports.add_argument("--json", action="store_true", help="machine-readable summary")
    imports.set_defaults(run=cmd_import)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: Any = args.run(args)
    except MnemexError as exc:
        print(f"mnemex: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_DAMAGED
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
