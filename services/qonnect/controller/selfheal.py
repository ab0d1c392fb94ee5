"""Restore drift: put back what the KB places on a live cluster, as qonnect applied it.

Agents report the workloads they see, so a Deployment deleted with ``kubectl`` (or by another
tool) is simply not reported, and one edited by hand still looks healthy: nothing else in the
controller notices. Like Argo CD's self-heal, the leader therefore compares, every
``INTERVAL`` seconds, each healthy cluster's share of every placed application - rendered by
the one renderer the deploy module uses (plugins/module_utils/k8s/render.py) - with what is
live there (``Deployer.drift``, on one list per kind and cluster a pass shares among its
applications: k8s/shared_reads.py), and re-applies what is missing or was changed in the fields
qonnect applied (``Deployer.restore``). An application whose last check on a cluster found
nothing is not checked there again while its spec, its placement, the addresses of its
clusters and every list that check read are byte for byte the same (``Healer.clean``).

Confirmed and bounded: a drift counts when two passes ``CONFIRM_SECONDS`` or more apart see
it unchanged under the same placement record; only applications whose placement is settled
(the KB's ``current`` equals its ``desired``: no deploy in progress) and with no migration in
flight; only objects qonnect owns or that are missing; at most ``MAX_RESTORES`` objects per
pass; the fence checked before every write; one KB event per restored object
(``controller.restored``). A cluster where something was restored gets the reconciler's orphan
check once the restored objects are old enough, so a restore that raced a removal is undone.
An application labelled ``qonnect.io/self-heal: "false"`` is only reported
(``controller.drifted``, once per change).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.booleans import parse_bool
from ansible_collections.qonnect.core.plugins.module_utils.errors import InputError
from ansible_collections.qonnect.core.plugins.module_utils.k8s.apply import contains
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError, client_of
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Drift, fingerprint
from ansible_collections.qonnect.core.plugins.module_utils.k8s.render import (
    application_deployer,
    record_target,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.shared_reads import SharedReads
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.keys import SELF_HEAL_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application

log = logging.getLogger(__name__)

RESTORED = "controller.restored"  # an object put back (reason: missing, modified, re-pointed)
DRIFTED = "controller.drifted"  # drift seen on an application that only reports it
INTERVAL = 5.0  # seconds between passes
# a drift is acted on when a pass this much later sees it again unchanged (a deleted Deployment
# is back after two passes: 5-10 s)
CONFIRM_SECONDS = 3.0
RETRY_SECONDS = 60.0  # an object the cluster refused (e.g. invalid there) is tried again after this
MAX_RESTORES = 20  # objects re-applied per pass, over all clusters together

WHY = {
    "missing": "it was missing (deleted out of band)",
    "modified": "it was changed out of band",
    "re-pointed": "its address named another instance",
}


def settled(record: dict[str, Any]) -> dict[str, Any]:
    """The placement of a KB placement record when no deploy is under way, else {}: a deploy
    writes its intent (``desired``) before it touches a cluster and ``current`` after."""
    current, desired = record.get("current") or {}, record.get("desired")
    if desired is not None and desired != current:
        return {}  # a deploy or migration is writing a new placement
    return current


def self_heals(app: Application) -> bool:
    """False when the application asks to only report drift (label qonnect.io/self-heal)."""
    try:
        return parse_bool(app.labels.get(SELF_HEAL_LABEL, True), SELF_HEAL_LABEL)
    except InputError:
        return False  # a value nobody can read is not consent to rewrite objects: report only


def differences(live: Any, desired: Any, path: str = "") -> list[str]:
    """The paths of the desired fields a live object does not hold (for the event's message)."""
    if isinstance(desired, dict) and isinstance(live, dict):
        out = []
        for key, value in desired.items():
            out += differences(live.get(key), value, f"{path}.{key}" if path else str(key))
        return out
    if isinstance(desired, list) and isinstance(live, list) and len(desired) == len(live):
        out = []
        for i, (a, b) in enumerate(zip(live, desired, strict=True)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    return [] if contains(live, desired) else [path or "."]


def describe(app: str, item: Drift, healed: bool) -> str:
    """One event line: what, where, why (with the changed fields of a modified object)."""
    service = f" (service {item.service})" if item.service else ""
    why = WHY.get(item.why, item.why)
    if item.why == "modified":
        fields = differences(item.live, item.desired)
        why += ": " + ", ".join(fields[:5]) + (f" and {len(fields) - 5} more" if len(fields) > 5 else "")
    if item.why == "re-pointed":
        why += f"; now {item.desired['spec'].get('externalName')}"
    verb = "restored" if healed else "drift on"
    tail = "" if healed else " (not restored: the application only reports drift)"
    return f"{verb} {item.describe()} of {app}{service} on {item.cluster}: {why}{tail}"


@dataclass
class _Pass:
    """What one pass reads once and every application's check shares."""

    records: dict[str, dict[str, Any]]
    versions: dict[str, Any]  # app -> its placement record's ``updated`` (a change: a new write)
    down: set[str]
    before_step: Callable[[str], None]
    token: dict[str, int]
    budget: int
    known: dict[str, dict[Any, Any]]  # cluster -> its lists as earlier passes read them
    stored: Mapping[str, dict[str, Any]]  # the application records the leader's tick read
    observed: set[tuple[str, str]] = field(default_factory=set)  # drifts seen in this pass
    visited: set[str] = field(default_factory=set)  # clusters examined to the end
    restored_on: set[str] = field(default_factory=set)
    # one read of each cluster for every application of the pass (k8s/shared_reads.py)
    reads: dict[str, SharedReads] = field(default_factory=dict)
    unchanged: int = 0  # checks left out: nothing they read changed since they found nothing

    def client(self, target: Any) -> SharedReads:
        """The pass's shared reads of a cluster: the deployers' client factory."""
        if target.name not in self.reads:
            self.reads[target.name] = SharedReads(client_of(target), self.known.setdefault(target.name, {}))
        return self.reads[target.name]


class Healer:
    """One leader's drift passes. A drift is acted on when a later pass, ``confirm`` seconds or
    more after the first, sees it again with the same live object and the same placement record:
    a removal sweeping the application's objects before it clears its placement, or a deploy
    between two writes, is not mistaken for drift."""

    def __init__(
        self,
        kb: Any,
        busy: Callable[[str], bool],
        limit: int = MAX_RESTORES,
        confirm: float = CONFIRM_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kb = kb
        self.busy = busy
        self.limit = limit
        self.confirm = confirm
        self.clock = clock
        # (cluster, object key) -> (first seen, fingerprint of the live object, placement version)
        self.pending: dict[tuple[str, str], tuple[float, str, Any]] = {}
        # (cluster, object key) -> fingerprint of the live object last reported as drift or
        # re-applied without effect: not looked at again until it changes
        self.seen: dict[tuple[str, str], str] = {}
        self.restored_on: set[str] = set()  # clusters the last pass restored objects on
        self.refused: dict[tuple[str, str], float] = {}  # (cluster, key) -> retry from (clock)
        # app -> (what identifies its stored version, the spec parsed): parsed once per version
        self.parsed: dict[str, tuple[tuple, Application]] = {}
        self.lists: dict[str, dict[Any, Any]] = {}  # cluster -> SharedReads.known, kept across passes
        # (app, cluster) -> (what its check rendered from, the digest of each list it read) of
        # the last check there that found nothing and read nothing beyond the shared lists
        self.clean: dict[tuple[str, str], tuple[tuple, dict[tuple[str, str], str | None]]] = {}
        self.unchanged = 0  # checks the last pass left out (the tests' and benchmarks' count)

    def run(
        self,
        clusters: list[str],
        down: set[str],
        before_step: Callable[[str], None],
        token: dict[str, int],
        stored: Mapping[str, dict[str, Any]] | None = None,
    ) -> int:
        """One pass over ``clusters`` (the healthy ones); returns the objects re-applied.

        ``stored``: the KB's application records the leader's tick already read (its view,
        kept current by the KB's change feed), so a pass asks the KB only for those it lacks."""
        records = {c["name"]: c for c in self.kb.list_clusters()}
        raw = self.kb.request("GET", "/api/v1/placements")["placements"]
        placements = {p["application"]: settled(p) for p in raw}
        state = _Pass(
            records,
            {p["application"]: p.get("updated") for p in raw},
            down,
            before_step,
            token,
            self.limit,
            self.lists,
            stored or {},
        )
        apps: dict[str, Application | None] = {}
        try:
            for cluster in clusters:
                if self._cluster(cluster, placements, apps, state):
                    state.visited.add(cluster)
        finally:
            self._forget(state)
            self.restored_on = state.restored_on
            self.unchanged = state.unchanged
        return self.limit - state.budget

    def _cluster(
        self,
        cluster: str,
        placements: dict[str, dict[str, Any]],
        apps: dict[str, Application | None],
        state: _Pass,
    ) -> bool:
        """Every application placed on one cluster; False when the pass stopped early there."""
        for app, placement in sorted(placements.items()):
            if state.budget <= 0:
                log.warning("self-heal: %d objects restored, the rest waits for the next pass", self.limit)
                return False
            here = {s for s, ts in placement.items() if any(t.get("cluster") == cluster for t in ts)}
            if not here or self.busy(app):
                continue
            if app not in apps:
                apps[app] = self._application(app, state.stored)
            application = apps[app]
            if application is None:
                continue
            try:
                self._heal(application, placement, cluster, state)
            except K8sError as exc:  # this cluster cannot be read or written now: next pass
                log.info("self-heal of %s on %s: %s", app, cluster, exc)
                if exc.status == 0:  # unreachable: its other applications would only wait too
                    return False
        return True

    def _forget(self, state: _Pass) -> None:
        """Drop what a cluster examined to the end no longer shows (a drift that went away is
        confirmed anew, and reported anew, if it comes back)."""

        def keep(key: tuple[str, str]) -> bool:
            return key[0] not in state.visited or key in state.observed

        self.pending = {k: v for k, v in self.pending.items() if keep(k)}
        self.seen = {k: v for k, v in self.seen.items() if keep(k)}
        now = self.clock()
        self.refused = {k: v for k, v in self.refused.items() if v > now}
        placed = set(state.versions)
        self.parsed = {a: v for a, v in self.parsed.items() if a in placed}
        self.clean = {k: v for k, v in self.clean.items() if k[0] in placed}

    def _application(self, app: str, stored: Mapping[str, dict[str, Any]]) -> Application | None:
        record = stored.get(app)
        if record is None:
            try:
                record = self.kb.get_application(app)
            except KBError as exc:
                if exc.status != 404:
                    raise
                return None  # placed but no spec (being removed): nothing to render
        version = (record.get("version"), record.get("created"), record.get("updated"))
        cached = self.parsed.get(app)
        if cached is not None and cached[0] == version:
            return cached[1]
        parsed = Application.from_dict(record["application"])
        self.parsed[app] = (version, parsed)
        return parsed

    @staticmethod
    def _targets(plan: dict[str, Any], state: _Pass) -> dict[str, Any] | None:
        """The clusters of the application's plan as Targets (None: one lacks credentials in
        the KB; the deploy module, given them by the user, knows more)."""
        names = {t["cluster"] for ts in plan.values() for t in ts}
        records = state.records
        if any(not (records.get(n) or {}).get("kubeconfig") for n in names):
            return None
        return {n: record_target(n, records[n]) for n in names}

    @staticmethod
    def _deployer(app: Application, plan: dict[str, Any], targets: dict[str, Any], state: _Pass) -> Any:
        """The application's deployer for its plan, reading through the pass's shared reads."""
        return application_deployer(
            app,
            plan,
            targets,
            previous=set(),
            client_factory=state.client,
            before_step=state.before_step,
            wait=False,
            wait_timeout=0.0,  # a namespace still terminating: look again next pass
            fencing=state.token,
            unavailable=state.down,
        )

    def _confirmed(self, key: tuple[str, str], live: str, version: Any) -> bool:
        """True when an earlier pass saw the same drift under the same placement long enough ago."""
        first = self.pending.get(key)
        now = self.clock()
        if first is None or first[1:] != (live, version):
            self.pending[key] = (now, live, version)
            return False
        if now - first[0] < self.confirm:
            return False
        del self.pending[key]
        return True

    def _heal(self, app: Application, placement: dict[str, Any], cluster: str, state: _Pass) -> None:
        """Restore (or report) one application's confirmed drift on one cluster."""
        services = {s.name for s in app.services}
        plan = {svc: ts for svc, ts in placement.items() if svc in services}  # its services' share
        targets = self._targets(plan, state)
        if targets is None:
            return
        reads = state.client(targets[cluster])
        basis = self._basis(app, placement, targets, state)
        last = self.clean.get((app.name, cluster))
        if last is not None and last[0] == basis and all(reads.digest(*k) == d for k, d in last[1].items()):
            state.unchanged += 1
            return
        reads.begin()
        deployer = self._deployer(app, plan, targets, state)
        drifts = deployer.drift(cluster)
        digests = {k: reads.digests.get(k) for k in reads.consulted}
        if drifts or reads.fallbacks or None in digests.values():
            self.clean.pop((app.name, cluster), None)
        else:
            self.clean[(app.name, cluster)] = (basis, digests)
        self._act(app, placement, cluster, drifts, deployer, state)

    def _basis(
        self, app: Application, placement: dict[str, Any], targets: dict[str, Any], state: _Pass
    ) -> tuple:
        """What a check renders the application's objects from: its stored spec, its placement
        record, how its clusters are reached and ranked (``Deployer.instances``) and the
        clusters it must not count on."""
        return (
            self.parsed[app.name][0],
            json.dumps(placement, sort_keys=True, default=str),
            state.versions.get(app.name),
            tuple(sorted((n, t.domain, t.address, t.tier, t.location) for n, t in targets.items())),
            tuple(sorted(state.down)),
        )

    def _act(
        self,
        app: Application,
        placement: dict[str, Any],
        cluster: str,
        drifts: list[Drift],
        deployer: Any,
        state: _Pass,
    ) -> None:
        """Report or restore each confirmed drift of one check."""
        heal = self_heals(app)
        for item in drifts:
            key, live = (cluster, item.key), fingerprint(item.live)
            state.observed.add(key)
            if self.seen.get(key) == live or self.refused.get(key, 0.0) > self.clock():
                continue
            if not self._confirmed(key, live, state.versions.get(app.name)):
                continue
            if not heal:
                self.seen[key] = live
                self._event(DRIFTED, app.name, item, describe(app.name, item, False), state.token)
                continue
            if state.budget <= 0 or self.busy(app.name) or not self._still_placed(app.name, placement):
                return
            state.budget -= 1
            try:
                outcome = deployer.restore([item])[0]
            except K8sError as exc:
                if exc.status == 0:
                    raise
                log.warning(
                    "self-heal: cannot restore %s on %s: %s; tried again in %gs",
                    item.describe(),
                    cluster,
                    exc,
                    RETRY_SECONDS,
                )
                self.refused[key] = self.clock() + RETRY_SECONDS
                continue
            if not outcome["changed"]:  # the server keeps it so (a value it normalises)
                self.seen[key] = live
                continue
            state.restored_on.add(cluster)
            line = describe(app.name, item, True)
            log.warning("self-heal: %s", line)
            self._event(RESTORED, app.name, item, line, state.token)

    def _still_placed(self, app: str, placement: dict[str, Any]) -> bool:
        """The placement read at the start of the pass is still the KB's, settled (a deploy
        that started since owns the clusters now)."""
        try:
            return settled(self.kb.get_placement(app)) == placement
        except KBError:
            return False

    def _event(self, etype: str, app: str, item: Drift, line: str, token: dict[str, int]) -> None:
        try:
            self.kb.post_event(
                {
                    "type": etype,
                    "reason": item.why,
                    "message": line,
                    "cluster": item.cluster,
                    "application": app,
                    "fencing": {"term": int(token["term"]), "seq": int(token["seq"])},
                }
            )
        except KBError as exc:
            log.info("cannot record %s: %s", line, exc)
