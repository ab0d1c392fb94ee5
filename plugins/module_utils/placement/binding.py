# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The committed placement of one application: where each service's replicas run (issue 38).

A plan used to change shape on its way from the decision to the cluster (the engine's Plan, the
batch planner's services, the Raft entry checked by one validator, the migration's variables,
the deploy module's stricter validator, the KB's placement). A :class:`Binding` is that one
shape - the application, its spec version, the policy it was placed with, per service its
targets (cluster, replicas, nodes, role) and, for a controller's move, the decision and fencing
token that made it - with one validator (:func:`services_problems`) for every place that takes a
plan from outside. Its ``placement()`` is what the KB stores as the application's desired state.

A target's role is ``active`` (runs and serves, the application's placement) or ``standby``
(a copy the leader made on suspicion that a cluster failed, controller/hedging.py: it runs and
serves callers while that cluster is suspect; it becomes ``active`` when the failure is confirmed
and is removed when the cluster returns within its grace). A plan may also name clusters to
``hold``: part of the placement, but not touched by the run (a suspect cluster's share).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.qos.limits import MAX_REPLICAS

ACTIVE, STANDBY = "active", "standby"
ROLES = (ACTIVE, STANDBY)


class PlanError(InputError):
    """A plan given from outside (a module option, a Raft entry) that is not a services
    mapping; ``errors`` lists every problem, ``path`` the first."""

    summary = "invalid plan"

    def __init__(self, problems: list[str]) -> None:
        path, _sep, problem = problems[0].partition(": ")
        super().__init__(path, problem)
        self.errors = problems if len(problems) > 1 else None


@dataclass(frozen=True)
class Target:
    """Replicas of one service on one cluster (pinned to ``nodes`` when the plan chose them)."""

    cluster: str
    replicas: int = 1
    nodes: tuple[str, ...] = ()
    role: str = "active"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cluster": self.cluster, "replicas": self.replicas}
        if self.nodes:
            out["nodes"] = list(self.nodes)
        if self.role != "active":
            out["role"] = self.role
        return out


@dataclass(frozen=True)
class Binding:
    """Where one application runs, as committed (see the module doc)."""

    application: str
    services: dict[str, tuple[Target, ...]]
    version: int | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    decision: str | None = None
    fencing: dict[str, int] | None = None

    @classmethod
    def from_services(
        cls, application: str, services: Any, path: str = "plan.services", **fields: Any
    ) -> Binding:
        """A Binding of a plan's services mapping; InputError listing every problem."""
        problems = services_problems(services, path)
        if problems:
            raise PlanError(problems)
        targets = {
            str(svc): tuple(
                Target(
                    cluster=e["cluster"],
                    replicas=e.get("replicas", 1),
                    nodes=tuple(e.get("nodes") or ()),
                    role=e.get("role", "active"),
                )
                for e in entries
            )
            for svc, entries in services.items()
        }
        return cls(application, targets, **fields)

    def services_dict(self) -> dict[str, list[dict[str, Any]]]:
        """The services mapping a plan carries: {service: [{cluster, replicas, nodes}]}."""
        return {svc: [t.to_dict() for t in targets] for svc, targets in self.services.items()}

    def placement(self) -> dict[str, list[dict[str, Any]]]:
        """What the KB stores as the application's desired (and, once applied, current) placement:
        every target, a standby with its role (what runs where, and why)."""
        return self.services_dict()

    def clusters(self) -> set[str]:
        return {t.cluster for targets in self.services.values() for t in targets}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"application": self.application, "services": self.services_dict()}
        for key in ("version", "decision", "fencing"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.policy:
            out["policy"] = dict(self.policy)
        return out


def services_problems(services: Any, path: str = "plan.services") -> list[str]:
    """Every reason ``services`` is not a plan's services mapping ({service: [{cluster, replicas,
    nodes, role}]}), each as its path, a colon and what is wrong; [] when it is one."""
    if not isinstance(services, dict):
        return [f"{path}: expected a mapping of service to a list of {{cluster, replicas, nodes}}"]
    problems = []
    for svc, entries in services.items():
        where = f"{path}.{svc}"
        if not isinstance(svc, str) or not svc:
            problems.append(f"{path}: service names must be non-empty strings, got {svc!r}")
            continue
        if not isinstance(entries, list) or not entries:
            problems.append(f"{where}: expected a non-empty list of {{cluster, replicas, nodes}}")
            continue
        for i, entry in enumerate(entries):
            problems += _target_problems(entry, f"{where}[{i}]")
    return problems


def _target_problems(entry: Any, where: str) -> list[str]:
    if not isinstance(entry, dict) or not isinstance(entry.get("cluster"), str) or not entry["cluster"]:
        return [f"{where}: expected {{cluster, replicas, nodes}} with a cluster name"]
    problems = []
    replicas = entry.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        problems.append(f"{where}.replicas: {replicas!r} is not an integer from 1 to {MAX_REPLICAS}")
    nodes = entry.get("nodes")
    if nodes is not None and not (isinstance(nodes, list) and all(isinstance(n, str) for n in nodes)):
        problems.append(f"{where}.nodes: expected a list of node names")
    if entry.get("role", "active") not in ROLES:
        problems.append(f"{where}.role: {entry.get('role')!r} is not one of {', '.join(ROLES)}")
    return problems
