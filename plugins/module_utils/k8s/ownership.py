# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who owns an object on a cluster: qonnect never adopts, overwrites or deletes what it does not own.

An object belongs to an application identity (``<namespace>/<app>``: an application name is
unique in the Knowledge Base, and the namespace tells two federations' same-named applications
apart) when it carries the managed labels of that application
(``app.kubernetes.io/managed-by=qonnect``, ``qonnect.io/application=<app>``), lives in that
namespace (when namespaced) and its owner annotation ``qonnect.io/owner`` is that identity
(see ``owned_by`` for objects written before the annotation existed). Anything else with the
same kind/namespace/name is *foreign*: a deploy refuses it before any write (``adopt: true``
takes it over explicitly), and removal, prune and sweep leave it alone.
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


def identity_namespace(identity: str) -> str:
    """The namespace part of an owner identity ``<namespace>/<app>``."""
    return identity.partition("/")[0]


def _home(obj: dict | None) -> str | None:
    """The namespace an object lives in (a Namespace: itself; cluster-scoped: None)."""
    meta = _meta(obj)
    if (obj or {}).get("kind") == "Namespace":
        return meta.get("name")
    return meta.get("namespace") or None


def owned_by(obj: dict | None, application: str, identity: str) -> bool:
    """True when the live object belongs to exactly this application identity.

    The labels must name the application, a namespaced object must live in the identity's
    namespace, and the owner annotation must be ``identity``. An object written before owner
    annotations existed has only the labels: a namespaced one counts (its namespace and labels
    are the identity); an unannotated cluster-scoped one does not, since an application of that
    name in any namespace may have written it.
    """
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY) != "qonnect" or labels.get(APP_LABEL) != application:
        return False
    home = _home(obj)
    if home is not None and home != identity_namespace(identity):
        return False  # the application's objects all live in its own namespace
    recorded = (meta.get("annotations") or {}).get(OWNER_ANNOTATION)
    if recorded is not None:
        return recorded == identity
    return home is not None


_SA_TOKEN = "kubernetes.io/service-account-token"
_SA_NAME = "kubernetes.io/service-account.name"


def is_system(obj: dict) -> bool:
    """Kubernetes' own objects of every namespace (its default account and that account's
    token Secret on older clusters, the root CA ConfigMap): never foreign, never ours."""
    if (obj.get("kind"), _meta(obj).get("name")) in SYSTEM_OBJECTS:
        return True
    annotations = _meta(obj).get("annotations") or {}
    return (
        obj.get("kind") == "Secret"
        and obj.get("type") == _SA_TOKEN
        and annotations.get(_SA_NAME) == "default"
    )


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


def namespace_created_for(namespace: dict | None, application: str, identity: str) -> bool:
    """True when qonnect created this namespace for exactly this application identity (so
    removal may delete it): its labels, owner annotation and name agree with ``identity``."""
    meta = _meta(namespace)
    created = (meta.get("annotations") or {}).get(NAMESPACE_CREATED_ANNOTATION)
    if not owned_by(namespace, application, identity):
        return False
    return created is None or created == application


def conflict_line(cluster: str, obj: dict) -> str:
    """'<cluster>: <Kind> <namespace>/<name> (owned by ...)' for the one refusal message."""
    meta = _meta(obj)
    where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{cluster}: {obj.get('kind')} {where}{meta.get('name')} ({current_owner(obj)})"
