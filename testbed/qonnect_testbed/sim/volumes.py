"""The volume controller: PersistentVolumeClaims are Bound, as the PV controller and a
provisioner would bind them.

A claim of a StorageClass whose provisioner is the emulator's (the default ``standard``,
store/defaults.py) gets a new PersistentVolume ``pvc-<claim uid>`` of the requested size (dynamic
provisioning); any other claim binds to an Available PersistentVolume of its class with enough
capacity and the access modes it asks for (static binding), and stays Pending if there is none.
Both ends are written as the PV controller writes them (claimRef / volumeName, phase Bound).
A claim marked for deletion loses its ``kubernetes.io/pvc-protection`` finalizer once no running
pod uses it, as kube-controller-manager's pvc-protection controller does (then it is gone).
"""

from __future__ import annotations

from typing import Iterable

from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity_decimal

from qonnect_testbed.sim.base import Controller
from qonnect_testbed.store import Store
from qonnect_testbed.store.defaults import DEFAULT_STORAGE_CLASS, PVC_PROTECTION

PROVISIONER = DEFAULT_STORAGE_CLASS["provisioner"]


def _size(value: object) -> float:
    try:
        return float(parse_quantity_decimal(str(value)))
    except ValueError:
        return 0.0


def claims_of(pod: dict) -> list[str]:
    """The claims a pod's volumes name."""
    return [
        str((v.get("persistentVolumeClaim") or {}).get("claimName"))
        for v in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)
    ]


def uses(pod: dict, claim: str) -> bool:
    """A pod that has not finished and names the claim (what pvc-protection waits for)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and claim in claims_of(pod)


class Volumes(Controller):
    """Binds claims (key: namespace, name) to provisioned or matching volumes."""

    def __init__(self, store: Store) -> None:
        super().__init__("volume")
        self.store = store

    def process(self, keys: Iterable[tuple[str, str]]) -> None:
        """Keys: (namespace, claim name), or ("", volume name) for a volume to mark Available."""
        for key in keys:
            action = self._available if key[0] == "" else self._bind
            self.guarded(key, lambda k=key, a=action: a(*k))

    def _available(self, _namespace: str, name: str) -> None:
        found = self.store.list_refs("persistentvolumes", None, field_selector=f"metadata.name={name}")[0]
        if (
            found
            and (found[0].get("status") or {}).get("phase") in (None, "Pending")
            and not (found[0].get("spec") or {}).get("claimRef")
        ):
            self.store.update(
                "persistentvolumes", None, dict(found[0], status={"phase": "Available"}), subresource="status"
            )

    def _bind(self, namespace: str, name: str) -> None:
        found = self.store.list_refs(
            "persistentvolumeclaims", namespace, field_selector=f"metadata.name={name}"
        )[0]
        if not found:
            return
        claim = found[0]
        spec = claim.get("spec") or {}
        if claim["metadata"].get("deletionTimestamp"):
            self._release(claim)
            return
        if (claim.get("status") or {}).get("phase") == "Bound":
            return
        klass = spec.get("storageClassName") or ""
        wanted = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
        volume = self._find(claim, klass, _size(wanted))
        if volume is None:
            classes = {c["metadata"]["name"]: c for c in self.store.list_refs("storageclasses")[0]}
            if klass not in classes or classes[klass].get("provisioner") != PROVISIONER:
                return  # no matching volume and nothing provisions one: Pending, as on real clusters
            volume = self.store.create("persistentvolumes", None, self._provision(claim, klass, wanted))
        ref = {
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": name,
            "uid": claim["metadata"]["uid"],
            "apiVersion": "v1",
            "resourceVersion": claim["metadata"]["resourceVersion"],
        }
        volume = dict(volume, spec=dict(volume.get("spec") or {}, claimRef=ref))
        volume = self.store.update("persistentvolumes", None, volume)
        self.store.update(
            "persistentvolumes", None, dict(volume, status={"phase": "Bound"}), subresource="status"
        )
        annotations = dict(claim["metadata"].get("annotations") or {})
        annotations.update(
            {"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
        )
        if volume["metadata"]["name"].startswith("pvc-"):
            annotations["volume.kubernetes.io/storage-provisioner"] = PROVISIONER
        bound = dict(
            claim,
            metadata=dict(claim["metadata"], annotations=annotations),
            spec=dict(spec, volumeName=volume["metadata"]["name"]),
        )
        bound = self.store.update("persistentvolumeclaims", namespace, bound)
        status = {
            "phase": "Bound",
            "accessModes": (volume.get("spec") or {}).get("accessModes") or spec.get("accessModes") or [],
            "capacity": dict((volume.get("spec") or {}).get("capacity") or {}),
        }
        self.store.update(
            "persistentvolumeclaims", namespace, dict(bound, status=status), subresource="status"
        )

    def _release(self, claim: dict) -> None:
        """A claim marked for deletion: drop its protection finalizer when no pod that has not
        finished uses it (the store then removes it)."""
        meta = claim["metadata"]
        finalizers = meta.get("finalizers") or []
        if PVC_PROTECTION not in finalizers:
            return
        pods = self.store.list_refs("pods", meta.get("namespace"))[0]
        if any(uses(pod, meta["name"]) for pod in pods):
            return
        rest = [f for f in finalizers if f != PVC_PROTECTION]
        self.store.update(
            "persistentvolumeclaims", meta.get("namespace"), dict(claim, metadata=dict(meta, finalizers=rest))
        )

    def _find(self, claim: dict, klass: str, size: float) -> dict | None:
        """The smallest Available volume of the claim's class that fits it (static binding)."""
        spec = claim.get("spec") or {}
        modes = set(spec.get("accessModes") or [])
        fits = []
        for volume in self.store.list_refs("persistentvolumes")[0]:
            vspec = volume.get("spec") or {}
            if vspec.get("claimRef") or (volume.get("status") or {}).get("phase") not in (
                None,
                "Pending",
                "Available",
            ):
                continue
            if (vspec.get("storageClassName") or "") != klass or not modes <= set(
                vspec.get("accessModes") or []
            ):
                continue
            capacity = _size((vspec.get("capacity") or {}).get("storage", "0"))
            if capacity >= size:
                fits.append((capacity, volume["metadata"]["name"], volume))
        return min(fits)[2] if fits else None

    @staticmethod
    def _provision(claim: dict, klass: str, size: str) -> dict:
        spec = claim.get("spec") or {}
        return {
            "metadata": {
                "name": f"pvc-{claim['metadata']['uid']}",
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
            },
            "spec": {
                "capacity": {"storage": size},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "storageClassName": klass,
                "persistentVolumeReclaimPolicy": "Delete",
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "hostPath": {"path": f"/var/lib/qonnect-emulated/pvc-{claim['metadata']['uid']}"},
            },
        }
