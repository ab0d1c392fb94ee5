"""Node and workload summaries computed from Kubernetes objects (plain JSON dicts)."""

from __future__ import annotations

import pytest
from qonnect.agent.collector import (
    FAILED,
    HEALTHY,
    PROGRESSING,
    StatusClock,
    pod_requests,
    requested_by_node,
    selector_matches,
    summarize_node,
    workload_status,
)


def pod(node=None, phase="Running", requests=None, init=None, labels=None, ns="app", status=None):
    containers = [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(requests or [])]
    spec = {"containers": containers}
    if init:
        spec["initContainers"] = [{"name": "init", "resources": {"requests": init}}]
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": "p", "namespace": ns, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase, **(status or {})},
    }


def test_pod_requests_sum_containers_and_take_the_larger_init_container():
    p = pod(
        requests=[{"cpu": "250m", "memory": "128Mi"}, {"cpu": "500m"}], init={"cpu": "2", "memory": "1Mi"}
    )
    p["spec"]["overhead"] = {"memory": "1Mi"}
    got = pod_requests(p)
    assert float(got["cpu"]) == 2.0
    assert int(got["memory"]) == 128 * 2**20 + 2**20
    assert int(got["ephemeral_storage"]) == 0


def test_requested_by_node_counts_only_bound_active_pods():
    pods = [
        pod("n1", requests=[{"cpu": "1", "ephemeral-storage": "1Gi"}]),
        pod("n1", requests=[{"cpu": "500m"}]),
        pod("n1", phase="Succeeded", requests=[{"cpu": "4"}]),
        pod("n2", phase="Failed", requests=[{"cpu": "4"}]),
        pod(None, phase="Pending", requests=[{"cpu": "8"}]),
        pod("n2", phase="Pending", requests=[{"memory": "1G"}]),
    ]
    got = requested_by_node(pods)
    assert float(got["n1"]["cpu"]) == 1.5
    assert int(got["n1"]["ephemeral_storage"]) == 2**30
    assert float(got["n2"]["cpu"]) == 0.0
    assert int(got["n2"]["memory"]) == 10**9


def node(labels=None, conditions=None, unschedulable=False):
    return {
        "metadata": {"name": "edge-1-worker", "labels": labels or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": {"cpu": "6", "memory": "7160M", "ephemeral-storage": "100Gi", "pods": "110"},
            "conditions": [{"type": t, "status": s} for t, s in (conditions or {"Ready": "True"}).items()],
        },
    }


def test_summarize_node_reads_capacity_conditions_and_qonnect_labels():
    labels = {
        "qonnect.io/energy-kwh": "0.0024042",
        "qonnect.io/price-eur-h": "16.3884",
        "qonnect.io/bandwidth-gbps": "52.5",
        "qonnect.io/location": "edge-1",
    }
    from decimal import Decimal

    got = summarize_node(
        node(labels), {"cpu": Decimal("0.5"), "memory": Decimal(100), "ephemeral_storage": Decimal(0)}
    )
    assert got["name"] == "edge-1-worker"
    assert got["ready"] is True and got["schedulable"] is True
    assert got["pressure"] == {"memory": False, "disk": False, "pid": False}
    assert got["allocatable"] == {"cpu": 6.0, "memory": 7160000000, "ephemeral_storage": 100 * 2**30}
    assert got["requested"] == {"cpu": 0.5, "memory": 100, "ephemeral_storage": 0}
    assert (got["energy_kwh"], got["price_eur_h"], got["bandwidth_gbps"]) == (0.0024042, 16.3884, 52.5)
    assert got["labels"]["qonnect.io/location"] == "edge-1"


def test_summarize_node_not_ready_pressure_cordoned_and_bad_labels():
    got = summarize_node(
        node(
            {"qonnect.io/energy-kwh": "lots", "qonnect.io/price-eur-h": "-1"},
            {"Ready": "Unknown", "MemoryPressure": "True", "PIDPressure": "True", "DiskPressure": "False"},
            unschedulable=True,
        ),
        None,
    )
    assert got["ready"] is False and got["schedulable"] is False
    assert got["pressure"] == {"memory": True, "disk": False, "pid": True}
    assert got["energy_kwh"] is None and got["price_eur_h"] is None and got["bandwidth_gbps"] is None
    assert got["requested"] == {"cpu": 0.0, "memory": 0, "ephemeral_storage": 0}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({"matchLabels": {"app": "a"}}, {"app": "a", "x": "1"}, True),
        ({"matchLabels": {"app": "a"}}, {"app": "b"}, False),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]}]}, {"t": "y"}, True),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["x"]}]}, {"t": "x"}, False),
        ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {}, True),
        ({}, {"app": "a"}, False),
    ],
)
def test_selector_matches(selector, labels, expected):
    assert selector_matches(selector, labels) is expected


def deployment(replicas=2, ready=0, updated=0, conditions=None, generation=1, observed=1):
    return {
        "metadata": {"name": "web", "namespace": "app", "generation": generation},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
        "status": {
            "readyReplicas": ready,
            "updatedReplicas": updated,
            "observedGeneration": observed,
            "conditions": conditions or [],
        },
    }


def test_deployment_all_ready_is_healthy():
    got = workload_status("Deployment", deployment(ready=2, updated=2), [])
    assert got == {"status": HEALTHY, "reason": "", "replicas": 2, "ready_replicas": 2}


def test_deployment_not_yet_observed_is_progressing():
    got = workload_status("Deployment", deployment(ready=2, updated=2, generation=2), [])
    assert got["status"] == PROGRESSING


def test_unschedulable_pod_fails_the_deployment_with_the_scheduler_message():
    pending = pod(
        labels={"app": "web"},
        phase="Pending",
        status={
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes: Insufficient cpu",
                }
            ]
        },
    )
    other_ns = dict(pending, metadata={"name": "q", "namespace": "other", "labels": {"app": "web"}})
    assert workload_status("Deployment", deployment(), [other_ns])["status"] == PROGRESSING
    got = workload_status("Deployment", deployment(), [pending])
    assert got["status"] == FAILED
    assert got["reason"] == "Unschedulable: 0/1 nodes: Insufficient cpu"


def test_crash_looping_container_fails_the_deployment():
    crashing = pod(
        labels={"app": "web"},
        status={"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    )
    got = workload_status("Deployment", deployment(ready=1, updated=2), [crashing])
    assert got["status"] == FAILED and got["reason"].startswith("CrashLoopBackOff")
    assert got["ready_replicas"] == 1


def test_progress_deadline_exceeded_fails_the_deployment():
    cond = [
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": "too slow",
        }
    ]
    got = workload_status("Deployment", deployment(conditions=cond), [])
    assert (got["status"], got["reason"]) == (FAILED, "ProgressDeadlineExceeded: too slow")


def test_daemonset_counts_scheduled_nodes():
    ds = {
        "metadata": {"name": "d", "namespace": "app", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "d"}}},
        "status": {
            "desiredNumberScheduled": 3,
            "numberReady": 3,
            "updatedNumberScheduled": 3,
            "observedGeneration": 1,
        },
    }
    assert workload_status("DaemonSet", ds, [])["status"] == HEALTHY
    ds["status"]["numberReady"] = 2
    got = workload_status("DaemonSet", ds, [])
    assert (got["status"], got["reason"]) == (PROGRESSING, "2/3 replicas ready")


def test_status_clock_fails_workloads_that_stay_not_ready_too_long():
    now = [1000.0]
    clock = StatusClock(not_ready_timeout=30, now=lambda: now[0])
    key = ("Deployment", "app", "web")
    progressing = {"status": PROGRESSING, "reason": "0/1 replicas ready", "replicas": 1, "ready_replicas": 0}
    assert clock.stamp(key, progressing) == dict(progressing, since=1000.0)
    now[0] = 1030.0
    assert clock.stamp(key, progressing)["status"] == PROGRESSING
    now[0] = 1031.0
    got = clock.stamp(key, progressing)
    assert got["status"] == FAILED and got["since"] == 1000.0
    assert got["reason"] == "NotReady: 0/1 replicas ready for more than 30s"
    now[0] = 1040.0
    healthy = {"status": HEALTHY, "reason": "", "replicas": 1, "ready_replicas": 1}
    assert clock.stamp(key, healthy)["since"] == 1040.0
    now[0] = 1050.0
    assert clock.stamp(key, healthy)["since"] == 1040.0
    clock.forget_except(set())
    assert clock.stamp(key, healthy)["since"] == 1050.0
