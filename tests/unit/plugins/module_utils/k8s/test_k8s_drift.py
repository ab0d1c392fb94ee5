"""Deployer.drift / restore (issue 22.5): what of a cluster's share is missing or was changed out
of band, and putting it back; other versions, foreign objects and added fields are not drift."""

from __future__ import annotations

from support.shop_cases import PLAN_A, deployer


def _edit(cluster, kind, name, change):
    """An out-of-band edit (kubectl edit/scale): the stored object changes, its annotations stay."""
    key = ("apps/v1" if kind == "Deployment" else "v1", kind, "shop", name)
    change(cluster.objects[key])


def test_nothing_drifts_right_after_a_deploy(fleet):
    clusters, _log = fleet
    deployer(clusters, PLAN_A).run()
    assert deployer(clusters, PLAN_A).drift("c1") == []
    assert deployer(clusters, PLAN_A).drift("c2") == []


def test_a_deleted_deployment_is_missing_and_restored_with_its_fence_check(fleet):
    clusters, _log = fleet
    deployer(clusters, PLAN_A).run()
    clusters["c1"].delete("apps/v1", "Deployment", "front-v1", "shop")
    steps: list[str] = []
    d = deployer(clusters, PLAN_A, before_step=steps.append)
    drifts = d.drift("c1")
    assert [(x.key, x.why, x.service) for x in drifts] == [
        ("apps/v1/Deployment/shop/front-v1", "missing", "front")
    ]
    outcomes = d.restore(drifts)
    assert outcomes[0]["changed"] and outcomes[0]["action"] == "create"
    assert steps == ["restore Deployment shop/front-v1 on c1"]
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop")["spec"]["replicas"] == 2
    assert deployer(clusters, PLAN_A).drift("c1") == []


def test_an_edited_applied_field_is_modified_an_added_field_is_not(fleet):
    clusters, _log = fleet
    deployer(clusters, PLAN_A).run()

    def scale(obj):
        obj["spec"]["replicas"] = 5

    def label(obj):
        obj["metadata"]["labels"]["team"] = "ops"

    _edit(clusters["c1"], "Deployment", "front-v1", label)
    assert deployer(clusters, PLAN_A).drift("c1") == []
    _edit(clusters["c1"], "Deployment", "front-v1", scale)
    d = deployer(clusters, PLAN_A)
    drifts = d.drift("c1")
    assert [x.why for x in drifts] == ["modified"]
    d.restore(drifts)
    assert clusters["c1"].get("apps/v1", "Deployment", "front-v1", "shop")["spec"]["replicas"] == 2


def test_another_version_and_foreign_objects_are_left_to_the_deploy(fleet):
    clusters, _log = fleet
    deployer(clusters, PLAN_A).run()

    def other_version(obj):
        obj["metadata"]["annotations"]["qonnect.io/applied-hash"] = "0" * 32
        obj["spec"]["replicas"] = 7

    def foreign(obj):
        obj["metadata"]["labels"]["qonnect.io/application"] = "someone-else"

    _edit(clusters["c1"], "Deployment", "front-v1", other_version)
    _edit(clusters["c1"], "Service", "front", foreign)
    assert deployer(clusters, PLAN_A).drift("c1") == []


def test_a_deleted_namespace_comes_back_first(fleet):
    clusters, _log = fleet
    deployer(clusters, PLAN_A).run()
    clusters["c2"].delete("v1", "Namespace", "shop")
    drifts = deployer(clusters, PLAN_A).drift("c2")
    assert drifts[0].key == "v1/Namespace//shop" and {x.why for x in drifts} == {"missing"}
    deployer(clusters, PLAN_A).restore(drifts)
    assert deployer(clusters, PLAN_A).drift("c2") == []


def test_a_stub_naming_a_down_instance_is_re_pointed(fleet):
    clusters, _log = fleet
    spread = {
        "front": [{"cluster": "c1", "replicas": 1}, {"cluster": "c2", "replicas": 1}],
        "back": [{"cluster": "c3", "replicas": 1}],
    }
    deployer(clusters, spread).run()
    named = clusters["c3"].get("v1", "Service", "front", "shop")["spec"]["externalName"]
    chosen = named.split(".svc.")[1].split(".")[0]
    other = ({"c1", "c2"} - {chosen}).pop()
    d = deployer(clusters, spread, unavailable={chosen})
    drifts = d.drift("c3")
    assert [(x.key, x.why) for x in drifts] == [("v1/Service/shop/front", "re-pointed")]
    d.restore(drifts)
    after = clusters["c3"].get("v1", "Service", "front", "shop")["spec"]["externalName"]
    assert after == f"front.shop.svc.{other}.example"
    # back again once the cluster is: the rule's own choice
    assert [x.why for x in deployer(clusters, spread).drift("c3")] == ["re-pointed"]


def test_a_manifest_with_yaml_anchors_renders_as_its_stored_copy():
    """The deploy reads manifests from YAML (anchors share one mapping), the reconciler from the
    KB (JSON: nothing shared): both must render the same object, or every restore would see
    another version and leave the drift in place."""
    import json

    import yaml
    from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import prepare

    text = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: &match {app: web}}
  template:
    metadata: {labels: *match}
    spec: {containers: [{name: web, image: img}]}
"""
    from_file = yaml.safe_load(text)
    from_kb = json.loads(json.dumps(from_file))
    rendered = prepare(from_file, "shop", "web", "shop")
    assert rendered == prepare(from_kb, "shop", "web", "shop")
    assert rendered["spec"]["selector"]["matchLabels"] == {"app": "web"}
