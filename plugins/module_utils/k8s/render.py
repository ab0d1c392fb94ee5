# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place an application becomes a deployer: its manifests with the failure-grace
annotation, QONNECT's ``[TIER_CLUSTER_IP]`` placeholders, its own replica counts and adoption.

The deploy module (runners/deploy.py) and the controller's reconciler
(services/qonnect/controller/reconcile.py) both build their deployer here, so a cluster's
objects are rendered the same way by deploy, remove, diff and reconciliation. A cluster's
Target and client come from its KB record here too (``record_target``, ``record_client``), so
the controller reaches a cluster as the deploy module does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import (
    ClusterClient,
    client_of,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import (
    Deployer,
    Target,
    service_domain,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import with_grace
from ansible_collections.qonnect.core.plugins.module_utils.k8s.records import record_credentials
from ansible_collections.qonnect.core.plugins.module_utils.keys import ADDRESS_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    QONNECT_API_VERSION,
    QONNECT_PLACEHOLDERS,
    Application,
)


def address_of(record: Mapping[str, Any]) -> str:
    """Where other tiers reach a cluster (QONNECT's [TIER_CLUSTER_IP]): label
    qonnect.io/address, else the host of its API server URL."""
    labels = record.get("labels") or {}
    if labels.get(ADDRESS_LABEL):
        return labels[ADDRESS_LABEL]
    return urlparse(record.get("server") or "").hostname or ""


def target_of(name: str, record: Mapping[str, Any], kubeconfig: Any, context: str | None = None) -> Target:
    """A cluster's Target from its KB record: credentials, service domain, address, and the
    tier and location a spread service's callers are matched to its nearest instance by."""
    return Target(
        name,
        kubeconfig,
        context,
        service_domain(name, record.get("labels")),
        address_of(record),
        tier=str(record.get("tier") or ""),
        location=str(record.get("location") or ""),
    )


def record_target(name: str, record: Mapping[str, Any]) -> Target:
    """A cluster's Target with the credentials of its KB record (``records.record_credentials``):
    the one way the controller (confirm, capacity, reconcile, self-heal) reaches a cluster,
    built as the deploy module builds its own (``target_of``)."""
    return target_of(name, record, *record_credentials(record))


def record_client(name: str, record: Mapping[str, Any]) -> ClusterClient:
    """The shared Kubernetes client of a cluster, through its KB record's credentials."""
    return client_of(record_target(name, record))


def rendered_services(app: Application) -> dict[str, list[dict]]:
    """Each service's manifests as they are applied (with the application's failure grace)."""
    return {s.name: [with_grace(m, app.failure_grace_seconds) for m in s.manifests] for s in app.services}


def placeholders_of(app: Application) -> dict[str, str] | None:
    """QONNECT's bundles: service -> the placeholder its cluster's address replaces."""
    if app.source_format != QONNECT_API_VERSION:
        return None
    return {
        f"{s.tier}-svc": QONNECT_PLACEHOLDERS[s.tier] for s in app.services if s.tier in QONNECT_PLACEHOLDERS
    }


def application_deployer(
    app: Application,
    plan: dict[str, list[dict]],
    targets: dict[str, Target],
    previous: set[str],
    **options: Any,
) -> Deployer:
    """The deployer of an application's plan; ``options`` are the Deployer's run options
    (check_mode, wait, wait_timeout, before_step, client_factory, ...)."""
    return Deployer(
        app.name,
        app.namespace,
        rendered_services(app),
        plan,
        targets,
        previous=previous,
        placeholders=placeholders_of(app),
        own_replicas=app.source_format == QONNECT_API_VERSION,
        adopt=options.pop("adopt", None) or app.adopted(),
        **options,
    )
