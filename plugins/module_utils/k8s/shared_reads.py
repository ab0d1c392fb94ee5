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
"""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL

# the attribute a client sets when its ``list`` may leave out unlabelled objects
PARTIAL_LISTS = "partial_lists"


class SharedReads:
    """A cluster client whose reads of qonnect's own objects come from one list per kind."""

    partial_lists = True

    def __init__(self, client: Any) -> None:
        self.client = client
        # (apiVersion, kind) -> {(namespace, name): object}; None: the cluster refused the list
        self._lists: dict[tuple[str, str], dict[tuple[str | None, str], dict] | None] = {}
        self.requests = 0  # reads sent to the cluster (the tests' and benchmarks' count)

    def __getattr__(self, name: str) -> Any:  # name, resource, namespaced_kinds, ...
        return getattr(self.client, name)

    def _index(self, api_version: str, kind: str) -> dict[tuple[str | None, str], dict] | None:
        key = (api_version, kind)
        if key not in self._lists:
            self.requests += 1
            try:
                items = self.client.list(api_version, kind, None, label_selector=APP_LABEL)
            except K8sError as exc:
                if exc.status not in (401, 403):
                    raise
                self._lists[key] = None  # not allowed across namespaces: read as asked
                return None
            self._lists[key] = {
                ((o.get("metadata") or {}).get("namespace"), o["metadata"]["name"]): o for o in items
            }
        return self._lists[key]

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        """qonnect's objects of a kind (in ``namespace``); other selectors go to the cluster."""
        index = None if label_selector else self._index(api_version, kind)
        if index is None:
            self.requests += 1
            return self.client.list(api_version, kind, namespace, label_selector=label_selector)
        return [copy.deepcopy(o) for (ns, _name), o in index.items() if namespace is None or ns == namespace]

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The object from the shared list, else from the cluster (it may be unlabelled)."""
        index = self._index(api_version, kind)
        found = None if index is None else index.get((namespace, name))
        if found is not None:
            return copy.deepcopy(found)
        self.requests += 1
        return self.client.get(api_version, kind, name, namespace)

    def apply(self, obj: dict, dry_run: bool = False) -> dict:
        result = self.client.apply(obj, dry_run)
        if not dry_run:
            self._lists.pop((obj["apiVersion"], obj["kind"]), None)
        return result

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        gone = self.client.delete(api_version, kind, name, namespace)
        self._lists.pop((api_version, kind), None)
        return gone
