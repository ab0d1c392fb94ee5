"""The admission and follow-up of writes that involve other objects of the store: default
StorageClass, ResourceQuota, CustomResourceDefinitions (mixed into Store, objects.py)."""

from __future__ import annotations

from typing import Any, Callable

from qonnect_testbed.store import crds, quota
from qonnect_testbed.store.defaults import admit_pod, default_storage_class, protect_claim
from qonnect_testbed.store.errors import invalid
from qonnect_testbed.store.resources import RESOURCES


class Admission:
    """Store methods: what real servers' admission plugins and controllers do around a write."""

    # the Store's state and steps these methods use (objects.py); declared, not inherited, so no
    # type checker or linter sees a class that derives from its own subclass
    _objects: Any
    types: Any
    toleration_seconds: Any
    _commit: Callable[..., Any]
    _remove: Callable[..., Any]
    _require_service_account: Callable[..., Any]

    def _admit_new(self, resource: str, obj: dict, namespace: str) -> None:
        """The mutating admission of a create: what real servers' plugins add."""
        if resource == "pods":
            admit_pod(obj, self.toleration_seconds)
            self._require_service_account(obj, namespace)
        elif resource == "persistentvolumeclaims":
            default_storage_class(obj, self._objects["storageclasses"].values())
            protect_claim(obj)
        elif resource == crds.CRDS:
            crds.default_crd(obj)
        elif resource == "resourcequotas":
            obj["status"] = quota.status_of(obj, self._in_namespace("pods", namespace))

    def _admit_checked(self, resource: str, obj: dict, namespace: str) -> None:
        """The validating admission of a create (after validation): quota, CRD names."""
        quotas = self._in_namespace("resourcequotas", namespace) if resource == "pods" else []
        if quotas:
            quota.admit(obj, quotas, self._in_namespace("pods", namespace))
        if resource == crds.CRDS:
            self._check_crd(obj)

    def _after_write(self, resource: str, namespace: str, new: dict, old: dict | None) -> None:
        """What follows a stored write: a CRD's resource is served; quota usage follows pods."""
        if resource == crds.CRDS:
            self._serve_crd(new)
        elif resource == "pods" and (
            old is None or (new.get("status") or {}).get("phase") != (old.get("status") or {}).get("phase")
        ):
            self._refresh_quotas(namespace)

    def _in_namespace(self, resource: str, namespace: str) -> list[dict]:
        return [o for k, o in self._objects[resource].items() if k[0] == namespace]

    def _refresh_quotas(self, namespace: str) -> None:
        """The quota controller: each ResourceQuota's status.used follows the namespace's pods."""
        quotas = [(k, o) for k, o in self._objects["resourcequotas"].items() if k[0] == namespace]
        if not quotas:
            return
        pods = self._in_namespace("pods", namespace)
        rt = self.types["resourcequotas"]
        for key, old in quotas:
            if old["metadata"].get("deletionTimestamp"):
                continue
            status = quota.status_of(old, pods)
            if status != old.get("status"):
                self._commit(rt, key, dict(old, status=status), "MODIFIED")

    def _check_crd(self, crd: dict) -> None:
        """422 Invalid unless the CRD names a group, plural, kind and a storage version."""
        rt = crds.served_type(crd)
        name = crd["metadata"]["name"]
        if rt is None:
            raise invalid(
                "CustomResourceDefinition",
                name,
                [("spec", "Invalid value: group, names and versions are required")],
            )
        if name != rt.key:
            raise invalid(
                "CustomResourceDefinition",
                name,
                [("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group')],
            )

    def _serve_crd(self, crd: dict) -> None:
        rt = crds.served_type(crd)
        if rt is not None:
            self.types[rt.key] = rt
            self._objects.setdefault(rt.key, {})

    def _unserve_crd(self, crd: dict) -> None:
        """A deleted CRD takes its custom resources with it."""
        rt = crds.served_type(crd)
        if rt is None or rt.key not in self.types or rt.key in RESOURCES:
            return
        for key in list(self._objects.get(rt.key, {})):
            self._remove(rt, key, cascade=True)
        del self.types[rt.key]
        self._objects.pop(rt.key, None)
