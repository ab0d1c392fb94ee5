"""Addresses of a service spread over several clusters (issue 23.6): a caller uses the instance
on its own cluster, else the nearest one (location, then tier), callers spread over equally near
instances, an instance on an unavailable cluster only as a last resort, and the stub lists
every instance."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import ADDRESSES_ANNOTATION
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from support.shop_cases import SERVICES

TIERS = {"e1": "edge", "e2": "edge", "f1": "fog", "f2": "fog", "c1": "cloud", "c2": "cloud"}


def deployer(plan, unavailable=(), locations=None):
    targets = {
        n: Target(n, f"/k/{n}.yaml", domain=f"{n}.example", tier=t, location=(locations or {}).get(n, ""))
        for n, t in TIERS.items()
    }
    return Deployer("shop", "shop", SERVICES, plan, targets, unavailable=set(unavailable))


def stub(d, cluster, name="back"):
    return next(o for o in d.desired_for(cluster) if o["kind"] == "Service" and o["metadata"]["name"] == name)


def target(d, cluster, name="back"):
    return stub(d, cluster, name)["spec"]["externalName"]


def test_a_cluster_that_runs_the_service_keeps_its_real_service():
    d = deployer({"front": [{"cluster": "c1"}], "back": [{"cluster": "c1"}, {"cluster": "e1"}]})
    assert stub(d, "c1")["spec"].get("type") != "ExternalName"


def test_a_caller_uses_the_nearest_tier_not_the_first_listed():
    plan = {
        "front": [{"cluster": "e2"}, {"cluster": "c2"}],
        "back": [{"cluster": "c1"}, {"cluster": "f1"}],  # c1 first, as the engine may list it
    }
    d = deployer(plan)
    assert target(d, "e2") == "back.shop.svc.f1.example"  # edge -> fog, not cloud
    assert target(d, "c2") == "back.shop.svc.c1.example"  # cloud -> cloud


def test_the_same_location_wins_over_the_tier():
    plan = {"front": [{"cluster": "e1"}], "back": [{"cluster": "e2"}, {"cluster": "c1"}]}
    d = deployer(plan, locations={"e1": "berlin", "c1": "berlin", "e2": "paris"})
    assert target(d, "e1") == "back.shop.svc.c1.example"


def test_equally_near_callers_spread_over_instances_and_the_stub_lists_them_all():
    plan = {
        "front": [{"cluster": n} for n in ("e1", "e2", "f1", "f2")],
        "back": [{"cluster": "c1"}, {"cluster": "c2"}],
    }
    d = deployer(plan)
    chosen = {target(d, c) for c in ("e1", "e2", "f1", "f2")}
    assert chosen == {"back.shop.svc.c1.example", "back.shop.svc.c2.example"}
    listed = stub(d, "e1")["metadata"]["annotations"][ADDRESSES_ANNOTATION].split(",")
    assert listed[0] == target(d, "e1") and sorted(listed) == sorted(chosen)
    assert target(deployer(plan), "e1") == target(d, "e1"), "the choice is stable between runs"


def test_an_unavailable_instance_is_named_only_when_no_other_runs():
    plan = {"front": [{"cluster": "e1"}], "back": [{"cluster": "f1"}, {"cluster": "c1"}]}
    assert target(deployer(plan), "e1") == "back.shop.svc.f1.example"
    assert target(deployer(plan, unavailable={"f1"}), "e1") == "back.shop.svc.c1.example"
    assert target(deployer(plan, unavailable={"f1", "c1"}), "e1") == "back.shop.svc.f1.example"


def test_a_service_on_one_cluster_has_a_stub_as_before():
    d = deployer({"front": [{"cluster": "e1"}], "back": [{"cluster": "c1"}]})
    annotations = stub(d, "e1")["metadata"]["annotations"]
    assert target(d, "e1") == "back.shop.svc.c1.example" and ADDRESSES_ANNOTATION not in annotations


def test_placeholders_name_the_callers_preferred_instance():
    plan = {"front": [{"cluster": "e1"}, {"cluster": "c2"}], "back": [{"cluster": "c1"}, {"cluster": "f1"}]}
    d = deployer(plan)
    d.placeholders = {"back": "[BACK_IP]"}
    d.targets["f1"].address, d.targets["c1"].address = "10.0.0.2", "10.0.0.1"
    assert d.replacements("e1") == {"[BACK_IP]": "10.0.0.2"}
    assert d.replacements("c1") == {"[BACK_IP]": "10.0.0.1"}  # its own instance
