"""The least-privilege identities the testbed issues on every cluster, beside admin and restricted.

Each is the ServiceAccount of one documented ClusterRole, ``docs/rbac/<role>-clusterrole.yml``
(the file users apply to their own clusters): ``agent`` (what the Resource Agent reads) and
``deploy`` (what deploy and the controller's migrations write). The file is the one definition:
the kube engine applies its objects and asks the API server for a token (TokenRequest); the
emulator authorizes the token it issues with the rules read from the same file
(apiserver/authz.py). The federation file names their kubeconfigs ``agent_kubeconfig`` and
``deploy_kubeconfig``; the demo runs its agents and registers its clusters with them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

RBAC_DIR = Path(__file__).resolve().parents[2] / "docs" / "rbac"
ROLES = ("agent", "deploy")


def kubeconfig_key(role: str) -> str:
    """The federation entry's key for this identity's kubeconfig."""
    return f"{role}_kubeconfig"


@functools.cache
def rbac_objects(role: str) -> tuple[dict[str, Any], ...]:
    """The objects of docs/rbac/<role>-clusterrole.yml (a v1 List), in file order."""
    path = RBAC_DIR / f"{role}-clusterrole.yml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("kind") != "List":
        raise ValueError(f"{path}: expected a v1 List of RBAC objects")
    return tuple(doc.get("items") or ())


def _one(role: str, kind: str) -> dict[str, Any]:
    found = [o for o in rbac_objects(role) if o.get("kind") == kind]
    if len(found) != 1:
        raise ValueError(f"{RBAC_DIR}/{role}-clusterrole.yml: expected one {kind}, found {len(found)}")
    return found[0]


def rules(role: str) -> list[dict[str, Any]]:
    """The ClusterRole's policy rules."""
    return list(_one(role, "ClusterRole").get("rules") or [])


def service_account(role: str) -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount the ClusterRole is bound to."""
    meta = _one(role, "ServiceAccount")["metadata"]
    return meta["namespace"], meta["name"]


def user(role: str) -> str:
    """The user name RBAC sees for this identity's token."""
    namespace, name = service_account(role)
    return f"system:serviceaccount:{namespace}:{name}"
