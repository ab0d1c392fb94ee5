"""The real engine's default StorageClass and its simulated external provisioner.

Real clusters users run ship a default StorageClass with a provisioner (kind: ``standard``,
k3s: ``local-path``); a bare control plane has neither, so a claim would stay Pending for ever.
Each real cluster therefore gets the emulator's class (store/defaults.py, same name, annotation,
binding mode and reclaim policy; only the provisioner's name differs) and, beside the simulated
kubelets, the part of an external provisioner (kubernetes-csi/external-provisioner) that talks
to the API: for a Pending claim the PV controller hands to it (annotation
``volume.kubernetes.io/storage-provisioner``: no existing volume fits) it creates the PV ``pvc-<claim uid>``
pre-bound by ``claimRef``, which the real PV controller of kube-controller-manager then binds;
once such a PV is Released and its policy is Delete, it deletes it. Two watches per cluster
(claims, volumes), one call per claim or volume change that needs it; nothing is polled.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any, Callable

from qonnect_testbed.kube.api import KubeApi, KubeApiError
from qonnect_testbed.store.defaults import DEFAULT_STORAGE_CLASS

log = logging.getLogger(__name__)
PROVISIONER = "qonnect.test/testbed-local"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
ASKED_OF = "volume.kubernetes.io/storage-provisioner"  # set on the claim by the PV controller
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
RETRY_MAX = 10.0  # seconds between tries while the API server is away (doubling from 1 s)


def storage_class() -> dict[str, Any]:
    """The emulator's default StorageClass with our provisioner (one definition for both)."""
    body = copy.deepcopy(DEFAULT_STORAGE_CLASS)
    body.update(apiVersion="storage.k8s.io/v1", kind="StorageClass", provisioner=PROVISIONER)
    return body


def volume_for(claim: dict[str, Any], klass: dict[str, Any]) -> dict[str, Any]:
    """The PV an external provisioner creates for the claim: pre-bound to it by claimRef."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    name = f"pvc-{meta['uid']}"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {
                "storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
            },
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "storageClassName": klass["metadata"]["name"],
            "persistentVolumeReclaimPolicy": klass.get("reclaimPolicy") or "Delete",
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "hostPath": {"path": f"/var/lib/qonnect-testbed/{name}", "type": "DirectoryOrCreate"},
        },
    }


class Provisioner:
    """Provisions and deletes the volumes of our StorageClasses in one real cluster."""

    def __init__(self, api: KubeApi, cluster: str) -> None:
        self.api = api
        self.cluster = cluster
        self._loops: list[asyncio.Task[None]] = []
        self._asked: set[str] = set()  # claim uids a PV was created for (forgotten on deletion)

    async def start(self) -> None:
        """The default class (kept if it exists: set-up is repeated on restart), then the watches."""
        await self.api.ensure(CLASSES, storage_class())
        self._loops = [
            asyncio.create_task(self._watch("/api/v1/persistentvolumeclaims", self._claim)),
            asyncio.create_task(self._watch("/api/v1/persistentvolumes", self._volume)),
        ]

    async def stop(self) -> None:
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops = []

    async def _watch(self, path: str, handle: Callable[[str, dict[str, Any]], Any]) -> None:
        """List, then watch; (re)list after errors and expired resource versions."""
        pause = 1.0
        while True:
            try:
                listed = await self.api.get(path)
                for obj in listed.get("items") or []:
                    await handle("ADDED", obj)
                pause = 1.0
                async for event in self.api.watch(path, listed["metadata"]["resourceVersion"]):
                    kind = str(event.get("type"))
                    if kind == "ERROR":
                        break  # e.g. 410 Gone: list again
                    if kind != "BOOKMARK":
                        await handle(kind, event.get("object") or {})
            except KubeApiError as exc:
                log.debug("%s: watch %s: %s", self.cluster, path, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX)
            except asyncio.CancelledError:
                raise
            except Exception:  # a simulator bug must not stop provisioning for ever
                log.exception("%s: watch %s failed", self.cluster, path)
                await asyncio.sleep(RETRY_MAX)

    async def _claim(self, kind: str, claim: dict[str, Any]) -> None:
        meta, spec = claim["metadata"], claim.get("spec") or {}
        if kind == "DELETED":
            self._asked.discard(meta["uid"])
            return
        if (
            meta["uid"] in self._asked
            or meta.get("deletionTimestamp")
            or spec.get("volumeName")
            or not spec.get("storageClassName")
            or (claim.get("status") or {}).get("phase") not in (None, "Pending")
            or (meta.get("annotations") or {}).get(ASKED_OF) != PROVISIONER
        ):
            return  # the PV controller asks a provisioner only when no existing volume fits
        try:
            klass = await self.api.get(f"{CLASSES}/{spec['storageClassName']}")
        except KubeApiError as exc:
            if exc.code != 404:
                raise
            return  # no such class: Pending, as on a real cluster
        if klass.get("provisioner") != PROVISIONER:
            return
        try:
            await self.api.create("/api/v1/persistentvolumes", volume_for(claim, klass))
        except KubeApiError as exc:
            if exc.code != 409:  # 409: made before a restart of the watch
                raise
        self._asked.add(meta["uid"])

    async def _volume(self, kind: str, volume: dict[str, Any]) -> None:
        meta, spec = volume["metadata"], volume.get("spec") or {}
        if (
            kind == "DELETED"
            or meta.get("deletionTimestamp")
            or (meta.get("annotations") or {}).get(PROVISIONED_BY) != PROVISIONER
            or spec.get("persistentVolumeReclaimPolicy") != "Delete"
            or (volume.get("status") or {}).get("phase") != "Released"
        ):
            return
        try:
            await self.api.delete(
                f"/api/v1/persistentvolumes/{meta['name']}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta["uid"]}},
            )
        except KubeApiError as exc:
            if exc.code not in (404, 409):
                raise
