"""Simulation behaviour seen through the official client against a real `testbed up`."""

from __future__ import annotations

import time
import uuid
from typing import Iterator

import pytest
from _federation import Federation, running
from kubernetes import client
from support import wait_for
from support.specs import deployment

pytestmark = pytest.mark.timeout(90)
NODES = ["cloud-1-worker-1", "cloud-1-worker-2", "cloud-1-worker-3"]  # energy, cost, performance
START_DELAY = 0.3


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    with running(
        tmp_path_factory.mktemp("sim"),
        "--profile",
        "paper",
        "--clusters",
        "2",
        "--nodes",
        "3",
        "--start-delay",
        str(START_DELAY),
        "--heartbeat",
        "1",
    ) as federation:
        yield federation


@pytest.fixture
def ns(fed: Federation) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    fed.core("cloud-1").create_namespace({"metadata": {"name": name}})
    yield name
    fed.core("cloud-1").delete_namespace(name)


def pods_of(fed: Federation, ns: str, app: str) -> list[client.V1Pod]:
    return fed.core("cloud-1").list_namespaced_pod(ns, label_selector=f"app={app}").items


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def rolled_out(fed: Federation, ns: str, name: str, replicas: int):
    d = fed.apps("cloud-1").read_namespaced_deployment(name, ns)
    s = d.status
    done = (
        s.observed_generation == d.metadata.generation
        and s.updated_replicas == replicas
        and s.ready_replicas == replicas
        and s.available_replicas == replicas
        and s.replicas == replicas
    )
    return d if done else None


def test_deployment_pods_start_after_the_delay_and_status_follows(fed, ns):
    started = time.monotonic()
    fed.apps("cloud-1").create_namespaced_deployment(ns, deployment("web", replicas=3, cpu="500m"))
    d = wait_for(lambda: rolled_out(fed, ns, "web", 3))
    assert time.monotonic() - started >= START_DELAY
    conditions = {c.type: c for c in d.status.conditions}
    assert conditions["Available"].status == "True"
    assert conditions["Available"].reason == "MinimumReplicasAvailable"
    assert conditions["Progressing"].reason == "NewReplicaSetAvailable"
    pods = pods_of(fed, ns, "web")
    assert len(pods) == 3
    for pod in pods:
        assert pod.status.phase == "Running" and ready(pod)
        assert pod.spec.node_name in NODES
        assert pod.status.pod_ip and pod.status.host_ip and pod.status.start_time
        assert pod.status.container_statuses[0].ready and pod.status.container_statuses[0].state.running
        owner = pod.metadata.owner_references[0]
        rs_name = f"web-{pod.metadata.labels['pod-template-hash']}"
        assert (owner.kind, owner.name) == ("ReplicaSet", rs_name)  # owned through its ReplicaSet
        rs = fed.apps("cloud-1").read_namespaced_replica_set(rs_name, ns)
        assert (rs.metadata.uid, rs.metadata.owner_references[0].uid) == (owner.uid, d.metadata.uid)
        assert pod.metadata.name.startswith(f"{rs_name}-")
    scheduled = fed.core("cloud-1").list_namespaced_event(ns, field_selector="reason=Scheduled").items
    assert {e.involved_object.name for e in scheduled} == {p.metadata.name for p in pods}
    # least-allocated scoring spreads three equal pods over three nodes
    assert {p.spec.node_name for p in pods} == set(NODES)


def test_node_selector_and_required_affinity_operators(fed, ns):
    apps = fed.apps("cloud-1")

    def affinity(*exprs):
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
                }
            }
        }

    cases = {
        "by-hostname": ({"node_selector": {"kubernetes.io/hostname": NODES[2]}}, {NODES[2]}),
        "by-notin": (
            {
                "affinity": affinity(
                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": NODES[:2]}
                )
            },
            {NODES[2]},
        ),
        "by-profile": (
            {"affinity": affinity({"key": "qonnect.io/node-profile", "operator": "In", "values": ["cost"]})},
            {NODES[1]},
        ),
        "by-exists": (
            {
                "affinity": affinity(
                    {"key": "qonnect.io/tier", "operator": "Exists"},
                    {"key": "gpu", "operator": "DoesNotExist"},
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODES[0]]},
                )
            },
            {NODES[0]},
        ),
    }
    for name, (kwargs, _nodes) in cases.items():
        apps.create_namespaced_deployment(ns, deployment(name, replicas=2, **kwargs))
    for name, (_kwargs, nodes) in cases.items():
        wait_for(lambda n=name: rolled_out(fed, ns, n, 2))
        assert {p.spec.node_name for p in pods_of(fed, ns, name)} == nodes, name


def test_pods_that_fit_nowhere_stay_pending_unschedulable(fed, ns):
    apps = fed.apps("cloud-1")
    apps.create_namespaced_deployment(ns, deployment("huge", replicas=1, cpu="64"))
    apps.create_namespaced_deployment(
        ns, deployment("nowhere", replicas=1, node_selector={"kubernetes.io/hostname": "no-such-node"})
    )
    for name, reason in (
        ("huge", "3 Insufficient cpu"),
        ("nowhere", "3 node(s) didn't match Pod's node affinity"),
    ):
        pod = wait_for(lambda n=name: next((p for p in pods_of(fed, ns, n) if p.status.conditions), None))
        cond = pod.status.conditions[0]
        assert pod.status.phase == "Pending" and pod.spec.node_name is None
        assert (cond.type, cond.status, cond.reason) == ("PodScheduled", "False", "Unschedulable")
        assert cond.message.startswith("0/3 nodes are available: ") and reason in cond.message
        events = (
            fed.core("cloud-1")
            .list_namespaced_event(ns, field_selector=f"involvedObject.uid={pod.metadata.uid}")
            .items
        )
        assert [(e.reason, e.type, e.message) for e in events] == [
            ("FailedScheduling", "Warning", cond.message)
        ]
    d = apps.read_namespaced_deployment("huge", ns)
    assert {c.type: c.status for c in d.status.conditions}["Available"] == "False"
    assert not d.status.ready_replicas and d.status.unavailable_replicas == 1


def test_requests_are_honoured_across_nodes(fed, ns):
    # allocatable cpu 6, 6, 10: five pods of 5 cpu -> 1 + 1 + 2 fit, one stays Pending
    fed.apps("cloud-1").create_namespaced_deployment(ns, deployment("big", replicas=5, cpu="5"))

    def settled():
        pods = pods_of(fed, ns, "big")
        running = [p for p in pods if p.status.phase == "Running"]
        pending = [
            p for p in pods if p.status.conditions and p.status.conditions[0].reason == "Unschedulable"
        ]
        return (running, pending) if len(running) == 4 and len(pending) == 1 else None

    running, _pending = wait_for(settled)
    per_node = {n: sum(1 for p in running if p.spec.node_name == n) for n in NODES}
    assert per_node == {NODES[0]: 1, NODES[1]: 1, NODES[2]: 2}
    # scaling down frees capacity and the pending pod is never needed: 3 replicas all run
    fed.apps("cloud-1").patch_namespaced_deployment_scale("big", ns, {"spec": {"replicas": 3}})
    wait_for(lambda: rolled_out(fed, ns, "big", 3))
    assert len(pods_of(fed, ns, "big")) == 3


def test_rolling_a_new_template_replaces_all_pods(fed, ns):
    apps = fed.apps("cloud-1")
    apps.create_namespaced_deployment(ns, deployment("roll", replicas=4))
    wait_for(lambda: rolled_out(fed, ns, "roll", 4))
    before = {p.metadata.name for p in pods_of(fed, ns, "roll")}
    old_hash = pods_of(fed, ns, "roll")[0].metadata.labels["pod-template-hash"]
    apps.patch_namespaced_deployment(
        "roll",
        ns,
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.26"}]}}}},
    )

    def replaced():
        d = rolled_out(fed, ns, "roll", 4)
        pods = pods_of(fed, ns, "roll")
        return d if d and len(pods) == 4 and not before & {p.metadata.name for p in pods} else None

    d = wait_for(replaced)
    assert d.status.observed_generation == 2 == d.metadata.generation
    pods = pods_of(fed, ns, "roll")
    assert {p.spec.containers[0].image for p in pods} == {"nginx:1.26"}
    assert {p.metadata.labels["pod-template-hash"] for p in pods} != {old_hash}
    assert all(ready(p) for p in pods)


def test_node_down_evicts_and_reschedules_then_node_up(fed, ns):
    core = fed.core("cloud-1")
    fed.apps("cloud-1").create_namespaced_deployment(ns, deployment("evict", replicas=3, cpu="1"))
    wait_for(lambda: rolled_out(fed, ns, "evict", 3))
    # a node that runs one of the pods (where the scheduler put them is its choice, not ours)
    hosting = sorted({p.spec.node_name for p in pods_of(fed, ns, "evict")} & set(NODES))
    assert hosting, "no pod on a node of cloud-1"
    victim = hosting[-1]
    fed.cli("node-down", "cloud-1", victim)
    node = core.read_node(victim)
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "Unknown"
    assert {(t.key, t.effect) for t in node.spec.taints} == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }

    def moved():
        pods = pods_of(fed, ns, "evict")
        ok = len(pods) == 3 and all(ready(p) and p.spec.node_name != victim for p in pods)
        return pods if ok else None

    # eviction takes longer on a busy CI host
    pods = wait_for(moved, timeout=90, what="3 Ready pods off the NotReady node")
    assert {p.spec.node_name for p in pods} <= set(NODES) - {victim}
    evicted = core.list_namespaced_event(ns, field_selector="reason=TaintManagerEviction").items
    assert evicted and all(e.involved_object.kind == "Pod" for e in evicted)
    assert core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={victim},reason=NodeNotReady"
    ).items
    fed.cli("node-up", "cloud-1", victim)
    node = core.read_node(victim)
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert not node.spec.taints


def test_node_heartbeats_lease_and_conditions(fed):
    coord = client.CoordinationV1Api(fed.api("fog-1"))
    core = fed.core("fog-1")
    name = "fog-1-worker-1"
    lease = coord.read_namespaced_lease(name, "kube-node-lease")
    first = lease.spec.renew_time
    beat = {c.type: c.last_heartbeat_time for c in core.read_node(name).status.conditions}["Ready"]
    wait_for(lambda: coord.read_namespaced_lease(name, "kube-node-lease").spec.renew_time > first, timeout=5)
    wait_for(
        lambda: (
            {c.type: c.last_heartbeat_time for c in core.read_node(name).status.conditions}["Ready"] > beat
        ),
        timeout=5,
    )
    conditions = {c.type: c.status for c in core.read_node(name).status.conditions}
    assert conditions == {
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
        "Ready": "True",
    }
    fed.cli("node-down", "fog-1", name)
    try:
        stopped = coord.read_namespaced_lease(name, "kube-node-lease").spec.renew_time
        time.sleep(2.2)  # two heartbeat intervals
        assert coord.read_namespaced_lease(name, "kube-node-lease").spec.renew_time == stopped
    finally:
        fed.cli("node-up", "fog-1", name)
