"""Builders of the manifests and application specs tests hand to qonnect, so a test states only
what matters to it (name, replicas, requests) and the boilerplate has one home."""

from __future__ import annotations

from typing import Any

PAUSE = "registry.k8s.io/pause:3.10"


def deployment(
    name: str,
    replicas: int = 2,
    image: str = "nginx:1.25",
    cpu: str | None = None,
    *,
    memory: str | None = None,
    container: str = "main",
    node_selector: dict | None = None,
    affinity: dict | None = None,
    labels: dict | None = None,
    namespace: str | None = None,
    port: int | None = None,
) -> dict[str, Any]:
    """A Deployment whose pods carry ``app: name``; ``cpu`` and ``memory`` are the container's
    requests."""
    main: dict[str, Any] = {"name": container, "image": image}
    if port:
        main["ports"] = [{"containerPort": port}]
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    if requests:
        main["resources"] = {"requests": requests}
    pod: dict[str, Any] = {"containers": [main]}
    if node_selector:
        pod["nodeSelector"] = node_selector
    if affinity:
        pod["affinity"] = affinity
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }


def application(name: str, services: list[dict], objective: dict | None = None) -> dict[str, Any]:
    """A native ``qonnect.io/v1`` Application document."""
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {"objective": objective or {"performance": 1.0}, "services": services},
    }


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def managed(obj: dict[str, Any], application: str, grace: float | None = None) -> dict[str, Any]:
    """``obj`` labelled as qonnect applies it (managed-by, application, service = its name); with
    ``grace``, its failure grace annotation in seconds."""
    from ansible_collections.qonnect.core.plugins.module_utils import keys

    metadata = obj["metadata"]
    metadata.setdefault("labels", {}).update(
        {keys.MANAGED_BY: "qonnect", keys.APP_LABEL: application, keys.SERVICE_LABEL: metadata["name"]}
    )
    if grace is not None:
        metadata.setdefault("annotations", {})[keys.GRACE_ANNOTATION] = f"{grace:g}"
    return obj


def yaml_docs(*docs: dict[str, Any]) -> str:
    """The documents as one multi-document YAML text (for ``kubectl apply -f -``)."""
    import yaml

    return yaml.safe_dump_all(docs, sort_keys=False)


def kubeconfig(server: str, token: str, name: str = "c") -> dict[str, Any]:
    """A kubeconfig of one cluster at ``server`` reached with a bearer ``token``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "u"}}],
    }
