"""The KB inventory a testbed profile gives: how ``examples/inventories/paper.json`` is made.

The nine-cluster paper testbed has one source, ``profiles/paper.yml``; the example inventory
that ``qonnect plan``, the docs and the unit tests read is this module's output for it (a test
holds the two identical). It is the fleet as the KB reports it a moment after each agent's first
report: every node Ready and idle but for the system pods' requests, reported two seconds ago.

    python -m qonnect_testbed.inventory paper > examples/inventories/paper.json
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# The collection's module_utils by their collection name, imported normally as the services do
# (the qonnect wheel carries the collection; docs/architecture.md, "One home for the Python core").
from ansible_collections.qonnect.core.plugins.module_utils import keys

from qonnect_testbed import fleet as profiles
from qonnect_testbed.fleet import ClusterSpec, Fleet, NodeSpec, ProfileError

# What an idle cluster's system pods (kube-proxy, CoreDNS) request on each node.
SYSTEM_REQUESTS = {"cpu": 0.25, "memory": 256 * 2**20, "ephemeral_storage": 0}
REPORT_AGE = 2.0  # seconds since the agent's report
# The cluster record's label naming the node profile of its nodes (the paper's cluster kinds).
CLUSTER_PROFILE_LABEL = keys.PREFIX + "profile"


def _node(cluster: ClusterSpec, node: NodeSpec) -> dict[str, Any]:
    return {
        "name": node.name,
        "ready": True,
        "schedulable": True,
        "pressure": {"memory": False, "disk": False, "pid": False},
        "allocatable": {
            "cpu": node.cpu,
            "memory": node.memory,
            "ephemeral_storage": node.ephemeral_storage,
        },
        "requested": dict(SYSTEM_REQUESTS),
        "bandwidth_gbps": node.bandwidth_gbps,
        "energy_kwh": node.energy_kwh,
        "price_eur_h": node.price_eur_h,
        "heartbeat_age": REPORT_AGE,
        "labels": {
            "kubernetes.io/hostname": node.name,
            keys.TIER_LABEL: cluster.tier,
            keys.LOCATION_LABEL: cluster.location,
            keys.ENERGY_LABEL: str(node.energy_kwh),
            keys.PRICE_LABEL: str(node.price_eur_h),
            keys.BANDWIDTH_LABEL: str(node.bandwidth_gbps),
            **node.labels,
        },
        **({"taints": [dict(t) for t in node.taints]} if node.taints else {}),
    }


def _cluster(cluster: ClusterSpec) -> dict[str, Any]:
    return {
        "name": cluster.name,
        "tier": cluster.tier,
        "location": cluster.location,
        "labels": {
            **cluster.labels,
            keys.TIER_LABEL: cluster.tier,
            CLUSTER_PROFILE_LABEL: cluster.nodes[0].profile,
        },
        "healthy": True,
        "heartbeat_age": REPORT_AGE,
        "nodes": [_node(cluster, n) for n in cluster.nodes],
    }


def inventory(fleet: Fleet) -> dict[str, Any]:
    """The inventory contract's document (docs/architecture.md, "Inventory") for a fleet."""
    names = [c.location for c in fleet.clusters]
    return {
        "clusters": [_cluster(c) for c in fleet.clusters],
        "latency_ms": {a: {b: fleet.latency_ms[a][b] for b in names} for a in names},
        "placements": {},
    }


def render(fleet: Fleet) -> str:
    """The inventory as the example file's text (two-space JSON, a final newline)."""
    return json.dumps(inventory(fleet), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="built-in profile name (e.g. paper) or profile file")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(render(profiles.expand(profiles.load(args.profile))))
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
