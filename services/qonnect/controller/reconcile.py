"""Reconcile a cluster that came back: remove what the KB does not place there.

A migration cannot prune a cluster that is down, so the copies it left (workloads, address
stubs pointing at old locations) would run forever. When a cluster the leader saw down is
healthy again - and once for every cluster when a replica becomes leader - the leader lists the
objects labelled ``qonnect.io/application`` on it and removes, through the same deployer the
deploy module uses, every application the KB does not place there, or the services of an
application that the KB placed elsewhere. Each removal is fenced like a migration step.

The same background thread runs the self-heal pass every ``selfheal.INTERVAL`` seconds over
the clusters that are not down: what the KB places there and is missing or was changed out of
band is applied again (services/qonnect/controller/selfheal.py).
"""

from __future__ import annotations

import calendar
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ansible_collections.qonnect.core.plugins.module_utils.fencing import FencedError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import current_placement

from qonnect.controller import journal, selfheal

if TYPE_CHECKING:
    from ansible_collections.qonnect.core.plugins.module_utils.qos import Application

log = logging.getLogger(__name__)

# A deploy applies on its new clusters before it writes the placement (make before break): what
# is younger than this may be a deploy in progress, not an orphan.
MIN_AGE_SECONDS = 60.0


def _created(obj: dict[str, Any]) -> float:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp") or ""
    try:
        return float(calendar.timegm(time.strptime(str(stamp)[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return 0.0


def placed_on(placement: dict[str, Any], cluster: str) -> set[str]:
    """The services of one placement that run on ``cluster``."""
    return {
        svc
        for svc, targets in (placement or {}).items()
        if any(isinstance(t, dict) and t.get("cluster") == cluster for t in targets or [])
    }


def found_on(client: Any) -> dict[str, dict[str, Any]]:
    """app -> {namespace, services (real objects), stubs} of what qonnect applied on a cluster."""
    from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import WORKLOAD_KINDS
    from ansible_collections.qonnect.core.plugins.module_utils.keys import (
        APP_LABEL,
        ROLE_LABEL,
        SERVICE_LABEL,
    )

    found: dict[str, dict[str, Any]] = {}
    kinds = [("apps/v1", k) for k in WORKLOAD_KINDS] + [("v1", "Service"), ("v1", "ConfigMap")]
    for api_version, kind in kinds:
        for obj in client.list(api_version, kind, None, APP_LABEL):
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            entry = found.setdefault(
                labels[APP_LABEL],
                {"namespace": meta.get("namespace"), "services": set(), "objects": 0, "newest": 0.0},
            )
            entry["objects"] += 1
            entry["newest"] = max(entry["newest"], _created(obj))
            if labels.get(ROLE_LABEL) != "address" and labels.get(SERVICE_LABEL):
                entry["services"].add(labels[SERVICE_LABEL])
    for ns in client.list("v1", "Namespace", None, APP_LABEL):
        labels = (ns.get("metadata") or {}).get("labels") or {}
        found.setdefault(
            labels[APP_LABEL],
            {"namespace": ns["metadata"]["name"], "services": set(), "objects": 0, "newest": _created(ns)},
        )
    return found


def reconcile_cluster(
    cluster: str, kb: Any, busy: Callable[[str], bool], before_step: Callable[[str], None]
) -> tuple[list[tuple[str, str]], bool]:
    """Remove from ``cluster`` what the KB does not place there; returns what was done (app,
    text) and whether to look again later (something was too young or busy to judge).

    ``busy(app)`` is true while a migration of the application is in flight (left alone);
    ``before_step`` is the fence check, called before every change.
    """
    records = {c["name"]: c for c in kb.list_clusters()}
    if cluster not in records or not records[cluster].get("kubeconfig"):
        return [], False  # unknown, or no credentials to reach it with
    cluster_pass = _ClusterPass(cluster, kb, records, before_step)
    placements = _placements(kb)
    done = []
    later = False
    for app, seen in sorted(found_on(cluster_pass.client).items()):
        if _too_soon_to_judge(app, seen, busy):
            later = True
            continue
        line = cluster_pass.reconcile(app, seen, placements.get(app) or {})
        if line is not None:
            done.append((app, line))
    return done, later


def _placements(kb: Any) -> dict[str, dict[str, Any]]:
    """app -> where the KB places it now (every placement record, read once per pass)."""
    return {
        p["application"]: current_placement(p) for p in kb.request("GET", "/api/v1/placements")["placements"]
    }


def _too_soon_to_judge(app: str, seen: dict[str, Any], busy: Callable[[str], bool]) -> bool:
    """A migration of it is in flight, or its newest object may belong to a deploy in progress."""
    return busy(app) or time.time() - seen["newest"] < MIN_AGE_SECONDS


class _Spec(NamedTuple):
    """What the KB says an application is; ``application`` None when the KB no longer has it."""

    application: Application | None
    services: dict[str, list[dict[str, Any]]]
    namespace: str


class _ClusterPass:
    """One reconciliation of one cluster: its target and client, the KB's cluster records (the
    targets of a placement's other clusters) and the fence check every change passes."""

    def __init__(
        self, cluster: str, kb: Any, records: dict[str, dict[str, Any]], before_step: Callable[[str], None]
    ) -> None:
        from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import client_of
        from ansible_collections.qonnect.core.plugins.module_utils.k8s.render import record_target

        self.cluster = cluster
        self.kb = kb
        self.records = records
        self.before_step = before_step
        self.target = record_target(cluster, records[cluster])
        self.client = client_of(self.target)

    def reconcile(self, app: str, seen: dict[str, Any], placement: dict[str, Any]) -> str | None:
        """Remove what the KB does not place here of one application: all of it, or the services
        placed elsewhere; what was done, or None when everything found is placed here."""
        here = placed_on(placement, self.cluster)
        extra = seen["services"] - here
        if here and not extra:
            return None
        spec = self._spec(app, seen)
        if not here:
            return self._remove_application(app, seen, spec)
        return self._remove_services(app, spec, placement, extra)

    def _spec(self, app: str, seen: dict[str, Any]) -> _Spec:
        """The application's services and namespace from the KB; an application the KB deleted
        has none (nothing of it should run) and the namespace it was found in."""
        from ansible_collections.qonnect.core.plugins.module_utils.qos import Application

        try:
            spec = self.kb.get_application(app)
            application = Application.from_dict(spec["application"])
        except KBError as exc:
            if exc.status != 404:
                raise
            return _Spec(None, {}, seen["namespace"] or app)
        return _Spec(application, {s.name: s.manifests for s in application.services}, application.namespace)

    def _remove_application(self, app: str, seen: dict[str, Any], spec: _Spec) -> str:
        """The KB places none of the application here: remove all of it from this cluster."""
        from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer

        client = self.client
        deployer = Deployer(
            app,
            spec.namespace,
            spec.services,
            {},
            {self.cluster: self.target},
            previous={self.cluster},
            client_factory=lambda t: client,
            before_step=self.before_step,
        )
        result = deployer.remove()
        return f"removed {app} ({seen['objects']} object(s)): the KB places none of it on {self.cluster}" + (
            f" ({result.get('message')})" if result.get("failed") else ""
        )

    def _remove_services(self, app: str, spec: _Spec, placement: dict[str, Any], extra: set[str]) -> str:
        """Some services are placed elsewhere: converge this cluster to its share of the plan."""
        from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import client_of
        from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer
        from ansible_collections.qonnect.core.plugins.module_utils.k8s.render import (
            application_deployer,
            record_target,
        )

        cluster, client = self.cluster, self.client
        plan = {svc: targets for svc, targets in placement.items() if svc in spec.services}
        clusters = {t["cluster"] for targets in plan.values() for t in targets}
        targets = {name: record_target(name, self.records[name]) for name in clusters if name in self.records}
        options: dict[str, Any] = {
            "client_factory": lambda t: client if t.name == cluster else client_of(t),
            "before_step": self.before_step,
            "wait": False,
        }
        # the same rendering as the deploy module's (grace annotation, placeholders, adoption);
        # a spec the KB lost has nothing to render: its services here are only pruned
        deployer = (
            application_deployer(spec.application, plan, targets, previous={cluster}, **options)
            if spec.application is not None
            else Deployer(app, spec.namespace, spec.services, plan, targets, previous={cluster}, **options)
        )
        converged = deployer.converge(cluster)
        return (
            f"removed {app} service(s) {', '.join(sorted(extra))} from {cluster}: the KB "
            f"places them elsewhere ({converged.status})"
        )


class Reconciler:
    """The leader's queue of clusters to reconcile, worked by one background thread at a time."""

    def __init__(
        self,
        kb: Any,
        busy: Callable[[str], bool],
        still_leader: Callable[[int], bool],
        heal_interval: float = selfheal.INTERVAL,
    ) -> None:
        self.kb = kb
        self.busy = busy
        self.still_leader = still_leader
        self.healer = selfheal.Healer(kb, busy)
        self.heal_interval = heal_interval
        self.heal_at = 0.0  # monotonic time of the next self-heal pass
        self.todo: set[str] = set()
        self.queued: dict[str, float] = {}  # cluster -> the recovery already queued
        self.after: dict[str, float] = {}  # cluster -> look again from then (monotonic)
        self.thread: threading.Thread | None = None

    def everything(self) -> None:
        """A new leader: every cluster once (nobody may have cleaned them)."""
        self.todo = {"*"}

    def tick(
        self, snapshot: Any, memory: Any, down: set[str], term: int | None, token: dict[str, int] | None
    ) -> None:
        """Queue clusters that came back, and start a pass over the ready ones if none runs."""
        self._queue(memory)
        if self.thread is not None and self.thread.is_alive():
            return
        names = [c["name"] for c in snapshot.inventory.get("clusters", [])]
        if "*" in self.todo:
            self.todo = set(names)
        ready = sorted(c for c in self.todo if c not in down)
        heal = sorted(c for c in names if c not in down) if time.monotonic() >= self.heal_at else []
        if not (ready or heal) or term is None or not token:
            return
        self.todo -= set(ready)
        if heal:
            self.heal_at = time.monotonic() + self.heal_interval
        stored = {str(r.get("name")): r for r in snapshot.applications} if heal else None
        self.thread = threading.Thread(
            target=self._run,
            args=(ready, term, dict(token), heal, set(down), stored),
            name="reconcile",
            daemon=True,
        )
        self.thread.start()

    def _queue(self, memory: Any) -> None:
        """Clusters to look at: each recovery once, and those whose last look asked for another."""
        for name, since in memory.recovered_at.items():
            if self.queued.get(name) != since:
                self.queued[name] = since
                self.todo.add(name)
        for name, when in list(self.after.items()):
            if time.monotonic() >= when:
                del self.after[name]
                self.todo.add(name)

    def _run(
        self,
        clusters: list[str],
        term: int,
        token: dict[str, int],
        heal: list[str] | None = None,
        down: set[str] | None = None,
        stored: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        from ansible_collections.qonnect.core.plugins.module_utils.fencing import fence_guard

        guard = fence_guard(self.kb, token)

        def before_step(step: str) -> None:
            if not self.still_leader(term):
                raise FencedError(f"no longer leader of term {term}: stopped before {step}")
            guard(step)  # type: ignore[misc]

        for cluster in clusters:
            try:
                done, later = reconcile_cluster(cluster, self.kb, self.busy, before_step)
            except (KBError, K8sError, FencedError) as exc:  # the KB, the cluster or the fence said no
                log.warning("reconciling %s failed: %s; retried later", cluster, exc)
                later, done = True, []
            except Exception:  # a bug: shown with its traceback; the other clusters still get their turn
                log.exception("reconciling %s failed", cluster)
                later, done = True, []
            if later:
                self.after[cluster] = time.monotonic() + 10.0
            for app, line in done:
                log.warning("reconciled %s: %s", cluster, line)
                try:
                    self.kb.post_event(
                        {
                            "type": journal.RECONCILED,
                            "reason": "orphans-removed",
                            "message": line,
                            "cluster": cluster,
                            "application": app,
                            "fencing": token,
                        }
                    )
                except KBError as exc:
                    log.info("cannot record the reconciliation of %s: %s", cluster, exc)
        if heal:
            self._heal(heal, down or set(), before_step, token, stored)

    def _heal(
        self,
        clusters: list[str],
        down: set[str],
        before_step: Callable[[str], None],
        token: dict[str, int],
        stored: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        try:
            self.healer.run(clusters, down, before_step, token, stored)
        except (KBError, K8sError, FencedError) as exc:
            log.warning("self-heal pass stopped: %s; the next pass tries again", exc)
        except Exception:  # a bug: shown with its traceback; the next pass still runs
            log.exception("self-heal pass failed")
        # what was restored is checked for orphans once it is old enough to be judged: a
        # restore that raced a removal (or a re-placement) is taken away again
        later = time.monotonic() + MIN_AGE_SECONDS + 5.0
        for cluster in self.healer.restored_on:
            self.after[cluster] = max(self.after.get(cluster, 0.0), later)
