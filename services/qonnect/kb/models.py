"""Request and response bodies of the KB API.

Every request model forbids unknown fields and NaN/Infinity and bounds every number and string,
so bad input is a 422 naming the field and never reaches the database (where an out-of-range
integer or a NUL character would otherwise become a 500).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from annotated_types import GroupedMetadata
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from qonnect.kb.jsonsafe import storable_problems

MAX_INT = 2**63 - 1
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
Tier = Literal["cloud", "fog", "edge"]
Role = Literal["admin", "controller", "agent", "reader"]
WorkloadStatus = Literal["Healthy", "Progressing", "Failed"]


def storable(value: str | None) -> str | None:
    """Reject characters that PostgreSQL TEXT or UTF-8 cannot hold."""
    if value is None:
        return None
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must not contain unpaired surrogate characters") from None
    return value


@dataclass(frozen=True)
class Text(GroupedMetadata):
    """``Annotated[str, Text(max, min)]``: a bounded string that both databases can store.

    Metadata rather than a function returning a type, so type checkers see a plain ``str``.
    """

    max_length: int
    min_length: int = 0

    def __iter__(self) -> Iterator[object]:
        yield Field(min_length=self.min_length, max_length=self.max_length)
        yield AfterValidator(storable)


Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]
Labels = Annotated[dict[Annotated[str, Text(317, 1)], Annotated[str, Text(1024)]], Field(max_length=256)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
NonNegative = Annotated[float, Field(ge=0, le=1e300)]


class Strict(BaseModel):
    """Base of request models: unknown fields and non-finite numbers are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Out(BaseModel):
    """Base of response models (documentation only)."""

    model_config = ConfigDict(extra="forbid")


class ErrorField(Out):
    field: str
    message: str


class ErrorBody(Out):
    """Every error answer: ``detail`` says what is wrong and names the field."""

    detail: str
    errors: list[ErrorField] | None = None


# -- clusters -----------------------------------------------------------------------------
class Economics(Strict):
    """A node's costs as the admin registers them: placement ranks clusters by these, so they
    are owned by the registration, never by agent reports (trust.py)."""

    price_eur_h: NonNegative | None = None
    energy_kwh: NonNegative | None = None
    bandwidth_gbps: NonNegative | None = None


class Capacity(Strict):
    """The most a cluster may report in total (over its nodes' allocatable); unset: bounded by
    growth over the first accepted report instead (trust.py)."""

    cpu: NonNegative | None = None
    memory: Count | None = None
    ephemeral_storage: Count | None = None


NodeEconomics = Annotated[
    dict[Annotated[str, Text(253, 1)], Economics],
    Field(max_length=5000, description="per node name; overrides economics for that node"),
]
ECONOMICS_DOC = "every node's price, energy and bandwidth (unless node_economics names the node)"


class ClusterIn(Strict):
    """A cluster record as registered by an admin."""

    name: Name
    tier: Tier
    location: Annotated[str, Text(253, 1)] | None = Field(None, description="defaults to the cluster name")
    server: Annotated[str, Text(2048, 1)] | None = Field(None, description="Kubernetes API URL")
    kubeconfig: Annotated[str, Text(4096, 1)] | None = Field(None, description="credentials: kubeconfig path")
    context: Annotated[str, Text(253, 1)] | None = Field(None, description="credentials: kubeconfig context")
    labels: Labels = Field(default_factory=dict)
    economics: Economics | None = Field(None, description=ECONOMICS_DOC)
    node_economics: NodeEconomics = Field(default_factory=dict)
    capacity: Capacity | None = Field(None, description="the registered maximum of the reported capacity")


class ClusterPut(Strict):
    """PUT body: like ClusterIn, the name comes from the path (if given it must match)."""

    name: Name | None = None
    tier: Tier
    location: Annotated[str, Text(253, 1)] | None = None
    server: Annotated[str, Text(2048, 1)] | None = None
    kubeconfig: Annotated[str, Text(4096, 1)] | None = None
    context: Annotated[str, Text(253, 1)] | None = None
    labels: Labels = Field(default_factory=dict)
    economics: Economics | None = Field(None, description=ECONOMICS_DOC)
    node_economics: NodeEconomics = Field(default_factory=dict)
    capacity: Capacity | None = Field(None, description="the registered maximum of the reported capacity")


class ClusterPatch(Strict):
    """PATCH body: only the fields given change; ``server``/``kubeconfig``/``context`` may be null."""

    # None only as "not given": an explicit null is refused below and absent from the schema
    tier: Tier | SkipJsonSchema[None] = None
    location: Annotated[str, Text(253, 1)] | SkipJsonSchema[None] = None
    server: Annotated[str, Text(2048, 1)] | None = None
    kubeconfig: Annotated[str, Text(4096, 1)] | None = None
    context: Annotated[str, Text(253, 1)] | None = None
    labels: Labels | SkipJsonSchema[None] = None
    economics: Economics | None = None
    node_economics: NodeEconomics | SkipJsonSchema[None] = None
    capacity: Capacity | None = None

    @field_validator("tier", "location", "labels", "node_economics", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("must not be null (leave the field out to keep it)")
        return value


class ClusterStatus(Out):
    seq: int | None = Field(None, description="seq of the newest agent report")
    heartbeat_age: float | None = Field(None, description="seconds since that report arrived")
    healthy: bool
    reachable: bool | None = None
    error: str | None = None


class ClusterOut(Out):
    name: str
    tier: Tier
    location: str
    server: str | None = None
    kubeconfig: str | None = Field(None, description="absent for reader and agent tokens")
    context: str | None = Field(None, description="absent for reader and agent tokens")
    labels: dict[str, str]
    economics: Economics | None = None
    node_economics: dict[str, Economics] | None = None
    capacity: Capacity | None = None
    created: float
    updated: float
    status: ClusterStatus


class ClusterList(Out):
    clusters: list[ClusterOut]


# -- agent reports ------------------------------------------------------------------------
class Pressure(Strict):
    memory: bool = False
    disk: bool = False
    pid: bool = False


class Resources(Strict):
    cpu: NonNegative = 0.0
    memory: Count = 0
    ephemeral_storage: Count = 0


class Taint(Strict):
    """A node taint; NoSchedule/NoExecute ones keep pods that do not tolerate them off the node."""

    key: Annotated[str, Text(317, 1)]
    value: Annotated[str, Text(63)] = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeReport(Strict):
    name: Annotated[str, Text(253, 1)]
    ready: bool
    schedulable: bool = True
    pressure: Pressure = Field(default_factory=Pressure)
    allocatable: Resources = Field(default_factory=Resources)
    requested: Resources = Field(default_factory=Resources)
    labels: Labels = Field(default_factory=dict)
    taints: Annotated[list[Taint], Field(max_length=64)] = Field(default_factory=list)
    # accepted from agents that still send them, never stored: the registration owns them
    bandwidth_gbps: NonNegative | None = Field(None, description="ignored: registered economics")
    energy_kwh: NonNegative | None = Field(None, description="ignored: registered economics")
    price_eur_h: NonNegative | None = Field(None, description="ignored: registered economics")


ECONOMIC_FIELDS = frozenset({"bandwidth_gbps", "energy_kwh", "price_eur_h"})


class WorkloadReport(Strict):
    namespace: Annotated[str, Text(253, 1)]
    kind: Annotated[str, Text(63, 1)]
    name: Annotated[str, Text(253, 1)]
    application: Annotated[str, Text(253)] | None = None
    service: Annotated[str, Text(253)] | None = None
    status: WorkloadStatus
    reason: Annotated[str, Text(16384)] = ""
    replicas: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    ready_replicas: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    since: NonNegative | None = None


class ServerReport(Strict):
    """What the cluster's API server says of itself: charts are rendered for it (issue 34)."""

    kube_version: Annotated[str, Text(64, 1)] = Field(description="/version's gitVersion, e.g. v1.34.4")
    api_versions: Annotated[list[Annotated[str, Text(253, 1)]], Field(max_length=1000)] = Field(
        description="served group-versions (/api and /apis), e.g. v1, apps/v1, autoscaling/v2"
    )


class Report(Strict):
    """One agent report: heartbeat, nodes, workloads and latencies (merge rule in the docs)."""

    seq: Count = Field(description="at most the KB's clock in microseconds plus 60 s (trust.py)")
    ts: NonNegative = Field(description="at most 60 s ahead of the KB's clock")
    reachable: bool = True
    error: Annotated[str, Text(16384)] | None = None
    nodes: Annotated[list[NodeReport], Field(max_length=5000)] | None = Field(
        None, description="null: not observed this time, the stored nodes stay"
    )
    workloads: Annotated[list[WorkloadReport], Field(max_length=20000)] | None = Field(
        None, description="null: not observed this time, the stored workloads stay"
    )
    latencies: Annotated[dict[Annotated[str, Text(253, 1)], NonNegative], Field(max_length=5000)] = Field(
        default_factory=dict, description="round-trip ms to each peer (cluster name or 'kb')"
    )
    server: ServerReport | None = Field(
        None, description="sent on (re)connect and every few minutes; null: the stored one stays"
    )

    @model_validator(mode="after")
    def _unique(self) -> Report:
        if len(self.nodes or ()) < 2 and len(self.workloads or ()) < 2:
            return self  # the common heartbeat: nothing can repeat
        names = [n.name for n in self.nodes or []]
        if len(names) != len(set(names)):
            raise ValueError("nodes: node names must be unique within a report")
        keys = [(w.namespace, w.kind, w.name) for w in self.workloads or []]
        if len(keys) != len(set(keys)):
            raise ValueError("workloads: (namespace, kind, name) must be unique within a report")
        return self


class ReportAck(Out):
    seq: int
    applied: bool = Field(description="false if a newer report was already stored")


class NodeOut(Out):
    name: str
    ready: bool
    schedulable: bool
    pressure: Pressure
    allocatable: Resources
    requested: Resources
    labels: dict[str, str]
    taints: list[Taint] = Field(default_factory=list)
    bandwidth_gbps: float | None = None
    energy_kwh: float | None = None
    price_eur_h: float | None = None
    heartbeat_age: float | None = Field(None, description="seconds since it was last reported")


class NodeList(Out):
    nodes: list[NodeOut]


class WorkloadOut(Out):
    cluster: str
    namespace: str
    kind: str
    name: str
    application: str | None = None
    service: str | None = None
    status: WorkloadStatus
    reason: str
    replicas: int
    ready_replicas: int
    since: float | None = None


class WorkloadList(Out):
    workloads: list[WorkloadOut]


class LatencyMatrix(Out):
    latency_ms: dict[str, dict[str, float]]


# -- applications -------------------------------------------------------------------------
class ApplicationOut(Out):
    name: str
    version: int
    spec: dict[str, Any] = Field(description="the spec as last submitted")
    application: dict[str, Any] = Field(description="the normalised Application (to_dict)")
    created: float
    updated: float
    policy: dict[str, Any] | None = Field(
        None,
        description="the placement policy (scorer, hysteresis, exclude) of the newest applied deploy,"
        " from its deploy.intent event; null: none recorded since the KB keeps it here",
    )
    changed: bool | None = Field(None, description="PUT only: whether a new version was made")


class ApplicationList(Out):
    applications: list[ApplicationOut]


class VersionStatus(Out):
    state: Literal["pending", "ready", "failed"]
    ready: list[str] = Field(description="clusters where the version ran Ready")
    failed: list[str] = Field(description="clusters where a deploy of it failed")
    updated: float | None = None


class VersionOut(Out):
    version: int
    created: float
    spec: dict[str, Any]
    application: dict[str, Any]
    rollback: dict[str, Any] | None = Field(
        None, description="set on a version a rollback stored: failing, restores, by, reason"
    )
    status: VersionStatus | None = Field(
        None, description="where the version ran Ready or failed, from the history (pending: neither yet)"
    )


class VersionList(Out):
    versions: list[VersionOut]


# -- placements ---------------------------------------------------------------------------
class Assignment(Strict):
    cluster: Name
    replicas: Annotated[int, Field(ge=0, le=1_000_000)] = 1
    nodes: Annotated[list[Annotated[str, Text(253, 1)]], Field(max_length=1000)] | None = None
    role: Literal["active", "standby"] | None = Field(
        None, description="standby: a copy made while another cluster is suspect (hedged failover)"
    )


Placement = Annotated[
    dict[Annotated[str, Text(253, 1)], Annotated[list[Assignment], Field(max_length=1000)]],
    Field(max_length=1000, description="service -> the clusters it runs on"),
]


FENCE_MAX = 2**53 - 1  # exact in every JSON parser (IEEE doubles); far beyond any real term
FenceInt = Annotated[int, Field(strict=True, ge=0, le=FENCE_MAX)]


class Fencing(Strict):
    """The controller's fencing token: its Raft term and a sequence number within the term.

    Strict integers (no "9", true or 6.0) up to 2^53-1: a bigger value is no counter a
    controller reaches, only a way to lock the placement (an admin can reset the token).
    """

    term: FenceInt
    seq: FenceInt


class PlacementIn(Strict):
    desired: Placement | None = None
    current: Placement | None = None
    fencing: Fencing | None = Field(None, description="required for controller tokens")


class RollbackIn(Strict):
    """A rollback of a failing version: the spec of an older version stored again as the newest."""

    failing: Annotated[int, Field(strict=True, ge=1, le=MAX_INT)] = Field(
        description="the version that fails; refused with 409 unless it is still the current one"
    )
    restores: Annotated[int, Field(strict=True, ge=1, le=MAX_INT)] = Field(
        description="the older version whose spec is stored again"
    )
    reason: Annotated[str, Text(8000, 1)] = Field(description="why: the clusters and the pods' reasons")
    fencing: Fencing | None = Field(None, description="required for controller tokens")


class RollbackOut(Out):
    version: int = Field(description="the version the rollback stored")
    changed: bool
    rollback: dict[str, Any]


class PlacementOut(Out):
    application: str
    desired: dict[str, list[dict[str, Any]]] | None = None
    current: dict[str, list[dict[str, Any]]] | None = None
    fencing: dict[str, int] | None = None
    updated: float


class PlacementList(Out):
    placements: list[PlacementOut]


# -- events -------------------------------------------------------------------------------
class DecisionRef(Strict):
    """Which controller decision (and attempt) an event is about: structured, never parsed
    from the message."""

    id: Annotated[str, Text(64, 1)]
    term: Count
    seq: Count
    attempt: Annotated[int, Field(ge=1, le=MAX_INT)] | None = None
    exclude: Annotated[list[Annotated[str, Text(253, 1)]], Field(max_length=1000)] = []


# an event type is a dotted word (no spaces, no look-alike characters): what reads as
# "controller.decision" to a person is compared as such (issue 25: " controller.x" was accepted)
EVENT_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"


class EventIn(Strict):
    type: Annotated[str, Text(64, 1), Field(pattern=EVENT_TYPE_PATTERN)] = Field(
        description="a dotted word, e.g. deploy, failure, migration; controller.* (in any case) "
        "only from controller tokens"
    )
    reason: Annotated[str, Text(256)] = ""
    message: Annotated[str, Text(8192)] = ""
    application: Annotated[str, Text(253, 1)] | None = None
    cluster: Annotated[str, Text(253, 1)] | None = None
    ts: NonNegative | None = Field(
        None, description="when it happened; default: receive time; at most 60 s ahead of the KB's clock"
    )
    ref: DecisionRef | None = Field(None, description="the controller decision the event is about")
    data: dict[str, Any] | None = Field(
        None, description="structured data for programs (at most 8 KiB as JSON); the message is prose"
    )
    fencing: Fencing | None = Field(
        None,
        description="required for controller.* events; refused (409) when older than the controller fence",
    )

    @field_validator("data")
    @classmethod
    def _small_data(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        problems = storable_problems(value)
        if problems:
            raise ValueError(problems[0])
        if len(json.dumps(value)) > 8192:
            raise ValueError("at most 8192 characters as JSON")
        return value


class EventOut(Out):
    id: int
    ts: float
    type: str
    reason: str
    message: str
    application: str | None = None
    cluster: str | None = None
    role: str | None = Field(None, description="role of the token that wrote the event")
    ref: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    fencing: dict[str, int] | None = None


# -- history of placement changes ---------------------------------------------------------
Outcome = Literal["succeeded", "failed", "superseded"]
Clusters = Annotated[list[Name], Field(max_length=1000)]


class HistoryChange(Strict):
    """One service's move: the clusters it ran on before and after."""

    service: Annotated[str, Text(253, 1)]
    from_clusters: Clusters = Field(alias="from", description="clusters before (empty: newly placed)")
    to_clusters: Clusters = Field(alias="to", description="clusters after (empty: removed)")

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)


class HistoryIn(Strict):
    """A placement change as its writer saw it end: a user's deploy, or a controller's run."""

    version: Annotated[int, Field(strict=True, ge=1, le=MAX_INT)] | None = Field(
        None, description="the spec version the change placed"
    )
    trigger: Annotated[str, Text(64, 1), Field(pattern=EVENT_TYPE_PATTERN)] = Field(
        description="why: deploy, rollback, cluster-down, qos-drift, spec-changed, ..."
    )
    decision: Annotated[str, Text(64, 1)] | None = Field(None, description="the controller decision id")
    outcome: Outcome
    detail: Annotated[str, Text(2000)] = ""
    started: NonNegative
    ended: NonNegative
    changes: Annotated[list[HistoryChange], Field(min_length=1, max_length=1000)]
    failed_on: Clusters = Field(
        [], description="clusters where the version failed (a failed outcome marks the version failed there)"
    )
    fencing: Fencing | None = Field(None, description="required for controller tokens")


class HistoryOut(Out):
    id: int
    application: str
    version: int | None = None
    service: str
    from_clusters: list[str] = Field(alias="from")
    to_clusters: list[str] = Field(alias="to")
    trigger: str
    by: str | None = Field(None, description="role of the token that recorded it")
    decision: str | None = None
    outcome: str
    detail: str
    started: float
    ended: float
    duration: float

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HistoryList(Out):
    history: list[HistoryOut] = Field(description="newest first")
    next: int | None = Field(None, description="the next page's 'before' (null on the last page)")


class HistoryAck(Out):
    recorded: int = Field(description="rows recorded")


class FenceOut(Out):
    term: int
    seq: int
    updated: float | None = None


class EventList(Out):
    events: list[EventOut]


# -- tokens, health -----------------------------------------------------------------------
class TokenIn(Strict):
    role: Role
    cluster: Name | None = Field(None, description="required for (and only for) role agent")
    name: Annotated[str, Text(128, 1)] | None = None

    @model_validator(mode="after")
    def _cluster_for_agents(self) -> TokenIn:
        if self.role == "agent" and not self.cluster:
            raise ValueError("cluster: is required for role agent")
        if self.role != "agent" and self.cluster:
            raise ValueError("cluster: only an agent token is bound to a cluster")
        return self


class TokenOut(Out):
    token: str = Field(description="shown only once; the KB stores only its hash")
    id: str = Field(description="the token's id, to revoke it (DELETE /api/v1/tokens/{id})")
    name: str
    role: Role
    cluster: str | None = None
    created: float


class TokenInfo(Out):
    id: str = Field(description="the start of the token's hash; names need not be unique")
    name: str
    role: Role
    cluster: str | None = None
    created: float


class TokenList(Out):
    tokens: list[TokenInfo]


class Health(Out):
    status: Literal["ok"]
    schema_version: int
    database: str


# -- inventory ----------------------------------------------------------------------------
class InventoryCluster(Out):
    name: str
    tier: Tier
    location: str
    labels: dict[str, str]
    healthy: bool
    heartbeat_age: float | None = None
    reachable: bool | None = Field(None, description="its agent reached the cluster API (null: no report)")
    error: str | None = Field(None, description="its agent's last error, e.g. why it cannot read the API")
    credentials_broken: bool = Field(
        False, description="the API answers but refuses the agent's credentials (401/403); nodes last-known"
    )
    nodes: list[NodeOut]
    capacity_baseline: dict[str, float] | None = Field(
        None,
        description="the total allocatable of the first node list accepted since the cluster's "
        "(re-)registration: what its reports' capacity is bounded by (kb/trust.py)",
    )
    free: dict[str, float] = Field(
        description="free capacity over the nodes that may run application pods "
        "(placement/model.py Cluster.free)"
    )
    kube_version: str | None = Field(
        None, description="its API server's gitVersion as its agent last read it (null: not reported)"
    )
    api_versions: list[str] = Field(
        default_factory=list, description="the group-versions its API server serves (/api, /apis)"
    )


class Inventory(Out):
    clusters: list[InventoryCluster]
    latency_ms: dict[str, dict[str, float]]
    placements: dict[str, dict[str, list[dict[str, Any]]]]


class InventoryPage(Inventory):
    next: str | None = Field(
        description="the ``after`` of the next page (the last cluster of this one); null on the last page"
    )


class TierCount(Out):
    clusters: int
    healthy: int


class UnhealthyCluster(Out):
    name: str
    tier: Tier
    heartbeat_age: float | None = None
    reachable: bool | None = None
    error: str | None = None


class Summary(Out):
    clusters: int
    healthy: int
    tiers: dict[str, TierCount]
    unhealthy: list[UnhealthyCluster] = Field(description="every cluster that is not healthy, by name")
