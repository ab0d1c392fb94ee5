"""Kubernetes type schemas from the kubernetes-validate package (a maintained copy of upstream).

Used for the OpenAPI documents and for the list semantics that strategic merge patch and
server-side apply need (x-kubernetes-patch-merge-key, x-kubernetes-list-type/-map-keys).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate

_SCHEMA_DIR = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
_REF = "#/$defs/"


def _minor(version: str) -> int:
    m = re.match(r"v?1\.(\d+)", version)
    if not m:
        raise ValueError(f"version: expected 'v1.NN.P', got {version!r}")
    return int(m.group(1))


@functools.lru_cache(maxsize=4)
def definitions(version: str) -> dict[str, dict]:
    """The $defs of the newest packaged schema not newer than version (e.g. v1.30.0)."""
    wanted = _minor(version)
    available = sorted(
        (_minor(p.name), p) for p in _SCHEMA_DIR.glob("v1.*.0-local") if (p / "_definitions.json").is_file()
    )
    if not available:
        raise RuntimeError(f"kubernetes-validate has no schemas under {_SCHEMA_DIR}")
    chosen = [p for minor, p in available if minor <= wanted] or [available[0][1]]
    with open(chosen[-1] / "_definitions.json", encoding="utf-8") as fh:
        return json.load(fh)["$defs"]


@functools.lru_cache(maxsize=64)
def kind_definition(version: str, group: str, api_version: str, kind: str) -> str | None:
    """The definition name whose x-kubernetes-group-version-kind is (group, version, kind)."""
    for name, schema in definitions(version).items():
        for gvk in schema.get("x-kubernetes-group-version-kind", ()):
            if gvk.get("group") == group and gvk.get("version") == api_version and gvk.get("kind") == kind:
                return name
    return None


class Node:
    """A position in a type's schema, followed field by field."""

    def __init__(self, version: str, schema: dict | None):
        self.version = version
        self.schema = self._resolve(schema or {})

    def _resolve(self, schema: dict) -> dict:
        ref = schema.get("$ref")
        if ref and ref.startswith(_REF):
            merged = dict(definitions(self.version).get(ref[len(_REF) :], {}))
            merged.update({k: v for k, v in schema.items() if k != "$ref"})
            return merged
        return schema

    @classmethod
    def for_kind(cls, version: str, group: str, api_version: str, kind: str) -> Node:
        name = kind_definition(version, group, api_version, kind)
        return cls(version, {"$ref": _REF + name} if name else None)

    def field(self, key: str) -> Node:
        props = self.schema.get("properties") or {}
        if key in props:
            return Node(self.version, props[key])
        extra = self.schema.get("additionalProperties")
        return Node(self.version, extra if isinstance(extra, dict) else None)

    def items(self) -> Node:
        return Node(
            self.version, self.schema.get("items") if isinstance(self.schema.get("items"), dict) else None
        )

    @property
    def merge_key(self) -> str | None:
        """Strategic merge: the key identifying list items, when the list merges."""
        strategy = self.schema.get("x-kubernetes-patch-strategy", "")
        return self.schema.get("x-kubernetes-patch-merge-key") if "merge" in strategy.split(",") else None

    @property
    def merges_primitives(self) -> bool:
        """Strategic merge: a list of scalars merged as a set (e.g. finalizers)."""
        return "merge" in self.schema.get("x-kubernetes-patch-strategy", "").split(",") and not self.merge_key

    @property
    def list_map_keys(self) -> list[str] | None:
        """Server-side apply: the keys of an associative list (list-type map)."""
        if self.schema.get("x-kubernetes-list-type") == "map":
            return list(self.schema.get("x-kubernetes-list-map-keys") or [])
        key = self.schema.get("x-kubernetes-patch-merge-key")
        return [key] if key and self.schema.get("x-kubernetes-list-type") != "atomic" else None

    @property
    def is_set(self) -> bool:
        return self.schema.get("x-kubernetes-list-type") == "set"

    @property
    def is_atomic_map(self) -> bool:
        return self.schema.get("x-kubernetes-map-type") == "atomic"

    @property
    def type(self) -> Any:
        return self.schema.get("type")
