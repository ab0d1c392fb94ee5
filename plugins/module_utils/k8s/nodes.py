# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node facts read through a kubeconfig, for registering a cluster with what it really has."""

from __future__ import annotations

from typing import Any

TIER_LABEL = "qonnect.io/tier"
LOCATION_LABEL = "qonnect.io/location"


def node_facts(client: Any) -> list[dict]:
    """A short summary of each Node: readiness, capacity and the qonnect.io labels."""
    facts = []
    for node in client.list("v1", "Node"):
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        labels = meta.get("labels") or {}
        facts.append({
            "name": meta.get("name"),
            "ready": conditions.get("Ready") == "True",
            "schedulable": not spec.get("unschedulable", False),
            "allocatable": dict(status.get("allocatable") or {}),
            "labels": {k: v for k, v in labels.items() if k.startswith(("qonnect.io/", "kubernetes.io/", "topology."))},
        })
    return sorted(facts, key=lambda n: n["name"] or "")


def common_label(nodes: list[dict], key: str) -> str | None:
    """The value of a label shared by all nodes, e.g. the tier a cluster's nodes declare."""
    values = {n["labels"].get(key) for n in nodes}
    return values.pop() if len(values) == 1 else None
