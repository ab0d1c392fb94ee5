# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Deploy an application's plan onto its clusters: make before break, in parallel per cluster.

Phases (each runs on all clusters at once, one thread per cluster):

1. make   - create the namespace and apply every service's objects on the clusters that now run
            it, except Services that would replace a live address stub or vice versa;
2. wait   - until the new workloads are ready (timeout); a failure here stops the deploy and
            leaves the previous placement serving;
3. switch - point addresses at the new placement: real Services where a stub was, ExternalName
            stubs everywhere a service no longer runs or moved;
4. break  - delete what qonnect applied but the plan no longer wants, including whole clusters
            that left the plan.

Cross-cluster addresses: on every cluster of the application that does not run service S, each
Service of S is replaced by an ExternalName Service with the same name whose target is
``<name>.<namespace>.svc.<domain>``, where ``<domain>`` is the service domain of a cluster
that runs S (cluster label ``qonnect.io/service-domain``, default ``<cluster>.qonnect.local``).
Multi-cluster DNS (e.g. CoreDNS forwarding per cluster domain, Submariner, Istio) resolves it.
A caller uses the instance on its own cluster; elsewhere, of a service spread over several
clusters, the nearest instance (see ``Deployer.instances``), and the stub lists every instance
in its ``qonnect.io/addresses`` annotation.

Drift: ``drift`` compares one cluster's share with what is live there (missing objects, and
objects qonnect applied whose fields were changed out of band) and ``restore`` re-applies them;
the controller's reconciler uses both to self-heal (services/qonnect/controller/reconcile.py).
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import (
    WORKLOAD_KINDS,
    address_stub,
    apply_one,
    apply_rank,
    autoscaled,
    comparable,
    desired_hash,
    is_stub,
    namespace_object,
    object_key,
    prepare,
    up_to_date,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError, client_of
from ansible_collections.qonnect.core.plugins.module_utils.k8s.namespaces import usable_namespace
from ansible_collections.qonnect.core.plugins.module_utils.k8s.ownership import (
    conflict_line,
    is_system,
    owned_by,
    owner_identity,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.prune import (
    DEFAULT_PRUNE_KINDS,
    delete_namespace,
    deleted_uids,
    prune,
    sweep,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.shared_reads import PARTIAL_LISTS
from ansible_collections.qonnect.core.plugins.module_utils.k8s.waiter import wait_workloads
from ansible_collections.qonnect.core.plugins.module_utils.keys import (
    DOMAIN_LABEL,
    HASH_ANNOTATION,
    ROLE_LABEL,
    SERVICE_LABEL,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import substitute


def service_domain(cluster: str, labels: dict | None = None) -> str:
    """The DNS domain under which other clusters reach this cluster's Services."""
    return (labels or {}).get(DOMAIN_LABEL) or f"{cluster}.qonnect.local"


@dataclass
class Target:
    """A cluster the deploy may touch: its kubeconfig and service domain."""

    name: str
    kubeconfig: str | dict  # a path, or its content (k8s/auth.py)
    context: str | None = None
    domain: str = ""
    address: str = ""  # what QONNECT's [TIER_CLUSTER_IP] placeholders become (default: domain)
    tier: str = ""  # cloud | fog | edge (its KB record): how near a caller an instance is
    location: str = ""

    def __post_init__(self) -> None:
        self.domain = self.domain or service_domain(self.name)
        self.address = self.address or self.domain


@dataclass
class ClusterResult:
    cluster: str
    status: str = "ok"  # ok | failed | unreachable | skipped
    changed: bool = False
    objects: list[dict] = field(default_factory=list)
    not_ready: list[str] = field(default_factory=list)
    # per workload not ready: its pods' own reasons (k8s/reasons.py), as the module returns them
    reasons: list[dict] = field(default_factory=list)
    error: str | None = None
    in_plan: bool = True

    def record(self, outcome: dict) -> None:
        self.objects.append(outcome)
        self.changed = self.changed or outcome["changed"]

    def to_dict(self) -> dict:
        return {
            "cluster": self.cluster,
            "status": self.status,
            "changed": self.changed,
            "in_plan": self.in_plan,
            "objects": [{"key": o["key"], "action": o["action"]} for o in self.objects],
            "not_ready": self.not_ready,
            "reasons": self.reasons,
            "error": self.error,
        }


# Tiers in network order: an edge caller is nearer a fog instance than a cloud one.
TIER_ORDER = ("edge", "fog", "cloud")


def tier_distance(a: str, b: str) -> int:
    """Steps between two tiers (edge-fog-cloud); an unknown tier is farther than any known."""
    if a not in TIER_ORDER or b not in TIER_ORDER:
        return len(TIER_ORDER)
    return abs(TIER_ORDER.index(a) - TIER_ORDER.index(b))


@dataclass
class Drift:
    """One object of a cluster's share that is not as qonnect applied it.

    ``why``: ``missing`` (deleted out of band), ``modified`` (it carries the hash qonnect
    applied but some applied field differs) or ``re-pointed`` (an address stub naming another
    instance than the rule chooses now, e.g. one on a cluster that is down).
    """

    cluster: str
    key: str
    why: str
    desired: dict
    live: dict | None

    @property
    def service(self) -> str:
        return ((self.desired.get("metadata") or {}).get("labels") or {}).get(SERVICE_LABEL) or ""

    def describe(self) -> str:
        """'<Kind> <namespace>/<name>' of the object."""
        return object_header(self.cluster, self.key).split(": ", 1)[1]


def fingerprint(obj: dict | None) -> str:
    """A digest of a live object without status and server-kept metadata: the same digest
    means nothing was changed since it was last looked at."""
    return desired_hash(comparable(obj) or {})


@dataclass
class _ClusterWork:
    result: ClusterResult
    client: Any = None
    desired: list[dict] = field(default_factory=list)
    live: dict[str, dict] = field(default_factory=dict)
    namespace_live: dict | None = None
    workloads: list[tuple[str, str]] = field(default_factory=list)
    rolled_back: list[dict] = field(default_factory=list)
    foreign: list[dict] = field(default_factory=list)  # live objects in the way, not ours
    adopted: set[str] = field(default_factory=set)  # keys of foreign objects taken over


def _namespaced(obj: dict) -> bool:
    """Prepared objects carry the application's namespace unless their kind is cluster-scoped."""
    return bool((obj.get("metadata") or {}).get("namespace"))


def _deferred(desired: dict, live: dict | None) -> bool:
    """Address switches wait until the new placement is ready (phase 3)."""
    if desired["kind"] != "Service" or live is None:
        return False
    return is_stub(desired) or is_stub(live)


def _is_address(obj: dict) -> bool:
    """An address stub qonnect renders (it holds no content of the application's own)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return is_stub(obj) and labels.get(ROLE_LABEL) == "address"


# Seconds a deploy waits for its new workloads to be ready: sized for real image pulls and
# Kubernetes' own pace (a pulled image, a scheduled pod, a Service's endpoints), not for the
# emulator's 0.3 s pods. The module option, the playbooks and the controller's migrations
# default to it; the controller gives each migration run this much plus RUN_OVERHEAD.
DEFAULT_WAIT_TIMEOUT = 300.0
# Seconds between two fence checks of a run waiting on a rollout (Deployer._poll_hook)
FENCE_POLL_SECONDS = 5.0


class Deployer:
    """Runs the four phases for one application; see the module docstring."""

    def __init__(
        self,
        application: str,
        namespace: str,
        services: dict[str, list[dict]],
        plan: dict[str, list[dict]],
        targets: dict[str, Target],
        previous: set[str] | None = None,
        check_mode: bool = False,
        wait: bool = True,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        client_factory: Callable[[Target], Any] | None = None,
        before_step: Callable[[str], None] | None = None,
        placeholders: dict[str, str] | None = None,
        own_replicas: bool = False,
        fencing: dict | None = None,
        adopt: bool | set[str] | frozenset[str] = False,
        unavailable: set[str] | frozenset[str] = frozenset(),
        min_ready_seconds: float = 0.0,
        progress: Callable[[str, list[str]], None] | None = None,
        hold: set[str] | frozenset[str] = frozenset(),
    ):
        self.application = application
        # called by each cluster's wait with the workloads still pending (the deploy runner
        # reports progress from it); must not raise
        self.progress = progress
        self.namespace = namespace
        self.identity = owner_identity(application, namespace)
        # True: take over every foreign object in the way; a set: only those of these services
        self.adopt = adopt
        self.services = services
        self.plan = plan
        self.targets = targets
        self.check_mode = check_mode
        self.wait = wait
        self.wait_timeout = wait_timeout
        # a workload without minReadySeconds is ready once its pods stayed Ready this long
        # (k8s/readiness.ReadyWindow; deploy's option min_ready_seconds)
        self.min_ready_seconds = max(0.0, float(min_ready_seconds or 0.0))
        self.client_factory = client_factory or client_of
        self.before_step = before_step  # e.g. the controller's fence check; raises to stop
        # the controller's token, stamped on every object written (a fence guard carries it)
        self.fencing = fencing or getattr(before_step, "token", None)
        # service -> placeholder replaced in every manifest by the address of its cluster
        self.placeholders = dict(placeholders or {})
        # QONNECT's bundles keep their Deployments' own replica counts
        self.own_replicas = own_replicas
        self.previous = set(previous or ())
        placed = {e["cluster"] for entries in plan.values() for e in entries}
        # clusters of the plan this run does not touch (a suspect cluster while a standby copy
        # is made elsewhere, controller/hedging.py): their share stays as it is, and addresses
        # prefer every other instance
        self.held = sorted(placed & set(hold))
        # clusters judged down: an address names an instance there only when no other runs
        self.unavailable = frozenset(unavailable) | frozenset(self.held)
        self.plan_clusters = sorted(placed - set(self.held))
        self.old_clusters = sorted(set(previous or ()) - placed)
        missing = [c for c in self.plan_clusters + self.old_clusters + self.held if c not in targets]
        if missing:
            raise ValueError("no kubeconfig known for cluster(s): " + ", ".join(missing))
        unknown = sorted(set(plan) - set(services))
        if unknown:
            raise ValueError("the plan names service(s) the application lacks: " + ", ".join(unknown))
        self.work: dict[str, _ClusterWork] = {
            c: _ClusterWork(ClusterResult(c, in_plan=c in self.plan_clusters))
            for c in self.plan_clusters + self.old_clusters
        }

    # -- desired state -------------------------------------------------------------------
    def instances(self, service: str, caller: str) -> list[str]:
        """The clusters that run ``service``, in the order a caller on ``caller`` prefers them:
        its own cluster; then instances not on an unavailable cluster; the same location; the
        nearest tier (edge-fog-cloud); and last a stable hash of (caller, service, cluster), so
        callers on different clusters spread over equally near instances."""
        hosts = sorted({e["cluster"] for e in self.plan.get(service, [])})
        here = self.targets.get(caller)

        def rank(host: str) -> tuple:
            there = self.targets[host]
            same_place = bool(here and here.location and here.location == there.location)
            spread = hashlib.sha256(f"{caller}/{service}/{host}".encode()).hexdigest()
            return (
                host != caller,
                host in self.unavailable,
                not same_place,
                tier_distance(here.tier if here else "", there.tier),
                spread,
            )

        return sorted(hosts, key=rank)

    def _address(self, service: str, caller: str) -> dict[str, list[str]]:
        """Service object name -> its addresses for a caller on ``caller``, preferred first."""
        domains = [self.targets[h].domain for h in self.instances(service, caller)]
        return {
            m["metadata"]["name"]: [f"{m['metadata']['name']}.{self.namespace}.svc.{d}" for d in domains]
            for m in self.services[service]
            if m.get("kind") == "Service"
        }

    def replacements(self, caller: str) -> dict[str, str]:
        """Placeholder -> address of the instance of its service that ``caller`` prefers
        (QONNECT's bundles)."""
        return {
            token: self.targets[self.instances(service, caller)[0]].address
            for service, token in self.placeholders.items()
            if self.plan.get(service)
        }

    def _namespace_manifests(self) -> list[dict]:
        """The Namespace objects the application's manifests give: merged into its namespace."""
        return [
            m
            for ms in self.services.values()
            for m in ms
            if isinstance(m, dict) and m.get("kind") == "Namespace"
        ]

    def adopts(self, obj: dict) -> bool:
        """True when the application takes over a foreign object like this one (adopt option)."""
        if self.adopt is True:
            return True
        service = ((obj.get("metadata") or {}).get("labels") or {}).get(SERVICE_LABEL)
        return bool(self.adopt) and service in self.adopt  # type: ignore[operator]

    def desired_for(self, cluster: str) -> list[dict]:
        """Every object of this cluster's share, in apply order (namespace, accounts, config,
        Services, then workloads)."""
        objs = [namespace_object(self.namespace, self.application, self._namespace_manifests())]
        replacements = self.replacements(cluster)
        for service in sorted(self.services):
            entries = [e for e in self.plan.get(service, []) if e["cluster"] == cluster]
            if entries:
                entry = entries[0]
                replicas = None if self.own_replicas else entry.get("replicas")
                scaled = autoscaled(self.services[service])
                for manifest in self.services[service]:
                    if manifest.get("kind") == "Namespace":
                        continue
                    named = (manifest.get("kind"), (manifest.get("metadata") or {}).get("name"))
                    objs.append(
                        prepare(
                            substitute(manifest, replacements) if replacements else manifest,
                            self.application,
                            service,
                            self.namespace,
                            None if named in scaled else replicas,
                            entry.get("nodes") or None,
                        )
                    )
            elif service in self.plan:
                for name, addresses in self._address(service, cluster).items():
                    objs.append(address_stub(name, self.namespace, self.application, service, *addresses))
        return sorted(objs, key=apply_rank)

    # -- phases ----------------------------------------------------------------------------
    def _each(self, clusters: list[str], step: Callable[[_ClusterWork], None]) -> None:
        """Run `step` on every cluster in parallel; a K8sError marks that cluster failed."""

        def guarded(name: str) -> None:
            work = self.work[name]
            if work.result.status != "ok":
                return
            try:
                step(work)
            except K8sError as exc:
                work.result.status = "unreachable" if exc.status == 0 else "failed"
                work.result.error = exc.message
            except ValueError as exc:
                work.result.status = "failed"
                work.result.error = str(exc)

        if not clusters:
            return
        with ThreadPoolExecutor(max_workers=min(16, len(clusters))) as pool:
            list(pool.map(guarded, clusters))

    def _discover(self, work: _ClusterWork) -> None:
        """Every kind this cluster will get is served there (checked on all before any write)."""
        target = self.targets[work.result.cluster]
        work.client = self.client_factory(target)
        missing = []
        for api_version, kind in sorted({(o["apiVersion"], o["kind"]) for o in work.desired}):
            try:
                work.client.resource(api_version, kind)
            except K8sError as exc:
                if exc.status != 404:
                    raise
                missing.append(f"{api_version} {kind}")
        if missing:
            raise K8sError(
                work.result.cluster,
                "the cluster does not serve " + ", ".join(missing) + "; nothing was applied anywhere",
                404,
            )

    def _snapshot(self, work: _ClusterWork, prunable: bool = True) -> None:
        """Every live object with a desired object's identity, whoever owns it (so check mode
        shows the real ``before`` and nothing foreign is overwritten), plus this application's
        own objects of the prunable kinds (``prunable``; a drift check needs only the desired
        ones); foreign ones in the way go to ``work.foreign``.

        Cluster-scoped objects are looked up whether or not the namespace exists yet: a first
        deploy must not take over a team's ClusterRole either. A client whose lists hold only
        qonnect's objects (k8s/shared_reads.py) is asked for each desired object its lists
        lacked, so an unlabelled one in the way is seen."""
        target = self.targets[work.result.cluster]
        work.client = self.client_factory(target)
        work.live, work.foreign = {}, []
        work.namespace_live = usable_namespace(work.client, self.namespace, self.wait_timeout)
        for obj in self._cluster_scoped(work):
            self._note(work, obj, wanted=True)
        if work.namespace_live is None:
            return
        wanted = {object_key(o) for o in work.desired}
        kinds = {(o["apiVersion"], o["kind"]) for o in work.desired if _namespaced(o)}
        if prunable:
            kinds.update(DEFAULT_PRUNE_KINDS)
        for api_version, kind in sorted(kinds):
            for obj in work.client.list(api_version, kind, self.namespace):
                self._note(work, obj, object_key(obj) in wanted)
        if getattr(work.client, PARTIAL_LISTS, False):
            for obj in work.desired:
                if _namespaced(obj) and object_key(obj) not in work.live:
                    meta = obj["metadata"]
                    live = work.client.get(
                        obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")
                    )
                    if live is not None:
                        self._note(work, live, True)

    def _cluster_scoped(self, work: _ClusterWork) -> list[dict]:
        """The live objects with the identity of a desired cluster-scoped object (not the
        Namespace, judged on its own: a shared one is left as it is)."""
        found = []
        for obj in work.desired:
            if obj["kind"] == "Namespace" or _namespaced(obj):
                continue
            live = work.client.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
            if live is not None:
                found.append(live)
        return found

    def _note(self, work: _ClusterWork, obj: dict, wanted: bool) -> None:
        """Record one live object: ours, or in the way of a desired one (foreign unless it is
        Kubernetes' own)."""
        key = object_key(obj)
        if owned_by(obj, self.application, self.identity):
            work.live[key] = obj
        elif wanted:
            work.live[key] = obj
            if not is_system(obj):
                work.foreign.append(obj)

    def _claim(self, work: _ClusterWork) -> None:
        """Find what is in the way on this cluster; adopted objects are taken over by _make."""
        self._snapshot(work)
        desired = {object_key(o): o for o in work.desired}
        blocking = []
        for live in work.foreign:
            key = object_key(live)
            if self.adopts(desired[key]):
                work.adopted.add(key)
            else:
                blocking.append(live)
        work.foreign = blocking

    def refusal(self, clusters: list[str]) -> str:
        """One message naming every foreign object in the way on every cluster."""
        lines = [conflict_line(c, o) for c in clusters for o in self.work[c].foreign]
        return (
            f"refusing to deploy {self.application}: {len(lines)} object(s) with the same kind, "
            "namespace and name exist and are not owned by it (nothing was changed; set "
            "adopt: true on the application or the service to take them over): " + "; ".join(lines)
        )

    def _live(self, work: _ClusterWork, obj: dict) -> dict | None:
        if obj["kind"] == "Namespace":
            return work.namespace_live
        return work.live.get(object_key(obj))

    def _apply(self, work: _ClusterWork, obj: dict, live: dict | None) -> None:
        """Apply one object; a taken-over foreign object is reported as ``adopt`` in the diff."""
        if (
            obj["kind"] == "Namespace"
            and live is not None
            and not owned_by(live, self.application, self.identity)
        ):
            return  # a namespace another application or a team made: shared, left as it is
        outcome = apply_one(work.client, obj, live, self.check_mode, self.fencing)
        if object_key(obj) in work.adopted:
            outcome.update(action="adopt", changed=True, before=comparable(live))
            outcome.setdefault("after", comparable(obj))
        work.result.record(outcome)

    def _make(self, work: _ClusterWork) -> None:
        for obj in work.desired:
            live = self._live(work, obj)
            if not _deferred(obj, live):
                self._apply(work, obj, live)
            if obj["kind"] in WORKLOAD_KINDS:
                work.workloads.append((obj["kind"], obj["metadata"]["name"]))

    def _wait(self, work: _ClusterWork, deadline: float) -> None:
        if self.check_mode or not self.wait:
            return
        started = time.monotonic()
        pending = wait_workloads(
            work.client,
            self.namespace,
            self.application,
            work.workloads,
            max(0.0, deadline - time.monotonic()),
            min_ready=self.min_ready_seconds,
            on_poll=self._poll_hook(work.result.cluster),
        )
        if pending:
            work.result.status = "failed"
            work.result.not_ready = [n.line() for n in pending]
            work.result.reasons = [n.to_dict() for n in pending]
            waited = time.monotonic() - started
            # a rollout Kubernetes (or a crash loop) declared failed returns before the timeout
            seconds = min(waited, self.wait_timeout)
            work.result.error = f"not ready after {seconds:.0f}s: {_joined(work.result.not_ready)}"

    def _poll_hook(self, cluster: str) -> Callable[[list[str]], None] | None:
        """What a long wait calls on each poll: the progress hook, and every FENCE_POLL_SECONDS
        the before_step check (a controller's run that a newer leader or a user's newer version
        overtook stops now, not at the end of its wait: raises, and the cluster fails with why)."""
        if self.progress is None and (self.before_step is None or self.check_mode):
            return None
        last = [time.monotonic()]

        def hook(pending: list[str]) -> None:
            if self.progress is not None:
                self.progress(cluster, pending)
            if self.before_step is not None and not self.check_mode:
                now = time.monotonic()
                if now - last[0] >= FENCE_POLL_SECONDS:
                    last[0] = now
                    self.before_step("wait")

        return hook

    def _switch(self, work: _ClusterWork) -> None:
        for obj in work.desired:
            live = self._live(work, obj)
            if _deferred(obj, live):
                self._apply(work, obj, live)

    def _break(self, work: _ClusterWork) -> None:
        if work.client is None:  # a cluster leaving the plan: only pruned
            work.client = self.client_factory(self.targets[work.result.cluster])
        keep = {object_key(o) for o in work.desired}
        kinds = sorted({(o["apiVersion"], o["kind"]) for o in work.desired if o["kind"] != "Namespace"})
        kinds = list(DEFAULT_PRUNE_KINDS) + [k for k in kinds if k not in DEFAULT_PRUNE_KINDS]
        pruned = prune(
            work.client, self.namespace, self.application, keep, kinds, self.check_mode, self.identity
        )
        for outcome in pruned:
            work.result.record(outcome)
        if not work.result.in_plan:
            for outcome in delete_namespace(
                work.client,
                self.namespace,
                self.application,
                self.check_mode,
                self.identity,
                kinds,
                deleted_uids(pruned),
            ):
                work.result.record(outcome)

    def _step(self, name: str) -> None:
        """Call the before_step hook before a step that changes clusters."""
        if self.before_step is not None and not self.check_mode:
            self.before_step(name)

    def converge(self, cluster: str) -> ClusterResult:
        """Bring one cluster to its share of the plan now, without waiting for readiness: apply
        what it should run, switch the addresses, prune what it should not run (before_step runs
        before each of the three). The controller's reconciler uses it on a cluster that holds
        services the KB places elsewhere; ``run`` is the all-or-nothing deploy of every cluster.
        """
        work = self.work[cluster]
        work.desired = self.desired_for(cluster)
        self._each([cluster], self._claim)
        if work.foreign:
            work.result.status, work.result.error = "failed", self.refusal([cluster])
            return work.result
        for name, step in (("apply", self._make), ("switch", self._switch), ("prune", self._break)):
            self._step(name)
            self._each([cluster], step)
        return work.result

    def drift(self, cluster: str) -> list[Drift]:
        """What of this cluster's share is missing or was changed out of band (reads only).

        An object counts when it is absent, or when it carries the hash of the object qonnect
        renders now but an applied field differs (``kubectl edit``, ``scale``, ``set image``);
        fields others added are not drift. An object with another hash was written for another
        version of the application (a deploy changes versions, not a restore); a foreign one
        is not ours to touch. Address stubs are re-pointed when the rule names another
        instance. Raises K8sError when the cluster cannot be read.
        """
        work = self.work[cluster]
        work.desired = self.desired_for(cluster)
        self._snapshot(work, prunable=False)
        out = []
        for obj in work.desired:
            live = self._live(work, obj)
            key = object_key(obj)
            if live is None:
                out.append(Drift(cluster, key, "missing", obj, None))
                continue
            meta = live.get("metadata") or {}
            if (
                meta.get("deletionTimestamp")
                or not owned_by(live, self.application, self.identity)
                or up_to_date(live, obj)
            ):
                continue
            same_version = (meta.get("annotations") or {}).get(HASH_ANNOTATION) == obj["metadata"][
                "annotations"
            ][HASH_ANNOTATION]
            if same_version:
                out.append(Drift(cluster, key, "modified", obj, live))
            elif _is_address(obj) and _is_address(live):
                out.append(Drift(cluster, key, "re-pointed", obj, live))
        return out

    def restore(self, drifts: list[Drift]) -> list[dict]:
        """Re-apply drifted objects of one cluster (from ``drift``), the fence checked before
        each; returns apply_one's outcome per object (``changed`` False: the server kept it as
        it was, e.g. a value it normalises)."""
        outcomes = []
        for item in drifts:
            work = self.work[item.cluster]
            work.client = work.client or self.client_factory(self.targets[item.cluster])
            self._step(f"restore {item.describe()} on {item.cluster}")
            outcomes.append(apply_one(work.client, item.desired, item.live, False, self.fencing))
        return outcomes

    def run(self) -> dict:
        """Apply the plan; returns {changed, failed, message, clusters, diff}."""
        for cluster in self.plan_clusters:
            self.work[cluster].desired = self.desired_for(cluster)
        self._each(self.plan_clusters, self._discover)
        refused = [c for c in self.plan_clusters if self.work[c].result.status != "ok"]
        if refused:
            for cluster in self.plan_clusters + self.old_clusters:
                if cluster not in refused:
                    self.work[cluster].result.status = "skipped"
            return self._summary(refused)
        self._each(self.plan_clusters, self._claim)
        blocked = [c for c in self.plan_clusters if self.work[c].foreign]
        failed = [c for c in self.plan_clusters if self.work[c].result.status != "ok"]
        if blocked or failed:
            message = self.refusal(blocked) if blocked else ""
            for cluster in self.plan_clusters + self.old_clusters:
                result = self.work[cluster].result
                if cluster in blocked:
                    result.status, result.error = "failed", message
                elif cluster not in failed:
                    result.status = "skipped"
            summary = self._summary(blocked + [c for c in failed if c not in blocked])
            if blocked:
                summary["message"] = message
            return summary
        deadline = time.monotonic() + self.wait_timeout
        self._step("apply")
        self._each(self.plan_clusters, self._make)
        self._each(self.plan_clusters, lambda w: self._wait(w, deadline))
        failed = [c for c in self.plan_clusters if self.work[c].result.status != "ok"]
        if not failed:
            self._step("switch")
            self._each(self.plan_clusters, self._switch)
            failed = [c for c in self.plan_clusters if self.work[c].result.status != "ok"]
        if not failed:
            self._step("prune")
            self._each(self.plan_clusters + self.old_clusters, self._break)
            failed = [c for c in self.plan_clusters if self.work[c].result.status != "ok"]
        else:
            for cluster in self.old_clusters:
                self.work[cluster].result.status = "skipped"
            self._roll_back()
        return self._summary(failed)

    def _roll_back(self) -> None:
        """After a failed deploy, remove everything from clusters that did not serve before.

        A first deploy leaves nothing behind; a re-placement keeps the previous placement
        serving on its clusters (as before) and clears only the clusters it was adding.
        """
        if self.check_mode:
            return
        added = [c for c in self.plan_clusters if c not in self.previous]
        if not added:
            return
        self._step("rollback")  # a newer controller decision may own these clusters now

        def clear(work: _ClusterWork) -> None:
            outcomes = []
            try:
                client = work.client or self.client_factory(self.targets[work.result.cluster])
                outcomes = sweep(client, self.application, self.kinds(), False, self.identity)
            except K8sError as exc:
                work.result.error = f"{work.result.error}; roll-back failed: {exc.message}"
            work.rolled_back = outcomes

        with ThreadPoolExecutor(max_workers=max(1, min(16, len(added)))) as pool:
            list(pool.map(lambda c: clear(self.work[c]), added))

    def kinds(self) -> list[tuple[str, str]]:
        """Kinds to look for when sweeping: the defaults plus every kind the application has."""
        own = sorted(
            {
                (m["apiVersion"], m["kind"])
                for ms in self.services.values()
                for m in ms
                if isinstance(m, dict)
                and isinstance(m.get("apiVersion"), str)
                and isinstance(m.get("kind"), str)
                and m["kind"] != "Namespace"
            }
        )
        return list(DEFAULT_PRUNE_KINDS) + [k for k in own if k not in DEFAULT_PRUNE_KINDS]

    def remove(self) -> dict:
        """Delete everything this application identity owns on every given cluster (a sweep by
        the qonnect.io/application label in all namespaces, keeping only what carries exactly
        this ``<namespace>/<app>``, then its namespace when nothing foreign is left there)."""
        self._step("remove")
        self.old_clusters = sorted(set(self.plan_clusters) | set(self.old_clusters))
        self.plan_clusters = []
        for work in self.work.values():
            work.result.in_plan = False
            work.desired = []

        def clear(work: _ClusterWork) -> None:
            work.client = self.client_factory(self.targets[work.result.cluster])
            for outcome in sweep(work.client, self.application, self.kinds(), self.check_mode, self.identity):
                work.result.record(outcome)

        self._each(self.old_clusters, clear)
        failed = [r.cluster for r in (w.result for w in self.work.values()) if r.status != "ok"]
        return self._summary(failed, removing=True)

    def _summary(self, failed: list[str], removing: bool = False) -> dict:
        results = [self.work[c].result for c in sorted(self.work)]
        warnings = [
            f"{r.cluster}: {r.error} (cluster left the plan; its old objects may remain)"
            for r in results
            if not r.in_plan and r.error and not removing
        ]
        diff = [object_diff(r.cluster, o) for r in results for o in r.objects if o["changed"]]
        rolled_back = {c: len(w.rolled_back) for c, w in self.work.items() if w.rolled_back}
        would = "would " if self.check_mode else ""
        if failed:
            what = "removal" if removing else "deploy"
            message = "{} failed on {}".format(
                what, ", ".join(f"{c} ({self.work[c].result.error})" for c in failed)
            )
            if not removing:
                message += (
                    "; nothing was left on clusters it was adding" if rolled_back or not self.previous else ""
                )
                message += "; the previous placement keeps serving" if self.previous else ""
        elif removing:
            touched = sorted(r.cluster for r in results if r.changed)
            message = (f"{would}remove from " + ", ".join(touched)) if touched else "nothing to remove"
        else:
            message = f"{'would deploy' if would else 'deployed'} to " + (
                ", ".join(self.plan_clusters) or "no cluster"
            )
            if self.held:
                message += f" ({', '.join(self.held)} held: not touched)"
        return {
            "changed": any(r.changed for r in results),
            "failed": bool(failed),
            "message": message,
            "warnings": warnings,
            "clusters": {r.cluster: r.to_dict() for r in results},
            "rolled_back": rolled_back,
            "diff": diff,
        }


# Characters of a cluster's error naming the workloads not ready: it is the DeployFailed event's
# message too (the KB takes 8 KiB), so an application with many failing workloads names the first
# ones and counts the rest (each is in the cluster's ``reasons``).
MAX_ERROR = 4000


def _joined(lines: list[str]) -> str:
    """The lines joined by '; ' up to MAX_ERROR characters, then how many more there are."""
    out: list[str] = []
    size = 0
    for i, line in enumerate(lines):
        if out and size + len(line) > MAX_ERROR:
            return "; ".join(out) + f"; and {len(lines) - i} more workload(s) not ready (see reasons)"
        out.append(line[:MAX_ERROR])
        size += len(out[-1]) + 2
    return "; ".join(out)


def object_header(cluster: str, key: str) -> str:
    """'<cluster>: <Kind> <namespace>/<name>' (cluster-scoped: '<cluster>: <Kind> <name>')."""
    kind, namespace, name = key.split("/")[-3:]
    return f"{cluster}: {kind} {namespace + '/' if namespace else ''}{name}"


def object_diff(cluster: str, outcome: dict) -> dict:
    """One Ansible diff entry per changed object (Ansible shows a list of them one by one); a
    foreign object taken over says so in its header, so ``--diff`` shows every adoption."""
    header = object_header(cluster, outcome["key"])
    if outcome.get("action") == "adopt":
        header += " (adopt: taken over from its current owner)"
    return {
        "before_header": header,
        "after_header": header,
        "before": outcome.get("before") or {},
        "after": outcome.get("after") or {},
    }
