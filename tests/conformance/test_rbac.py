"""Authorization: a restricted identity gets 403 Forbidden with the real messages."""

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
