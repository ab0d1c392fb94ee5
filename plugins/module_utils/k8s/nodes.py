# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node facts read through a kubeconfig, for registering a cluster with what it really has.

A node that is cordoned, or carries a NoSchedule/NoExecute taint (a control-plane node), runs no
application pods: it is reported with ``workloads: false`` and does not decide the cluster's tier
or location labels.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.taints import blocking_taints, node_taints
from ansible_collections.qonnect.core.plugins.module_utils.keys import PREFIX


def node_facts(client: Any) -> list[dict]:
    """A short summary of each Node: readiness, capacity and the qonnect.io labels."""
    facts = []
    for node in client.list("v1", "Node"):
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        labels = meta.get("labels") or {}
        taints = node_taints(node)
        schedulable = not spec.get("unschedulable", False)
        facts.append(
            {
                "name": meta.get("name"),
                "ready": conditions.get("Ready") == "True",
                "schedulable": schedulable,
                "taints": taints,
                "workloads": schedulable and not blocking_taints(taints, []),
                "allocatable": dict(status.get("allocatable") or {}),
                "labels": {
                    k: v for k, v in labels.items() if k.startswith((PREFIX, "kubernetes.io/", "topology."))
                },
            }
        )
    return sorted(facts, key=lambda n: n["name"] or "")


def common_label(nodes: list[dict], key: str) -> str | None:
    """The value of a label shared by all workload nodes, e.g. the tier a cluster's nodes declare.

    Nodes that run no workloads (a tainted control-plane node without the label) do not count,
    unless there is no other node.
    """
    workers = [n for n in nodes if n.get("workloads", True)] or nodes
    values = {n["labels"].get(key) for n in workers}
    return values.pop() if len(values) == 1 else None
