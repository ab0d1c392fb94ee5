"""What each engine serves: the resources the product relies on, and the emulator's gaps (pinned)."""

from __future__ import annotations

import json
import time

import pytest
from conformance_engines import deployment, pod
from kubernetes import client
from support import wait_for

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(120)]

# (group/version, resource) the product and its tests use: served by both engines
REQUIRED = {
    ("v1", "namespaces"),
    ("v1", "nodes"),
    ("v1", "pods"),
    ("v1", "services"),
    ("v1", "endpoints"),
    ("v1", "serviceaccounts"),
    ("v1", "configmaps"),
    ("v1", "secrets"),
    ("v1", "events"),
    ("apps/v1", "deployments"),
    ("apps/v1", "replicasets"),
    ("apps/v1", "statefulsets"),
    ("apps/v1", "daemonsets"),
    ("coordination.k8s.io/v1", "leases"),
    ("networking.k8s.io/v1", "ingresses"),
}
# served by both since the emulator serves the generated list (test_served_kinds.py compares all)
REQUIRED |= {
    ("discovery.k8s.io/v1", "endpointslices"),
    ("apps/v1", "controllerrevisions"),
    ("batch/v1", "jobs"),
    ("batch/v1", "cronjobs"),
    ("rbac.authorization.k8s.io/v1", "roles"),
    ("v1", "persistentvolumeclaims"),
    ("autoscaling/v2", "horizontalpodautoscalers"),
    ("policy/v1", "poddisruptionbudgets"),
}
# served by a real API server, not by the emulator (docs/testbed.md, differences table)
NOT_EMULATED = {
    ("v1", "pods/eviction"),
    ("v1", "pods/log"),
    ("autoscaling/v1", "horizontalpodautoscalers"),
}


def _served(api: client.ApiClient) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    core = client.CoreApi(api).get_api_versions()
    groups = [("v1", "/api/v1")] + [
        (v.group_version, f"/apis/{v.group_version}")
        for g in client.ApisApi(api).get_api_versions().groups
        for v in g.versions
    ]
    assert core.versions == ["v1"]
    for gv, path in groups:
        response = api.call_api(
            "GET",
            api.configuration.host + path,
            header_params={
                "Accept": "application/json",
                "Authorization": api.configuration.auth_settings()["BearerToken"]["value"],
            },
        )
        response.read()
        doc = json.loads(response.data)
        out |= {(gv, r["name"]) for r in doc["resources"]}
    return out


def test_served_resources(engine):
    served = _served(engine.api())
    assert served >= REQUIRED
    if engine.is_emulator:
        assert not NOT_EMULATED & served
    else:
        assert served >= NOT_EMULATED


def test_a_replicaset_without_a_deployment(engine, ns):
    """Real clusters reconcile a bare ReplicaSet; the emulator stores it but makes no pods."""
    body = deployment("bare", replicas=1)
    body.update(kind="ReplicaSet")
    body["spec"].pop("strategy", None)
    engine.apps().create_namespaced_replica_set(ns, body)
    if engine.is_emulator:
        time.sleep(2)
        assert engine.core().list_namespaced_pod(ns, label_selector="app=bare").items == []
    else:
        wait_for(
            lambda: engine.apps().read_namespaced_replica_set("bare", ns).status.ready_replicas == 1,
            timeout=60,
            what="bare ReplicaSet ready",
        )


def test_pod_deletion_is_graceful_only_on_the_real_engine(engine, ns):
    core = engine.core()
    core.create_namespaced_pod(ns, pod("gone"))
    wait_for(
        lambda: core.read_namespaced_pod("gone", ns).status.phase == "Running", timeout=60, what="Running"
    )
    deleted = core.delete_namespaced_pod("gone", ns)
    assert deleted.metadata.deletion_timestamp is not None
    if engine.is_emulator:  # graceful termination is instant
        assert deleted.metadata.deletion_grace_period_seconds is None
    else:
        assert deleted.metadata.deletion_grace_period_seconds == 30


def test_service_account_token_volume_only_on_the_real_engine(engine, ns):
    stored = engine.core().create_namespaced_pod(ns, pod("vol"))
    projected = [v.name for v in stored.spec.volumes or [] if v.name.startswith("kube-api-access-")]
    if engine.is_emulator:  # no ServiceAccount token projection
        assert projected == []
    else:
        assert len(projected) == 1
