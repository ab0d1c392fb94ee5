"""One read of a cluster shared by every application a pass looks at (the controller's self-heal).

The drift check reads, per application and cluster, its namespace and the objects of the kinds
it renders. Done per application, a pass every 5 s made requests in proportion to the number of
applications, and an idle leader's CPU grew with them (issue 38: 0.095 of a core at 100
one-Deployment applications, most of it in these reads). ``SharedReads`` lists each kind once
per cluster per pass instead - only the objects qonnect labelled (``qonnect.io/application``), in
every namespace - and answers every application's ``get`` and ``list`` from that list.

The list is partial on purpose: a team's Secrets or Helm releases never pass through it. A
wanted object missing from it may still exist unlabelled (a foreign object in the way), so
``get`` asks the cluster for anything the list does not hold, and the deployer asks ``get`` for
each wanted object a partial list lacked (``PARTIAL_LISTS``): a foreign object is never taken
for a missing one. A cluster that refuses a list across namespaces (RBAC limited to some
namespaces) is read per namespace as before. Writes go to the cluster and drop the kind's list.

Across passes (``known``): a list whose items came back byte for byte as the last pass read them
is not decoded again, and its ``digest`` tells the self-heal pass that nothing of that kind
changed on the cluster, so an application whose last check found nothing there, under the same
spec and placement, needs no new check (controller/selfheal.py). On an idle fleet of 1,000
applications these decodes and checks were most of the leader's CPU (issue 38).
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeAlias

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL

# the attribute a client sets when its ``list`` may leave out unlabelled objects
PARTIAL_LISTS = "partial_lists"

Index: TypeAlias = "dict[str | None, dict[str, dict]]"  # namespace -> name -> object


def _indexed(items: list[dict]) -> Index:
    index: Index = {}
    for o in items:
        index.setdefault((o.get("metadata") or {}).get("namespace"), {})[o["metadata"]["name"]] = o
    return index


def _items_digest(body: bytes) -> str:
    """A digest of a list's items as sent: the list's own ``resourceVersion`` (before its items,
    as the API server and the emulator write it) moves with any write anywhere on the cluster."""
    start = body.find(b'"items":')
    return hashlib.blake2b(body[start:] if start >= 0 else body, digest_size=16).hexdigest()


class SharedReads:
    """A cluster client whose reads of qonnect's own objects come from one list per kind."""

    partial_lists = True

    def __init__(self, client: Any, known: dict[tuple[str, str], tuple[str, Index]] | None = None) -> None:
        self.client = client
        # (apiVersion, kind) -> {namespace: {name: object}}; None: the cluster refused the list
        self._lists: dict[tuple[str, str], Index | None] = {}
        # (apiVersion, kind) -> (digest of its items, their index) as an earlier pass read them
        self.known = {} if known is None else known
        self.digests: dict[tuple[str, str], str | None] = {}  # this pass's, None: not comparable
        self.consulted: set[tuple[str, str]] = set()  # the lists read since ``begin``
        self.fallbacks = 0  # reads since ``begin`` the lists could not answer
        self.requests = 0  # reads sent to the cluster (the tests' and benchmarks' count)

    def __getattr__(self, name: str) -> Any:  # name, resource, namespaced_kinds, ...
        return getattr(self.client, name)

    def begin(self) -> None:
        """Start counting what one check reads (``consulted``, ``fallbacks``)."""
        self.consulted, self.fallbacks = set(), 0

    def digest(self, api_version: str, kind: str) -> str | None:
        """The digest of the kind's list this pass (read now if not yet); None when it cannot
        be compared with another pass's (refused, or a client that gives no raw body)."""
        self._index(api_version, kind)
        return self.digests.get((api_version, kind))

    def _index(self, api_version: str, kind: str) -> Index | None:
        key = (api_version, kind)
        self.consulted.add(key)
        if key not in self._lists:
            self.requests += 1
            try:
                self._lists[key] = self._read(key)
            except K8sError as exc:
                if exc.status not in (401, 403):
                    raise
                self._lists[key] = None  # not allowed across namespaces: read as asked
                self.digests[key] = None
        return self._lists[key]

    def _read(self, key: tuple[str, str]) -> Index:
        """The kind's labelled objects across namespaces, decoded only when they changed."""
        read_body = getattr(self.client, "list_body", None)
        if read_body is None:
            self.digests[key] = None
            return _indexed(self.client.list(*key, None, label_selector=APP_LABEL))
        body = read_body(*key, None, label_selector=APP_LABEL)
        found = _items_digest(body)
        self.digests[key] = found
        seen = self.known.get(key)
        if seen is not None and seen[0] == found:
            return seen[1]
        index = _indexed(self.client.list_items(body, *key))
        self.known[key] = (found, index)
        return index

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        """qonnect's objects of a kind (in ``namespace``); other selectors go to the cluster."""
        index = None if label_selector else self._index(api_version, kind)
        if index is None:
            self.requests += 1
            self.fallbacks += 1
            return self.client.list(api_version, kind, namespace, label_selector=label_selector)
        spaces = index.values() if namespace is None else [index.get(namespace) or {}]
        return [json_copy(o) for objects in spaces for o in objects.values()]

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The object from the shared list, else from the cluster (it may be unlabelled)."""
        index = self._index(api_version, kind)
        found = None if index is None else (index.get(namespace) or {}).get(name)
        if found is not None:
            return json_copy(found)
        self.requests += 1
        self.fallbacks += 1
        return self.client.get(api_version, kind, name, namespace)

    def apply(self, obj: dict, dry_run: bool = False) -> dict:
        result = self.client.apply(obj, dry_run)
        if not dry_run:
            self._forget((obj["apiVersion"], obj["kind"]))
        return result

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        gone = self.client.delete(api_version, kind, name, namespace)
        self._forget((api_version, kind))
        return gone

    def _forget(self, key: tuple[str, str]) -> None:
        """After a write: the kind is read afresh, and compared with no earlier pass."""
        self._lists.pop(key, None)
        self.digests.pop(key, None)
        self.known.pop(key, None)


def json_copy(value: Any) -> Any:
    """A copy of a decoded JSON value (dicts, lists, scalars): each caller may change its own,
    the list stays as the cluster sent it. About 2.4 times cheaper than ``copy.deepcopy``,
    which the drift check of every application paid for every object it read."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value
