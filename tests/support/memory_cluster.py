"""An in-memory stand-in for a cluster's API (``ClusterClient``'s reads and writes): the unit
tests' fake, held to the real client's behaviour by tests/integration/kube/test_cluster_client_contract.py."""

from __future__ import annotations

import copy
import json

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError


class MemoryCluster:
    """Enough of the Kubernetes API for the deployer: SSA as replace, labels, instant readiness.

    `log` records every write as (cluster, verb, kind, name) so tests can check ordering.
    `ready` False keeps Deployments unready; `down` makes every call fail as unreachable.
    """

    def __init__(self, name: str, log: list):
        self.name = name
        self.log = log
        self.objects: dict[tuple, dict] = {}
        self.ready = True
        self.down = False
        self.rv = 0
        # A deleted namespace stays Terminating for this many reads of it (a real cluster's
        # namespace controller first deletes its content); creates in it are refused meanwhile.
        self.terminate_reads = 0
        self._terminating: dict[str, int] = {}

    def _check(self):
        if self.down:
            raise K8sError(self.name, "unreachable (connection refused)", 0)

    def _key(self, api_version, kind, name, namespace):
        return (api_version, kind, namespace if kind != "Namespace" else None, name)

    def resource(self, api_version, kind):
        """Discovery: every kind is served unless listed in ``unserved``."""
        self._check()
        if (api_version, kind) in getattr(self, "unserved", ()):
            raise K8sError(self.name, f"the cluster does not serve {api_version} {kind}", 404)
        return (api_version, kind)

    def get(self, api_version, kind, name, namespace=None):
        self._check()
        if kind == "Namespace" and name in self._terminating:
            self._terminating[name] -= 1
            if self._terminating[name] < 0:
                del self._terminating[name]
                self.objects.pop(self._key(api_version, kind, name, None), None)
                for k in [k for k in self.objects if k[2] == name]:
                    del self.objects[k]
        obj = self.objects.get(self._key(api_version, kind, name, namespace))
        return copy.deepcopy(obj) if obj else None

    def list(self, api_version, kind, namespace=None, label_selector=None):
        self._check()
        if (api_version, kind) == ("v1", "Pod") and self.ready:
            return self._pods(namespace)
        terms = [p for p in (label_selector or "").split(",") if p]
        wanted = dict(p.split("=", 1) for p in terms if "=" in p)  # key=value
        present = [p for p in terms if "=" not in p]  # key: the label exists, any value
        out = []
        for (av, k, ns, _name), obj in sorted(self.objects.items(), key=lambda kv: str(kv[0])):
            labels = obj["metadata"].get("labels") or {}
            if (
                av == api_version
                and k == kind
                and (namespace is None or ns == namespace)
                and all(labels.get(a) == b for a, b in wanted.items())
                and all(a in labels for a in present)
            ):
                out.append(self._with_status(copy.deepcopy(obj)))
        return out

    def list_body(self, api_version, kind, namespace=None, label_selector=None):
        """``list`` as the API server sends it: the list's own resourceVersion (the store's,
        moving with every write) first, then the items."""
        self.list_reads = getattr(self, "list_reads", 0) + 1
        items = self.list(api_version, kind, namespace, label_selector)
        doc = {
            "kind": f"{kind}List",
            "apiVersion": api_version,
            "metadata": {"resourceVersion": str(self.rv)},
        }
        return (json.dumps(doc)[:-1] + ',"items":' + json.dumps(items) + "}").encode()

    def list_items(self, body, api_version, kind):
        self.decoded = getattr(self, "decoded", 0) + 1
        items = json.loads(body)["items"] if body else []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def _pods(self, namespace):
        """One Ready pod (Ready for long: deploy's minimum-ready window passes at once) per
        replica of each Deployment, owned by it; stored Pods too."""
        out = [
            copy.deepcopy(o) for (av, k, ns, _n), o in self.objects.items() if k == "Pod" and ns == namespace
        ]
        for (_av, kind, ns, name), obj in sorted(self.objects.items(), key=lambda kv: str(kv[0])):
            if kind != "Deployment" or ns != namespace:
                continue
            labels = ((obj["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
            for i in range(obj["spec"].get("replicas", 1)):
                out.append(
                    {
                        "metadata": {
                            "name": f"{name}-{i}",
                            "namespace": ns,
                            "uid": f"{self.name}/{ns}/{name}-{i}",
                            "labels": dict(labels),
                            "ownerReferences": [{"kind": "ReplicaSet", "name": name}],
                        },
                        "status": {
                            "phase": "Running",
                            "conditions": [
                                {
                                    "type": "Ready",
                                    "status": "True",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                                }
                            ],
                        },
                    }
                )
        return out

    def _with_status(self, obj):
        if obj["kind"] == "Deployment":
            n = obj["spec"].get("replicas", 1)
            r = n if self.ready else 0
            obj["status"] = {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": n,
                "updatedReplicas": n,
                "readyReplicas": r,
                "availableReplicas": r,
            }
        return obj

    def apply(self, obj, dry_run=False):
        self._check()
        meta = obj["metadata"]
        ns = meta["name"] if obj["kind"] == "Namespace" else meta.get("namespace")
        if ns in self._terminating:
            raise K8sError(self.name, f"HTTP 403: namespace {ns} is being terminated", 403)
        in_namespace = obj["kind"] != "Namespace" and meta.get("namespace")  # else cluster-scoped
        if in_namespace and self.get("v1", "Namespace", meta["namespace"]) is None:
            raise K8sError(self.name, f'HTTP 404: namespaces "{meta["namespace"]}" not found', 404)
        key = self._key(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        old = self.objects.get(key)
        new = copy.deepcopy(obj)
        if (
            old is not None
            and old["spec" if "spec" in old else "metadata"]
            == new.get("spec" if "spec" in old else "metadata")
            and old["metadata"].get("labels") == meta.get("labels")
            and old["metadata"].get("annotations") == meta.get("annotations")
        ):
            return copy.deepcopy(old)
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        new["metadata"]["generation"] = (old or {"metadata": {"generation": 0}})["metadata"]["generation"] + 1
        if obj["kind"] == "Service" and (obj.get("spec") or {}).get("type") != "ExternalName":
            new["spec"].setdefault("type", "ClusterIP")
        if not dry_run:
            self.objects[key] = new
            self.log.append((self.name, "apply", obj["kind"], meta["name"]))
        return copy.deepcopy(new)

    def delete(self, api_version, kind, name, namespace=None):
        self._check()
        key = self._key(api_version, kind, name, namespace)
        if key not in self.objects:
            return False
        if kind == "Namespace" and self.terminate_reads:
            self._terminating[name] = self.terminate_reads
            self.objects[key]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            self.objects[key]["status"] = {"phase": "Terminating"}
            self.log.append((self.name, "delete", kind, name))
            return True
        del self.objects[key]
        if kind == "Namespace":
            for k in [k for k in self.objects if k[2] == name]:
                del self.objects[k]
        self.log.append((self.name, "delete", kind, name))
        return True
