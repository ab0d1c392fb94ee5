"""Kubeconfig files for testbed clusters: bearer token plus the CA, one file per cluster.

They are ordinary kubeconfigs, read by kubectl and the official client the same way as a real
cluster's. They hold a token, so they are written mode 0600.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML is a dependency of the package
    yaml = None


def build(cluster: str, server: str, token: str, ca_pem: bytes, namespace: str = "default") -> dict:
    """The kubeconfig document of one cluster (context and user named after the cluster)."""
    user = f"{cluster}-admin"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode("ascii"),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": cluster, "context": {"cluster": cluster, "user": user, "namespace": namespace}}
        ],
        "current-context": cluster,
    }


def write(path: Path, document: dict) -> Path:
    """Write a kubeconfig with mode 0600 (it carries a bearer token)."""
    if yaml is None:
        raise RuntimeError("writing kubeconfigs needs PyYAML (pip install PyYAML)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        yaml.dump(document, fh, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
    os.chmod(path, 0o600)
    return path
