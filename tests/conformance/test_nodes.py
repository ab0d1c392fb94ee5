"""Nodes: conditions, the tainted control plane, scheduling around taints, node loss."""

from __future__ import annotations

import pytest
from conformance_engines import CONTROL_PLANE, WORKER, pod
from support import wait_for

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(300)]


def _conds(node) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in node.status.conditions}


def test_nodes_conditions_labels_and_control_plane_taint(engine):
    nodes = {n.metadata.name: n for n in engine.core().list_node().items}
    assert set(nodes) == {WORKER, CONTROL_PLANE}
    for node in nodes.values():
        conds = _conds(node)
        assert conds["Ready"] == ("True", "KubeletReady")
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure"):
            assert conds[kind][0] == "False"
        assert {"cpu", "memory", "pods", "ephemeral-storage"} <= set(node.status.allocatable)
        assert node.metadata.labels["qonnect.io/tier"] == "cloud"
    cp = nodes[CONTROL_PLANE]
    assert [(t.key, t.value, t.effect) for t in cp.spec.taints] == [
        ("node-role.kubernetes.io/control-plane", None, "NoSchedule")
    ]
    assert cp.metadata.labels["node-role.kubernetes.io/control-plane"] == ""
    assert not nodes[WORKER].spec.taints


def test_untolerated_taint_leaves_the_pod_pending(engine, ns):
    body = pod("pinned")
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": CONTROL_PLANE}
    engine.core().create_namespaced_pod(ns, body)

    def unschedulable():
        p = engine.core().read_namespaced_pod("pinned", ns)
        cond = {c.type: c for c in p.status.conditions or []}.get("PodScheduled")
        return cond if cond and cond.reason == "Unschedulable" else None

    cond = wait_for(unschedulable, timeout=60, what="Unschedulable")
    assert cond.status == "False"
    expected = (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint(s)."
    )
    if engine.is_emulator:  # no dynamic resources, no preemption: the message ends there
        assert cond.message == expected
    else:
        assert cond.message == expected + (
            " no new claims to deallocate, preemption: 0/2 nodes are available: "
            "2 Preemption is not helpful for scheduling."
        )


def test_tolerating_pod_runs_on_the_control_plane(engine, ns):
    body = pod("cp")
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": CONTROL_PLANE}
    body["spec"]["tolerations"] = [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
    ]
    engine.core().create_namespaced_pod(ns, body)
    p = wait_for(
        lambda: (x := engine.core().read_namespaced_pod("cp", ns)).status.phase == "Running" and x,
        timeout=60,
        what="pod Running on the control plane",
    )
    assert p.spec.node_name == CONTROL_PLANE


def test_node_loss_conditions_and_taints_then_recovery(engine, ns):
    core = engine.core()
    engine.testbed("node-down", engine.cluster, WORKER)
    try:
        ready = _conds(core.read_node(WORKER))["Ready"][0]
        if engine.is_emulator:  # --node-monitor-grace-period defaults to 0 in the emulator
            assert ready == "Unknown"
        else:  # the node lifecycle controller waits 40 s (its default) without heartbeats
            assert ready == "True"

        def lost():
            node = core.read_node(WORKER)
            taints = {(t.key, t.effect) for t in node.spec.taints or []}
            return (
                node
                if _conds(node)["Ready"][0] == "Unknown"
                and ("node.kubernetes.io/unreachable", "NoExecute") in taints
                else None
            )

        node = wait_for(lost, timeout=180, interval=0.5, what="node unreachable")
        assert _conds(node)["Ready"] == ("Unknown", "NodeStatusUnknown")
        assert {(t.key, t.effect) for t in node.spec.taints} >= {
            ("node.kubernetes.io/unreachable", "NoSchedule"),
            ("node.kubernetes.io/unreachable", "NoExecute"),
        }
        core.create_namespaced_pod(ns, pod("stranded"))

        def unschedulable():
            p = core.read_namespaced_pod("stranded", ns)
            cond = {c.type: c for c in p.status.conditions or []}.get("PodScheduled")
            return cond.message if cond and cond.reason == "Unschedulable" else None

        message = wait_for(unschedulable, timeout=60, what="Unschedulable while the worker is lost")
        if engine.is_emulator:  # the emulator's scheduler checks readiness before taints
            assert message == (
                "0/2 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were not ready."
            )
        else:  # kube-scheduler sees only the unreachable taint
            assert message.startswith("0/2 nodes are available: 2 node(s) had untolerated taint(s). ")
    finally:
        engine.testbed("node-up", engine.cluster, WORKER)

    def back():
        node = core.read_node(WORKER)
        return node if _conds(node)["Ready"][0] == "True" and not node.spec.taints else None

    wait_for(back, timeout=180, interval=0.5, what="node Ready without taints")
