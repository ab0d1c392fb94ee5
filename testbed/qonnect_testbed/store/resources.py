"""The resource types the emulated API server serves: names, scope and subresources (the data
behind discovery, OpenAPI and the store's tables)."""

from __future__ import annotations

from dataclasses import dataclass

from qonnect_testbed.store.errors import ApiError


@dataclass(frozen=True)
class ResourceType:
    """How one served resource is named and scoped (the data behind discovery)."""

    plural: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def qualified(self) -> str:
        """plural.group, as real servers name the resource in messages ("deployments.apps")."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: dict[str, ResourceType] = {
    r.plural: r
    for r in (
        ResourceType("namespaces", "namespace", "Namespace", "", "v1", False, ("ns",), ("status",)),
        ResourceType("nodes", "node", "Node", "", "v1", False, ("no",), ("status",)),
        ResourceType("pods", "pod", "Pod", "", "v1", True, ("po",), ("status", "binding"), ("all",)),
        ResourceType("services", "service", "Service", "", "v1", True, ("svc",), ("status",), ("all",)),
        ResourceType("serviceaccounts", "serviceaccount", "ServiceAccount", "", "v1", True, ("sa",)),
        ResourceType("configmaps", "configmap", "ConfigMap", "", "v1", True, ("cm",)),
        ResourceType("secrets", "secret", "Secret", "", "v1", True),
        ResourceType("events", "event", "Event", "", "v1", True, ("ev",)),
        ResourceType(
            "deployments",
            "deployment",
            "Deployment",
            "apps",
            "v1",
            True,
            ("deploy",),
            ("status", "scale"),
            ("all",),
        ),
        ResourceType(
            "replicasets",
            "replicaset",
            "ReplicaSet",
            "apps",
            "v1",
            True,
            ("rs",),
            ("status", "scale"),
            ("all",),
        ),
        ResourceType(
            "statefulsets",
            "statefulset",
            "StatefulSet",
            "apps",
            "v1",
            True,
            ("sts",),
            ("status", "scale"),
            ("all",),
        ),
        ResourceType(
            "daemonsets", "daemonset", "DaemonSet", "apps", "v1", True, ("ds",), ("status",), ("all",)
        ),
        ResourceType("endpoints", "endpoints", "Endpoints", "", "v1", True, ("ep",)),
        ResourceType("leases", "lease", "Lease", "coordination.k8s.io", "v1", True),
        # served so real applications' bundles apply whole (QONNECT's Bookinfo has Ingresses);
        # stored only: the emulator runs no ingress controller
        ResourceType("ingresses", "ingress", "Ingress", "networking.k8s.io", "v1", True, ("ing",)),
    )
}

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def resource_type(resource: str) -> ResourceType:
    """The served resource named by its plural, or 404 NotFound like a real server."""
    try:
        return RESOURCES[resource]
    except KeyError:
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({resource})"
        ) from None
