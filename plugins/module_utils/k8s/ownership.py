# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who owns an object on a cluster: qonnect never adopts, overwrites or deletes what it does not own.

An object belongs to an application when it carries the managed labels of that application
(``app.kubernetes.io/managed-by=qonnect``, ``qonnect.io/application=<app>``) and, when present,
the owner annotation ``qonnect.io/owner`` names the same identity (``<namespace>/<app>``: an
application name is unique in the Knowledge Base, and the namespace tells two federations'
same-named applications apart). Anything else with the same kind/namespace/name is *foreign*:
a deploy refuses it before any write (``adopt: true`` takes it over explicitly), and removal,
prune and sweep leave it alone.
"""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.keys import (
    APP_LABEL,
    MANAGED_BY,
    NAMESPACE_CREATED_ANNOTATION,
    OWNER_ANNOTATION,
)

# Objects Kubernetes itself puts in every namespace: never foreign, never ours.
SYSTEM_OBJECTS = {("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")}


def owner_identity(application: str, namespace: str) -> str:
    """The value of the owner annotation of every object an application applies."""
    return f"{namespace}/{application}"


def _meta(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def owned_by(obj: dict | None, application: str, identity: str | None = None) -> bool:
    """True when the live object belongs to the application: its labels, and the recorded
    identity when there is one (``identity`` None: the application in any namespace)."""
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY) != "qonnect" or labels.get(APP_LABEL) != application:
        return False
    recorded = (meta.get("annotations") or {}).get(OWNER_ANNOTATION)
    if recorded is None:  # applied before owner annotations existed: the labels say it all
        return True
    if identity is None:  # a sweep in every namespace: any namespace, this application
        return recorded.rpartition("/")[2] == application
    return recorded == identity


def is_system(obj: dict) -> bool:
    return (obj.get("kind"), _meta(obj).get("name")) in SYSTEM_OBJECTS


def current_owner(obj: dict) -> str:
    """How a refusal names who has the object: its qonnect application, or its field managers."""
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY) == "qonnect" and labels.get(APP_LABEL):
        recorded = (meta.get("annotations") or {}).get(OWNER_ANNOTATION)
        return f"qonnect application {recorded or labels[APP_LABEL]}"
    managers = sorted({m.get("manager") for m in meta.get("managedFields") or [] if m.get("manager")})
    if managers:
        return "field manager " + ", ".join(managers)
    return "not managed by qonnect"


def namespace_created_for(namespace: dict | None, application: str) -> bool:
    """True when qonnect created this namespace for this application (so removal may delete it)."""
    meta = _meta(namespace)
    labels = meta.get("labels") or {}
    created = (meta.get("annotations") or {}).get(NAMESPACE_CREATED_ANNOTATION)
    if labels.get(MANAGED_BY) != "qonnect" or labels.get(APP_LABEL) != application:
        return False
    return created is None or created == application


def conflict_line(cluster: str, obj: dict) -> str:
    """'<cluster>: <Kind> <namespace>/<name> (owned by ...)' for the one refusal message."""
    meta = _meta(obj)
    where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{cluster}: {obj.get('kind')} {where}{meta.get('name')} ({current_owner(obj)})"
