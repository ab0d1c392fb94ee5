# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The QoS spec's internal model: what the placement engine, the KB and the deployer use.

Both input formats (native.py, qonnect_format.py) produce an :class:`Application`; the KB stores
its ``to_dict()`` and reads it back with ``from_dict()``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError
from ansible_collections.qonnect.core.plugins.module_utils.qos.resources import sum_requests

API_VERSION = "qonnect.io/v1"
KIND = "Application"
TIERS = ("cloud", "fog", "edge", "any")
CRITERIA = ("energy", "cost", "performance", "latency")


class QosSpecError(QonnectError, ValueError):
    """A spec that cannot be used; ``errors`` lists every problem as 'path: what is wrong'."""

    summary = "invalid QoS spec"

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("invalid QoS spec:\n  " + "\n  ".join(self.errors))


@dataclass
class Service:
    """One placeable unit: its manifests go together to the clusters the engine picks."""

    name: str
    tier: str = "any"
    replicas: int = 1
    spread: int = 1
    depends_on: list[str] = field(default_factory=list)
    cluster_selector: dict = field(default_factory=dict)
    filter: str | None = None
    max_latency: list[dict] = field(default_factory=list)
    min_free: dict = field(default_factory=dict)
    # kubeVersion constraints (Helm's syntax): the spec's own and those of the service's charts;
    # a cluster whose Kubernetes version one of them refuses is ineligible (filters.KubeVersion)
    kube_version: list[str] = field(default_factory=list)
    manifests: list[dict] = field(default_factory=list)
    requests: dict = field(default_factory=dict)
    # take over objects with the same kind/namespace/name that qonnect did not apply for this
    # application (k8s/ownership.py); off by default, so nobody's objects are taken silently
    adopt: bool = False

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "tier": self.tier,
            "replicas": self.replicas,
            "spread": self.spread,
            "depends_on": list(self.depends_on),
            "constraints": {
                "cluster_selector": copy.deepcopy(self.cluster_selector),
                "filter": self.filter,
                "max_latency": copy.deepcopy(self.max_latency),
                "min_free": dict(self.min_free),
                # only when set: stored versions without it keep their form
                **({"kube_version": list(self.kube_version)} if self.kube_version else {}),
            },
            "manifests": copy.deepcopy(self.manifests),
            "requests": dict(self.requests),
            **({"adopt": True} if self.adopt else {}),  # only when set: stored versions keep
        }

    @classmethod
    def from_dict(cls, data: dict) -> Service:
        cons = data.get("constraints") or {}
        return cls(
            name=data["name"],
            tier=data.get("tier", "any"),
            replicas=int(data.get("replicas", 1)),
            spread=int(data.get("spread", 1)),
            depends_on=list(data.get("depends_on") or []),
            cluster_selector=copy.deepcopy(cons.get("cluster_selector") or {}),
            filter=cons.get("filter"),
            max_latency=copy.deepcopy(cons.get("max_latency") or []),
            min_free=dict(cons.get("min_free") or {}),
            kube_version=list(cons.get("kube_version") or []),
            manifests=copy.deepcopy(data.get("manifests") or []),
            requests=dict(data.get("requests") or sum_requests(data.get("manifests") or [])),
            adopt=bool(data.get("adopt", False)),
        )


@dataclass
class Application:
    """The normalised application: what the placement engine, the KB and the deployer use."""

    name: str
    namespace: str
    objective: dict
    services: list[Service]
    labels: dict = field(default_factory=dict)
    source_format: str = API_VERSION
    # spec.failureGraceSeconds: how long a workload may stay not ready before it counts as
    # Failed and moves (None: the Deployment's progressDeadlineSeconds, 600 s by default)
    failure_grace_seconds: float | None = None
    # spec.clusterGraceSeconds: how long a cluster running the application may be down (its API
    # unreachable, confirmed by the controller's probe) before the application moves off it;
    # None: the cluster's own grace (its qonnect.io/cluster-grace-seconds label, or the
    # controller's --cluster-grace). Karmada's clusterTolerations, per application.
    cluster_grace_seconds: float | None = None
    adopt: bool = False  # spec.adopt: every service takes over foreign objects in its way
    # spec.survive: the failures the application must outlive, [{"cluster": "any"}] (any one
    # cluster) and/or [{"label": KEY}] (all clusters sharing any one value of KEY, e.g. a site);
    # None: not stated (the survivability report holds it to any one cluster's failure)
    survive: list | None = None
    # spec.failover.hedge: false - never run a second copy while a cluster is only suspect (a
    # singleton, a database primary); the application then moves only once the failure is
    # confirmed (controller/hedging.py)
    hedge: bool = True

    def adopted(self) -> bool | set[str]:
        """What the deployer may take over: True for the whole application, else its services
        that say adopt (an empty set: nothing)."""
        return True if self.adopt else {s.name for s in self.services if s.adopt}

    def service(self, name: str) -> Service:
        for svc in self.services:
            if svc.name == name:
                return svc
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "labels": dict(self.labels),
            "source_format": self.source_format,
            "objective": dict(self.objective),
            "services": [s.to_dict() for s in self.services],
            # only when set: a stored spec without it keeps its version on a re-put
            **(
                {"failure_grace_seconds": self.failure_grace_seconds}
                if self.failure_grace_seconds is not None
                else {}
            ),
            **(
                {"cluster_grace_seconds": self.cluster_grace_seconds}
                if self.cluster_grace_seconds is not None
                else {}
            ),
            **({"adopt": True} if self.adopt else {}),
            **({"survive": [dict(s) for s in self.survive]} if self.survive is not None else {}),
            **({"hedge": False} if not self.hedge else {}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Application:
        return cls(
            name=data["name"],
            namespace=data.get("namespace") or data["name"],
            labels=dict(data.get("labels") or {}),
            source_format=data.get("source_format", API_VERSION),
            objective={k: float(data.get("objective", {}).get(k, 0.0)) for k in CRITERIA},
            services=[Service.from_dict(s) for s in data["services"]],
            failure_grace_seconds=data.get("failure_grace_seconds"),
            cluster_grace_seconds=data.get("cluster_grace_seconds"),
            adopt=bool(data.get("adopt", False)),
            survive=[dict(s) for s in data["survive"]] if isinstance(data.get("survive"), list) else None,
            hedge=data.get("hedge") is not False,
        )
