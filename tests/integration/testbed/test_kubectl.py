"""The real kubectl against the emulated API server: the kubectl built from the same Kubernetes
release as the real engine (`make kube`, scripts/build-kube.sh; the build runs if it is missing,
and a failed build fails these tests)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import support
import yaml

pytestmark = pytest.mark.timeout(120)

MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, tier: front}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web, tier: front}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports:
        - containerPort: 80
        resources:
          requests: {cpu: 100m, memory: 64Mi}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web}
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 80
"""


@pytest.fixture(scope="module")
def kubectl(cluster, tmp_path_factory):
    """Run the built kubectl with the cluster's kubeconfig and a private cache dir."""
    from qonnect_testbed.kube.binaries import BinariesError, ensure_binaries

    try:
        binary = ensure_binaries() / "kubectl"
    except BinariesError as exc:
        pytest.fail(f"the kubectl tests need the built kubectl: {exc}")
    version = json.loads(support.run([str(binary), "version", "--client", "-o", "json"], timeout=60).stdout)[
        "clientVersion"
    ]
    home = tmp_path_factory.mktemp("kubectl")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig)}

    def run(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
        return support.run([str(binary), *args], env=env, input=stdin, check=check)

    run.version = f"{version['major']}.{version['minor']}"
    return run


@pytest.fixture
def kns(kubectl, core):
    """A namespace for one kubectl test, created and deleted with kubectl itself."""
    name = f"kc-{kubectl.version.replace('.', '-')}-{os.urandom(3).hex()}"
    kubectl("create", "namespace", name)  # a protobuf body from kubectl >= 1.32
    yield name
    kubectl("delete", "namespace", name, "--ignore-not-found", check=False)


def test_api_resources(kubectl):
    out = kubectl("api-resources").stdout
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert {
        "pods",
        "nodes",
        "namespaces",
        "services",
        "deployments",
        "leases",
        "configmaps",
        "secrets",
        "jobs",
        "cronjobs",
        "horizontalpodautoscalers",
        "persistentvolumeclaims",
        "customresourcedefinitions",
    } <= set(rows)
    assert "apps/v1" in rows["deployments"] and "deploy" in rows["deployments"]
    assert "autoscaling/v2" in rows["horizontalpodautoscalers"] and "hpa" in rows["horizontalpodautoscalers"]


def test_get_job_prints_kubectls_columns(kubectl, kns):
    """`kubectl create job` (a protobuf body) is stored; `get` prints kubectl's Job columns (this
    server runs no controllers: the Job stays Running, 0/1; conformance tests its completion)."""
    kubectl("create", "job", "once", "-n", kns, "--image=busybox:1.36", "--", "echo", "hi")
    header, row = kubectl("get", "job", "once", "-n", kns).stdout.splitlines()
    assert header.split()[:3] == ["NAME", "STATUS", "COMPLETIONS"] and row.split()[:3] == [
        "once",
        "Running",
        "0/1",
    ]


def test_get_nodes(kubectl, cluster):
    name = f"node-{kubectl.version.replace('.', '-')}"
    node = {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "node-role.kubernetes.io/worker": ""},
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.30.0"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
        },
    }
    cluster.call(cluster.store.create, "nodes", None, node)
    try:
        lines = [line.split() for line in kubectl("get", "nodes", "-o", "wide").stdout.splitlines()]
        row = next(line for line in lines if line[0] == name)
        assert row[1:3] == ["Ready", "worker"] and "v1.30.0" in row and "10.0.0.7" in row
    finally:
        cluster.call(cluster.store.delete, "nodes", None, name)


def test_apply_multi_document_manifest_is_idempotent(kubectl, kns, tmp_path, apps):
    path = tmp_path / "app.yaml"
    path.write_text(MANIFEST)
    out = kubectl("apply", "-n", kns, "-f", str(path)).stdout
    assert "deployment.apps/web created" in out and "service/web created" in out
    again = kubectl("apply", "-n", kns, "-f", str(path)).stdout
    assert "deployment.apps/web unchanged" in again and "service/web unchanged" in again
    path.write_text(MANIFEST.replace("nginx:1.25", "nginx:1.27"))
    assert "deployment.apps/web configured" in kubectl("apply", "-n", kns, "-f", str(path)).stdout
    dep = apps.read_namespaced_deployment("web", kns)
    assert dep.spec.template.spec.containers[0].image == "nginx:1.27" and dep.metadata.generation == 2
    assert dep.spec.template.spec.containers[0].ports[0].container_port == 80


def test_apply_bookinfo_manifests(kubectl, kns, apps):
    bookinfo = Path(__file__).resolve().parents[3] / "examples" / "bookinfo" / "manifests"
    out = kubectl("apply", "-n", kns, "-f", str(bookinfo)).stdout
    assert "deployment.apps/productpage-v1 created" in out and "service/ratings created" in out
    again = kubectl("apply", "-n", kns, "-f", str(bookinfo)).stdout.splitlines()
    assert again and all(line.endswith(" unchanged") for line in again)
    names = {d.metadata.name for d in apps.list_namespaced_deployment(kns).items}
    assert {"productpage-v1", "details-v1", "ratings-v1", "reviews-v1", "reviews-v2", "reviews-v3"} <= names


def test_server_side_apply(kubectl, kns, tmp_path):
    path = tmp_path / "app.yaml"
    path.write_text(MANIFEST)
    out = kubectl("apply", "--server-side", "-n", kns, "-f", str(path)).stdout
    assert "deployment.apps/web serverside-applied" in out
    kubectl("scale", "-n", kns, "deployment/web", "--replicas=4")
    conflict = kubectl("apply", "--server-side", "-n", kns, "-f", str(path), check=False)
    assert conflict.returncode != 0 and ".spec.replicas" in conflict.stderr
    kubectl("apply", "--server-side", "--force-conflicts", "-n", kns, "-f", str(path))
    assert kubectl("get", "-n", kns, "deploy", "web", "-o", "jsonpath={.spec.replicas}").stdout == "2"


def test_client_side_apply_then_server_side_apply_migrates_ownership(kubectl, kns, tmp_path, apps):
    path = tmp_path / "app.yaml"
    path.write_text(MANIFEST)
    kubectl("apply", "-n", kns, "-f", str(path))
    path.write_text(MANIFEST.replace("nginx:1.25", "nginx:1.26"))
    kubectl("apply", "--server-side", "-n", kns, "-f", str(path))
    dep = apps.read_namespaced_deployment("web", kns)
    assert dep.spec.template.spec.containers[0].image == "nginx:1.26"
    assert [(p.container_port, p.protocol) for p in dep.spec.template.spec.containers[0].ports] == [
        (80, "TCP")
    ]
    owners = {m.manager: m.fields_v1 for m in dep.metadata.managed_fields}
    container = 'k:{"name":"web"}'

    def owns_image(manager: str) -> bool:
        fields = owners.get(manager) or {}
        spec = fields.get("f:spec", {}).get("f:template", {}).get("f:spec", {})
        return "f:image" in spec.get("f:containers", {}).get(container, {})

    assert owns_image("kubectl") and not owns_image("kubectl-client-side-apply")


def _pods_for_deployment(cluster, namespace: str, node: str) -> None:
    """What the simulation's controllers would do: pods owned by the Deployment, bound to a node."""
    store = cluster.store
    dep = store.get("deployments", namespace, "web")
    owner = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "uid": dep["metadata"]["uid"],
        "controller": True,
    }
    for i in range(dep["spec"]["replicas"]):
        pod = {
            "metadata": {
                "name": f"web-{i}",
                "labels": dict(dep["spec"]["template"]["metadata"]["labels"]),
                "ownerReferences": [owner],
            },
            "spec": dict(dep["spec"]["template"]["spec"], nodeName=node),
        }
        store.create("pods", namespace, pod)
        running = store.get("pods", namespace, f"web-{i}")
        running["status"].update(
            phase="Running",
            podIP=f"10.244.0.{i + 10}",
            containerStatuses=[
                {
                    "name": "web",
                    "ready": True,
                    "restartCount": 0,
                    "image": "nginx",
                    "imageID": "",
                    "state": {"running": {}},
                }
            ],
        )
        store.update("pods", namespace, running, subresource="status")


def test_get_pods_wide_labels_and_delete_namespace(kubectl, kns, cluster, tmp_path, core):
    path = tmp_path / "app.yaml"
    path.write_text(MANIFEST)
    kubectl("apply", "-n", kns, "-f", str(path))
    cluster.call(_pods_for_deployment, cluster, kns, "edge-1-worker")
    lines = [line.split() for line in kubectl("get", "pods", "-n", kns, "-o", "wide").stdout.splitlines()]
    assert lines[0][:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert {tuple(line[i] for i in (0, 1, 2, 6)) for line in lines[1:]} == {
        ("web-0", "1/1", "Running", "edge-1-worker"),
        ("web-1", "1/1", "Running", "edge-1-worker"),
    }
    names = kubectl("get", "pods", "-n", kns, "-l", "app=web,tier in (front)", "-o", "name").stdout.split()
    assert names == ["pod/web-0", "pod/web-1"]
    assert kubectl("get", "pods", "-n", kns, "-l", "tier notin (front)", "-o", "name").stdout.strip() == ""
    field = kubectl("get", "pods", "-n", kns, "--field-selector", "spec.nodeName=edge-1-worker", "-o", "name")
    assert len(field.stdout.split()) == 2
    kubectl("delete", "namespace", kns, "--timeout=30s")
    gone = kubectl("get", "namespace", kns, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    assert not [p for p in core.list_pod_for_all_namespaces().items if p.metadata.namespace == kns]


def test_scale_and_rollout_status(kubectl, kns, cluster, tmp_path, apps):
    path = tmp_path / "app.yaml"
    path.write_text(MANIFEST)
    kubectl("apply", "-n", kns, "-f", str(path))
    assert (
        "deployment.apps/web scaled" in kubectl("scale", "-n", kns, "deployment/web", "--replicas=3").stdout
    )
    dep = apps.read_namespaced_deployment("web", kns)
    assert dep.spec.replicas == 3
    pending = kubectl("rollout", "status", "-n", kns, "deployment/web", "--timeout=1s", check=False)
    assert pending.returncode != 0

    def finish_rollout() -> None:  # what the simulation's Deployment controller reports when done
        current = cluster.store.get("deployments", kns, "web")
        current["status"] = {
            "observedGeneration": current["metadata"]["generation"],
            "replicas": 3,
            "updatedReplicas": 3,
            "readyReplicas": 3,
            "availableReplicas": 3,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        }
        cluster.store.update("deployments", kns, current, subresource="status")

    cluster.call(finish_rollout)
    done = kubectl("rollout", "status", "-n", kns, "deployment/web", "--timeout=20s")
    assert "successfully rolled out" in done.stdout
    table = kubectl("get", "deploy", "-n", kns, "web").stdout.splitlines()
    assert table[1].split()[:4] == ["web", "3/3", "3", "3"]


def test_dry_run_server_and_yaml_output(kubectl, kns, tmp_path):
    path = tmp_path / "app.yaml"
    path.write_text(MANIFEST)
    out = kubectl("apply", "-n", kns, "--dry-run=server", "-f", str(path)).stdout
    assert "(server dry run)" in out
    assert kubectl("get", "deploy", "-n", kns, "-o", "name").stdout.strip() == ""
    kubectl("create", "configmap", "cfg", "-n", kns, "--from-literal=k=v")
    doc = yaml.safe_load(kubectl("get", "configmap", "cfg", "-n", kns, "-o", "yaml").stdout)
    assert doc["data"] == {"k": "v"} and doc["metadata"]["uid"]


@pytest.mark.parametrize(
    "generator",
    [
        ("deployment", "gen-d", "--image=nginx:1.25", "--replicas=3", "--port=8080", "--", "sleep", "5"),
        ("service", "clusterip", "gen-s", "--tcp=80:8080"),
        ("service", "nodeport", "gen-n", "--tcp=80:8080", "--node-port=30080"),
        ("secret", "generic", "gen-x", "--from-literal=user=admin", "--type=Opaque"),
        ("serviceaccount", "gen-sa"),
        ("job", "gen-j", "--image=busybox:1.36", "--", "echo", "hi"),
        ("cronjob", "gen-c", "--image=busybox:1.36", "--schedule=*/5 * * * *", "--", "date"),
    ],
)
def test_create_generators(kubectl, kns, generator):
    """`kubectl create <kind>` stores what kubectl itself renders client-side (protobuf on >= 1.32)."""
    wanted = json.loads(kubectl("create", "-n", kns, "--dry-run=client", "-o", "json", *generator).stdout)
    kubectl("create", "-n", kns, *generator)
    kind = wanted["kind"].lower()
    stored = json.loads(kubectl("get", kind, wanted["metadata"]["name"], "-n", kns, "-o", "json").stdout)
    for field in ("spec", "data", "type"):
        if field not in wanted:
            continue
        if field == "spec":
            _assert_subset(wanted["spec"], stored["spec"], "spec")
        else:
            assert stored[field] == wanted[field]
    assert stored["metadata"].get("labels") == wanted["metadata"].get("labels")


def _assert_subset(want, got, path: str) -> None:
    """Everything kubectl rendered is stored (the server may add defaults)."""
    if isinstance(want, dict):
        for key, value in want.items():
            if value in ({}, None):
                continue
            assert key in got, f"{path}.{key} missing"
            _assert_subset(value, got[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert len(want) == len(got), f"{path}: {want} != {got}"
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            _assert_subset(a, b, f"{path}[{i}]")
    else:
        assert want == got, f"{path}: {want!r} != {got!r}"
