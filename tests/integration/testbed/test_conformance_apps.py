"""Conformance with the official client: Deployments, patch types, server-side apply, watch."""

from __future__ import annotations

import json
import threading

import pytest
import yaml
from kubernetes import client, watch

pytestmark = pytest.mark.timeout(60)


def _status(exc: client.ApiException) -> dict:
    return json.loads(exc.body)


def test_generation_bumps_on_spec_change_only(apps, ns, manifests):
    created = apps.create_namespaced_deployment(ns, manifests.deployment("web"))
    assert created.metadata.generation == 1 and created.spec.strategy.type == "RollingUpdate"
    labelled = apps.patch_namespaced_deployment("web", ns, {"metadata": {"labels": {"extra": "1"}}})
    assert labelled.metadata.generation == 1
    scaled = apps.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 4}})
    assert scaled.metadata.generation == 2 and scaled.spec.replicas == 4


def test_scale_subresource(apps, ns, manifests):
    apps.create_namespaced_deployment(ns, manifests.deployment("web", replicas=2))
    scale = apps.read_namespaced_deployment_scale("web", ns)
    assert scale.spec.replicas == 2 and scale.status.selector == "app=web"
    apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 5}})
    assert apps.read_namespaced_deployment("web", ns).spec.replicas == 5
    with pytest.raises(client.ApiException) as exc:
        apps.patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": -1}})
    assert exc.value.status == 422


def test_invalid_deployment_selector(apps, ns, manifests):
    bad = manifests.deployment("bad")
    bad["spec"]["selector"]["matchLabels"] = {"app": "other"}
    with pytest.raises(client.ApiException) as exc:
        apps.create_namespaced_deployment(ns, bad)
    body = _status(exc.value)
    assert (
        exc.value.status == 422 and body["details"]["causes"][0]["field"] == "spec.template.metadata.labels"
    )


def test_deleting_a_deployment_deletes_its_pods(apps, core, ns, manifests):
    dep = apps.create_namespaced_deployment(ns, manifests.deployment("web"))
    owner = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "uid": dep.metadata.uid,
        "controller": True,
    }
    for i in range(2):
        pod = manifests.pod(f"web-{i}", {"app": "web"})
        pod["metadata"]["ownerReferences"] = [owner]
        core.create_namespaced_pod(ns, pod)
    core.create_namespaced_pod(ns, manifests.pod("loner", {"app": "web"}))
    apps.delete_namespaced_deployment("web", ns)
    assert [p.metadata.name for p in core.list_namespaced_pod(ns).items] == ["loner"]


def test_orphan_propagation_keeps_dependents(apps, core, ns, manifests):
    dep = apps.create_namespaced_deployment(ns, manifests.deployment("web"))
    pod = manifests.pod("web-0", {"app": "web"})
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": dep.metadata.uid}
    ]
    core.create_namespaced_pod(ns, pod)
    apps.delete_namespaced_deployment("web", ns, propagation_policy="Orphan")
    assert [p.metadata.name for p in core.list_namespaced_pod(ns).items] == ["web-0"]


def test_json_patch(core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}})
    ops = [
        {"op": "replace", "path": "/data/a", "value": "9"},
        {"op": "remove", "path": "/data/b"},
        {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
    ]
    patched = core.patch_namespaced_config_map("c", ns, ops)
    assert patched.data == {"a": "9"} and patched.metadata.labels == {"x": "y"}
    with pytest.raises(client.ApiException) as exc:
        core.patch_namespaced_config_map("c", ns, [{"op": "test", "path": "/data/a", "value": "1"}])
    assert exc.value.status == 422


def test_merge_patch_replaces_lists(dyn, apps, ns, manifests):
    apps.create_namespaced_deployment(ns, manifests.deployment("web"))
    body = {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "busybox"}]}}}}
    api = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    api.patch(body=body, name="web", namespace=ns, content_type="application/merge-patch+json")
    names = [c.name for c in apps.read_namespaced_deployment("web", ns).spec.template.spec.containers]
    assert names == ["side"]


def test_strategic_merge_patch_merges_by_key(apps, ns, manifests):
    apps.create_namespaced_deployment(ns, manifests.deployment("web"))
    # the Python client sends dict patches as strategic merge patches
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "main", "image": "nginx:1.27"},
                        {"name": "side", "image": "busybox"},
                    ]
                }
            }
        }
    }
    result = apps.patch_namespaced_deployment("web", ns, patch)
    containers = {c.name: c for c in result.spec.template.spec.containers}
    assert set(containers) == {"main", "side"}
    assert containers["main"].image == "nginx:1.27" and containers["main"].ports[0].container_port == 80
    deleted = apps.patch_namespaced_deployment(
        "web", ns, {"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}}
    )
    assert [c.name for c in deleted.spec.template.spec.containers] == ["main"]


def _manifest(name: str, replicas: int, image: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    }


def test_server_side_apply_with_dynamic_client(dyn, ns):
    api = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    first = api.server_side_apply(body=_manifest("ssa", 2, "nginx:1"), namespace=ns, field_manager="alice")
    assert first.spec.replicas == 2
    managers = {(m.manager, m.operation) for m in first.metadata.managedFields}
    assert managers == {("alice", "Apply")}
    fields = first.metadata.managedFields[0].fieldsV1.to_dict()
    assert "f:replicas" in fields["f:spec"]
    assert 'k:{"name":"main"}' in fields["f:spec"]["f:template"]["f:spec"]["f:containers"]
    # bob applies a different replicas value: conflict naming alice
    bobs = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ssa"},
        "spec": {"replicas": 5},
    }
    with pytest.raises(client.ApiException) as exc:
        api.server_side_apply(
            body=bobs,
            namespace=ns,
            field_manager="bob",
        )
    body = _status(exc.value)
    assert exc.value.status == 409 and body["reason"] == "Conflict"
    assert body["details"]["causes"][0]["field"] == ".spec.replicas" and '"alice"' in body["message"]
    forced = api.server_side_apply(
        body=bobs,
        namespace=ns,
        field_manager="bob",
        force_conflicts=True,
    )
    assert forced.spec.replicas == 5
    owners = {m.manager: m.fieldsV1.to_dict() for m in forced.metadata.managedFields}
    assert "f:replicas" in owners["bob"]["f:spec"] and "f:replicas" not in owners["alice"]["f:spec"]
    # alice re-applies without the label she no longer wants and with a new image: merged by key
    again = _manifest("ssa", 2, "nginx:2")
    del again["spec"]["replicas"]
    again["metadata"]["labels"] = {"app": "ssa", "team": "a"}
    result = api.server_side_apply(body=again, namespace=ns, field_manager="alice")
    assert result.spec.replicas == 5 and result.spec.template.spec.containers[0].image == "nginx:2"
    assert result.metadata.labels.to_dict() == {"app": "ssa", "team": "a"}
    # fields alice stops applying and nobody else owns are removed
    again["metadata"]["labels"] = {"app": "ssa"}
    assert api.server_side_apply(
        body=again, namespace=ns, field_manager="alice"
    ).metadata.labels.to_dict() == {"app": "ssa"}


def test_server_side_apply_list_map_keys_and_removal(dyn, ns):
    api = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    body = _manifest("ports", 1, "nginx:1")
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"containerPort": 80}, {"containerPort": 443, "name": "https"}]
    first = api.server_side_apply(body=body, namespace=ns, field_manager="alice").to_dict()
    stored = first["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert stored == [
        {"containerPort": 80, "protocol": "TCP"},
        {"containerPort": 443, "name": "https", "protocol": "TCP"},
    ]
    container["ports"] = [{"containerPort": 80}]  # alice stops applying port 443: it goes
    second = api.server_side_apply(body=body, namespace=ns, field_manager="alice").to_dict()
    assert second["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "protocol": "TCP"}
    ]
    assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    third = api.server_side_apply(body=body, namespace=ns, field_manager="alice").to_dict()
    assert third["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]  # no-op apply


def test_server_side_apply_creates_and_honours_dry_run(dyn, apps, ns):
    api = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    body = _manifest("fresh", 1, "nginx:1")
    api.server_side_apply(body=body, namespace=ns, field_manager="ci", dry_run="All")
    with pytest.raises(client.ApiException):
        apps.read_namespaced_deployment("fresh", ns)
    api.server_side_apply(body=yaml.safe_dump(body), name="fresh", namespace=ns, field_manager="ci")
    assert apps.read_namespaced_deployment("fresh", ns).spec.template.spec.containers[0].image == "nginx:1"
    with pytest.raises(client.ApiException) as exc:
        api.server_side_apply(body=body, namespace=ns)
    assert exc.value.status == 400 and "fieldManager" in _status(exc.value)["message"]


def test_update_managers_are_recorded(apps, ns, manifests):
    made = apps.create_namespaced_deployment(ns, manifests.deployment("web"), field_manager="creator")
    assert [(m.manager, m.operation) for m in made.metadata.managed_fields] == [("creator", "Update")]


def test_watch_streams_added_modified_deleted(core, ns):
    w = watch.Watch()
    events: list[tuple[str, str, str]] = []
    start = core.list_namespaced_config_map(ns).metadata.resource_version

    def consume() -> None:
        for event in w.stream(
            core.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=10
        ):
            obj = event["object"]
            events.append((event["type"], obj.metadata.name, (obj.data or {}).get("v", "")))
            if event["type"] == "DELETED":
                w.stop()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "w"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("w", ns, {"data": {"v": "2"}})
    core.delete_namespaced_config_map("w", ns)
    thread.join(timeout=15)
    assert events == [("ADDED", "w", "1"), ("MODIFIED", "w", "2"), ("DELETED", "w", "2")]


def test_watch_resumes_from_resource_version_and_filters(core, ns, manifests):
    core.create_namespaced_pod(ns, manifests.pod("a", {"app": "x"}))
    rv = core.read_namespaced_pod("a", ns).metadata.resource_version
    core.create_namespaced_pod(ns, manifests.pod("b", {"app": "x"}))
    core.create_namespaced_pod(ns, manifests.pod("c", {"app": "y"}))
    core.patch_namespaced_pod("b", ns, {"metadata": {"labels": {"app": "z"}}})  # leaves the selector
    w = watch.Watch()
    seen = [
        (e["type"], e["object"].metadata.name)
        for e in w.stream(
            core.list_namespaced_pod, ns, label_selector="app=x", resource_version=rv, timeout_seconds=1
        )
    ]
    assert seen == [("ADDED", "b"), ("DELETED", "b")]
    listed = [
        (e["type"], e["object"].metadata.name)
        for e in w.stream(core.list_namespaced_pod, ns, label_selector="app in (x,y)", timeout_seconds=1)
    ]
    assert sorted(listed) == [("ADDED", "a"), ("ADDED", "c")]


def test_watch_too_old_resource_version_is_410(cluster, core, ns):
    def churn() -> None:  # push the first events out of the store's bounded history
        for i in range(1100):
            cluster.store.create("configmaps", ns, {"metadata": {"name": f"churn-{i}"}})

    cluster.call(churn)
    with pytest.raises(client.ApiException) as exc:
        for _event in watch.Watch().stream(
            core.list_namespaced_config_map, ns, resource_version="1", timeout_seconds=2
        ):
            pass
    assert exc.value.status == 410


def test_dynamic_client_discovers_and_lists(dyn, ns, core):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "d", "labels": {"k": "v"}}})
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    assert [i.metadata.name for i in cms.get(namespace=ns, label_selector="k=v").items] == ["d"]
    leases = dyn.resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    assert leases.namespaced
