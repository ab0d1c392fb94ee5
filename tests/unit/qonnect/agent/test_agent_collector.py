"""Node and workload summaries computed from Kubernetes objects (plain JSON dicts)."""

from __future__ import annotations

import pytest
from qonnect.agent.collector import (
    DEFAULT_NOT_READY_TIMEOUT,
    FAILED,
    GRACE_ANNOTATION,
    HEALTHY,
    PROGRESSING,
    StatusClock,
    pod_requests,
    requested_by_node,
    selector_matches,
    summarize_node,
    workload_grace,
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


def deployment(
    replicas=2,
    ready=0,
    updated=0,
    conditions=None,
    generation=1,
    observed=1,
    available=None,
    total=None,
    annotations=None,
    deadline=None,
):
    status = {
        "replicas": max(ready, updated) if total is None else total,
        "readyReplicas": ready,
        "availableReplicas": ready if available is None else available,
        "updatedReplicas": updated,
        "observedGeneration": observed,
        "conditions": conditions or [],
    }
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}}
    if deadline is not None:
        spec["progressDeadlineSeconds"] = deadline
    meta = {"name": "web", "namespace": "app", "generation": generation}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec, "status": {k: v for k, v in status.items() if v}}


def test_deployment_all_ready_is_healthy():
    got = workload_status("Deployment", deployment(ready=2, updated=2), [])
    assert got == {"status": HEALTHY, "reason": "", "replicas": 2, "ready_replicas": 2}


def test_deployment_not_yet_observed_is_progressing():
    got = workload_status("Deployment", deployment(ready=2, updated=2, generation=2), [])
    assert got["status"] == PROGRESSING


def unschedulable(
    message="0/3 nodes are available: 1 node(s) had untolerated taint "
    "{node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu.",
    cpu="250m",
):
    return pod(
        labels={"app": "web"},
        phase="Pending",
        requests=[{"cpu": cpu}],
        status={
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ]
        },
    )


def test_an_unschedulable_surge_pod_is_progressing_with_the_scheduler_message():
    pending = unschedulable()
    other_ns = dict(pending, metadata={"name": "q", "namespace": "other", "labels": {"app": "web"}})
    assert (
        workload_status("Deployment", deployment(), [other_ns])["reason"] == "0 of 2 replicas updated; "
        "0 of 2 replicas ready; 0 of 2 replicas available"
    )
    got = workload_status("Deployment", deployment(ready=2, updated=1, total=3), [pending], [node()])
    assert got["status"] == PROGRESSING  # transient: it waits for capacity, Kubernetes retries
    assert got["reason"].startswith(
        "Unschedulable: " + pending["status"]["conditions"][0]["message"] + " (pod p)"
    )
    assert got["grace"] == 600.0  # the Deployment's default progressDeadlineSeconds


def test_a_pod_bigger_than_every_node_is_failed_at_once():
    got = workload_status(
        "Deployment", deployment(), [unschedulable("0/1 nodes: Insufficient cpu", "64")], [node()]
    )
    assert got["status"] == FAILED
    assert got["reason"].startswith("Unschedulable: 0/1 nodes: Insufficient cpu (the pod requests more")


@pytest.mark.parametrize(
    "reason", ["CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError"]
)
def test_container_trouble_is_progressing_not_failed(reason):
    troubled = pod(
        labels={"app": "web"},
        status={
            "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": reason, "message": "m"}}}]
        },
    )
    got = workload_status("Deployment", deployment(ready=1, updated=2), [troubled])
    assert got["status"] == PROGRESSING and got["reason"].startswith(f"{reason}: m (pod p, container c)")
    assert got["ready_replicas"] == 1


def test_an_invalid_image_name_is_failed_at_once():
    bad = pod(
        labels={"app": "web"},
        status={
            "containerStatuses": [
                {
                    "name": "c",
                    "state": {"waiting": {"reason": "InvalidImageName", "message": "couldn't parse image"}},
                }
            ]
        },
    )
    assert workload_status("Deployment", deployment(), [bad])["status"] == FAILED


def condition(kind: str, status: str, reason: str, message: str) -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def test_replica_failure_is_progressing():
    cond = [
        condition(
            "ReplicaFailure",
            "True",
            "FailedCreate",
            'pods "web-1" is forbidden: error looking up service account app/web',
        )
    ]
    got = workload_status("Deployment", deployment(conditions=cond), [])
    assert got["status"] == PROGRESSING and got["reason"].startswith("ReplicaFailure: FailedCreate")


def test_progress_deadline_exceeded_fails_the_deployment():
    cond = [condition("Progressing", "False", "ProgressDeadlineExceeded", "too slow")]
    got = workload_status("Deployment", deployment(conditions=cond), [])
    assert (got["status"], got["reason"]) == (FAILED, "Progressing: ProgressDeadlineExceeded too slow")


def test_daemonset_counts_scheduled_nodes():
    ds = {
        "metadata": {"name": "d", "namespace": "app", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "d"}}},
        "status": {
            "currentNumberScheduled": 3,
            "desiredNumberScheduled": 3,
            "numberAvailable": 3,
            "numberMisscheduled": 0,
            "numberReady": 3,
            "updatedNumberScheduled": 3,
            "observedGeneration": 1,
        },
    }
    assert workload_status("DaemonSet", ds, [])["status"] == HEALTHY
    ds["status"]["numberReady"] = 2
    got = workload_status("DaemonSet", ds, [])
    assert (got["status"], got["reason"]) == (PROGRESSING, "2 of 3 pods ready")


def test_statefulset_with_none_updated_is_not_healthy():
    sts = {
        "metadata": {"name": "db", "namespace": "app", "generation": 2},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"}}},
        "status": {
            "availableReplicas": 3,
            "currentReplicas": 3,
            "currentRevision": "db-1",
            "observedGeneration": 2,
            "readyReplicas": 3,
            "replicas": 3,
            "updateRevision": "db-2",
        },
    }
    assert workload_status("StatefulSet", sts, [])["status"] == PROGRESSING
    sts["status"].update(updatedReplicas=3, currentRevision="db-2")
    assert workload_status("StatefulSet", sts, [])["status"] == HEALTHY


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


def image_pull_pod():
    return pod(
        labels={"app": "web"},
        phase="Pending",
        status={
            "containerStatuses": [
                {
                    "name": "c",
                    "state": {
                        "waiting": {
                            "reason": "ErrImagePull",
                            "message": "failed to pull: 503 Service Unavailable",
                        }
                    },
                }
            ]
        },
    )


def run_clock(obj, pods_at, until, step=5.0, nodes=()):
    """Feed a clock with the agent's defaults one observation per ``step`` seconds."""
    now = [0.0]
    clock = StatusClock(now=lambda: now[0])
    seen = []
    while now[0] <= until:
        obj_now, pods_now = pods_at(now[0], obj)
        seen.append(
            (
                now[0],
                clock.stamp(
                    ("Deployment", "app", "web"), workload_status("Deployment", obj_now, pods_now, nodes)
                ),
            )
        )
        now[0] += step
    return seen


def test_a_transient_image_pull_failure_is_never_reported_failed():
    def pods_at(t, obj):  # the registry hiccups for 90 s, then the pull succeeds
        if t < 90:
            return obj, [image_pull_pod()]
        return deployment(replicas=2, ready=2, updated=2), []

    seen = run_clock(deployment(), pods_at, 200)
    assert {s["status"] for _t, s in seen} == {PROGRESSING, HEALTHY}
    assert seen[0][1]["reason"].startswith("ErrImagePull: failed to pull")


def test_a_permanent_image_pull_failure_is_failed_after_the_deployments_progress_deadline():
    seen = run_clock(deployment(deadline=120), lambda t, obj: (obj, [image_pull_pod()]), 200)
    failed = [t for t, s in seen if s["status"] == FAILED]
    assert failed and failed[0] == 125.0  # the first look after 120 s
    last = seen[-1][1]
    assert last["reason"].startswith("NotReady: ErrImagePull: failed to pull: 503 Service Unavailable (pod ")
    assert last["reason"].endswith(" for more than 120s")
    assert last["since"] == 0.0


def test_the_grace_annotation_set_by_deploy_wins_and_defaults_to_kubernetes_600s():
    annotated = deployment(annotations={GRACE_ANNOTATION: "45"}, deadline=120)
    assert workload_grace("Deployment", annotated) == 45.0
    assert workload_grace("Deployment", deployment()) == 600.0
    assert workload_grace("StatefulSet", {"metadata": {}}) is None  # the agent's --not-ready-timeout
    assert workload_grace("Deployment", deployment(annotations={GRACE_ANNOTATION: "soon"})) == 600.0
    seen = run_clock(annotated, lambda t, obj: (obj, [image_pull_pod()]), 60)
    assert next(t for t, s in seen if s["status"] == FAILED) == 50.0
    assert StatusClock().not_ready_timeout == DEFAULT_NOT_READY_TIMEOUT == 600.0


def test_a_pod_rescheduled_after_a_node_loss_is_not_failed_while_the_cluster_has_room():
    # A real node turns NotReady after ~40 s, its pods are evicted after 300 s, the ReplicaSet
    # makes a new pod that is scheduled on the node with room and starts after an image pull.
    def pods_at(t, obj):
        if t < 40:
            return deployment(replicas=3, ready=3, updated=3), []
        if t < 340:  # the pod on the lost node still counts, its Ready condition is Unknown
            return deployment(replicas=3, ready=2, updated=3, available=2), []
        if t < 400:  # evicted; the replacement is pending, then pulling
            return deployment(replicas=3, ready=2, updated=3, available=2), [
                pod("n2", phase="Pending", labels={"app": "web"}, requests=[{"cpu": "250m"}])
            ]
        return deployment(replicas=3, ready=3, updated=3), []

    seen = run_clock(deployment(), pods_at, 500, step=10.0, nodes=[node()])
    assert FAILED not in {s["status"] for _t, s in seen}
    assert seen[-1][1]["status"] == HEALTHY
