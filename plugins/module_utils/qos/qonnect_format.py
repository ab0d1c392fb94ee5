# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""QONNECT's original ``swarmchestrate.tu-berlin.de/v1`` format, accepted unchanged.

``metadata.qos`` weights become the objective and each tier bundle (cloud_svc, fog_svc,
edge_svc) one service of that tier, so existing QONNECT specs keep working.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.qos.checks import typename
from ansible_collections.qonnect.core.plugins.module_utils.qos.manifests import ManifestReader
from ansible_collections.qonnect.core.plugins.module_utils.qos.model import KIND, Application, Service
from ansible_collections.qonnect.core.plugins.module_utils.qos.resources import sum_requests

QONNECT_API_VERSION = "swarmchestrate.tu-berlin.de/v1"
QONNECT_BUNDLES = (("cloud_svc", "cloud"), ("fog_svc", "fog"), ("edge_svc", "edge"))
# QONNECT's address placeholders in its bundles, replaced by the address of the cluster chosen
# for that tier (QONNECT's agents do it; qonnect's deployer does it here).
QONNECT_PLACEHOLDERS = {"cloud": "[CLOUD_CLUSTER_IP]", "fog": "[FOG_CLUSTER_IP]", "edge": "[EDGE_CLUSTER_IP]"}


def substitute(value: Any, replacements: dict[str, str]) -> Any:
    """A copy of `value` with every placeholder in its strings replaced (QONNECT's addresses)."""
    if isinstance(value, dict):
        return {k: substitute(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, replacements) for v in value]
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
    return value


class QonnectReader(ManifestReader):
    """Reads a QONNECT Application, collecting every error with its path."""

    def __init__(self, base_dir: str):
        super().__init__(base_dir)
        self.paths: dict[str, str] = {}  # service -> where its bundle is given (error paths)

    def manifests_path(self, index: int, service: Service) -> str:
        """A tier bundle's path in the spec (or ``bundles.<key>`` beside it)."""
        return self.paths.get(service.name, service.name)

    def read(self, data: dict, bundles: dict[str, str]) -> Application:
        """QONNECT's format: one service per tier bundle, each placed on one cluster of it.

        The bundles sit in ``spec`` or at the top level, or come beside the file (``bundles``:
        tier key -> manifest file, as QONNECT's API takes them as multipart fields).
        """
        keys = tuple(k for k, _tier in QONNECT_BUNDLES)
        self.mapping(data, "", ("apiVersion", "kind", "metadata", "spec", *keys))
        if data.get("kind") != KIND:
            self.err("kind", f"{data.get('kind')!r} is not {KIND}")
        name, namespace, labels, meta = self.metadata(data, ("name", "namespace", "labels", "qos"))
        qos = self.mapping(meta.get("qos"), "metadata.qos", ("energy", "pricing", "performance"))
        if not qos:
            self.err("metadata.qos", "is required (energy, pricing, performance weights)")
        objective = {
            "energy": self.weight(qos.get("energy"), "metadata.qos.energy"),
            "cost": self.weight(qos.get("pricing"), "metadata.qos.pricing"),
            "performance": self.weight(qos.get("performance"), "metadata.qos.performance"),
            "latency": 0.0,
        }
        spec = self.mapping(data.get("spec"), "spec", keys)
        if not isinstance(bundles, dict):
            self.err("bundles", f"expected a mapping of {', '.join(keys)} to files")
            bundles = {}
        for key in sorted(set(bundles) - set(keys), key=str):
            self.err(f"bundles.{key}", f"unknown tier bundle; expected one of {', '.join(keys)}")
        services = []
        for key, tier in QONNECT_BUNDLES:
            where = "spec" if key in spec else ""
            raw = spec.get(key, data.get(key))
            path = f"{where}.{key}" if where else key
            if key in bundles:
                if raw is not None:
                    self.err(f"bundles.{key}", f"given twice: also in the spec at {path}")
                manifests = self.bounded(
                    self.read_manifest_file(bundles[key], f"bundles.{key}"), f"bundles.{key}"
                )
                if not manifests and not any(e.startswith(f"bundles.{key}") for e in self.errors):
                    self.err(f"bundles.{key}", "holds no manifests")
            elif raw is None:
                continue
            else:
                manifests = self.bundle(raw, path)
            self.paths[f"{tier}-svc"] = f"bundles.{key}" if key in bundles else path
            services.append(
                Service(name=f"{tier}-svc", tier=tier, manifests=manifests, requests=sum_requests(manifests))
            )
        if not services:
            self.err(
                "spec",
                "expected at least one of cloud_svc, fog_svc, edge_svc "
                "(a manifest file, YAML text or a list of manifests; or give the "
                "bundle files beside the Application, e.g. --bundle cloud_svc=FILE)",
            )
        return self.finish(name, namespace, labels, objective, services, source_format=QONNECT_API_VERSION)

    def bundle(self, raw: Any, path: str) -> list[dict]:
        """A tier bundle: a file path, multi-document YAML text, {file: PATH} or a list."""
        if isinstance(raw, str):
            if "\n" not in raw.strip() and raw.strip().endswith((".yaml", ".yml", ".json")):
                found = self.read_manifest_file(raw.strip(), path)
            else:
                found = self.parse_manifest_text(raw, path, source=path)
        elif isinstance(raw, dict) and set(raw) == {"file"}:
            found = self.read_manifest_file(raw["file"], f"{path}.file")
        elif isinstance(raw, list):
            found = self.manifests(raw, path)
        else:
            self.err(
                path, f"expected a manifest file path, YAML text or a list of manifests, got {typename(raw)}"
            )
            return []
        if not found and not any(e.startswith(path) for e in self.errors):
            self.err(path, "holds no manifests")
        return self.bounded(found, path)
