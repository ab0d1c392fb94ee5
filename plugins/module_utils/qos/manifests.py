# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading and checking the Kubernetes manifests of a service (inline, by file, or YAML text)."""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils import spec_yaml
from ansible_collections.qonnect.core.plugins.module_utils.qos.checks import SpecChecker, typename
from ansible_collections.qonnect.core.plugins.module_utils.qos.limits import (
    MAX_OBJECT_DATA_BYTES,
    MAX_OBJECTS_PER_SERVICE,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.resources import (
    POD_TEMPLATE_KINDS,
    finite_quantity,
    pod_path,
)
from ansible_collections.qonnect.core.plugins.module_utils.spec_yaml import (
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    SpecYamlError,
)


class ManifestReader(SpecChecker):
    """The manifest checks both formats share; bytes read count towards the spec's total limit."""

    def __init__(self, base_dir: str):
        super().__init__()
        self.base_dir = base_dir  # manifest files are relative to the spec's folder
        self.bytes_read = 0

    def read_manifest_file(self, rel: Any, path: str) -> list[dict]:
        if not isinstance(rel, str) or not rel:
            self.err(path, f"{rel!r} is not a file path")
            return []
        full = rel if os.path.isabs(rel) else os.path.join(self.base_dir, rel)
        budget = min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - self.bytes_read)
        try:
            text = spec_yaml.read_bounded(full, budget, what="manifest file")
        except SpecYamlError as exc:
            if exc.detail.startswith("cannot read"):
                self.err(path, f"cannot read manifest file {rel!r}: {exc.detail.split(': ', 1)[-1]}")
            elif budget < MAX_FILE_BYTES and "larger than the limit" in exc.detail:
                self.err(
                    path,
                    f"{rel!r}: the files of this spec together are larger than the "
                    f"limit of {MAX_TOTAL_BYTES // 2**20} MiB",
                )
            else:
                self.err(path, f"{rel!r}: {exc.detail}")
            return []
        self.bytes_read += len(text)
        return self.parse_manifest_text(text, path, source=full)

    def parse_manifest_text(self, text: str, path: str, source: str) -> list[dict]:
        try:
            docs, duplicates = spec_yaml.load(text, source, path=path, multi=True)
        except SpecYamlError as exc:
            self.errors.extend(f"{path}: {e}" for e in exc.errors)
            return []
        self.errors.extend(duplicates)
        out: list[dict] = []
        for i, doc in enumerate(d for d in docs if d is not None):
            out.extend(self.expand_list(doc, f"{path}[document {i + 1}]"))
        return out

    def expand_list(self, doc: Any, path: str) -> list[dict]:
        """A manifest, or a Kubernetes ``List`` of them, becomes a flat list."""
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            return [
                m for i, item in enumerate(doc["items"]) for m in self.expand_list(item, f"{path}.items[{i}]")
            ]
        return [doc] if self.check_manifest(doc, path) else []

    def check_manifest(self, doc: Any, path: str) -> bool:
        if not isinstance(doc, dict):
            self.err(path, f"expected a Kubernetes manifest (a mapping), got {typename(doc)}")
            return False
        ok = True
        for key in ("apiVersion", "kind"):
            if not isinstance(doc.get(key), str) or not doc.get(key):
                self.err(f"{path}.{key}", "is required (a non-empty string)")
                ok = False
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            self.err(f"{path}.metadata.name", "is required (a non-empty string)")
            ok = False
        elif meta.get("labels") is not None:
            before = len(self.errors)
            self.labels(meta.get("labels"), f"{path}.metadata.labels")
            ok = ok and len(self.errors) == before
        if not self.shaped(doc.get("spec"), dict, f"{path}.spec"):
            return False
        if doc.get("kind") in ("ConfigMap", "Secret"):
            ok = self.check_data(doc, path) and ok
        return self.check_pod(doc, path) and ok

    def check_data(self, doc: dict, path: str) -> bool:
        """A ConfigMap's or Secret's data stays under Kubernetes' 1 MiB."""
        size = 0
        for key in ("data", "binaryData", "stringData"):
            data = doc.get(key)
            if not self.shaped(data, dict, f"{path}.{key}"):
                return False
            for name, value in (data or {}).items():
                if not isinstance(value, str):
                    self.err(f"{path}.{key}.{name}", f"{typename(value)} is not a string (quote it)")
                    return False
                size += len(str(name)) + len(value)
        if size > MAX_OBJECT_DATA_BYTES:
            self.err(
                f"{path}.data",
                f"{doc['kind']} data of {size} bytes is more than the "
                f"limit of {MAX_OBJECT_DATA_BYTES} bytes (1 MiB)",
            )
            return False
        return True

    def check_pod(self, doc: dict, path: str) -> bool:
        """Each step towards the pod's containers is the right type; quantities are valid."""
        kind = doc.get("kind")
        if kind not in POD_TEMPLATE_KINDS and kind not in ("Pod", "CronJob"):
            return True
        node: Any = doc
        where = path
        for step in pod_path(kind).split("."):
            node = node.get(step) if isinstance(node, dict) else None
            where = f"{where}.{step}"
            if node is None:
                return True
            if not self.shaped(node, dict, where):
                return False
        ok = True
        for key in ("containers", "initContainers"):
            containers = node.get(key)
            if not self.shaped(containers, list, f"{where}.{key}"):
                ok = False
                continue
            for ci, container in enumerate(containers or []):
                ok = self.check_container(container, f"{where}.{key}[{ci}]") and ok
        return ok

    def check_container(self, container: Any, path: str) -> bool:
        """A container is a mapping; its resources' requests and limits are quantities."""
        if not isinstance(container, dict):  # null too: a container is required here
            self.err(path, f"expected a container (a mapping), got {typename(container)}")
            return False
        res = container.get("resources")
        if not self.shaped(res, dict, f"{path}.resources"):
            return False
        ok = True
        for rkind in ("requests", "limits"):
            values = (res or {}).get(rkind)
            if not self.shaped(values, dict, f"{path}.resources.{rkind}"):
                ok = False
                continue
            for rname, raw in (values or {}).items():
                try:
                    finite_quantity(raw)
                except ValueError:
                    self.err(
                        f"{path}.resources.{rkind}.{rname}",
                        f"{raw!r} is not a Kubernetes quantity (e.g. 250m, 128Mi)",
                    )
                    ok = False
        return ok

    def manifests(self, value: Any, path: str) -> list[dict]:
        if value is None:
            self.err(path, "is required (a list of manifests or {file: PATH} entries)")
            return []
        if not isinstance(value, list) or not value:
            self.err(path, "expected a non-empty list of manifests or {file: PATH} entries")
            return []
        out: list[dict] = []
        for i, entry in enumerate(value):
            p = f"{path}[{i}]"
            if isinstance(entry, dict) and set(entry) == {"file"}:
                out.extend(self.read_manifest_file(entry["file"], f"{p}.file"))
            else:
                out.extend(self.expand_list(entry, p))
            if len(out) > MAX_OBJECTS_PER_SERVICE:
                break
        return self.bounded(out, path)

    def bounded(self, objects: list[dict], path: str) -> list[dict]:
        if len(objects) > MAX_OBJECTS_PER_SERVICE:
            self.err(path, f"more than the limit of {MAX_OBJECTS_PER_SERVICE} objects in one service")
            return objects[:MAX_OBJECTS_PER_SERVICE]
        return objects
