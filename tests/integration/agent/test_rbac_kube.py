"""The documented least-privilege ClusterRoles and workload readiness on a real control plane
(`--engine kube`: real RBAC, real workload controllers).

The agent with docs/rbac/agent-clusterrole.yml reads everything it needs; without one of its
rights it reports exactly that right as missing; deploy with docs/rbac/deploy-clusterrole.yml
applies, waits, removes and (through a Terminating namespace) re-applies an application.

Marked `kube` like tests/integration/kube: the binaries are built (or taken from the cache) at
collection by this directory's conftest.py; a failed build or an engine that cannot start fails
the tests, they are never skipped.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import support
import yaml
from _agent_harness import wait_for
from support.federation import started_testbed
from support.specs import PAUSE, deployment

# isort: split
from ansible_collections.qonnect.core.plugins.module_utils.k8s import waiter
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import readiness
from qonnect.agent.collector import TOLERATED_MISSING, Collector, ForbiddenError

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.timeout(900)]
CLUSTER = "cloud-1"
KUBECTL = ["kubectl"]


@pytest.fixture(scope="module")
def kube(kube_bin: Path, tmp_path_factory) -> Iterator[dict]:
    """One real cluster of the `tiers` profile: a tainted control-plane node and a worker."""
    KUBECTL[0] = str(kube_bin / "kubectl")  # the kubectl of the engine's own release
    root = tmp_path_factory.mktemp("kube")
    args = [
        "--profile",
        "tiers",
        "--clusters",
        "1",
        "--start-delay",
        "0.3",
        "--engine",
        "kube",
        "--timeout",
        "300",
    ]
    with started_testbed(root, *args, timeout=420) as federation:
        federation["dir"] = root
        yield federation


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    return support.kubectl(kubeconfig, *args, input=stdin, binary=KUBECTL[0])


def token_kubeconfig(admin: str, account: str, path: Path) -> str:
    """A kubeconfig like the admin's (server, CA) for a service account's token."""
    token = kubectl(admin, "-n", "qonnect", "create", "token", account, "--duration", "1h").strip()
    doc = yaml.safe_load(Path(admin).read_text())
    doc = copy.deepcopy(doc)
    for user in doc["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return str(path)


def test_the_agent_clusterrole_is_enough_and_every_right_in_it_is_needed(kube, tmp_path):
    admin = next(c for c in kube["clusters"] if c["name"] == CLUSTER)["kubeconfig"]
    role_file = ROOT / "docs" / "rbac" / "agent-clusterrole.yml"
    kubectl(admin, "apply", "-f", str(role_file))
    agent_config = token_kubeconfig(admin, "qonnect-agent", tmp_path / "agent.yaml")

    collector = Collector(agent_config, timeout=10)
    try:
        observed = wait_for(lambda: _collect(collector), 30, "the agent to read with its ClusterRole")
        # its first read also says what the API server is (issue 34): discovery needs no right
        # beyond the ClusterRole (Kubernetes grants it to every authenticated user)
        server = observed["server"]
        version = yaml.safe_load(kubectl(admin, "version", "-o", "json"))["serverVersion"]["gitVersion"]
        assert server["kube_version"] == version
        assert server["api_versions"] == sorted(set(kubectl(admin, "api-versions").split()))
        assert {"v1", "apps/v1", "autoscaling/v2", "batch/v1", "policy/v1"} <= set(server["api_versions"])
        nodes = {n["name"]: n for n in observed["nodes"]}
        assert nodes[f"{CLUSTER}-control-plane"]["taints"] == [
            {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}
        ]

        docs = yaml.safe_load(role_file.read_text())["items"]
        role = next(d for d in docs if d["kind"] == "ClusterRole")
        for i, rule in enumerate(role["rules"]):
            for resource in rule["resources"]:
                reduced = copy.deepcopy(role)
                kept = [r for r in rule["resources"] if r != resource]
                if kept:
                    reduced["rules"][i]["resources"] = kept
                else:
                    del reduced["rules"][i]
                kubectl(admin, "apply", "-f", "-", stdin=yaml.safe_dump(reduced))
                if resource in TOLERATED_MISSING:  # reported around (its reads only degrade)
                    time.sleep(2)  # RBAC caches: let the reduced role be in effect
                    assert _collect(collector) is not None, f"{resource} taken away stops the agent"
                    continue
                group = rule["apiGroups"][0]
                wanted = f"list {resource}{'.' + group if group else ''} (all namespaces)"
                err = wait_for(lambda: _forbidden(collector), 30, f"403 once {resource} is taken away")
                assert str(err) == (
                    "forbidden: the agent needs these rights: "
                    + wanted
                    + " (grant the ClusterRole in docs/rbac/agent-clusterrole.yml)"
                )
        kubectl(admin, "apply", "-f", str(role_file))
        wait_for(lambda: _collect(collector), 30, "the agent to read again with the whole ClusterRole")
    finally:
        collector.close()


def _collect(collector: Collector) -> dict | None:
    with contextlib.suppress(ForbiddenError):
        return collector.collect()
    return None


def _forbidden(collector: Collector) -> ForbiddenError | None:
    try:
        collector.collect()
    except ForbiddenError as exc:
        return exc
    return None


def test_the_restricted_token_is_reported_forbidden_not_unreachable(kube):
    restricted = next(c for c in kube["clusters"] if c["name"] == CLUSTER)["restricted_kubeconfig"]
    collector = Collector(restricted, timeout=10)
    try:
        with pytest.raises(ForbiddenError) as err:
            collector.collect()
    finally:
        collector.close()
    assert err.value.status == 403
    assert str(err.value).startswith(
        "forbidden: the agent needs these rights: list nodes (all namespaces), "
        "list pods (all namespaces), list deployments.apps (all namespaces)"
    )


def test_deploy_with_its_clusterrole_applies_removes_and_reapplies_through_a_terminating_namespace(
    kube, tmp_path
):
    admin = next(c for c in kube["clusters"] if c["name"] == CLUSTER)["kubeconfig"]
    kubectl(admin, "apply", "-f", str(ROOT / "docs" / "rbac" / "agent-clusterrole.yml"))  # the namespace
    kubectl(admin, "apply", "-f", str(ROOT / "docs" / "rbac" / "deploy-clusterrole.yml"))
    deploy_config = token_kubeconfig(admin, "qonnect-deploy", tmp_path / "deploy.yaml")
    targets = {CLUSTER: Target(CLUSTER, deploy_config)}
    web = deployment("web", 2, PAUSE, "100m", container="c")
    services = {
        "web": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"a": "1"}},
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}},
            },
            web,
        ]
    }
    plan = {"web": [{"cluster": CLUSTER, "replicas": 2}]}

    def deployer(**kw):
        return Deployer("rbac", "rbac", services, plan, targets, wait_timeout=240, **kw)

    first = deployer().run()
    assert not first["failed"], first["message"]
    removed = deployer(previous={CLUSTER}).remove()
    assert not removed["failed"], removed["message"]
    client = get_client(CLUSTER, admin)
    left = client.get("v1", "Namespace", "rbac")
    started = time.monotonic()
    again = deployer().run()
    assert not again["failed"], again["message"]
    namespace = client.get("v1", "Namespace", "rbac")
    assert left is not None and left["status"]["phase"] == "Terminating"  # what deploy met on its way back
    assert (
        namespace["status"]["phase"] == "Active" and namespace["metadata"]["uid"] != left["metadata"]["uid"]
    )
    assert client.get("apps/v1", "Deployment", "web", "rbac")["status"].get("readyReplicas") == 2
    assert time.monotonic() - started < 240


def test_readiness_of_real_daemonsets_and_statefulsets(kube):
    """The one readiness definition against the real controllers' status (deploy's waiter)."""
    admin = next(c for c in kube["clusters"] if c["name"] == CLUSTER)["kubeconfig"]
    client = get_client(CLUSTER, admin)
    labels = {"app.kubernetes.io/managed-by": "qonnect", "qonnect.io/application": "ready"}
    kubectl(admin, "create", "namespace", "ready")

    def workload(kind: str, name: str, image: str) -> dict:
        spec = {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, **labels}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        }
        if kind == "StatefulSet":
            spec.update(replicas=2, serviceName=name)
        metadata = {"name": name, "namespace": "ready", "labels": labels}
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata, "spec": spec}

    for kind, name in (("DaemonSet", "agentd"), ("StatefulSet", "db")):
        client.apply(workload(kind, name, "registry.k8s.io/pause:3.10"))
    names = [("DaemonSet", "agentd"), ("StatefulSet", "db")]
    assert waiter.wait_ready(client, "ready", "ready", names, 120) == []
    ds = client.get("apps/v1", "DaemonSet", "agentd", "ready")
    assert ds["status"]["desiredNumberScheduled"] == 1  # the tainted control plane runs none
    assert readiness(ds).ready and "replicas" not in ds["spec"]

    client.apply(workload("StatefulSet", "db", "registry.k8s.io/pause:3.9"))  # a rolling update
    seen_not_ready = wait_for(
        lambda: not readiness(client.get("apps/v1", "StatefulSet", "db", "ready")).ready,
        30,
        "the StatefulSet to be not ready while it rolls",
    )
    assert seen_not_ready
    assert waiter.wait_ready(client, "ready", "ready", [("StatefulSet", "db")], 120) == []
    status = client.get("apps/v1", "StatefulSet", "db", "ready")["status"]
    assert status["updateRevision"] == status["currentRevision"] and status["updatedReplicas"] == 2
