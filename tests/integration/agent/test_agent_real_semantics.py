"""The agent, the KB, placement and deploy against what real clusters do, on the emulated `tiers` profile.

Each cluster of the `tiers` profile has a control-plane node tainted as kubeadm does
(node-role.kubernetes.io/control-plane:NoSchedule) beside one worker. Real processes throughout:
`qonnect testbed up`, `qonnect kb serve`, `qonnect agent`, kubectl.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from _agent_harness import Agent, module_testbed, wait_for
from support import kubectl, run_qonnect
from support.federation import started_testbed
from support.specs import application, deployment, managed, namespace, yaml_docs

# isort: split
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from ansible_collections.qonnect.core.plugins.module_utils.k8s.nodes import node_facts
from ansible_collections.qonnect.core.plugins.module_utils.placement import place
from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application
from qonnect.controller.detector import Settings, Snapshot, down_clusters

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def testbed(tmp_path_factory) -> Iterator[dict]:
    """cloud-1, fog-1 and edge-1, each with a tainted control-plane node and one worker."""
    yield from module_testbed(tmp_path_factory, "tiers", "--start-delay", "0.3")


def edge_nodes(kb) -> list[dict]:
    cluster = next(c for c in kb.admin.inventory()["clusters"] if c["name"] == "edge-1")
    return cluster["nodes"] if cluster["healthy"] and len(cluster["nodes"]) == 2 else []


def test_control_plane_taints_reach_the_kb_and_placement_never_uses_that_node(start_agent, kb, testbed):
    agent = start_agent("edge-1")
    nodes = {n["name"]: n for n in wait_for(lambda: edge_nodes(kb), 60, "edge-1's two nodes in the KB")}
    assert nodes["edge-1-control-plane"]["taints"] == [CONTROL_PLANE_TAINT]
    assert nodes["edge-1-worker"]["taints"] == []

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]},
    }
    app = load_application(
        application("t", [{"name": "s", "tier": "edge", "replicas": 3, "manifests": [pod]}])
    )
    for scorer in ("weighted", "borda", "optimal"):
        (entry,) = place(app, kb.admin.inventory(), scorer=scorer).services["s"]
        assert (entry["cluster"], entry["replicas"], set(entry["nodes"])) == ("edge-1", 3, {"edge-1-worker"})

    facts = {f["name"]: f for f in node_facts(get_client("edge-1", agent.cluster["kubeconfig"]))}
    assert facts["edge-1-control-plane"]["workloads"] is False
    assert facts["edge-1-worker"]["workloads"] is True
    assert agent.stop() == 0


def waits_manifest(replicas: int = 2, cpu: str = "5") -> dict:
    """2 x 5 CPU: one replica fits the 6-CPU worker, the other waits (the control plane is tainted):
    on a real cluster it waits for capacity, so it must stay Progressing within its grace."""
    return managed(deployment("waits", replicas, "nginx", cpu, container="c", namespace="shop"), "shop")


NO_SUCH_NODE = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["no-such-node"]}
                    ]
                }
            ]
        }
    }
}
# gives-up is never schedulable (no such node); a grace of 4 s set by annotation: Failed after it.
GIVES_UP = deployment("gives-up", 1, "nginx", "100m", container="c", namespace="shop", affinity=NO_SUCH_NODE)
MANIFESTS = yaml_docs(namespace("shop"), waits_manifest(), managed(GIVES_UP, "shop", grace=4))


def test_an_unschedulable_pod_is_progressing_within_its_grace_and_failed_after_it(start_agent, kb, testbed):
    agent = start_agent("edge-1")
    agent.reported()
    kubectl(agent.cluster["kubeconfig"], "apply", "-f", "-", input=MANIFESTS)
    started = time.monotonic()

    def workloads():
        found = {w["name"]: w for w in kb.admin.list_workloads(cluster="edge-1")}
        waiting = found.get("waits", {})
        done = waiting.get("ready_replicas") == 1 and waiting.get("reason", "").startswith("Unschedulable:")
        return done and found.get("gives-up", {}).get("status") == "Failed" and found

    found = wait_for(workloads, 60, "waits Progressing (1 of 2, Unschedulable) and gives-up Failed")
    assert time.monotonic() - started >= 4  # not before its grace
    gives_up = found["gives-up"]
    assert gives_up["reason"].startswith("NotReady: Unschedulable:") and gives_up["reason"].endswith(
        "for more than 4s"
    )
    time.sleep(3)  # well past gives-up's grace: waits keeps waiting (its grace is the 600 s deadline)
    waits = next(w for w in kb.admin.list_workloads(cluster="edge-1") if w["name"] == "waits")
    assert waits["status"] == "Progressing" and waits["reason"].startswith("Unschedulable:")
    assert "taint" in waits["reason"]  # the scheduler names the control plane's taint
    assert agent.stop() == 0


def test_an_agent_without_rbac_rights_reports_forbidden_and_the_cluster_stays_healthy(kb, testbed):
    cluster = next(c for c in testbed["clusters"] if c["name"] == "fog-1")
    agent = Agent(kb, testbed, "fog-1", kb.root / "restricted-fog-1")
    # the testbed's restricted identity: a namespaced Role (get/list/watch a few kinds in default)
    agent.cluster = dict(cluster, kubeconfig=cluster["restricted_kubeconfig"])
    agent.start()
    try:

        def status():
            record = kb.admin.get_cluster("fog-1")["status"]
            return (record.get("error") or "").startswith("forbidden:") and record

        record = wait_for(status, 60, "fog-1's agent to report forbidden")
        assert record["reachable"] is True and record["healthy"] is True
        assert record["error"].startswith(
            "forbidden: the agent needs these rights: list nodes (all namespaces), list pods (all namespaces), "
            "list deployments.apps (all namespaces)"
        )
        inventory = kb.admin.inventory()
        snapshot = Snapshot(inventory=inventory, workloads=[], applications=[], now=time.time())
        assert "fog-1" not in down_clusters(snapshot, Settings())  # the controller moves nothing
    finally:
        agent.stop()


def pulls(name: str, image: str, grace: float | None = None) -> dict:
    return managed(deployment(name, 1, image, "100m", container="c", namespace="pulls"), "pulls", grace)


FAULTS = yaml_docs(
    namespace("pulls"),
    # the registry fails for the first 6 s, then the pull works: transient, never Failed
    pulls("flaky", "qonnect.test/pull-flaky-6s/web"),
    # the image never pulls: Failed once its grace (5 s here) is over
    pulls("broken", "qonnect.test/pull-fail/web", grace=5),
)


def test_a_transient_pull_failure_is_never_failed_and_a_permanent_one_is_after_its_grace(
    start_agent, kb, testbed
):
    agent = start_agent("cloud-1")
    agent.reported()  # watching before the first pull: it fails for 6 s only
    kubectl(agent.cluster["kubeconfig"], "apply", "-f", "-", input=FAULTS)
    seen: dict[str, list[tuple[str, str]]] = {"flaky": [], "broken": []}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for w in kb.admin.list_workloads(cluster="cloud-1"):
            if w["name"] in seen and (
                not seen[w["name"]] or seen[w["name"]][-1] != (w["status"], w["reason"])
            ):
                seen[w["name"]].append((w["status"], w["reason"]))
        if (
            seen["flaky"]
            and seen["flaky"][-1][0] == "Healthy"
            and seen["broken"]
            and seen["broken"][-1][0] == "Failed"
        ):
            break
        time.sleep(0.2)
    flaky, broken = seen["flaky"], seen["broken"]
    assert flaky and flaky[-1][0] == "Healthy", flaky
    assert "Failed" not in {status for status, _reason in flaky}, flaky
    assert any(reason.startswith(("ErrImagePull", "ImagePullBackOff")) for _s, reason in flaky), flaky
    assert broken and broken[-1][0] == "Failed", broken
    assert broken[-1][1].startswith("NotReady: ") and broken[-1][1].endswith("for more than 5s"), broken
    assert any(
        s == "Progressing" and r.startswith(("ErrImagePull", "ImagePullBackOff")) for s, r in broken
    ), broken
    assert agent.stop() == 0


def test_moving_straight_back_waits_for_the_terminating_namespace(testbed):
    """Deploy to edge-1, move to fog-1 (edge-1's namespace is deleted and stays Terminating while
    its pods go), move straight back: deploy waits for the namespace to be gone, then recreates it."""
    targets = {c["name"]: Target(c["name"], c["kubeconfig"]) for c in testbed["clusters"]}
    web = deployment("web", 2, "nginx", "100m", container="c")
    services = {
        "web": [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}},
            },
            web,
        ]
    }
    on_edge = {"web": [{"cluster": "edge-1", "replicas": 2}]}
    on_fog = {"web": [{"cluster": "fog-1", "replicas": 2}]}

    def deploy(plan, previous):
        return Deployer(
            "moveback", "moveback", services, plan, targets, previous=previous, wait_timeout=60
        ).run()

    assert not deploy(on_edge, set())["failed"]
    assert not deploy(on_fog, {"edge-1"})["failed"]
    edge = get_client("edge-1", targets["edge-1"].kubeconfig)
    left = edge.get("v1", "Namespace", "moveback")
    assert left is not None and left["status"]["phase"] == "Terminating"  # what a real cluster does
    back = deploy(on_edge, {"fog-1"})
    assert not back["failed"], back["message"]
    namespace = edge.get("v1", "Namespace", "moveback")
    assert namespace["status"]["phase"] == "Active"
    assert namespace["metadata"]["uid"] != left["metadata"]["uid"]  # a new namespace
    ready = edge.get("apps/v1", "Deployment", "web", "moveback")["status"]
    assert ready.get("readyReplicas") == 2


TWO_WORKERS = """
name: two-workers
tiers: [edge]
node_profiles:
  energy: {cpu: 6, memory: 7.16G, bandwidth_gbps: 52.5, energy_kwh: 0.0024042, price_eur_h: 16.3884}
clusters:
  - name: edge-1
    tier: edge
    nodes:
      - {name: edge-1-a, profile: energy}
      - {name: edge-1-b, profile: energy}
"""


def test_a_node_loss_with_room_left_is_rescheduled_and_never_failed(tmp_path, kb):
    """One node of two goes down: Kubernetes evicts its pods and starts them on the other one.
    The workload is Progressing meanwhile, never Failed, and Healthy again without any move.

    Real timing, shortened: the node turns NotReady after a 3 s grace period and its pods are
    evicted 6 s later (real defaults 40 s and 300 s). The agent's own --not-ready-timeout is 2 s:
    a Deployment is judged by its progress deadline (600 s by default), not by that fallback.
    """
    (tmp_path / "two.yml").write_text(TWO_WORKERS)
    root = tmp_path / "tb"
    flags = ["--node-monitor-grace-period", "3", "--default-unreachable-toleration-seconds", "6"]
    flags += ["--default-not-ready-toleration-seconds", "6"]
    with started_testbed(
        root, "--profile", str(tmp_path / "two.yml"), "--start-delay", "0.3", "--timeout", "60", *flags
    ) as federation:
        _lost_node_is_replaced(kb, federation, root, tmp_path)


def _lost_node_is_replaced(kb, federation: dict, root, tmp_path) -> None:
    agent = None
    try:
        kubeconfig = federation["clusters"][0]["kubeconfig"]
        agent = Agent(kb, federation, "edge-1", tmp_path / "agent")
        agent.not_ready_timeout = 2.0
        agent.start()
        manifest = yaml_docs(namespace("shop"), waits_manifest(replicas=4, cpu="1"))
        kubectl(kubeconfig, "apply", "-f", "-", input=manifest)

        def waits(status):
            found = [w for w in kb.admin.list_workloads(cluster="edge-1") if w["name"] == "waits"]
            return found and found[0]["status"] == status and found[0]["ready_replicas"] == 4 and found[0]

        wait_for(lambda: waits("Healthy"), 60, "waits Healthy with 4 replicas")
        pods = json.loads(kubectl(kubeconfig, "-n", "shop", "get", "pods", "-o", "json"))
        lost = pods["items"][0]["spec"]["nodeName"]
        run_qonnect("testbed", "node-down", "edge-1", lost, "--dir", str(root))
        statuses = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            (w,) = [w for w in kb.admin.list_workloads(cluster="edge-1") if w["name"] == "waits"]
            statuses.append((w["status"], w["ready_replicas"]))
            running = json.loads(kubectl(kubeconfig, "-n", "shop", "get", "pods", "-o", "json"))["items"]
            moved = running and all(p["spec"].get("nodeName") not in (None, lost) for p in running)
            if moved and statuses[-1] == ("Healthy", 4):
                break
            time.sleep(0.3)
        assert moved, "the pods of the lost node were not rescheduled"
        # (with the timing flags honoured, the lost replicas show as Progressing for ~9 s: longer
        # than the agent's 2 s --not-ready-timeout, well within the Deployment's 600 s deadline)
        assert statuses[-1] == ("Healthy", 4), statuses
        assert "Failed" not in {s for s, _n in statuses}, statuses
    finally:
        if agent is not None:
            agent.stop()
