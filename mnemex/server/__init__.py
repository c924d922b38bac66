"""The HTTP service: the conversation API, the memory API and operations.

uvicorn serves it on uvloop with httptools (``_serve``); the runtime runs as a
trio guest of that event loop on the same thread, and each request crosses
into it once, through the Bridge (``_bridge``), and back once. The handlers
are asyncio code.

Request handling, chosen by measurement (POST and GET /messages at 16
connections, wrk, this 2-core machine, the two builds alternating in one run):
Starlette's router and its two exception middlewares cost about a fifth of
the server's time per request (GET of a 50-message session 10,440 -> 13,252
req/s, POST 5,466 -> 9,692 req/s once replaced), so routing is our own
(``_routing``: one dict lookup for a fixed path) and each endpoint answers its
own errors. Starlette's Request (query strings, headers, path parameters) and
its streaming response (disconnect handling for server-sent events) are kept:
they cost little, and the alternative is writing them again. Bodies are
decoded and checked by msgspec Structs (``_schemas``), once.

Another runtime can be served (``mnemex serve --ray``, ``mnemex.ray.serving``):
``Server(config, opener=...)`` opens it with its ``Operations`` (``_served``);
what such a host needs is exported here too.

POST /messages does not cross into trio at all (``Bridge.ask``): the append is
handed to the kernel from the loop, between two ticks of the guest run, and
taken there (journal line, then the agent's state) when the agent is idle; its
reply comes back through the loop once the group commit's thread reports the
line durable. Measured the same way against crossing into trio for it (a trio
task per request, the run woken through its entry queue and its I/O-wait
thread, the reply through the run again): 105 -> 92 us of server CPU per
request, and the app, bridge and kernel alone 70 -> 63 us (16 clients in
process, no HTTP); the rest is uvicorn, the socket's send, and the fsync
threads' handoffs of the GIL. A body that arrived with its head (the usual
small one) is read without arming the body timeout, and the content type is
checked on the raw headers. With the agent's snapshot taken off its turn
(``mnemex.conversations.snapshot``) and its per-query indexes out of the cyclic
GC's sight, measured beside the previous tree on this shared machine (same
runs, load 5 to 25, so noisy): 1 to 15% less server CPU per request, 1.06 to
1.8x its rate, and p99 63 -> 20 ms in the quietest run.

POST /memory/search of one in-process scope takes the same short way once its
query can be embedded at once (``ScopeRef.search_command``; a reranker, or a
query for the embedding thread, goes the general way): the searches asked in one
turn of the loop are answered inline, back to back, in one callback
(``Bridge.ask_batched``). Measured against a trio task per search (2026-11-26,
10,000 memories, 16 connections, wrk, the two servers alternating): the server's
CPU per request 580 -> 533 us (medians of 6 rounds, load 1-1.8) and 622 -> 582 us
(``bench/http.py --routes search``, medians of 3 rounds, load 2-4). The same
short way with each search run in its own handler saved nothing (~600 against
~590 us): the ranking's data stays in the CPU's caches only when the searches
run one after another, as the trio tasks did.

A batch's searches of one scope are read ahead (``Runtime.read_ahead``,
``ScopeMemory.read_ahead``): before they are asked, the scope makes one coarse
int8 pass over its vectors for all of them (the pass of a search alone spends
most of its time reading the rows: 10,000 rows of 384 dimensions, caches cold,
~95 us for one query against ~39 us a query for 16), and each search takes what
was made for it; the hits are the same, byte for byte. The actor's own task does
the same for each run of searches it takes from its mailbox (a scope busy with a
write, or with the access counts' Touch, queues them there). With it, in the same
change: the named memories' cosines rescored in the vector search's product, a
hybrid hit's lists carried as a tuple, and one ScopeRef kept per scope (see
bench/README.md, http.py). All of it measured beside the tree before it (c2efb68,
2026-11-26, ``bench/http.py --routes search --connections 16 --rounds 3
--baseline-tree ...``, load 1-3.5, helpers of the session working): the server's
CPU per request 550 -> 476 us, 2,102 against 1,820 req/s (per round 1.15, 1.16,
1.12); two earlier runs 1,981 against 1,828 and 2,116 against 1,846.
"""

from mnemex.server._app import build_app
from mnemex.server._bridge import Bridge
from mnemex.server._schemas import ServerSettings, StreamStatistics
from mnemex.server._serve import Server, serve
from mnemex.server._served import (
    Gauges,
    LocalOperations,
    Operations,
    PushedStreams,
    RuntimeHealth,
    RuntimeOpener,
    ServedRuntime,
    ShardGauges,
)
from mnemex.server._streams import CAUGHT_UP, PushedStream, StreamClosed, StreamHub

__all__ = ["CAUGHT_UP", "Bridge", "Gauges", "LocalOperations", "Operations", "PushedStream", "PushedStreams",
           "RuntimeHealth", "RuntimeOpener", "ServedRuntime", "Server", "ServerSettings", "ShardGauges",
           "StreamClosed", "StreamHub", "StreamStatistics", "build_app", "serve"]
