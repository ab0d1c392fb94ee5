# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runner of cluster_info: read the federation as the KB sees it (no cluster is contacted, so
this module packs no Kubernetes code)."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.module import QonnectModule


def select(clusters: list[dict], params: dict) -> list[dict]:
    """The clusters cluster_info's filters (name, tier, healthy_only) keep."""
    names = set(params.get("name") or [])
    out = []
    for cluster in clusters:
        if names and cluster.get("name") not in names:
            continue
        if params.get("tier") and cluster.get("tier") != params["tier"]:
            continue
        if params.get("healthy_only") and not cluster.get("healthy"):
            continue
        out.append(cluster)
    return out


def info(module: QonnectModule) -> dict:
    """cluster_info: one call to the KB's inventory endpoint, filtered."""
    inventory = module.kb.inventory()
    return {
        "changed": False,
        "clusters": select(inventory.get("clusters") or [], module.params),
        "placements": inventory.get("placements") or {},
        "latency_ms": inventory.get("latency_ms") or {},
    }
