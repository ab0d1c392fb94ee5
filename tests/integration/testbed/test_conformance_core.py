"""Conformance of the emulated API server with the official client: core/v1 behaviour."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from qonnect_testbed.store.resources import RESOURCES

pytestmark = pytest.mark.timeout(60)


def _raw(
    cluster, path: str, token: str | None = None, accept: str | None = None
) -> tuple[int, dict | bytes, str]:
    ctx = ssl.create_default_context(cafile=str(cluster.ca_path))
    request = urllib.request.Request(cluster.url + path)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
            body, status, ctype = resp.read(), resp.status, resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        body, status, ctype = err.read(), err.code, err.headers.get("Content-Type", "")
    try:
        return status, json.loads(body), ctype
    except ValueError:
        return status, body, ctype


def _status(exc: client.ApiException) -> dict:
    return json.loads(exc.body)


def test_health_and_version_need_no_token(cluster):
    for path in ("/healthz", "/livez", "/readyz"):
        status, body, _ctype = _raw(cluster, path)
        assert (status, body) == (200, b"ok")
    status, body, _ctype = _raw(cluster, "/version")
    assert status == 200 and body["gitVersion"] == "v1.30.0" and body["minor"] == "30"


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_missing_or_wrong_token_is_401_status(cluster, token):
    status, body, _ctype = _raw(cluster, "/api/v1/namespaces", token=token)
    assert status == 401
    assert body["kind"] == "Status" and body["reason"] == "Unauthorized" and body["code"] == 401


def test_legacy_and_aggregated_discovery(cluster):
    status, body, _ctype = _raw(cluster, "/apis", token=cluster.token)
    assert status == 200 and body["kind"] == "APIGroupList"
    # the groups of the generated served list (store/served_v1_34.json), less the review APIs
    assert {g["name"] for g in body["groups"]} == {rt.group for rt in RESOURCES.values() if rt.group}
    assert {"apps", "batch", "autoscaling", "policy", "apiextensions.k8s.io"} <= {
        g["name"] for g in body["groups"]
    }
    assert "authorization.k8s.io" not in {g["name"] for g in body["groups"]}
    _status, core_list, _ctype = _raw(cluster, "/api/v1", token=cluster.token)
    names = {r["name"] for r in core_list["resources"]}
    assert {
        "pods",
        "pods/status",
        "pods/binding",
        "nodes",
        "namespaces",
        "services",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "events",
    } <= names
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    status, agg, ctype = _raw(cluster, "/apis", token=cluster.token, accept=accept)
    assert status == 200 and "as=APIGroupDiscoveryList" in ctype and "v=v2" in ctype
    apps = next(i for i in agg["items"] if i["metadata"].get("name") == "apps")
    deploy = next(r for r in apps["versions"][0]["resources"] if r["resource"] == "deployments")
    assert {s["subresource"] for s in deploy["subresources"]} == {"status", "scale"}
    assert deploy["scope"] == "Namespaced" and "deploy" in deploy["shortNames"]


def test_openapi_documents_come_from_upstream_schemas(cluster):
    status, index, _ctype = _raw(cluster, "/openapi/v3", token=cluster.token)
    assert status == 200 and {"api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1"} <= set(index["paths"])
    _status, doc, _ctype = _raw(
        cluster, index["paths"]["apis/apps/v1"]["serverRelativeURL"], token=cluster.token
    )
    schemas = doc["components"]["schemas"]
    deployment = schemas["io.k8s.api.apps.v1.Deployment"]
    assert deployment["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "kind": "Deployment", "version": "v1"}
    ]
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert (
        containers["x-kubernetes-patch-merge-key"] == "name"
        and containers["x-kubernetes-patch-strategy"] == "merge"
    )
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    status, v2, _ctype = _raw(cluster, "/openapi/v2", token=cluster.token, accept="application/json")
    assert status == 200 and v2["swagger"] == "2.0" and "io.k8s.api.core.v1.Pod" in v2["definitions"]
    status, proto, ctype = _raw(
        cluster,
        "/openapi/v2",
        token=cluster.token,
        accept="application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    )
    assert status == 200 and ctype == "application/octet-stream" and proto.startswith(b"\x0a\x032.0")


def test_initial_namespaces_and_default_service_account(core, ns):
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", ns} <= names
    sa = core.read_namespaced_service_account("default", ns)
    assert sa.metadata.uid


def test_create_sets_metadata_and_get_round_trips(core, ns, manifests):
    created = core.create_namespaced_pod(ns, manifests.pod("p1", {"app": "a"}))
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp and meta.generation == 1 and int(meta.resource_version) > 0
    assert created.status.phase == "Pending" and created.spec.restart_policy == "Always"
    again = core.read_namespaced_pod("p1", ns)
    assert again.metadata.uid == meta.uid and again.metadata.resource_version == meta.resource_version


def test_resource_version_is_cluster_wide_and_grows(core, ns):
    a = core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    b = core.create_namespaced_secret(ns, {"metadata": {"name": "b"}, "stringData": {"k": "v"}})
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    assert b.data == {"k": "dg=="} and b.string_data is None and b.type == "Opaque"


def test_errors_are_status_objects_with_real_reasons(core, ns, manifests):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    assert exc.value.status == 409 and _status(exc.value)["reason"] == "AlreadyExists"
    with pytest.raises(client.ApiException) as exc:
        core.read_namespaced_config_map("nope", ns)
    body = _status(exc.value)
    assert exc.value.status == 404 and body["reason"] == "NotFound" and body["details"]["name"] == "nope"
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod("no-such-namespace", manifests.pod("x"))
    assert (
        exc.value.status == 404
        and 'namespaces "no-such-namespace" not found' in _status(exc.value)["message"]
    )
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod(ns, {"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}})
    body = _status(exc.value)
    assert exc.value.status == 422 and body["reason"] == "Invalid"
    assert {c["field"] for c in body["details"]["causes"]} == {"metadata.name", "spec.containers"}
    with pytest.raises(client.ApiException) as exc:
        core.delete_namespace("default")
    assert exc.value.status == 403 and _status(exc.value)["reason"] == "Forbidden"


def test_stale_resource_version_conflicts(core, ns):
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"v": "1"}})
    cm.data = {"v": "2"}
    updated = core.replace_namespaced_config_map("c", ns, cm)
    assert updated.data == {"v": "2"} and updated.metadata.resource_version != cm.metadata.resource_version
    cm.data = {"v": "3"}  # still carries the old resourceVersion
    with pytest.raises(client.ApiException) as exc:
        core.replace_namespaced_config_map("c", ns, cm)
    assert exc.value.status == 409 and _status(exc.value)["reason"] == "Conflict"
    assert core.read_namespaced_config_map("c", ns).data == {"v": "2"}


def test_noop_update_keeps_resource_version(core, ns):
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "same"}, "data": {"v": "1"}})
    again = core.replace_namespaced_config_map("same", ns, cm)
    assert again.metadata.resource_version == cm.metadata.resource_version


def test_status_subresource_changes_only_status(core, ns, manifests):
    core.create_namespaced_pod(ns, manifests.pod("s"))
    pod = core.read_namespaced_pod("s", ns)
    pod.status.phase = "Running"
    pod.metadata.labels = {"changed": "yes"}
    core.replace_namespaced_pod_status("s", ns, pod)
    now = core.read_namespaced_pod("s", ns)
    assert now.status.phase == "Running" and not (now.metadata.labels or {}).get("changed")
    now.status.phase = "Failed"
    now.metadata.labels = {"changed": "yes"}
    core.replace_namespaced_pod("s", ns, now)  # the main resource ignores status
    final = core.read_namespaced_pod("s", ns)
    assert final.status.phase == "Running" and final.metadata.labels == {"changed": "yes"}


def test_label_selectors_all_operators(core, ns, manifests):
    for name, labels in {
        "a": {"app": "web", "tier": "front"},
        "b": {"app": "web", "tier": "back"},
        "c": {"app": "db"},
        "d": {"size": "5"},
    }.items():
        core.create_namespaced_pod(ns, manifests.pod(name, labels))

    def names(selector: str) -> set[str]:
        return {p.metadata.name for p in core.list_namespaced_pod(ns, label_selector=selector).items}

    assert names("app=web") == {"a", "b"}
    assert names("app==web") == {"a", "b"}
    assert names("app!=web") == {"c", "d"}
    assert names("tier in (front, back)") == {"a", "b"}
    assert names("tier notin (front)") == {"b", "c", "d"}
    assert names("tier") == {"a", "b"}
    assert names("!tier") == {"c", "d"}
    assert names("app=web,tier=back") == {"b"}
    assert names("size>4") == {"d"}
    with pytest.raises(client.ApiException) as exc:
        core.list_namespaced_pod(ns, label_selector="app in web")
    assert exc.value.status == 400 and _status(exc.value)["reason"] == "BadRequest"


def test_field_selectors(core, ns, manifests):
    core.create_namespaced_pod(ns, manifests.pod("on-n1", node="n1"))
    core.create_namespaced_pod(ns, manifests.pod("on-n2", node="n2"))
    core.create_namespaced_pod(ns, manifests.pod("pending"))

    def names(selector: str) -> set[str]:
        return {
            p.metadata.name
            for p in core.list_pod_for_all_namespaces(field_selector=selector).items
            if p.metadata.namespace == ns
        }

    assert names("spec.nodeName=n1") == {"on-n1"}
    assert names("spec.nodeName=") == {"pending"}
    assert names("spec.nodeName!=n1,metadata.namespace=" + ns) == {"on-n2", "pending"}
    assert names("metadata.name=on-n2") == {"on-n2"}
    assert names("status.phase=Pending") == {"on-n1", "on-n2", "pending"}
    assert names("status.phase=Running") == set()
    with pytest.raises(client.ApiException) as exc:
        core.list_namespaced_pod(ns, field_selector="spec.image=x")
    assert exc.value.status == 400 and "field label not supported" in _status(exc.value)["message"]


def test_limit_and_continue_page_through_everything(core, ns):
    for i in range(7):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}"}})
    seen, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map(ns, limit=3, _continue=token)
        seen += [c.metadata.name for c in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)
    assert sorted(seen) == sorted(f"cm-{i}" for i in range(7)) and pages == 3


def test_dry_run_persists_nothing(core, ns, manifests):
    made = core.create_namespaced_pod(ns, manifests.pod("dry"), dry_run="All")
    assert made.metadata.name == "dry"
    with pytest.raises(client.ApiException):
        core.read_namespaced_pod("dry", ns)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "keep"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("keep", ns, {"data": {"v": "2"}}, dry_run="All")
    cm = core.read_namespaced_config_map("keep", ns)
    assert cm.data == {"v": "1"}
    cm.data = {"v": "3"}
    assert core.replace_namespaced_config_map("keep", ns, cm, dry_run="All").data == {"v": "3"}
    core.delete_namespaced_config_map("keep", ns, dry_run="All")
    assert core.read_namespaced_config_map("keep", ns).data == {"v": "1"}
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "x"}}, dry_run="Some")
    assert exc.value.status == 400


def test_namespace_deletion_removes_its_contents(core, manifests):
    name = f"gone-{int(time.time() * 1000) % 100000}"
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_pod(name, manifests.pod("p"))
    core.create_namespaced_config_map(name, {"metadata": {"name": "c"}})
    core.delete_namespace(name)
    with pytest.raises(client.ApiException) as exc:
        core.read_namespace(name)
    assert exc.value.status == 404
    assert not [p for p in core.list_pod_for_all_namespaces().items if p.metadata.namespace == name]
    assert not core.list_namespaced_config_map(name).items


def test_cluster_scoped_nodes_and_status(core):
    node = {
        "metadata": {"name": "conf-node", "labels": {"qonnect.io/tier": "edge"}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
    }
    core.create_node(node)
    try:
        got = core.read_node("conf-node")
        assert got.status.allocatable == {"cpu": "4", "memory": "8Gi"}
        core.patch_node_status("conf-node", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        assert core.read_node("conf-node").status.conditions[0].type == "Ready"
        assert core.list_node(label_selector="qonnect.io/tier=edge").items[0].metadata.name == "conf-node"
    finally:
        core.delete_node("conf-node")


def test_pod_binding_sets_node(core, ns, manifests):
    core.create_namespaced_pod(ns, manifests.pod("bind-me"))
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="bind-me"), target=client.V1ObjectReference(kind="Node", name="n7")
    )
    core.create_namespaced_pod_binding("bind-me", ns, body, _preload_content=False)
    assert core.read_namespaced_pod("bind-me", ns).spec.node_name == "n7"


def test_services_get_cluster_ips_and_events_leases_work(core, ns, api_client):
    svc = core.create_namespaced_service(
        ns, {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}
    )
    assert svc.spec.cluster_ip.startswith("10.") and svc.spec.ports[0].target_port == 80
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
            "reason": "Scheduled",
            "message": "ok",
            "type": "Normal",
        },
    )
    assert [
        e.reason for e in core.list_namespaced_event(ns, field_selector="involvedObject.name=p").items
    ] == ["Scheduled"]
    leases = client.CoordinationV1Api(api_client)
    lease = leases.create_namespaced_lease(
        ns, {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    )
    lease.spec.holder_identity = "b"
    assert leases.replace_namespaced_lease("leader", ns, lease).spec.holder_identity == "b"


def test_protobuf_bodies_are_refused_with_415(cluster):
    ctx = ssl.create_default_context(cafile=str(cluster.ca_path))
    request = urllib.request.Request(
        cluster.url + "/api/v1/namespaces",
        data=b"k8s\x00\x0a\x0c",
        method="POST",
        headers={
            "Authorization": f"Bearer {cluster.token}",
            "Content-Type": "application/vnd.kubernetes.protobuf",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(request, context=ctx, timeout=10)
    body = json.loads(exc.value.read())
    assert (
        exc.value.code == 415
        and body["reason"] == "UnsupportedMediaType"
        and "application/json" in body["message"]
    )
