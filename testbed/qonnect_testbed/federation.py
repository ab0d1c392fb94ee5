"""The federation file: the testbed's self-description for playbooks, agents and tests.

It lists every cluster (name, tier, location, labels, address, https server URL, kubeconfig
path, nodes with their profiles) and the latency matrix between locations. It carries no
secrets: tokens stay in the kubeconfigs. ``playbooks/register_clusters.yml`` reads it.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Any

from qonnect_testbed import identities
from qonnect_testbed.fleet import Fleet

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML is a dependency of the package
    yaml = None

_PARSE_ERRORS: tuple[type[Exception], ...] = (ValueError, yaml.YAMLError) if yaml else (ValueError,)

# The files of a testbed directory (see docs/testbed.md).
FEDERATION_FILE = "federation.yaml"
STATE_FILE = "testbed.json"  # pid, control endpoint and its token (0600)
PID_FILE = "testbed.pid"
LOG_FILE = "testbed.log"

API_VERSION = "qonnect.io/v1alpha1"
KIND = "Federation"
FIRST_ADDRESS = ipaddress.IPv4Address("127.0.0.2")


class FederationError(ValueError):
    """A federation file that cannot be read: the message names the file and the field."""


def cluster_address(index: int) -> str:
    """Loopback address of the index-th cluster: 127.0.0.2 upward, skipping .0 and .255."""
    addr = int(FIRST_ADDRESS)
    for _step in range(index):
        addr += 1
        while addr & 0xFF in (0, 255):
            addr += 1
    ip = ipaddress.IPv4Address(addr)
    if ip not in ipaddress.IPv4Network("127.0.0.0/8"):
        raise FederationError(f"cluster index {index}: out of loopback addresses")
    return str(ip)


def document(
    fleet: Fleet,
    endpoints: dict[str, tuple[str, int]],
    kubeconfigs: dict[str, Path],
    ca_file: Path,
    restricted_kubeconfigs: dict[str, Path] | None = None,
    role_kubeconfigs: dict[str, dict[str, Path]] | None = None,
) -> dict[str, Any]:
    """The federation document for a running fleet (endpoints: cluster -> (address, port))."""
    clusters = []
    for spec in fleet.clusters:
        address, port = endpoints[spec.name]
        entry = {
            "name": spec.name,
            "tier": spec.tier,
            "location": spec.location,
            "labels": dict(spec.labels),
            "address": address,
            "port": port,
            "server": f"https://{address}:{port}",
            "kubeconfig": str(kubeconfigs[spec.name]),
            "context": spec.name,
            "nodes": [n.to_dict() for n in spec.nodes],
        }
        if restricted_kubeconfigs and spec.name in restricted_kubeconfigs:
            # a token with few rights (apiserver/authz.py), for 403 handling tests
            entry["restricted_kubeconfig"] = str(restricted_kubeconfigs[spec.name])
        for role, paths in (role_kubeconfigs or {}).items():
            if spec.name in paths:  # least privilege: docs/rbac/<role>-clusterrole.yml (identities.py)
                entry[identities.kubeconfig_key(role)] = str(paths[spec.name])
        clusters.append(entry)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": fleet.name,
        "ca_file": str(ca_file),
        "clusters": clusters,
        "latency_ms": fleet.latency_ms,
    }


def write(path: Path, doc: dict[str, Any]) -> Path:
    """Write YAML (or JSON when the name ends in .json), replacing the file atomically."""
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".json":
        text = json.dumps(doc, indent=2)
    else:
        if yaml is None:
            raise FederationError("writing YAML needs PyYAML (pip install PyYAML)")
        # libyaml's emitter when present: the pure-Python one takes seconds for 100 clusters.
        text = yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def read(path: Path) -> dict[str, Any]:
    """Read and check a federation file (YAML or JSON)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FederationError(f"{path}: cannot read the federation file: {exc.strerror}") from None
    try:
        if str(path).endswith(".json") or yaml is None:
            doc = json.loads(text)
        else:
            doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except _PARSE_ERRORS as exc:
        raise FederationError(f"{path}: not valid YAML/JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise FederationError(f"{path}: expected kind {KIND!r}")
    clusters = doc.get("clusters")
    if not isinstance(clusters, list):
        raise FederationError(f"{path}: clusters: expected a list")
    for i, cluster in enumerate(clusters):
        for key in ("name", "tier", "location", "server", "address", "kubeconfig", "nodes"):
            if not isinstance(cluster, dict) or key not in cluster:
                raise FederationError(f"{path}: clusters[{i}].{key}: missing")
    if not isinstance(doc.get("latency_ms"), dict):
        raise FederationError(f"{path}: latency_ms: expected a mapping of mappings")
    return doc
