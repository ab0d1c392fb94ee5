"""A workload scaled by a HorizontalPodAutoscaler of its own service keeps its replica count out
of what qonnect applies (issue 34: podinfo's Kustomize base ships an autoscaling/v2 HPA).
Applying the plan's count would take ``spec.replicas`` from the HPA controller on every deploy,
undo its scaling and report a change each time; workloads no HPA scales still get the count."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import autoscaled
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target


def _deployment(name: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c"}]}},
        },
    }


HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "web"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": 2,
    },
}


def _replicas(manifests: list[dict]) -> dict[str, object]:
    d = Deployer(
        "shop",
        "shop",
        {"web": manifests},
        {"web": [{"cluster": "c1", "replicas": 3}]},
        {"c1": Target("c1", "/k/c1.yaml")},
    )
    return {
        o["metadata"]["name"]: o["spec"].get("replicas", "unset")
        for o in d.desired_for("c1")
        if o["kind"] == "Deployment"
    }


def test_the_plan_s_count_is_applied_to_a_workload_no_hpa_scales():
    assert _replicas([_deployment("web")]) == {"web": 3}


def test_a_workload_its_hpa_scales_gets_no_replica_count_and_its_neighbour_still_does():
    assert _replicas([_deployment("web"), _deployment("worker"), HPA]) == {"web": "unset", "worker": 3}


def test_autoscaled_names_each_hpa_target_and_ignores_malformed_ones():
    broken = {"kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"}, "spec": {"scaleTargetRef": "web"}}
    assert autoscaled([HPA, broken, _deployment("web")]) == {("Deployment", "web")}
