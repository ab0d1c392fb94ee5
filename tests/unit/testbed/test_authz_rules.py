"""The emulator's RBAC rule resolver (apiserver/authz.py) and the identities of docs/rbac/."""

from __future__ import annotations

from qonnect_testbed import identities
from qonnect_testbed.apiserver.authz import RESTRICTED, Grant, RequestInfo, allows


def req(verb: str, resource: str, group: str = "", namespace: str = "", name: str = "", sub: str = ""):
    return RequestInfo(verb, group, resource, sub, namespace, name)


def test_a_cluster_role_grant_reads_its_rules_from_the_documented_file():
    agent = Grant.cluster_role("agent")
    assert agent.user == "system:serviceaccount:qonnect:qonnect-agent"
    assert list(agent.rules) == identities.rules("agent")
    assert allows(agent, req("list", "nodes"))
    assert allows(agent, req("list", "deployments", "apps", namespace="shop"))  # any namespace
    assert not allows(agent, req("get", "nodes", name="n1")), "list is granted, not get"
    assert not allows(agent, req("create", "configmaps", namespace="default"))


def test_subresources_groups_wildcards_and_resource_names():
    grant = Grant(
        "u",
        (
            {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]},
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"], "resourceNames": ["only-this"]},
        ),
    )
    assert allows(grant, req("patch", "deployments", "apps", "ns", "web", sub="scale"))
    assert not allows(grant, req("patch", "deployments", "apps", "ns", "web")), "the object is not its scale"
    assert not allows(grant, req("patch", "deployments", "", "ns", "web", sub="scale")), "another group"
    assert allows(grant, req("get", "secrets", namespace="ns", name="only-this"))
    assert not allows(grant, req("get", "secrets", namespace="ns", name="other"))
    assert not allows(grant, req("list", "secrets", namespace="ns")), "resourceNames never allow a list"


def test_a_role_grant_stays_in_its_namespace():
    assert allows(RESTRICTED, req("list", "pods", namespace="default"))
    assert not allows(RESTRICTED, req("list", "pods", namespace="kube-system"))
    assert not allows(RESTRICTED, req("list", "pods"))  # cluster scope


def test_the_deploy_identity_may_write_workloads_but_not_rbac():
    deploy = Grant.cluster_role("deploy")
    assert allows(deploy, req("patch", "deployments", "apps", "shop", "web"))
    assert allows(deploy, req("create", "namespaces", namespace="shop", name=""))
    assert not allows(deploy, req("create", "clusterroles", "rbac.authorization.k8s.io"))
    assert not allows(deploy, req("get", "pods", namespace="shop", name="p", sub="log"))
