"""A local three-node Ray cluster for the cluster tests, bound to 127.0.0.1.

Ray picks the machine's routable address for a driver connecting to
``127.0.0.1`` unless it believes clustering is off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``,
read when Ray is imported): set before Ray is imported, so that every node, the
driver and the workers speak over loopback only. Skipped, saying why, where Ray
is not installed or cannot start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A head node (2 CPUs) and two worker nodes (1 CPU each), all on 127.0.0.1; the
    driver connected. Shards take one CPU each: three shards spread over the nodes,
    and one whose node is lost has a CPU to restart on."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'mnemex[ray]')")
    from ray.cluster_utils import Cluster

    node = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}
    try:
        cluster = Cluster(initialize_head=True,
                          head_node_args={**node, "num_cpus": 2, "include_dashboard": False})
        workers = [cluster.add_node(**node, num_cpus=1) for _ in range(2)]
        ray.init(address=cluster.address, _node_ip_address="127.0.0.1", namespace="mnemex-tests",
                 log_to_driver=False)
    except Exception as exc:
        pytest.skip(f"a local Ray cluster could not start: {exc!r}")
    cluster.workers = workers
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
