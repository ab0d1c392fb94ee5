"""Claims on the real engine: the default StorageClass and the simulated provisioner
(testbed/qonnect_testbed/kube/volumes.py) with the real PV controller, binder and scheduler.

A claim without a class gets `standard` from the real DefaultStorageClass admission plugin, the
provisioner creates `pvc-<uid>`, kube-controller-manager binds both, a pod using the claim is
scheduled (the scheduler's volume binding) and runs Ready, and deleting the claim releases the
volume, which the provisioner then deletes (reclaimPolicy Delete).
"""

from __future__ import annotations

import pytest
from kubernetes import client
from qonnect_testbed.kube import KubeFederation
from support import specs
from test_engine import api, namespace, wait_for

pytestmark = pytest.mark.xdist_group("kube-tiers")  # the session's `tiers` federation: one worker starts it


def test_a_claim_is_provisioned_bound_used_by_a_ready_pod_and_its_volume_deleted_with_it(
    tiers: KubeFederation,
):
    with api(tiers.kubeconfig("cloud-1")) as c:
        core = client.CoreV1Api(c)
        ns = namespace(core)
        claim = {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
        }
        stored = core.create_namespaced_persistent_volume_claim(ns, claim)
        assert stored.spec.storage_class_name == "standard"
        name = f"pvc-{stored.metadata.uid}"
        bound = wait_for(
            lambda: (
                (c := core.read_namespaced_persistent_volume_claim("data", ns)).status.phase == "Bound" and c
            ),
            60,
            "claim data Bound by the real PV controller",
        )
        assert bound.spec.volume_name == name and bound.status.capacity == {"storage": "2Gi"}
        volume = core.read_persistent_volume(name)
        assert volume.status.phase == "Bound" and volume.spec.persistent_volume_reclaim_policy == "Delete"
        assert volume.spec.claim_ref.uid == stored.metadata.uid and volume.spec.host_path.path.endswith(name)
        assert volume.metadata.annotations["pv.kubernetes.io/provisioned-by"] == "qonnect.test/testbed-local"

        pod = {
            "metadata": {"name": "user"},
            "spec": {
                "containers": [
                    {"name": "c", "image": specs.PAUSE, "volumeMounts": [{"name": "d", "mountPath": "/d"}]}
                ],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
            },
        }
        core.create_namespaced_pod(ns, pod)
        ready = wait_for(
            lambda: (
                (p := core.read_namespaced_pod("user", ns)).status.conditions
                and any(x.type == "Ready" and x.status == "True" for x in p.status.conditions)
                and p
            ),
            90,
            "pod user Ready with its claim",
        )
        assert ready.spec.node_name == "cloud-1-worker"

        core.delete_namespaced_pod("user", ns, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(ns).items, 60, "pod user gone")
        core.delete_namespaced_persistent_volume_claim("data", ns)
        wait_for(
            lambda: name not in {v.metadata.name for v in core.list_persistent_volume().items},
            60,
            f"volume {name} deleted once Released",
        )
        core.delete_namespace(ns)
