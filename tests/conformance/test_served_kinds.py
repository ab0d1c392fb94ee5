"""Every resource type a real v1.34 server serves, on both engines: discovery compared with the
generated file (testbed/qonnect_testbed/store/served_v1_34.json, scripts/generate-served.py),
and the minimal behaviour of the kinds an application's readiness depends on.

The real engine's discovery must equal the file (so the file is this build's); the emulator's
must equal it except for the differences ALLOWED explains, each with its reason
(docs/testbed.md, "What the emulator serves"). Both together compare the two engines.
"""

from __future__ import annotations

import json
import uuid

import pytest
from conformance_engines import deployment, pod, status_of
from kubernetes import client
from qonnect_testbed.store.resources import (
    EMULATED_SUBRESOURCES,
    OMITTED,
    OMITTED_SUBRESOURCES,
    served_document,
)
from support import wait_for

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(240)]

# What one served resource (or subresource) is, as discovery says.
Entry = tuple[str, str, str, bool, tuple[str, ...]]  # group/version, name, kind, namespaced, verbs


def _explain(entry: Entry, doc: dict) -> str | None:
    """Why the emulator leaves a real server's entry out, or None if it must not."""
    gv, name, _kind, _namespaced, _verbs = entry
    group = gv.rpartition("/")[0]
    plural, _slash, sub = name.partition("/")
    if (group, plural) in OMITTED:
        return OMITTED[(group, plural)]
    if sub and sub not in EMULATED_SUBRESOURCES:
        return OMITTED_SUBRESOURCES.get(sub)
    version = gv.rpartition("/")[2]
    found = [
        r for r in doc["resources"] if (r["group"], r["version"], r["plural"]) == (group, version, plural)
    ]
    if found and not found[0]["preferred"]:
        return (
            "a non-preferred version: the emulator serves each group in its preferred version (no conversion)"
        )
    return None


def _expected(doc: dict) -> set[Entry]:
    """The file's resources and subresources as discovery entries."""
    out: set[Entry] = set()
    for r in doc["resources"]:
        gv = f"{r['group']}/{r['version']}" if r["group"] else r["version"]
        out.add((gv, r["plural"], r["kind"], r["namespaced"], tuple(sorted(r["verbs"]))))
        for s in r["subresources"]:
            out.add((gv, f"{r['plural']}/{s['name']}", s["kind"], r["namespaced"], tuple(sorted(s["verbs"]))))
    return out


def _get(api: client.ApiClient, path: str) -> dict:
    response = api.call_api(
        "GET",
        api.configuration.host + path,
        header_params={
            "Accept": "application/json",
            "Authorization": api.configuration.auth_settings()["BearerToken"]["value"],
        },
    )
    response.read()
    return json.loads(response.data)


def _served(api: client.ApiClient) -> set[Entry]:
    out: set[Entry] = set()
    paths = [("v1", "/api/v1")] + [
        (v["groupVersion"], f"/apis/{v['groupVersion']}")
        for g in _get(api, "/apis")["groups"]
        for v in g["versions"]
    ]
    for gv, path in paths:
        for r in _get(api, path)["resources"]:
            out.add((gv, r["name"], r["kind"], r["namespaced"], tuple(sorted(r["verbs"]))))
    return out


def test_discovery_matches_the_real_servers(engine):
    doc = served_document()
    expected, served = _expected(doc), _served(engine.api())
    if not engine.is_emulator:
        assert served == expected, "regenerate served_v1_34.json with scripts/generate-served.py"
        return
    unexplained = sorted(e for e in expected - served if _explain(e, doc) is None)
    extra = sorted(served - expected)
    assert (unexplained, extra) == ([], [])
    # and the allowlist has no stale entries: each omission is one
    assert set(OMITTED) <= {(e[0].rpartition("/")[0], e[1]) for e in expected - served}


def test_a_job_runs_to_completion(engine, ns):
    batch = client.BatchV1Api(engine.api())
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {
            "completions": 2,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}
            },
        },
    }
    batch.create_namespaced_job(ns, job)

    def complete():
        j = batch.read_namespaced_job("once", ns)
        return (
            j if any(c.type == "Complete" and c.status == "True" for c in j.status.conditions or []) else None
        )

    j = wait_for(complete, timeout=120, what="Job once Complete")
    assert j.status.succeeded == 2 and j.status.completion_time is not None
    assert {c.type for c in j.status.conditions} >= {"SuccessCriteriaMet", "Complete"}
    pods = engine.core().list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name=once").items
    assert len(pods) == 2 and {p.status.phase for p in pods} == {"Succeeded"}


def test_a_claim_binds(engine, ns):
    """Static binding on both engines (the default StorageClass: test_storage.py)."""
    core = engine.core()
    klass = f"manual-{uuid.uuid4().hex[:6]}"
    volume = {
        "metadata": {"name": f"pv-{ns}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": klass,
            "hostPath": {"path": "/tmp/qonnect-pv"},
        },
    }
    core.create_persistent_volume(volume)
    try:
        claim = {
            "metadata": {"name": "static"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": klass,
                "resources": {"requests": {"storage": "500Mi"}},
            },
        }
        core.create_namespaced_persistent_volume_claim(ns, claim)
        bound = wait_for(
            lambda: (
                (c := core.read_namespaced_persistent_volume_claim("static", ns)).status.phase == "Bound"
                and c
            ),
            timeout=90,
            what="claim static Bound",
        )
        assert bound.spec.volume_name == f"pv-{ns}" and bound.status.capacity == {"storage": "1Gi"}
    finally:
        core.delete_persistent_volume(f"pv-{ns}", _preload_content=False)


def test_an_hpa_gets_a_status(engine, ns):
    engine.apps().create_namespaced_deployment(ns, deployment("web", replicas=2))
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 4,
        },
    }
    auto = client.AutoscalingV2Api(engine.api())
    auto.create_namespaced_horizontal_pod_autoscaler(ns, hpa)
    got = wait_for(
        lambda: (
            (h := auto.read_namespaced_horizontal_pod_autoscaler("web", ns)).status.current_replicas == 2
            and h
        ),
        timeout=120,
        what="HPA web currentReplicas 2",
    )
    conditions = {c.type: c.status for c in got.status.conditions or []}
    assert conditions.get("AbleToScale") == "True"


def test_a_pdb_gets_a_status(engine, ns):
    engine.apps().create_namespaced_deployment(ns, deployment("web", replicas=2))
    policy = client.PolicyV1Api(engine.api())
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    got = wait_for(
        lambda: (
            (p := policy.read_namespaced_pod_disruption_budget("web", ns)).status.current_healthy == 2 and p
        ),
        timeout=120,
        what="PDB web currentHealthy 2",
    )
    assert (got.status.expected_pods, got.status.desired_healthy, got.status.disruptions_allowed) == (2, 1, 1)


def test_a_crds_custom_resources_are_served(engine, ns):
    group = f"q{uuid.uuid4().hex[:6]}.example.com"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    },
                }
            ],
        },
    }
    ext = client.ApiextensionsV1Api(engine.api())
    ext.create_custom_resource_definition(crd)
    try:
        wait_for(
            lambda: any(
                c.type == "Established" and c.status == "True"
                for c in ext.read_custom_resource_definition(f"widgets.{group}").status.conditions or []
            ),
            timeout=60,
            what="CRD Established",
        )
        listed = wait_for(
            lambda: [
                r for r in _get(engine.api(), f"/apis/{group}/v1")["resources"] if r["name"] == "widgets"
            ],
            timeout=30,
            what="widgets in discovery",
            retry_on=(client.ApiException, ValueError),
        )
        assert listed[0]["kind"] == "Widget" and listed[0]["namespaced"] is True
        custom = client.CustomObjectsApi(engine.api())
        body = {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
        }
        custom.create_namespaced_custom_object(group, "v1", ns, "widgets", body)
        items = custom.list_namespaced_custom_object(group, "v1", ns, "widgets")["items"]
        assert [(i["metadata"]["name"], i["spec"]) for i in items] == [("w1", {"size": 3})]
        custom.delete_namespaced_custom_object(group, "v1", ns, "widgets", "w1")
        assert custom.list_namespaced_custom_object(group, "v1", ns, "widgets")["items"] == []
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")


def test_a_pod_over_quota_is_refused_with_the_real_message(engine, ns):
    core = engine.core()
    core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "compute"}, "spec": {"hard": {"pods": "3", "requests.cpu": "1"}}}
    )
    wait_for(
        lambda: (
            (core.read_namespaced_resource_quota("compute", ns).status.hard or {}).get("requests.cpu") == "1"
        ),
        timeout=60,
        what="quota compute status.hard",
    )
    core.create_namespaced_pod(ns, pod("a", resources={"requests": {"cpu": "500m"}}))
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(ns, pod("b", resources={"requests": {"cpu": "600m"}}))
    assert refused.value.status == 403
    assert status_of(refused.value)["message"] == (
        'pods "b" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, '
        "used: requests.cpu=500m, limited: requests.cpu=1"
    )


def test_a_cronjob_runs_a_job_each_minute(engine, ns):
    """Within about a minute: a Job `<name>-<minutes since the epoch>` owned by the CronJob,
    lastScheduleTime, and once the Job completes, lastSuccessfulTime."""
    batch = client.BatchV1Api(engine.api())
    template = {
        "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox:1.36"}]}
    }
    batch.create_namespaced_cron_job(
        ns,
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "tick"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}},
        },
    )
    cron = wait_for(
        lambda: (c := batch.read_namespaced_cron_job("tick", ns)).status.last_successful_time and c,
        timeout=150,
        what="CronJob tick lastSuccessfulTime",
    )
    scheduled = cron.status.last_schedule_time
    job = batch.read_namespaced_job(f"tick-{int(scheduled.timestamp()) // 60}", ns)
    assert [(r.kind, r.name, r.controller) for r in job.metadata.owner_references] == [
        ("CronJob", "tick", True)
    ]
    assert job.metadata.annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"] == scheduled.strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
