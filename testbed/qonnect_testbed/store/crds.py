"""Custom resources: what a CustomResourceDefinition makes the emulated server serve.

A real server's apiextensions-apiserver accepts a CRD's names, marks it Established and from then
on serves its group/version/plural (discovery, CRUD, watch) until the CRD is deleted, which
deletes its custom resources too. The emulator does the same in one step at create time. It
serves the storage version only (no conversion between versions) and does not check objects
against the CRD's openAPIV3Schema (docs/testbed.md, differences).
"""

from __future__ import annotations

from qonnect_testbed.store.resources import ResourceType
from qonnect_testbed.store.values import now_rfc3339

CRDS = "customresourcedefinitions"
_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def served_type(crd: dict) -> ResourceType | None:
    """The resource a CRD defines (its storage version), or None if the CRD names nothing usable."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("served", True)]
    storage = next((v for v in versions if v.get("storage")), versions[0] if versions else None)
    if not (group and plural and kind and storage and storage.get("name")):
        return None
    subs = storage.get("subresources") or {}
    info: list[tuple[str, str, str, str, tuple[str, ...]]] = []
    if "status" in subs:
        info.append(("status", group, storage["name"], kind, ("get", "patch", "update")))
    if "scale" in subs:
        info.append(("scale", "autoscaling", "v1", "Scale", ("get", "patch", "update")))
    return ResourceType(
        plural=plural,
        singular=names.get("singular") or kind.lower(),
        kind=kind,
        group=group,
        version=storage["name"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        subresources=tuple(s[0] for s in info),
        categories=tuple(names.get("categories") or ()),
        verbs=_VERBS,
        subresource_info=tuple(info),
        key=f"{plural}.{group}",
    )


def default_crd(obj: dict) -> None:
    """The status a real server reaches once it accepts the names: NamesAccepted, Established."""
    spec = obj.get("spec") or {}
    names = dict(spec.get("names") or {})
    if names.get("kind") and not names.get("listKind"):
        names["listKind"] = names["kind"] + "List"
    if names.get("kind") and not names.get("singular"):
        names["singular"] = str(names["kind"]).lower()
    stamp = now_rfc3339()
    obj["status"] = {
        "acceptedNames": names,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": stamp,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": stamp,
            },
        ],
        "storedVersions": [
            v["name"] for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")
        ],
    }
