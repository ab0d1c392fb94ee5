"""The real engine (`qonnect testbed up --engine kube`) with the official Kubernetes client.

Real kube-apiserver, controller-manager, scheduler and etcd per cluster; only the kubelet is
simulated. Each test asserts what the real components do: the scheduler honours the
control-plane taint, the controllers make a Deployment Ready, RBAC answers 403, a killed API
server refuses connections and comes back with its state, a silent node turns NotReady and its
pods are evicted by the taint-eviction controller, and `down` leaves no process behind.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
import support
import urllib3
import yaml
from kubernetes import client, config
from qonnect_testbed.kube import KUBE_VERSION, KubeFederation, start_federation
from support import specs

pytestmark = pytest.mark.xdist_group("kube-tiers")  # the session's `tiers` federation: one worker starts it

PROFILE_LABELS = (
    "qonnect.io/tier",
    "qonnect.io/location",
    "qonnect.io/energy-kwh",
    "qonnect.io/price-eur-h",
    "qonnect.io/bandwidth-gbps",
)


def api(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.retries = 0
    return client.ApiClient(cfg)


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """support.wait_for every 0.5 s, through the API's refusals while a component restarts."""
    return support.wait_for(
        check, timeout, what, interval=0.5, retry_on=(client.ApiException, urllib3.exceptions.HTTPError)
    )


def deployment(name: str, replicas: int = 1) -> dict:
    return specs.deployment(name, replicas, specs.PAUSE, "100m")


def namespace(core: client.CoreV1Api) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
        30,
        f"the default ServiceAccount of {name}",
    )
    return name


def test_up_tiers_serves_three_real_control_planes_with_the_profiles_nodes(tiers: KubeFederation):
    doc = yaml.safe_load(tiers.federation_file.read_text())
    assert doc["engine"] == "kube"
    assert [c["name"] for c in doc["clusters"]] == ["cloud-1", "fog-1", "edge-1"]
    for entry in doc["clusters"]:
        name = entry["name"]
        assert (
            Path(entry["kubeconfig"])
            == tiers.kubeconfig(name)
            == tiers.directory / "kubeconfigs" / f"{name}.yaml"
        )
        assert entry["server"].startswith("https://127.0.0.")
        with api(tiers.kubeconfig(name)) as c:
            assert client.VersionApi(c).get_code().git_version == KUBE_VERSION
            core = client.CoreV1Api(c)

            def settled(core=core):
                found = {n.metadata.name: n for n in core.list_node().items}
                lifecycle = [
                    t
                    for n in found.values()
                    for t in n.spec.taints or []
                    if t.key.startswith("node.kubernetes.io/")
                ]
                return None if lifecycle else found

            # the node lifecycle controller lifts its not-ready taints a moment after Ready
            nodes = wait_for(settled, 60, f"{name}'s nodes without node-lifecycle taints")
            assert sorted(nodes) == [f"{name}-control-plane", f"{name}-worker"]
            worker, control = nodes[f"{name}-worker"], nodes[f"{name}-control-plane"]
            assert worker.metadata.labels["qonnect.io/tier"] == entry["tier"]
            expected = next(n for n in entry["nodes"] if n["name"] == worker.metadata.name)
            assert worker.metadata.labels["qonnect.io/price-eur-h"] == repr(
                float(expected["price_eur_h"])
            ).removesuffix(".0")
            assert all(key in worker.metadata.labels for key in PROFILE_LABELS)
            assert not worker.spec.taints
            assert [(t.key, t.effect) for t in control.spec.taints] == [
                ("node-role.kubernetes.io/control-plane", "NoSchedule")
            ]
            assert "node-role.kubernetes.io/control-plane" in control.metadata.labels
            assert all(
                any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
                for n in nodes.values()
            )


def test_a_deployment_becomes_ready_on_the_worker_through_the_real_controllers(
    tiers: KubeFederation, node_timing: tuple[int, int]
):
    with api(tiers.kubeconfig("cloud-1")) as c:
        core, apps = client.CoreV1Api(c), client.AppsV1Api(c)
        ns = namespace(core)
        apps.create_namespaced_deployment(ns, deployment("web", replicas=2))
        dep = wait_for(
            lambda: (d := apps.read_namespaced_deployment_status("web", ns)).status.ready_replicas == 2 and d,
            60,
            "web 2/2 ready",
        )
        assert dep.status.available_replicas == 2 and dep.status.observed_generation == 1
        assert any(cond.type == "Available" and cond.status == "True" for cond in dep.status.conditions)
        assert len(apps.list_namespaced_replica_set(ns).items) == 1  # the real Deployment controller
        pods = core.list_namespaced_pod(ns).items
        assert {p.spec.node_name for p in pods} == {"cloud-1-worker"}  # the tainted node is avoided
        assert all(p.status.phase == "Running" and p.status.pod_ip for p in pods)
        # Real defaulting by the API server: the pod got the DefaultTolerationSeconds tolerations.
        tolerations = {(t.key, t.toleration_seconds) for t in pods[0].spec.tolerations}
        assert ("node.kubernetes.io/unreachable", node_timing[1]) in tolerations
        core.delete_namespace(ns)


def test_the_restricted_token_gets_403_from_real_rbac(tiers: KubeFederation):
    with api(tiers.restricted_kubeconfig("fog-1")) as c:
        core = client.CoreV1Api(c)
        assert core.list_namespaced_pod("default").items == []  # allowed by its Role
        with pytest.raises(client.ApiException) as denied:
            core.list_node()
        assert denied.value.status == 403
        assert (
            'User "system:serviceaccount:default:qonnect-restricted" cannot list resource "nodes"'
            in json.loads(denied.value.body)["message"]
        )
        with pytest.raises(client.ApiException) as create:
            core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
        assert create.value.status == 403


def test_fail_kills_the_api_server_and_recover_brings_it_back_with_its_state(tiers: KubeFederation):
    with api(tiers.kubeconfig("fog-1")) as c:
        core = client.CoreV1Api(c)
        core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}, "data": {"k": "v"}})
    tiers.fail("fog-1")
    entry = next(e for e in tiers.status()["clusters"] if e["name"] == "fog-1")
    assert entry["up"] is False and "kube-apiserver" not in entry["pids"]
    with api(tiers.kubeconfig("fog-1")) as c:
        with pytest.raises(urllib3.exceptions.MaxRetryError) as refused:
            client.CoreV1Api(c).list_namespace(_request_timeout=5)
        assert "Connection refused" in str(refused.value)
    with api(tiers.kubeconfig("cloud-1")) as c:  # the other clusters are untouched
        assert client.CoreV1Api(c).list_namespace(_request_timeout=5).items
    tiers.recover("fog-1")
    with api(tiers.kubeconfig("fog-1")) as c:
        assert client.CoreV1Api(c).read_namespaced_config_map("kept", "default").data == {"k": "v"}
    assert next(e for e in tiers.status()["clusters"] if e["name"] == "fog-1")["up"] is True


def test_node_down_turns_not_ready_and_taint_eviction_moves_nothing_onto_the_tainted_node(
    tiers: KubeFederation, node_timing: tuple[int, int]
):
    grace, toleration = node_timing
    node = "edge-1-worker"
    with api(tiers.kubeconfig("edge-1")) as c:
        core, apps = client.CoreV1Api(c), client.AppsV1Api(c)
        ns = namespace(core)
        apps.create_namespaced_deployment(ns, deployment("svc"))
        wait_for(
            lambda: apps.read_namespaced_deployment_status("svc", ns).status.ready_replicas == 1,
            60,
            "svc ready",
        )
        first = core.list_namespaced_pod(ns).items[0].metadata.name
        down_at = time.monotonic()
        tiers.node_down("edge-1", node)

        def not_ready() -> bool:
            n = core.read_node(node)
            ready = next(c for c in n.status.conditions if c.type == "Ready")
            taints = {(t.key, t.effect) for t in n.spec.taints or []}
            return ready.status == "Unknown" and ("node.kubernetes.io/unreachable", "NoExecute") in taints

        wait_for(not_ready, grace + 30, f"{node} NotReady with the unreachable taint")
        assert time.monotonic() - down_at >= grace - 1  # the grace period is honoured

        def evicted() -> bool:
            pod = core.read_namespaced_pod(first, ns)
            return pod.metadata.deletion_timestamp is not None

        wait_for(evicted, toleration + 40, f"eviction of {first}")

        # The replacement has nowhere to go: the only other node is the tainted control plane.
        def pending_replacement() -> list:
            return [
                p
                for p in core.list_namespaced_pod(ns).items
                if p.metadata.name != first and p.status.phase == "Pending" and not p.spec.node_name
            ]

        wait_for(pending_replacement, 30, "an unschedulable replacement pod")
        tiers.node_up("edge-1", node)
        wait_for(
            lambda: (
                apps.read_namespaced_deployment_status("svc", ns).status.ready_replicas == 1
                and all(p.metadata.name != first for p in core.list_namespaced_pod(ns).items)
            ),
            90,
            "svc ready again on the recovered node, the evicted pod gone",
        )
        core.delete_namespace(ns)


def test_a_node_marked_unknown_while_its_kubelet_lives_is_ready_again_within_a_beat(
    tiers: KubeFederation, node_timing: tuple[int, int]
):
    """What the node-lifecycle controller does after an API-server outage (Ready set to Unknown)
    a live kubelet undoes at its next status sync, as a kubelet compares its status with the
    server's; the simulated kubelet used to wait for its 60 s periodic report, so a 15 s blip
    left nodes NotReady for up to a minute (issue 36's Karmada blips)."""
    grace, _toleration = node_timing
    node = "fog-1-worker"
    with api(tiers.kubeconfig("fog-1")) as c:
        core = client.CoreV1Api(c)
        conditions = core.read_node_status(node).status.conditions
        unknown = [
            {"type": cond.type, "status": "Unknown" if cond.type == "Ready" else cond.status}
            for cond in conditions
        ]
        core.patch_node_status(node, {"status": {"conditions": unknown}})
        marked = time.monotonic()

        def ready() -> bool:
            cond = next(c for c in core.read_node_status(node).status.conditions if c.type == "Ready")
            return cond.status == "True"

        assert not ready()
        wait_for(ready, grace + 5, f"{node} Ready again")  # a beat is grace / 4 here; the report 60 s
        assert time.monotonic() - marked < 30


def test_down_leaves_no_process_behind(kube_bin: Path, tmp_path: Path):
    fed = start_federation(tmp_path / "one", "tiers", clusters=1, start_delay=0.2)
    try:
        status = fed.status()
        pids = [pid for c in status["clusters"] for pid in c["pids"].values()]
        assert len(pids) == 4 and status["pid"] not in pids
        rss = sum(sum(c["rss_bytes"].values()) for c in status["clusters"])
        assert 50 << 20 < rss < 2 << 30  # real processes, of a size that three can share 24 GiB
    finally:
        fed.stop()
    for pid in [*pids, status["pid"]]:
        assert not _alive(pid), f"process {pid} survived 'qonnect testbed down'"
    assert not (tmp_path / "one" / "testbed.json").exists()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_after_an_api_server_restart_pods_match_what_the_controllers_want(tiers: KubeFederation):
    """Issue 22.12: the kubelet recovers like a kubelet. A Deployment scaled to 0 just before its
    API server is killed (the kubelet's confirmations of the deletions meet a stopped server),
    then recovered: no pod is left Terminating; scaled to 2 again, exactly 2 pods run; its
    namespace, deleted, goes with all its pods."""
    with api(tiers.kubeconfig("edge-1")) as c:
        core, apps = client.CoreV1Api(c), client.AppsV1Api(c)
        ns = namespace(core)
        apps.create_namespaced_deployment(ns, deployment("web", replicas=2))
        wait_for(
            lambda: apps.read_namespaced_deployment_status("web", ns).status.ready_replicas == 2, 60, "2/2"
        )
        apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 0}})
        wait_for(
            lambda: all(p.metadata.deletion_timestamp for p in core.list_namespaced_pod(ns).items),
            30,
            "the pods marked for deletion",
        )
    tiers.fail("edge-1")
    time.sleep(2.0)  # the kubelet's confirmations meet the stopped server
    tiers.recover("edge-1")
    with api(tiers.kubeconfig("edge-1")) as c:
        core, apps = client.CoreV1Api(c), client.AppsV1Api(c)
        wait_for(
            lambda: not core.list_namespaced_pod(ns).items, 45, "no pod left of the scaled-down Deployment"
        )
        apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 2}})

        def two_of_two() -> bool:
            # the status of this generation: the one read before the kill can still say 2/2
            d = apps.read_namespaced_deployment_status("web", ns)
            return (
                d.status.observed_generation or 0
            ) >= d.metadata.generation and d.status.ready_replicas == 2

        wait_for(two_of_two, 60, "2/2 again")
        time.sleep(2.0)
        pods = core.list_namespaced_pod(ns).items
        assert len(pods) == 2 and not any(p.metadata.deletion_timestamp for p in pods), [
            (p.metadata.name, p.status.phase, p.metadata.deletion_timestamp) for p in pods
        ]
        assert {rs.status.replicas for rs in apps.list_namespaced_replica_set(ns).items} == {2}
        core.delete_namespace(ns)
        wait_for(
            lambda: ns not in {n.metadata.name for n in core.list_namespace().items},
            90,
            f"namespace {ns} gone",
        )
