from __future__ import annotations

from qonnect_testbed.sim import placement
from qonnect_testbed.sim.deployments import _resolve, _surge_unavailable, template_hash
from qonnect_testbed.sim.objects import parse_quantity, pod_requests


def node(name="n1", cpu="4", memory="8Gi", pods="110", labels=None, ready="True", taints=None):
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "ephemeral-storage": "10Gi", "pods": pods},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(cpu=None, memory=None, selector=None, terms=None, tolerations=None):
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}]}
    if selector:
        spec["nodeSelector"] = selector
    if terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": "p"}, "spec": spec}


def expr(key, op, *values):
    return {"key": key, "operator": op, "values": list(values)} if values else {"key": key, "operator": op}


def test_quantities_and_requests():
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1e3") == 1000
    p = pod(cpu="250m", memory="64Mi")
    p["spec"]["containers"].append({"name": "d", "resources": {"limits": {"cpu": "1"}}})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    assert pod_requests(p) == {"cpu": 2.0, "memory": 64 * 2**20, "ephemeral-storage": 0.0}


def test_resources_and_pod_count():
    assert placement.reject_reason(pod(cpu="4"), node(), {}) is None
    assert placement.reject_reason(pod(cpu="4"), node(), {"cpu": 0.5}) == "Insufficient cpu"
    assert placement.reject_reason(pod(memory="9Gi"), node(), {}) == "Insufficient memory"
    assert placement.reject_reason(pod(), node(pods="2"), {"pods": 2}) == "Too many pods"


def test_ready_and_taints():
    assert placement.reject_reason(pod(), node(ready="Unknown"), {}) == "node(s) were not ready"
    tainted = node(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    assert placement.reject_reason(pod(), tainted, {}) == "node(s) had untolerated taint(s)"
    tolerating = pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu"}])
    assert placement.reject_reason(tolerating, tainted, {}) is None
    assert placement.reject_reason(pod(tolerations=[{"operator": "Exists"}]), tainted, {}) is None


def test_node_selector_and_affinity_operators():
    n = node(labels={"tier": "edge", "rank": "5"})
    assert placement.affinity_matches(pod(selector={"tier": "edge"}), n)
    assert not placement.affinity_matches(pod(selector={"tier": "cloud"}), n)
    cases = [
        (expr("kubernetes.io/hostname", "In", "n1", "n2"), True),
        (expr("kubernetes.io/hostname", "In", "n2"), False),
        (expr("tier", "NotIn", "cloud"), True),
        (expr("tier", "NotIn", "edge"), False),
        (expr("missing", "NotIn", "x"), True),
        (expr("tier", "Exists"), True),
        (expr("missing", "Exists"), False),
        (expr("missing", "DoesNotExist"), True),
        (expr("tier", "DoesNotExist"), False),
        (expr("rank", "Gt", "4"), True),
        (expr("rank", "Lt", "4"), False),
    ]
    for e, expected in cases:
        assert placement.affinity_matches(pod(terms=[{"matchExpressions": [e]}]), n) is expected, e
    # terms are ORed, expressions within a term ANDed; an empty term matches nothing
    assert placement.affinity_matches(
        pod(
            terms=[
                {"matchExpressions": [expr("tier", "In", "cloud")]},
                {"matchExpressions": [expr("tier", "In", "edge")]},
            ]
        ),
        n,
    )
    assert not placement.affinity_matches(
        pod(terms=[{"matchExpressions": [expr("tier", "In", "edge"), expr("rank", "In", "1")]}]), n
    )
    assert not placement.affinity_matches(pod(terms=[{}]), n)
    assert placement.affinity_matches(pod(terms=[{"matchFields": [expr("metadata.name", "In", "n1")]}]), n)


def test_score_prefers_least_allocated_and_message_format():
    p = pod(cpu="1")
    assert placement.score(p, node(cpu="8"), {}) > placement.score(p, node(cpu="8"), {"cpu": 4})
    msg = placement.unschedulable_message(3, {"Insufficient cpu": 2, "node(s) were not ready": 1})
    assert msg == "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) were not ready."


def test_rolling_update_parameters_and_hash():
    assert _resolve("25%", 4, True) == 1 and _resolve("25%", 3, False) == 0 and _resolve(2, 9, True) == 2
    assert _surge_unavailable({}, 4) == (1, 1)
    assert _surge_unavailable(
        {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}, 4
    ) == (0, 1)
    assert _surge_unavailable({"strategy": {"type": "Recreate"}}, 3) == (0, 3)
    a = template_hash({"spec": {"containers": [{"image": "a"}]}})
    assert a == template_hash({"spec": {"containers": [{"image": "a"}]}})
    assert a != template_hash({"spec": {"containers": [{"image": "b"}]}})
    assert set(a) <= set("bcdfghjklmnpqrstvwxz2456789")
