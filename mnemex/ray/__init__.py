"""mnemex on Ray: the same API over shard processes that Ray places and restarts.

``open_runtime(config, address=..., shards=N)`` (async) and ``Client(config,
address=..., shards=N)`` (blocking) reach a cluster of ``Shard`` actors, each
running today's runtime over the virtual shards placed on it, on a data directory
every node mounts; leases with fencing epochs give each key one owner, request ids
make retried writes apply once. Needs the ``ray`` extra: ``pip install 'mnemex[ray]'``
(Ray itself is imported only when a cluster is opened).
"""

from mnemex.ray.cluster import Client, RayHost, RayRuntime, open_runtime, stop_cluster
from mnemex.ray.placement import Placement
from mnemex.ray.requests import Repeated, Requested, deduplicating, request_kinds
from mnemex.ray.shard import Shard, ShardHealth

__all__ = ["Client", "Placement", "RayHost", "RayRuntime", "Repeated", "Requested", "Shard", "ShardHealth",
           "deduplicating", "open_runtime", "request_kinds", "stop_cluster"]
