"""The resource types the emulated API server serves: names, scope, verbs and subresources (the
data behind discovery, OpenAPI and the store's tables).

They are not written by hand: ``served_v1_34.json`` is what a real API server of the pinned
Kubernetes build serves, read from its own discovery by ``scripts/generate-served.py``. The
emulator serves every one of those types in its group's preferred version, except the few that
cannot make sense without a real control plane (OMITTED, each with its reason; docs/testbed.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from qonnect_testbed.store.errors import ApiError

SERVED_FILE = Path(__file__).with_name("served_v1_34.json")

# Subresources the emulator implements (store.update(subresource=...), app._scale, app._binding);
# the others a real server has are left out, each for its reason:
EMULATED_SUBRESOURCES = ("status", "scale", "binding")
OMITTED_SUBRESOURCES: dict[str, str] = {
    "attach": "no container runs in the emulator",
    "exec": "no container runs in the emulator",
    "log": "no container runs in the emulator, so there is no log",
    "portforward": "no container runs in the emulator",
    "proxy": "no network behind pods, services or nodes",
    "ephemeralcontainers": "no container runtime to add a container to",
    "resize": "no container runtime to resize",
    "eviction": "not implemented: clients delete pods directly (no PodDisruptionBudget check)",
    "token": "the emulator authenticates static tokens and issues none (TokenRequest)",
    "finalize": "not implemented: a namespace's deletion finishes on its own",
    "approval": "no certificate signer",
}

# Served by a real server, left out by the emulator: (group, plural) -> why.
OMITTED: dict[tuple[str, str], str] = {
    ("", "bindings"): "create-only; the emulator binds through pods/binding",
    ("", "componentstatuses"): "reports on control-plane processes the emulator does not run",
    ("authentication.k8s.io", "tokenreviews"): "a review API (create-only, answers, stores nothing)",
    ("authentication.k8s.io", "selfsubjectreviews"): "a review API (create-only, answers, stores nothing)",
    ("authorization.k8s.io", "subjectaccessreviews"): "a review API (create-only, answers, stores nothing)",
    (
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
    ): "a review API (create-only, answers, stores nothing)",
    (
        "authorization.k8s.io",
        "localsubjectaccessreviews",
    ): "a review API (create-only, answers, stores nothing)",
    (
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
    ): "a review API (create-only, answers, stores nothing)",
}


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
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    # per subresource: (name, group, version, kind, verbs) as the real server's discovery says
    subresource_info: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = ()
    key: str = ""  # the store's table name: the plural, or plural.group where plurals collide

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


def _from_entry(entry: dict, key: str) -> ResourceType:
    subs = [s for s in entry["subresources"] if s["name"] in EMULATED_SUBRESOURCES]
    return ResourceType(
        plural=entry["plural"],
        singular=entry["singular"],
        kind=entry["kind"],
        group=entry["group"],
        version=entry["version"],
        namespaced=entry["namespaced"],
        short_names=tuple(entry["shortNames"]),
        subresources=tuple(s["name"] for s in subs),
        categories=tuple(entry["categories"]),
        verbs=tuple(entry["verbs"]),
        subresource_info=tuple(
            (
                s["name"],
                s.get("group", entry["group"]),
                s.get("version", entry["version"]),
                s["kind"],
                tuple(s["verbs"]),
            )
            for s in subs
        ),
        key=key,
    )


def load_served(path: Path = SERVED_FILE) -> dict[str, ResourceType]:
    """The emulator's resource types from the generated file, keyed by their store table name."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{path}: cannot read the served resources ({exc}); regenerate it") from None
    entries = [e for e in doc["resources"] if e["preferred"] and (e["group"], e["plural"]) not in OMITTED]
    entries.sort(key=lambda e: (e["group"] != "", e["group"], e["plural"]))
    out: dict[str, ResourceType] = {}
    for entry in entries:
        key = entry["plural"] if entry["plural"] not in out else f"{entry['plural']}.{entry['group']}"
        out[key] = _from_entry(entry, key)
    return out


def served_document(path: Path = SERVED_FILE) -> dict:
    """The generated file itself (what the real server serves, all versions)."""
    return json.loads(path.read_text(encoding="utf-8"))


RESOURCES: dict[str, ResourceType] = load_served()

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def resource_type(resource: str) -> ResourceType:
    """The served resource named by its store table name, or 404 NotFound like a real server."""
    try:
        return RESOURCES[resource]
    except KeyError:
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({resource})"
        ) from None
