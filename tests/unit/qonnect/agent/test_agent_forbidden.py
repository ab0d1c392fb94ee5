"""An agent with too few RBAC rights: reported as "forbidden", never as an unreachable cluster.

The collector talks HTTP through the official kubernetes client to a small API server stand-in
that answers like a real one with RBAC on (403 Status objects for the reads the token may not do).
The report then goes through the KB's own report model and health rule, and the controller's
detector, which must not see the cluster as down.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from support.specs import kubeconfig as kubeconfig_doc

# isort: split
from qonnect.agent.buffer import Outbox
from qonnect.agent.collector import AGENT_RIGHTS, CollectError, Collector, ForbiddenError
from qonnect.agent.runner import Agent
from qonnect.agent.sequence import Sequence
from qonnect.controller.detector import Settings, Snapshot, down_clusters
from qonnect.kb.models import Report
from qonnect.kb.queries import healthy

ROOT = Path(__file__).resolve().parents[4]
NODE = {
    "metadata": {"name": "n1", "labels": {}},
    "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
    "status": {
        "allocatable": {"cpu": "4", "memory": "8Gi"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}


def forbidden(path: str) -> dict:
    resource = path.rstrip("/").rsplit("/", 1)[-1]
    group = "apps" if path.startswith("/apis/apps/") else ""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{resource} is forbidden: User "system:serviceaccount:shop:default" cannot list '
        f'resource "{resource}" in API group "{group}" at the cluster scope',
        "reason": "Forbidden",
        "details": {"kind": resource},
        "code": 403,
    }


class FakeApiServer:
    """Serves list calls; paths in ``denied`` answer 403 as RBAC does."""

    def __init__(self):
        self.denied: set[str] = set()
        self.seen: list[str] = []
        self.items: dict[str, list[dict]] = {"/api/v1/nodes": [NODE]}  # path -> its list's items
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?", 1)[0]
                outer.seen.append(path)
                if path in outer.denied:
                    status, body = 403, forbidden(path)
                else:
                    items = outer.items.get(path, [])
                    status, body = 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def apiserver(tmp_path):
    server = FakeApiServer()
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(kubeconfig_doc(server.url, "restricted-token")))
    yield server, str(kubeconfig)
    server.close()


def test_all_missing_rights_are_named_at_once(apiserver):
    server, kubeconfig = apiserver
    server.denied = {"/api/v1/pods", "/apis/apps/v1/deployments", "/apis/apps/v1/daemonsets"}
    collector = Collector(kubeconfig, timeout=5)
    with pytest.raises(ForbiddenError) as err:
        collector.collect()
    assert str(err.value) == (
        "forbidden: the agent needs these rights: list pods (all namespaces), "
        "list deployments.apps (all namespaces), list daemonsets.apps (all namespaces) "
        "(grant the ClusterRole in docs/rbac/agent-clusterrole.yml)"
    )
    assert "restricted-token" not in str(err.value)
    server.denied = set()
    observed = collector.collect()  # rights granted: the next tick reads everything
    assert [n["name"] for n in observed["nodes"]] == ["n1"]
    assert observed["nodes"][0]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}
    ]


def test_a_forbidden_cluster_is_reachable_healthy_and_not_down(apiserver):
    server, kubeconfig = apiserver
    server.denied = {"/api/v1/nodes", "/api/v1/pods"}
    collector = Collector(kubeconfig, timeout=5)
    agent = Agent("edge-1", collector.collect, kb=None, outbox=Outbox(10), sequence=Sequence())
    report = agent.build_report()
    collector.close()
    assert report["reachable"] is True
    assert report["error"].startswith(
        "forbidden: the agent needs these rights: list nodes (all namespaces), list pods (all namespaces)"
    )
    assert report["nodes"] is None and report["workloads"] is None  # not observed: the KB keeps its view
    stored = Report.model_validate(report)  # the KB takes it as it is
    assert healthy(now=report["ts"], heartbeat=report["ts"], reachable=int(stored.reachable), timeout=6)
    cluster = {
        "name": "edge-1",
        "heartbeat_age": 0.5,
        "reachable": stored.reachable,
        "healthy": True,
        "error": stored.error,
    }
    snapshot = Snapshot(inventory={"clusters": [cluster]}, workloads=[], applications=[], now=report["ts"])
    assert down_clusters(snapshot, Settings()) == {}


def test_an_unreachable_cluster_is_still_reported_unreachable(tmp_path):
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(kubeconfig_doc("http://127.0.0.1:9", "t")))
    collector = Collector(str(kubeconfig), timeout=2)
    with pytest.raises(CollectError) as err:
        collector.collect()
    assert not isinstance(err.value, ForbiddenError) and err.value.status == 0
    report = Agent(
        "edge-1", collector.collect, kb=None, outbox=Outbox(10), sequence=Sequence()
    ).build_report()
    assert report["reachable"] is False


def documented_role(name: str) -> tuple[list[dict], dict, set[tuple[str, str, str]]]:
    """docs/rbac/NAME: its documents, its ClusterRole and the (group, resource, verb) it grants."""
    docs = yaml.safe_load((ROOT / "docs" / "rbac" / name).read_text())["items"]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    return docs, role, granted


def test_the_documented_agent_clusterrole_grants_exactly_what_the_collector_reads():
    docs, role, granted = documented_role("agent-clusterrole.yml")
    assert granted == {(group, resource, verb) for group, resource, verb, _path in AGENT_RIGHTS}
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_the_documented_deploy_clusterrole_covers_what_deploy_touches():
    # Imported here: module_utils of the collection, the one home of the kinds deploy manages.
    from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import WORKLOAD_KINDS
    from ansible_collections.qonnect.core.plugins.module_utils.k8s.prune import (
        DEFAULT_PRUNE_KINDS,
        SWEEP_KINDS,
    )

    _docs, _role, granted = documented_role("deploy-clusterrole.yml")
    plural = {"Ingress": "ingresses", "HorizontalPodAutoscaler": "horizontalpodautoscalers"}
    kinds = {
        (av.split("/", maxsplit=1)[0] if "/" in av else "", plural.get(kind, kind.lower() + "s"))
        for av, kind in (*DEFAULT_PRUNE_KINDS, *SWEEP_KINDS)
    }
    kinds |= {("apps", kind.lower() + "s") for kind in WORKLOAD_KINDS}
    for group, resource in kinds:
        for verb in ("get", "list", "create", "patch", "delete"):
            assert (group, resource, verb) in granted, (group, resource, verb)
    for verb in ("get", "list", "create", "patch", "delete"):
        assert ("", "namespaces", verb) in granted
    assert not any(verb in ("*", "update", "escalate", "bind", "impersonate") for _g, _r, verb in granted)


def test_an_agent_without_the_replicasets_right_still_reports_the_new_pods_reason(apiserver, caplog):
    """The right was added for issue 34 (a Deployment's current ReplicaSet names the pods whose
    reasons count): an agent whose ClusterRole predates it keeps reporting, and takes the pods
    running the template's images; the ReplicaSets are read only while a Deployment is not ready."""
    server, kubeconfig = apiserver
    collector = Collector(kubeconfig, timeout=5)
    collector.collect()
    assert "/apis/apps/v1/replicasets" not in server.seen  # nothing is rolling out
    labels = {"app.kubernetes.io/managed-by": "qonnect", "app": "web"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "web:2"}]}}
    server.items["/apis/apps/v1/deployments"] = [
        {
            "metadata": {"name": "web", "namespace": "shop", "generation": 2, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1},
        }
    ]

    def pod(name: str, image: str, state: dict) -> dict:
        return {
            "metadata": {"name": name, "namespace": "shop", "labels": labels},
            "spec": {"containers": [{"name": "web", "image": image}]},
            "status": {
                "phase": "Pending",
                "containerStatuses": [{"name": "web", "image": image, "state": state}],
            },
        }

    server.items["/api/v1/pods"] = [
        pod("web-old", "web:1", {"running": {}}),
        pod(
            "web-new",
            "web:2",
            {"waiting": {"reason": "ErrImagePull", "message": 'Failed to pull image "web:2"'}},
        ),
    ]
    server.denied = {"/apis/apps/v1/replicasets"}
    (workload,) = collector.collect()["workloads"]
    assert "/apis/apps/v1/replicasets" in server.seen
    assert workload["status"] == "Progressing"
    assert workload["reason"].startswith(
        'ErrImagePull: Failed to pull image "web:2" (pod web-new, container web)'
    )
    assert "cannot list replicasets (HTTP 403)" in caplog.text
