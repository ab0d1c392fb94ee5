"""placement/binding.py: one shape and one validator for a plan from the decision to the cluster
(issue 38.1)."""

from __future__ import annotations

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.errors import fail_fields
from ansible_collections.qonnect.core.plugins.module_utils.placement.binding import (
    Binding,
    PlanError,
    Target,
    services_problems,
)

SERVICES = {
    "web": [{"cluster": "fog-1", "replicas": 2, "nodes": ["fog-1-a", "fog-1-b"]}],
    "db": [{"cluster": "cloud-1"}, {"cluster": "cloud-2", "replicas": 1, "nodes": []}],
}


def test_a_plans_services_become_a_binding_and_back():
    binding = Binding.from_services("shop", SERVICES, version=3, fencing={"term": 2, "seq": 9}, decision="d7")
    assert binding.services["db"][0] == Target("cloud-1", 1, (), "active")
    assert binding.services_dict() == {
        "web": [{"cluster": "fog-1", "replicas": 2, "nodes": ["fog-1-a", "fog-1-b"]}],
        "db": [{"cluster": "cloud-1", "replicas": 1}, {"cluster": "cloud-2", "replicas": 1}],
    }
    assert binding.placement() == binding.services_dict()  # every target active
    assert binding.clusters() == {"fog-1", "cloud-1", "cloud-2"}
    assert binding.to_dict() == {
        "application": "shop",
        "services": binding.services_dict(),
        "version": 3,
        "decision": "d7",
        "fencing": {"term": 2, "seq": 9},
    }
    again = Binding.from_services("shop", binding.services_dict())
    assert again.services == binding.services


def test_every_problem_of_a_plan_is_named_at_once():
    bad = {
        "web": [{"cluster": "fog-1", "replicas": 0}, {"replicas": 1}, "edge-1"],
        "db": [],
        "cache": "cloud-1",
        "api": [{"cluster": "cloud-1", "replicas": True, "nodes": "n1", "role": "spare"}],
    }
    problems = services_problems(bad)
    assert problems == [
        "plan.services.web[0].replicas: 0 is not an integer from 1 to 1000",
        "plan.services.web[1]: expected {cluster, replicas, nodes} with a cluster name",
        "plan.services.web[2]: expected {cluster, replicas, nodes} with a cluster name",
        "plan.services.db: expected a non-empty list of {cluster, replicas, nodes}",
        "plan.services.cache: expected a non-empty list of {cluster, replicas, nodes}",
        "plan.services.api[0].replicas: True is not an integer from 1 to 1000",
        "plan.services.api[0].nodes: expected a list of node names",
        "plan.services.api[0].role: 'spare' is not one of active, standby",
    ]
    with pytest.raises(PlanError) as raised:
        Binding.from_services("shop", bad)
    fields = fail_fields(raised.value)
    assert fields["errors"] == problems and fields["path"] == "plan.services.web[0].replicas"
    assert fields["msg"].startswith("invalid plan (8 errors): plan.services.web[0].replicas")
    assert services_problems(["web"]) == [
        "plan.services: expected a mapping of service to a list of {cluster, replicas, nodes}"
    ]
    assert services_problems(SERVICES) == []


def test_the_raft_log_and_the_deploy_module_judge_a_plan_alike():
    """The Raft state machine took any list of {cluster} (replicas 0 included) that the deploy
    module then refused: a committed plan no run could apply. Both use the one validator now."""
    from ansible_collections.qonnect.core.plugins.module_utils.runners.deploy import plan_services
    from qonnect.controller.statemachine import CommandError, DecisionLog

    zero = {"web": [{"cluster": "fog-1", "replicas": 0}]}
    with pytest.raises(PlanError, match=r"plan\.services\.web\[0\]\.replicas"):
        plan_services({"services": zero})
    log = DecisionLog()
    decided = log.apply(
        {
            "op": "decide",
            "term": 1,
            "node": "n1",
            "ts": 100.0,
            "app": "shop",
            "reason": "r",
            "exclude": ["edge-1"],
            "kind": "cluster-down",
        }
    )
    start = {"op": "start", "id": decided["id"], "term": 1, "node": "n1", "ts": 101.0}
    with pytest.raises(CommandError, match=r"plan\.web\[0\]\.replicas: 0 is not an integer"):
        log.apply({**start, "plan": zero})
    assert log.apply({**start, "plan": SERVICES})  # a good plan still starts it
    assert plan_services({"services": SERVICES}) == Binding.from_services("", SERVICES).services_dict()
