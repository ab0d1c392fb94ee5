"""Namespace lifecycle: default content, Terminating, 403/409 while terminating, finalizers."""

from __future__ import annotations

import pytest
from conformance_engines import pod, status_of, unique
from kubernetes import client
from support import wait_for

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(180)]


def _gone(read) -> bool:
    try:
        read()
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_new_namespace_content(engine):
    core = engine.core()
    name = unique("fresh")
    created = core.create_namespace({"metadata": {"name": name}})
    try:
        if engine.is_emulator:  # made with the namespace; real controllers add them moments later
            assert [s.metadata.name for s in core.list_namespaced_service_account(name).items] == ["default"]
        assert created.spec.finalizers == ["kubernetes"] and created.status.phase == "Active"
        assert created.metadata.labels == {"kubernetes.io/metadata.name": name}
        sa = wait_for(lambda: core.list_namespaced_service_account(name).items, what="default ServiceAccount")
        assert [s.metadata.name for s in sa] == ["default"]
        cms = wait_for(lambda: core.list_namespaced_config_map(name).items, what="kube-root-ca.crt")
        assert [c.metadata.name for c in cms] == ["kube-root-ca.crt"]
        assert cms[0].data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
    finally:
        core.delete_namespace(name)


def test_terminating_namespace_refuses_content_and_recreation(engine):
    core = engine.core()
    name = unique("term")
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core.list_namespaced_service_account(name).items, what="default ServiceAccount")
    core.create_namespaced_config_map(name, {"metadata": {"name": "held", "finalizers": ["qonnect.io/test"]}})
    core.delete_namespace(name)
    ns = core.read_namespace(name)
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp is not None

    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_pod(name, pod("late"))
    status = status_of(err.value)
    assert err.value.status == 403 and status["reason"] == "Forbidden"
    assert status["message"] == (
        f'pods "late" is forbidden: unable to create new content in namespace {name} '
        "because it is being terminated"
    )
    assert {
        "reason": "NamespaceTerminating",
        "message": f"namespace {name} is being terminated",
        "field": "metadata.namespace",
    } in status["details"]["causes"]

    with pytest.raises(client.ApiException) as err:
        core.create_namespace({"metadata": {"name": name}})
    assert err.value.status == 409 and status_of(err.value)["reason"] == "AlreadyExists"
    assert status_of(err.value)["message"] == f'object is being deleted: namespaces "{name}" already exists'

    # The object with a finalizer is marked for deletion but stays, and so does the namespace.
    held = wait_for(
        lambda: (
            core.read_namespaced_config_map("held", name).metadata.deletion_timestamp
            and core.read_namespaced_config_map("held", name)
        ),
        timeout=60,
        what="held marked for deletion",
    )
    assert held.metadata.finalizers == ["qonnect.io/test"]
    wait_for(
        lambda: (
            {c.type: c.status for c in core.read_namespace(name).status.conditions or []}.get(
                "NamespaceFinalizersRemaining"
            )
            == "True"
        ),
        timeout=60,
        what="NamespaceFinalizersRemaining",
    )
    assert core.read_namespace(name).status.phase == "Terminating"

    core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(lambda: core.read_namespace(name)), timeout=90, what="namespace gone")
    created = core.create_namespace({"metadata": {"name": name}})  # moving back in works again
    assert created.status.phase == "Active"
    core.delete_namespace(name)


def test_namespace_deletion_takes_its_pods_and_is_not_instant(engine, ns):
    core, apps = engine.core(), engine.apps()
    apps.create_namespaced_deployment(
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "m", "image": "registry.k8s.io/pause:3.10"}]},
                },
            },
        },
    )
    wait_for(
        lambda: len([p for p in core.list_namespaced_pod(ns).items if p.status.phase == "Running"]) == 2,
        timeout=60,
        what="2 running pods",
    )
    core.delete_namespace(ns)
    assert core.read_namespace(ns).status.phase == "Terminating"
    wait_for(lambda: _gone(lambda: core.read_namespace(ns)), timeout=90, what="namespace gone")
    assert core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}").items == []


def test_object_finalizers_delay_deletion(engine, ns):
    core = engine.core()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "fin", "finalizers": ["qonnect.io/test"]}})
    core.delete_namespaced_config_map("fin", ns)
    cm = core.read_namespaced_config_map("fin", ns)
    assert cm.metadata.deletion_timestamp is not None and cm.metadata.deletion_grace_period_seconds == 0
    core.patch_namespaced_config_map("fin", ns, {"metadata": {"finalizers": None}})
    assert _gone(lambda: core.read_namespaced_config_map("fin", ns))
