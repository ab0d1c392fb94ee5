"""Moving a service straight back to a cluster whose namespace is still Terminating."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.namespaces import (
    is_terminating,
    usable_namespace,
)
from support.shop_cases import PLAN_A, PLAN_B, deployer

# As a real API server returns it while the namespace controller empties it.
TERMINATING = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "shop", "deletionTimestamp": "2026-12-01T10:00:00Z"},
    "spec": {"finalizers": ["kubernetes"]},
    "status": {
        "phase": "Terminating",
        "conditions": [
            {
                "type": "NamespaceContentRemaining",
                "status": "True",
                "reason": "SomeResourcesRemain",
                "message": "Some resources are remaining: pods. has 2 resource instances",
            }
        ],
    },
}


def test_is_terminating():
    assert is_terminating(TERMINATING)
    assert not is_terminating({"metadata": {"name": "shop"}, "status": {"phase": "Active"}})
    assert not is_terminating(None)


class Sequence:
    name = "c9"

    def __init__(self, answers):
        self.answers = list(answers)

    def get(self, api_version, kind, name, namespace=None):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_usable_namespace_waits_until_gone_and_gives_up_clearly():
    slept = []
    client = Sequence([TERMINATING, TERMINATING, None])
    assert usable_namespace(client, "shop", 10, sleep=slept.append) is None
    assert len(slept) == 2
    clock = iter([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0])
    with pytest.raises(K8sError) as err:
        usable_namespace(
            Sequence([TERMINATING]), "shop", 2.0, sleep=lambda s: None, clock=lambda: next(clock)
        )
    assert err.value.status == 409 and "namespace shop is still terminating after 2s" in err.value.message


def test_move_back_waits_for_the_terminating_namespace_then_recreates_it(fleet):
    clusters, log = fleet
    clusters["c2"].terminate_reads = 3  # the old namespace lingers for three reads of it
    assert not deployer(clusters, PLAN_A).run()["failed"]
    moved = deployer(clusters, PLAN_B, previous={"c1", "c2"}).run()
    assert not moved["failed"]
    assert is_terminating(clusters["c2"].objects[("v1", "Namespace", None, "shop")])
    back = deployer(clusters, PLAN_A, previous={"c1", "c3"}).run()
    assert not back["failed"], back["message"]
    c2 = clusters["c2"]
    assert not is_terminating(c2.get("v1", "Namespace", "shop"))
    assert c2.get("apps/v1", "Deployment", "back-v1", "shop")["spec"]["replicas"] == 1
    assert ("c2", "apply", "Namespace", "shop") in log[-12:]  # created afresh


def test_a_namespace_terminating_too_long_fails_that_cluster_before_any_write(fleet):
    clusters, log = fleet
    clusters["c2"].terminate_reads = 10**6
    deployer(clusters, PLAN_A).run()
    deployer(clusters, PLAN_B, previous={"c1", "c2"}).run()
    writes = len(log)
    back = deployer(clusters, PLAN_A, previous={"c1", "c3"}, wait_timeout=0.5).run()
    assert back["failed"]
    assert "namespace shop is still terminating" in back["clusters"]["c2"]["error"]
    assert not [e for e in log[writes:] if e[0] == "c2"]  # nothing written into the dying namespace
    assert clusters["c3"].get("apps/v1", "Deployment", "back-v1", "shop") is not None  # c3 keeps serving
