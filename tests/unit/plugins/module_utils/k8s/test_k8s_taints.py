"""Taints and tolerations with the scheduler's rules, and taint-aware node facts."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.k8s.nodes import common_label, node_facts
from ansible_collections.qonnect.core.plugins.module_utils.k8s.taints import (
    blocking_taints,
    blocks_service,
    manifest_tolerations,
    node_taints,
    taint_text,
    tolerates,
)

CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "value": "", "effect": "NoExecute"}
SOFT = {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
            CONTROL_PLANE,
            True,
        ),
        ({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}, CONTROL_PLANE, True),
        ({"operator": "Exists"}, GPU, True),  # empty key + Exists tolerates everything
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}, GPU, True),
        ({"key": "nvidia.com/gpu", "value": "present"}, GPU, True),  # Equal is the default operator
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}, GPU, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU, False),
        (
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            UNREACHABLE,
            True,
        ),
        ({"key": "other", "operator": "Exists"}, GPU, False),
    ],
)
def test_toleration_matching_follows_kubernetes(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


def test_only_noschedule_and_noexecute_taints_block():
    taints = [CONTROL_PLANE, SOFT, UNREACHABLE]
    assert blocking_taints(taints, []) == [CONTROL_PLANE, UNREACHABLE]
    tol = [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]
    assert blocking_taints(taints, tol) == [UNREACHABLE]
    assert taint_text(GPU) == "nvidia.com/gpu=present:NoSchedule"
    assert taint_text(CONTROL_PLANE) == "node-role.kubernetes.io/control-plane:NoSchedule"


def test_a_service_needs_every_workload_to_tolerate_the_taint():
    tolerant = {
        "kind": "Deployment",
        "spec": {
            "template": {
                "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}], "containers": []}
            }
        },
    }
    plain = {"kind": "StatefulSet", "spec": {"template": {"spec": {"containers": []}}}}
    config = {"kind": "ConfigMap", "metadata": {"name": "c"}}
    assert blocks_service([GPU], manifest_tolerations([tolerant, config])) == []
    assert blocks_service([GPU], manifest_tolerations([tolerant, plain])) == [GPU]
    assert manifest_tolerations([config]) == [[]]  # no pods: tolerates nothing


def node(name, taints=None, labels=None, unschedulable=False):
    spec = {"taints": taints} if taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "4", "memory": "8Gi"},
        },
    }


class Nodes:
    def __init__(self, nodes):
        self.nodes = nodes

    def list(self, api_version, kind, namespace=None, label_selector=None):
        assert (api_version, kind) == ("v1", "Node")
        return self.nodes


def test_node_facts_report_taints_and_a_tainted_control_plane_does_not_decide_the_tier():
    real_taint = dict(CONTROL_PLANE, timeAdded="2026-01-01T00:00:00Z")
    real_taint.pop("value")  # the API server omits an empty value
    facts = node_facts(
        Nodes(
            [
                node("cp", [real_taint], {"node-role.kubernetes.io/control-plane": ""}),
                node("w1", labels={"qonnect.io/tier": "edge", "qonnect.io/location": "lab"}),
                node("w2", [SOFT], labels={"qonnect.io/tier": "edge", "qonnect.io/location": "lab"}),
            ]
        )
    )
    by_name = {f["name"]: f for f in facts}
    assert by_name["cp"]["taints"] == [CONTROL_PLANE]
    assert by_name["cp"]["workloads"] is False and by_name["cp"]["schedulable"] is True
    assert by_name["w1"]["workloads"] is True and by_name["w2"]["workloads"] is True
    assert common_label(facts, "qonnect.io/tier") == "edge"
    assert common_label(facts, "qonnect.io/location") == "lab"


def test_node_taints_drop_malformed_entries():
    raw = node(
        "n", [{"key": "a", "effect": "NoSchedule"}, {"effect": "NoSchedule"}, {"key": "b", "effect": "Bogus"}]
    )
    assert node_taints(raw) == [{"key": "a", "value": "", "effect": "NoSchedule"}]
