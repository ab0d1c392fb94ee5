"""The object store of one emulated Kubernetes cluster: objects, resourceVersions and watches.

It plays the part etcd plus the generic registry play in a real API server: it assigns uid,
creationTimestamp, generation and a cluster-wide resourceVersion, applies the defaults
(defaults.py) and validation (validation.py) real servers apply, enforces optimistic
concurrency, cascades deletes through ownerReferences and namespaces, filters by label and
field selectors (selectors.py), and keeps a short event history so that watches can resume from
a resourceVersion. The API server app and the simulation controllers both go through these
methods, so the simulation changes objects exactly as a client would.

Stored objects are never mutated in place (every write stores a new dict), which lets the API
server serialise them without copying; the public methods hand out copies.
"""

from __future__ import annotations

import base64
import binascii
import collections
import ipaddress
import json
import uuid
from typing import Callable, Iterator

from qonnect_testbed.quantities import UPSTREAM_PATTERN, canonicalise
from qonnect_testbed.store import crds, selectors
from qonnect_testbed.store.admission import Admission
from qonnect_testbed.store.defaults import (
    DEFAULT_STORAGE_CLASS,
    TOLERATED_TAINTS,
    apply_defaults,
    job_selector,
)
from qonnect_testbed.store.errors import ApiError, invalid
from qonnect_testbed.store.resources import INITIAL_NAMESPACES, RESOURCES, ResourceType
from qonnect_testbed.store.validation import validate
from qonnect_testbed.store.values import json_copy, now_rfc3339

Callback = Callable[[str, str, dict], None]
_PROTECTED_NAMESPACES = frozenset(("default", "kube-system", "kube-public"))
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_Key = tuple[str, str]  # namespace ("" for cluster-scoped), name
Event = tuple[int, str, str, dict]  # resourceVersion, type, resource, stored object


class Store(Admission):
    """All objects of one emulated cluster; synchronous, used from one asyncio loop."""

    def __init__(self, cluster_name: str, *, history: int = 1000, root_ca: str = "") -> None:
        self.cluster_name = cluster_name
        self.root_ca = root_ca
        # DefaultTolerationSeconds of new pods (kube-apiserver --default-*-toleration-seconds)
        self.toleration_seconds = dict.fromkeys(TOLERATED_TAINTS, 300)
        # Called with a namespace's name when it starts terminating; None: clean it up at once.
        self.namespace_terminating: Callable[[str], None] | None = None
        # the served types: the built-ins, plus the custom resources of this cluster's CRDs
        self.types: dict[str, ResourceType] = dict(RESOURCES)
        self._objects: dict[str, dict[_Key, dict]] = {r: {} for r in RESOURCES}
        self._rv = 0
        self._history: collections.deque[Event] = collections.deque(maxlen=history)
        self._oldest_rv = 0  # events after this rv are all still in the history
        self._subscribers: list[tuple[Callback, bool]] = []
        self._encoded: dict[int, tuple[dict, bytes]] = {}  # id(stored object) -> (object, its JSON)
        self._ips = ipaddress.ip_network("10.96.0.0/12").hosts()
        next(self._ips)  # 10.96.0.1 is the kubernetes service's address
        for name in INITIAL_NAMESPACES:
            self.create("namespaces", None, {"metadata": {"name": name}})
        self.create("storageclasses", None, DEFAULT_STORAGE_CLASS)

    def resource_type(self, resource: str) -> ResourceType:
        """The served type of a store table name, or 404 NotFound like a real server."""
        rt = self.types.get(resource)
        if rt is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({resource})")
        return rt

    # ----------------------------------------------------------------- reads

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, resource: str, namespace: str | None, name: str) -> dict:
        """A copy of one object; 404 NotFound if absent."""
        return json_copy(self.get_ref(resource, namespace, name))

    def get_ref(self, resource: str, namespace: str | None, name: str) -> dict:
        """The stored object itself (read-only: the server serialises it without a copy)."""
        rt = self.resource_type(resource)
        obj = self._objects[resource].get(self._key(rt, namespace, name))
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{rt.qualified} "{name}" not found',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        return obj

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict], str]:
        """Copies of the matching objects, sorted by namespace and name, and the list resourceVersion."""
        items, rv, _continuation = self.list_refs(resource, namespace, label_selector, field_selector)
        return [json_copy(o) for o in items], rv

    def list_refs(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[list[dict], str, tuple[str, int] | None]:
        """Stored objects matching the selectors, one page of them if limit is set.

        Returns (items, resourceVersion, (continue token, remaining count) or None).
        """
        rt = self.resource_type(resource)
        matcher = self.matcher(resource, label_selector, field_selector)
        start: _Key | None = None
        if continue_token:
            start = self._decode_continue(continue_token)
        table = self._objects[resource]
        keys = sorted(table)
        if rt.namespaced and namespace:
            keys = [k for k in keys if k[0] == namespace]
        if start is not None:
            keys = [k for k in keys if k > start]
        items: list[dict] = []
        more: tuple[str, int] | None = None
        last: _Key | None = None
        for i, key in enumerate(keys):
            obj = table[key]
            if not matcher(obj):
                continue
            if limit and len(items) == limit and last is not None:
                remaining = sum(1 for k in keys[i:] if matcher(table[k]))
                more = (self._encode_continue(last), remaining)
                break
            items.append(obj)
            last = key
        return items, str(self._rv), more

    def matcher(
        self, resource: str, label_selector: str | None, field_selector: str | None
    ) -> Callable[[dict], bool]:
        """A predicate for the selectors (parsed once; 400 BadRequest if malformed)."""
        return selectors.matcher(resource, label_selector, field_selector)

    def _encode_continue(self, last: _Key) -> str:
        payload = {"rv": self._rv, "ns": last[0], "name": last[1]}
        return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()

    @staticmethod
    def _decode_continue(token: str) -> _Key:
        try:
            payload = json.loads(base64.urlsafe_b64decode(token.encode()))
            return (str(payload["ns"]), str(payload["name"]))
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise ApiError(
                400, "BadRequest", "continue key is not valid: expected a token from a previous list"
            ) from None

    def encoded(self, resource: str, obj: dict) -> bytes:
        """Compact JSON of a stored object, cached until the object is replaced or deleted."""
        hit = self._encoded.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        data = json.dumps(obj, separators=(",", ":")).encode()
        meta = obj.get("metadata", {})
        rt = self.types.get(resource)
        if (
            rt is not None
            and self._objects[resource].get(self._key(rt, meta.get("namespace"), meta.get("name", ""))) is obj
        ):
            self._encoded[id(obj)] = (obj, data)
        return data

    def events_since(self, resource: str, resource_version: int) -> list[Event]:
        """History events of resource after resource_version; 410 Expired if they were dropped."""
        if resource_version < self._oldest_rv:
            raise ApiError(
                410, "Expired", f"too old resource version: {resource_version} ({self._oldest_rv})"
            )
        return [e for e in self._history if e[0] > resource_version and e[2] == resource]

    # ----------------------------------------------------------------- writes

    def create(self, resource: str, namespace: str | None, obj: dict, *, dry_run: bool = False) -> dict:
        """Store a new object (uid, creationTimestamp, generation, resourceVersion, defaults)."""
        rt = self.resource_type(resource)
        obj = self._prepare(rt, namespace, obj)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name(rt, namespace, str(meta["generateName"]))
        if not meta.get("name"):
            raise invalid(
                rt.kind, "", [("metadata.name", "Required value: name or generateName is required")]
            )
        if rt.namespaced:
            self._require_namespace(namespace or "", rt, meta["name"])
        apply_defaults(resource, obj, self.allocate_cluster_ip)
        self._admit_new(resource, obj, namespace or "")
        validate(rt, obj)
        key = self._key(rt, namespace, meta["name"])
        existing = self._objects[resource].get(key)
        if existing is not None:
            being_deleted = (
                "object is being deleted: " if existing["metadata"].get("deletionTimestamp") else ""
            )
            raise ApiError(
                409,
                "AlreadyExists",
                f'{being_deleted}{rt.qualified} "{meta["name"]}" already exists',
                {"name": meta["name"], "group": rt.group, "kind": rt.plural},
            )
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        if resource == "jobs":
            job_selector(obj)
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        self._admit_checked(resource, obj, namespace or "")
        if dry_run:
            meta["resourceVersion"] = str(self._rv)
            return obj
        self._commit(rt, key, obj, "ADDED")
        self._after_write(resource, namespace or "", obj, None)
        if resource == "namespaces":
            self.create("serviceaccounts", meta["name"], {"metadata": {"name": "default"}})
            if self.root_ca:  # the root-ca-cert-publisher's ConfigMap
                self.create(
                    "configmaps",
                    meta["name"],
                    {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": self.root_ca}},
                )
        return json_copy(obj)

    def update(
        self,
        resource: str,
        namespace: str | None,
        obj: dict,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        """Replace an object; stale resourceVersion -> 409 Conflict; "status" changes only status.

        An update that changes nothing keeps the resourceVersion and sends no event, as real
        servers do. generation grows when anything outside metadata and status changes.
        """
        rt = self.resource_type(resource)
        obj = self._prepare(rt, namespace, obj)
        meta = obj["metadata"]
        name = meta.get("name")
        if not name:
            raise invalid(rt.kind, "", [("metadata.name", "Required value: name is required")])
        old = self.get_ref(resource, namespace, name)
        old_meta = old["metadata"]
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv not in (None, "") and str(wanted_rv) != old_meta["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        if meta.get("uid") not in (None, "", old_meta["uid"]):
            raise invalid(rt.kind, name, [("metadata.uid", "Invalid value: field is immutable")])
        if subresource == "status":
            new = dict(old)
            new["status"] = obj.get("status", {})
            new["metadata"] = dict(old_meta)
        elif subresource is None:
            new = obj
            for field in (
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ):
                if field in old_meta:
                    meta[field] = old_meta[field]
            _keep_allocations(resource, new, old)
            apply_defaults(
                resource, new, self.allocate_cluster_ip
            )  # real servers default every write, not just creates
            if "status" in rt.subresources:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if "managedFields" not in meta and "managedFields" in old_meta:
                meta["managedFields"] = old_meta["managedFields"]
            if _spec_part(new) != _spec_part(old):
                meta["generation"] = old_meta.get("generation", 1) + 1
            validate(rt, new)
        else:
            raise ApiError(
                404,
                "NotFound",
                f"the server could not find the requested resource ({resource}/{subresource})",
            )
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if _same(new, old):
            return json_copy(old)
        if dry_run:
            return new
        key = self._key(rt, namespace, name)
        if (
            new["metadata"].get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and not (resource == "namespaces" and (new.get("spec") or {}).get("finalizers"))
        ):
            self._commit(rt, key, new, "MODIFIED")
            return json_copy(self._remove(rt, key, cascade=True))  # the last finalizer went
        self._commit(rt, key, new, "MODIFIED")
        self._after_write(resource, namespace or "", new, old)
        return json_copy(new)

    def delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
        dry_run: bool = False,
        precondition_uid: str | None = None,
        precondition_rv: str | None = None,
    ) -> dict:
        """Remove an object and (unless propagation is Orphan) its dependents and namespace contents."""
        rt = self.resource_type(resource)
        obj = self.get_ref(resource, namespace, name)
        meta = obj["metadata"]
        if precondition_uid and precondition_uid != meta["uid"]:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {precondition_uid}, UID in object meta: {meta['uid']}",
            )
        if precondition_rv and precondition_rv != meta["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: ResourceVersion in precondition: {precondition_rv}, "
                f"ResourceVersion in object meta: {meta['resourceVersion']}",
            )
        if resource == "namespaces" and name in _PROTECTED_NAMESPACES:
            raise ApiError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                {"name": name, "kind": "namespaces"},
            )
        gone = dict(obj)
        gone["metadata"] = dict(meta, deletionTimestamp=now_rfc3339())
        if resource == "namespaces" and meta.get("deletionTimestamp"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on namespaces "{name}": The system is '
                "ensuring all content is removed from this namespace.  Upon completion, this namespace "
                "will automatically be purged by the system.",
                {"name": name, "kind": "namespaces"},
            )
        if dry_run:
            return json_copy(gone)
        key = self._key(rt, namespace, name)
        if resource == "namespaces":
            gone["metadata"]["deletionGracePeriodSeconds"] = 0
            gone["status"] = dict(gone.get("status") or {}, phase="Terminating")
            self._commit(rt, key, gone, "MODIFIED")
            if self.namespace_terminating is not None:
                self.namespace_terminating(name)
            else:
                self.finalize_namespace(name)
            return json_copy(self._objects[resource].get(key, gone))
        if meta.get("finalizers"):  # marked for deletion; gone when the last finalizer is removed
            if meta.get("deletionTimestamp"):
                return json_copy(obj)
            gone["metadata"]["deletionGracePeriodSeconds"] = 0
            self._commit(rt, key, gone, "MODIFIED")
            return json_copy(gone)
        deleted = self._remove(rt, key, cascade=propagation != "Orphan")
        return json_copy(deleted)

    def finalize_namespace(self, name: str) -> bool:
        """The namespace controller's pass over a Terminating namespace: delete its content;
        once nothing is left, remove the namespace. Returns True when it is gone."""
        rt = self.types["namespaces"]
        ns = self._objects["namespaces"].get(("", name))
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return ns is None
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        for other, table in self._objects.items():
            if other not in self.types or not self.types[other].namespaced:
                continue
            for key in [k for k in table if k[0] == name]:
                obj = table.get(key)
                if obj is None:
                    continue
                if not obj["metadata"].get("deletionTimestamp"):
                    self.delete(other, name, key[1])
                obj = table.get(key)
                if obj is not None:
                    remaining[other] = remaining.get(other, 0) + 1
                    for fin in obj["metadata"].get("finalizers") or []:
                        finalizers[fin] = finalizers.get(fin, 0) + 1
        if not remaining:
            self._remove(rt, ("", name), cascade=False)
            return True
        stamp = now_rfc3339()
        content = ", ".join(f"{r}. has {n} resource instances" for r, n in sorted(remaining.items()))
        fins = ", ".join(f"{f} in {n} resource instances" for f, n in sorted(finalizers.items()))
        conditions = [
            {
                "type": "NamespaceDeletionDiscoveryFailure",
                "status": "False",
                "reason": "ResourcesDiscovered",
                "message": "All resources successfully discovered",
                "lastTransitionTime": stamp,
            },
            {
                "type": "NamespaceDeletionGroupVersionParsingFailure",
                "status": "False",
                "reason": "ParsedGroupVersions",
                "message": "All legacy kube types successfully parsed",
                "lastTransitionTime": stamp,
            },
            {
                "type": "NamespaceDeletionContentFailure",
                "status": "False",
                "reason": "ContentDeleted",
                "message": "All content successfully deleted, may be waiting on finalization",
                "lastTransitionTime": stamp,
            },
            {
                "type": "NamespaceContentRemaining",
                "status": "True",
                "reason": "SomeResourcesRemain",
                "message": f"Some resources are remaining: {content}",
                "lastTransitionTime": stamp,
            },
            {
                "type": "NamespaceFinalizersRemaining",
                "status": "True" if finalizers else "False",
                "reason": "SomeFinalizersRemain" if finalizers else "ContentHasNoFinalizers",
                "message": f"Some content in the namespace has finalizers remaining: {fins}"
                if finalizers
                else "All content-preserving finalizers finished",
                "lastTransitionTime": stamp,
            },
        ]
        old = {c["type"]: c for c in (ns.get("status") or {}).get("conditions") or []}
        for cond in conditions:
            before = old.get(cond["type"])
            if before and before.get("status") == cond["status"]:
                cond["lastTransitionTime"] = before.get("lastTransitionTime", stamp)
        if [dict(c, lastTransitionTime=None) for c in conditions] != [
            dict(c, lastTransitionTime=None) for c in (ns.get("status") or {}).get("conditions") or []
        ]:
            new = dict(ns, status={"phase": "Terminating", "conditions": conditions})
            self._commit(rt, ("", name), new, "MODIFIED")
        return False

    def subscribe(self, callback: Callback, *, copy: bool = True) -> Callable[[], None]:
        """Call callback(event_type, resource, obj) after every change; returns unsubscribe.

        With copy=False obj is the stored object itself and must not be modified.
        """
        entry = (callback, copy)
        self._subscribers.append(entry)

        def unsubscribe() -> None:
            if entry in self._subscribers:
                self._subscribers.remove(entry)

        return unsubscribe

    def allocate_cluster_ip(self) -> str:
        """The next free Service clusterIP from 10.96.0.0/12."""
        return str(next(self._ips))

    # ----------------------------------------------------------------- internals

    def _prepare(self, rt: ResourceType, namespace: str | None, obj: dict) -> dict:
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", f"the body of a {rt.kind} must be a JSON object")
        obj = json_copy(obj)
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata: expected an object")
        if rt.namespaced:
            if not namespace:
                raise ApiError(400, "BadRequest", f"a namespace is required for {rt.plural}")
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        for field, expected in (("kind", rt.kind), ("apiVersion", rt.api_version)):
            if obj.get(field) not in (None, "", expected):
                raise ApiError(
                    400,
                    "BadRequest",
                    f"{field}: expected {expected!r} for {rt.plural}, got {obj.get(field)!r}",
                )
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version
        if canonicalise(rt.kind, rt.api_version, obj):
            raise ApiError(
                400,
                "BadRequest",
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"quantities must match the regular expression '{UPSTREAM_PATTERN}'",
            )
        if rt.plural == "secrets" and isinstance(obj.get("stringData"), dict):
            # real servers fold write-only stringData into base64 data
            data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
            for key, value in obj.pop("stringData").items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            obj["data"] = data
        return obj

    def _require_service_account(self, pod: dict, namespace: str) -> None:
        """The ServiceAccount admission plugin: a pod's service account must exist (403)."""
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        if (namespace, account) in self._objects["serviceaccounts"]:
            return
        meta = pod["metadata"]
        shown = meta.get("generateName") or meta.get("name", "")
        raise ApiError(
            403,
            "Forbidden",
            f'pods "{shown}" is forbidden: error looking up service account '
            f'{namespace}/{account}: serviceaccount "{account}" not found',
            {"name": shown, "kind": "pods"},
        )

    def _require_namespace(self, namespace: str, rt: ResourceType | None = None, name: str = "") -> None:
        ns = self._objects["namespaces"].get(("", namespace))
        if ns is None:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        if ns["metadata"].get("deletionTimestamp") and rt is not None:
            # the NamespaceLifecycle admission plugin
            raise ApiError(
                403,
                "Forbidden",
                f'{rt.qualified} "{name}" is forbidden: unable to create new content in namespace '
                f"{namespace} because it is being terminated",
                {
                    "name": name,
                    "group": rt.group,
                    "kind": rt.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _generate_name(self, rt: ResourceType, namespace: str | None, prefix: str) -> str:
        table = self._objects[rt.key]
        for _attempt in range(100):
            suffix = "".join(_GENERATE_CHARS[b % len(_GENERATE_CHARS)] for b in uuid.uuid4().bytes[:5])
            name = prefix[:58] + suffix
            if self._key(rt, namespace, name) not in table:
                return name
        raise ApiError(500, "AlreadyExists", f"could not generate a unique name for {prefix!r}")

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> _Key:
        return ((namespace or "") if rt.namespaced else "", name)

    def _commit(self, rt: ResourceType, key: _Key, obj: dict, event: str) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        old = self._objects[rt.key].get(key)
        if old is not None:
            self._encoded.pop(id(old), None)
        if event == "DELETED":
            self._objects[rt.key].pop(key, None)
        else:
            self._objects[rt.key][key] = obj
        if len(self._history) == self._history.maxlen:
            self._oldest_rv = self._history[0][0]
        self._history.append((self._rv, event, rt.key, obj))
        for callback, copy in list(self._subscribers):
            callback(event, rt.key, json_copy(obj) if copy else obj)

    def _remove(self, rt: ResourceType, key: _Key, *, cascade: bool) -> dict:
        obj = self._objects[rt.key].get(key)
        if obj is None:
            return {}
        gone = dict(obj)
        gone["metadata"] = dict(obj["metadata"], deletionTimestamp=now_rfc3339())
        self._commit(rt, key, gone, "DELETED")
        if rt.key == crds.CRDS:
            self._unserve_crd(obj)
        elif rt.key == "pods":
            self._refresh_quotas(key[0])
        if cascade:
            for dep_rt, dep_key in list(self._dependents(obj)):
                self._remove(dep_rt, dep_key, cascade=True)
        return gone

    def _dependents(self, owner: dict) -> Iterator[tuple[ResourceType, _Key]]:
        uid = owner["metadata"]["uid"]
        namespace = owner["metadata"].get("namespace", "")
        for plural, table in self._objects.items():
            rt = self.types.get(plural)
            if rt is None:
                continue
            for key, obj in table.items():
                if rt.namespaced and namespace and key[0] != namespace:
                    continue
                refs = obj["metadata"].get("ownerReferences") or ()
                if any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
                    yield rt, key


def _keep_allocations(resource: str, new: dict, old: dict) -> None:
    """Values the server allocated stay when an update leaves them out (a Service's clusterIP;
    not when it becomes an ExternalName Service, which has none)."""
    if (
        resource == "services"
        and isinstance(new.get("spec"), dict)
        and new["spec"].get("type") != "ExternalName"
    ):
        for field in ("clusterIP", "clusterIPs"):
            if field in (old.get("spec") or {}):
                new["spec"].setdefault(field, old["spec"][field])


def _spec_part(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _without_managed_fields(obj: dict) -> dict:
    return dict(obj, metadata={k: v for k, v in obj["metadata"].items() if k != "managedFields"})


def _untimed_managed_fields(obj: dict) -> list:
    return [dict(e, time=None) for e in obj["metadata"].get("managedFields") or [] if isinstance(e, dict)]


def _same(new: dict, old: dict) -> bool:
    """Equal apart from managedFields timestamps (a no-op write)."""
    if new == old:
        return True
    if _without_managed_fields(new) != _without_managed_fields(old):
        return False
    return _untimed_managed_fields(new) == _untimed_managed_fields(old)
