"""Authorization: a restricted identity gets 403 Forbidden with the real messages, and the
documented least-privilege identities (docs/rbac/, the testbed's agent and deploy kubeconfigs)
get exactly what their ClusterRoles grant, on both engines."""

from __future__ import annotations

import pytest
from conformance_engines import status_of
from kubernetes import client

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(120)]
USER = "system:serviceaccount:default:qonnect-restricted"


def _forbidden(call) -> dict:
    with pytest.raises(client.ApiException) as err:
        call()
    assert err.value.status == 403
    status = status_of(err.value)
    assert status["reason"] == "Forbidden" and status["code"] == 403
    return status


def test_restricted_identity_reads_pods_in_its_namespace(engine):
    assert isinstance(engine.core(restricted=True).list_namespaced_pod("default").items, list)
    assert isinstance(engine.apps(restricted=True).list_namespaced_deployment("default").items, list)


def test_cluster_scope_is_forbidden(engine):
    status = _forbidden(lambda: engine.core(restricted=True).list_node())
    assert status["message"] == (
        f'nodes is forbidden: User "{USER}" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    assert status["details"] == {"kind": "nodes"}
    _forbidden(lambda: engine.core(restricted=True).list_pod_for_all_namespaces())


def test_writes_and_other_namespaces_are_forbidden(engine):
    status = _forbidden(
        lambda: engine.core(restricted=True).create_namespaced_config_map(
            "default", {"metadata": {"name": "nope"}}
        )
    )
    assert status["message"] == (
        f'configmaps is forbidden: User "{USER}" cannot create resource "configmaps" '
        'in API group "" in the namespace "default"'
    )
    status = _forbidden(lambda: engine.apps(restricted=True).list_namespaced_deployment("kube-system"))
    assert status["message"] == (
        f'deployments.apps is forbidden: User "{USER}" cannot list resource '
        '"deployments" in API group "apps" in the namespace "kube-system"'
    )
    assert status["details"] == {"group": "apps", "kind": "deployments"}
    status = _forbidden(lambda: engine.core(restricted=True).read_namespaced_secret("x", "default"))
    assert status["message"] == (
        f'secrets "x" is forbidden: User "{USER}" cannot get resource "secrets" '
        'in API group "" in the namespace "default"'
    )
    assert status["details"] == {"name": "x", "kind": "secrets"}


def test_admin_token_is_not_restricted(engine):
    assert engine.core().list_node().items


AGENT = "system:serviceaccount:qonnect:qonnect-agent"
DEPLOY = "system:serviceaccount:qonnect:qonnect-deploy"


def test_the_agent_identity_reads_the_cluster_and_writes_nothing(engine):
    assert engine.core(role="agent").list_node().items
    assert isinstance(engine.core(role="agent").list_pod_for_all_namespaces().items, list)
    assert isinstance(engine.apps(role="agent").list_deployment_for_all_namespaces().items, list)
    status = _forbidden(
        lambda: engine.core(role="agent").create_namespaced_config_map(
            "default", {"metadata": {"name": "nope"}}
        )
    )
    assert status["message"] == (
        f'configmaps is forbidden: User "{AGENT}" cannot create resource "configmaps" '
        'in API group "" in the namespace "default"'
    )
    status = _forbidden(lambda: engine.core(role="agent").read_namespaced_pod("x", "default"))
    assert status["message"] == (
        f'pods "x" is forbidden: User "{AGENT}" cannot get resource "pods" in API group "" '
        'in the namespace "default"'
    )


def test_the_deploy_identity_writes_workloads_and_no_more(engine):
    ns = f"rbac-deploy-{engine.name}"
    core, apps = engine.core(role="deploy"), engine.apps(role="deploy")
    core.create_namespace({"metadata": {"name": ns}})
    try:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "settings"}, "data": {"a": "1"}})
        assert core.read_namespaced_config_map("settings", ns).data == {"a": "1"}
        assert isinstance(apps.list_namespaced_deployment(ns).items, list)
        status = _forbidden(lambda: core.read_namespaced_pod_log("x", ns))
        assert status["message"] == (
            f'pods "x" is forbidden: User "{DEPLOY}" cannot get resource "pods/log" in API group "" '
            f'in the namespace "{ns}"'
        )
        status = _forbidden(lambda: core.list_namespaced_event(ns))
        assert status["message"] == (
            f'events is forbidden: User "{DEPLOY}" cannot list resource "events" in API group "" '
            f'in the namespace "{ns}"'
        )
        rbac = client.RbacAuthorizationV1Api(engine.api(role="deploy"))
        status = _forbidden(lambda: rbac.create_cluster_role({"metadata": {"name": "escalate"}, "rules": []}))
        assert status["message"] == (
            f'clusterroles.rbac.authorization.k8s.io is forbidden: User "{DEPLOY}" cannot create '
            'resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope'
        )
    finally:
        core.delete_namespace(ns)
