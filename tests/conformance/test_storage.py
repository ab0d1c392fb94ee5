"""The default StorageClass on both engines: the same class, and a claim without a class binds.

Real clusters users run ship one (kind: `standard`, k3s: `local-path`); the emulator serves
store/defaults.py's `standard`, the real engine the same class with its own provisioner
(testbed/qonnect_testbed/kube/volumes.py), so applications with claims run on both.
"""

from __future__ import annotations

import time

import pytest
from conformance_engines import pod
from kubernetes import client
from support import wait_for

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(240)]

DEFAULT = "storageclass.kubernetes.io/is-default-class"


def test_the_default_storage_class_is_the_same(engine):
    """Same name, default annotation, binding mode and reclaim policy; only the provisioner
    (each engine's own) may differ."""
    classes = client.StorageV1Api(engine.api()).list_storage_class().items
    defaults = [c for c in classes if (c.metadata.annotations or {}).get(DEFAULT) == "true"]
    assert [c.metadata.name for c in defaults] == ["standard"]
    klass = defaults[0]
    assert (klass.volume_binding_mode, klass.reclaim_policy) == ("Immediate", "Delete")
    assert klass.provisioner.startswith("qonnect.test/")


def test_a_claim_without_a_class_gets_the_default_and_binds(engine, ns):
    core = engine.core()
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    stored = core.create_namespaced_persistent_volume_claim(ns, claim)
    assert stored.spec.storage_class_name == "standard"
    bound = wait_for(
        lambda: (c := core.read_namespaced_persistent_volume_claim("data", ns)).status.phase == "Bound" and c,
        timeout=60,
        what="claim data Bound",
    )
    assert bound.spec.volume_name == f"pvc-{stored.metadata.uid}"
    assert bound.status.capacity == {"storage": "1Gi"} and bound.status.access_modes == ["ReadWriteOnce"]
    volume = core.read_persistent_volume(bound.spec.volume_name)
    assert volume.spec.storage_class_name == "standard" and volume.status.phase == "Bound"
    assert (volume.spec.claim_ref.namespace, volume.spec.claim_ref.name, volume.spec.claim_ref.uid) == (
        ns,
        "data",
        stored.metadata.uid,
    )
    assert volume.metadata.annotations["pv.kubernetes.io/provisioned-by"].startswith("qonnect.test/")


def test_a_claim_a_pod_uses_is_kept_until_the_pod_is_gone(engine, ns):
    """StorageObjectInUseProtection: every claim carries the pvc-protection finalizer; deleting a
    claim a pod uses only marks it, and it goes once the pod has gone (charts such as Grafana's
    also set that finalizer themselves, so a removal waits on it on every engine)."""
    core = engine.core()
    claim = {
        "metadata": {"name": "held"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    stored = core.create_namespaced_persistent_volume_claim(ns, claim)
    assert "kubernetes.io/pvc-protection" in (stored.metadata.finalizers or [])
    wait_for(
        lambda: core.read_namespaced_persistent_volume_claim("held", ns).status.phase == "Bound",
        timeout=60,
        what="claim held Bound",
    )
    user = pod("user")
    user["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "held"}}]
    core.create_namespaced_pod(ns, user)
    core.delete_namespaced_persistent_volume_claim("held", ns)
    marked = core.read_namespaced_persistent_volume_claim("held", ns)
    assert marked.metadata.deletion_timestamp is not None
    time.sleep(2)  # the controller had its chance: the pod still uses the claim, so it stays
    assert core.read_namespaced_persistent_volume_claim("held", ns).metadata.deletion_timestamp

    core.delete_namespaced_pod("user", ns, grace_period_seconds=0)

    def gone() -> bool:
        try:
            core.read_namespaced_persistent_volume_claim("held", ns)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=60, what="claim held gone once its pod is")
