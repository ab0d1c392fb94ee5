"""One controller replica: the loop that turns KB observations into committed decisions and
committed decisions into migration runs.

Safety rules (why the code is shaped like this):
- Only the leader acts, and only after committing a 'leader' entry in its term: that proves a
  majority accepted it and that its state machine holds every earlier decision.
- Nothing runs on an uncommitted decision: 'decide', then 'start' (which issues the attempt's
  fencing token and carries the plan the attempt applies) are committed first, and each is
  written to the KB (the durable record) before the playbook runs.
- One plan per attempt: the leader places every application of a batch once, in one pass over
  its snapshot's inventory with each application's stored policy; the run applies exactly that
  plan. A plan gone stale fails its run, and the next attempt plans afresh.
- A run is cancelled as soon as this replica stops being leader of the term that started it.
- A new leader takes over another leader's running attempt only after that leader's lease ran
  out (it has stepped down and cancelled by then), and first asks the KB whether the attempt
  already succeeded; if so it records that instead of migrating again (exactly once).
- By construction, not by timing: a new leader raises the KB's fence to the token of its leader
  entry before it acts, so every older token (placements, controller events, and the fence check
  the migration makes before each cluster-changing step) is refused from then on; and a run's
  whole process tree dies on cancel and with the replica (proctree).
- Heartbeat staleness counts only after the controller has heard from the KB for a whole
  heartbeat timeout: a KB outage is not a mass failover.
- Before each attempt the exclusions are re-read from current health (never frozen); an
  unplaceable application waits in an explained state with exponential backoff.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent
from ansible_collections.qonnect.core.plugins.module_utils.scorers import DEFAULT_SCORER

from qonnect.controller import journal, moves, proctree, rollback
from qonnect.controller.capacity import CapacityWatch
from qonnect.controller.confirm import Confirmer
from qonnect.controller.detector import (
    VERSION_FAILING,
    Memory,
    Replanner,
    Settings,
    Snapshot,
    Trigger,
    detect,
    down_clusters,
    exclusions_now,
)
from qonnect.controller.executor import CANCELLED, SUCCEEDED, Executor, Outcome
from qonnect.controller.pacing import Pacer
from qonnect.controller.raft import ProposalError, RaftNode, Timing
from qonnect.controller.reconcile import Reconciler
from qonnect.controller.records import RecordCache
from qonnect.controller.replan import BatchPlan, ChangeGate, Planner, PlanRequest, drift_judge
from qonnect.controller.statemachine import PENDING, RETRY, RUNNING
from qonnect.controller.status import Metrics, StatusServer
from qonnect.controller.survival import EVERY, Watch
from qonnect.controller.timeouts import DEFAULT_WAIT_TIMEOUT, RUN_OVERHEAD

log = logging.getLogger("qonnect.controller")

# what the batch plan says of one decision (Controller._plan)
PLANNED, DEFER, HOLD, FREE = "planned", "defer", "hold", "free"
# decisions (or observed versions) committed in one Raft entry: a pass over a fleet-wide
# failure commits once per this many applications (each item is about 0.5 KB)
DECISIONS_PER_ENTRY = 100


def default_concurrency() -> int:
    """Playbook runs at once by default: one per two cores (each run costs ~5 CPU-s and 180 MiB;
    more at once only share the CPU and all finish late together)."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass
class Config:
    """Everything one replica needs; built by cli.py from the command line."""

    self_addr: str
    peers: list[str]
    kb_url: str
    token: str
    token_file: str
    secret: str
    data_dir: str
    playbook: str
    http_host: str = "127.0.0.1"
    http_port: int = 0
    tick: float = 1.0
    commit_timeout: float = 3.0
    max_attempts: int = 4
    backoff: float = 2.0
    defer_max: float = 60.0  # longest wait between checks of an unplaceable application
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT  # each migration's deploy waits this long for readiness
    run_timeout: float = DEFAULT_WAIT_TIMEOUT + RUN_OVERHEAD  # a whole run: the wait plus the rest
    settings: Settings = field(default_factory=Settings)
    timing: Timing = field(default_factory=Timing)
    extravars: dict[str, Any] = field(default_factory=dict)
    name: str = ""  # the operator's name for this replica (--id); Raft knows it by self_addr
    max_concurrent_runs: int = field(default_factory=default_concurrency)  # playbook runs at once
    batch_size: int = 50  # applications one run migrates (one playbook start, one deploy process)
    max_drift_moves_per_minute: float = 2.0  # QoS-drift moves admitted per minute (calm failback)
    intent_ttl: float = DEFAULT_WAIT_TIMEOUT + RUN_OVERHEAD  # a deploy's 'applying' intent holds this long
    rollback: bool = True  # a version failing on max_version_failures clusters rolls back
    survivability_every: float = EVERY  # seconds between survivability checks (0: off; survival.py)
    survive_labels: tuple[str, ...] = ()  # label keys whose every value is a failure scenario


def migration_vars(cfg: Config) -> dict[str, Any]:
    """Variables of every migration run, plus the operator's extra vars. A run applies the plan
    committed with its attempt; without one (no placement engine in the controller) it places
    with the hysteresis the detector judged drift with and the user's stored scorer (no scorer
    is forced here: the deploy module's default applies when the user stored none)."""
    return {
        **cfg.extravars,
        "hysteresis": cfg.settings.hysteresis,
        "wait_timeout": cfg.wait_timeout,
    }


class Controller:
    """A replica: Raft node + detector + executor + status server."""

    def __init__(self, cfg: Config, planner: Planner | None = None, judge_drift: bool = True) -> None:
        """``planner``: the heal's planner (None: each migration places for itself, and no drift
        is judged); ``judge_drift``: whether QoS drift is judged, by that same planner with each
        application's stored policy."""
        from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

        self.cfg = cfg
        self.kb = KBClient(cfg.kb_url, cfg.token, timeout=max(2.0, cfg.tick * 3))
        self.node = RaftNode(cfg.self_addr, cfg.peers, cfg.secret, cfg.data_dir, cfg.timing)
        self.owner = proctree.new_owner(cfg.name or cfg.self_addr)
        self.watchdog = proctree.Watchdog(self.owner)
        self.watchdog.start()  # kills this replica's runs if it dies, even by SIGKILL
        self.executor = Executor(
            cfg.playbook,
            f"{cfg.data_dir}/runs",
            cfg.kb_url,
            cfg.token_file,
            cfg.run_timeout,
            migration_vars(cfg),
            owner=self.owner,
        )
        self.planner = planner  # the plan each attempt applies: one place_many pass per batch
        self.judged_policies: dict[str, tuple[Any, dict[str, Any]]] = {}  # app -> (record key, policy)
        self.replan: Replanner | None = (  # judged again only when what it depends on changed
            ChangeGate(drift_judge(planner, self._judged_policy))
            if planner is not None and judge_drift
            else None
        )
        self.lead_token: dict[str, int] | None = None  # the fence this leader raised in the KB
        self.kb_ok_since: float | None = None  # monotonic start of the current run of good KB reads
        self.deferred_why: dict[str, str] = {}  # decision id -> why it waits (announced once)
        self.reconciler = Reconciler(
            self.kb, lambda app: app in self.node.machine.inflight, self._still_leader
        )
        self.metrics = Metrics()
        self.memory = Memory()
        records = RecordCache(self.kb.list_clusters)  # one read of every record per 30 s, shared
        self.confirmer = Confirmer(records)  # the leader's own probes of suspects
        self.capacity = CapacityWatch(records)  # ... and of capacity claims
        self.survival = Watch(  # the leader's N-1 survivability report, off the tick
            self.kb, (DEFAULT_SCORER, cfg.settings.hysteresis), cfg.survivability_every, cfg.survive_labels
        )
        self.last_tick: float | None = None  # monotonic start of the previous tick (loop lag)
        # a tick this much later than planned: the host (or we) stalled, agents were not heard
        self.stall_limit = max(2.0 * cfg.tick, cfg.settings.heartbeat_timeout / 2)
        # a deposed leader stops within leader_fallback (+ a tick and the runner's cancel poll)
        self.lease_wait = cfg.timing.leader_fallback + 0.5
        self.lead_term: int | None = None
        self.lead_since = 0.0
        self.reconciled = False
        self.runs: dict[str, threading.Thread] = {}  # decision id -> its run (a batch: one thread)
        # decision id -> (the application's placement before its run, when the run began): history
        self.run_from: dict[str, tuple[dict[str, Any], float]] = {}
        self.waiting_slot: list[str] = []  # decisions waiting for a run slot, in order
        self.announced_wait: set[str] = set()
        self.pacer = Pacer(cfg.max_drift_moves_per_minute, cfg.intent_ttl)
        self.finished: queue.Queue[tuple[dict[str, Any], int, dict[str, int], Outcome]] = queue.Queue()
        self.unreported: list[tuple[dict[str, Any], int, dict[str, int], Outcome]] = []
        self.recorded: set[str] = set()  # decisions whose KB decision event this replica wrote or saw
        self.apps: set[str] | None = None
        self.kb_state = "not contacted yet"
        self.why = "starting"
        self.stop_event = threading.Event()
        self.wake = threading.Event()  # a finished run wakes the loop to report it at once
        self.wake_at: float | None = None  # monotonic time to run the next tick at, if sooner
        self.http: StatusServer | None = None
        self._last_kb_ping = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    def start_http(self) -> int:
        self.http = StatusServer(self.cfg.http_host, self.cfg.http_port, self.status, self.metrics)
        self.http.start()
        return self.http.port

    def run_forever(self) -> None:
        log.info(
            "replica %s up: peers %s, KB %s", self.node.node_id, ", ".join(self.cfg.peers), self.cfg.kb_url
        )
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception:  # one bad tick must not kill the replica
                log.exception("controller tick failed")
            pause = self.cfg.tick - (time.monotonic() - started)
            if self.wake_at is not None:  # e.g. a lease that ends before the next tick
                pause = min(pause, self.wake_at - time.monotonic())
                self.wake_at = None
            self.wake.wait(max(0.05, pause))
            self.wake.clear()
        self.shutdown()

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    def shutdown(self) -> None:
        killed = self.executor.kill_all()  # SIGTERM: no run of ours outlives us
        if killed:
            log.warning("stopping: killed %d process(es) of running migrations", killed)
        for thread in list(self.runs.values()):
            thread.join(timeout=5)
        if self.http:
            self.http.stop()
        self.node.destroy()
        self.watchdog.stop()

    # -- one tick ------------------------------------------------------------------------------

    def step(self) -> None:
        self._loop_lag()
        self._collect_finished()
        if not self.node.is_leader():
            if self.lead_term is not None:
                log.warning("no longer leader of term %d", self.lead_term)
            self.lead_term = None
            self.why = self._follower_why()
            self._ping_kb()
            return
        term = self.node.term()
        if self.lead_term != term and not self._take_lead(term):
            return
        if not self.reconciled:
            self._reconcile_lost()
        try:
            read_at = time.monotonic()
            snapshot, placements = journal.read_snapshot(self.kb, time.time())
        except KBError as exc:
            self._kb_heard(False, exc)
            self.why = f"leader of term {term}, but no decisions: cannot read the KB ({exc})"
            return
        self._kb_heard(True)
        self._stalled(time.monotonic() - read_at, "reading the KB took")
        heard_for = time.monotonic() - (self.kb_ok_since or time.monotonic())
        suspects = down_clusters(snapshot, self.cfg.settings)
        snapshot = dataclasses.replace(
            snapshot,
            heard_for=heard_for,
            probes=self.confirmer.probes(suspects),
            unconfirmed=self.capacity.unconfirmed(snapshot.inventory.get("clusters", [])),
        )
        self.apps = {a["name"] for a in snapshot.applications}
        if heard_for < self.cfg.settings.heartbeat_timeout:
            self.why = (
                f"leader of term {term}: the KB answers again since {heard_for:.1f}s; waiting "
                f"{self.cfg.settings.heartbeat_timeout:g}s for agents to report before judging clusters"
            )
            return
        self._drive_open(snapshot)
        if self._detect(snapshot):
            self._drive_open(snapshot)  # start what was just decided now, not a tick later
        down = set(down_clusters(snapshot, self.cfg.settings))
        self.reconciler.tick(snapshot, self.memory, down, self.lead_term, self.lead_token)
        self.survival.tick(snapshot, placements, term, self.lead_token, lambda: self._still_leader(term))

    def _loop_lag(self) -> None:
        """Measure this loop's own lag (time between ticks beyond cfg.tick)."""
        now = time.monotonic()
        if self.last_tick is not None:
            self._stalled(now - self.last_tick - self.cfg.tick, "the controller loop ran late by")
        self.last_tick = now

    def _stalled(self, lag: float, what: str) -> None:
        """After a stall of this host (or of the KB's answers), staleness is not failure: as after
        a KB outage, heartbeats count again only once agents had a whole timeout to be heard."""
        if lag <= self.stall_limit:
            return
        log.warning(
            "%s %.1fs (> %.1fs): this host stalled; judging no cluster by heartbeat age for %gs",
            what,
            lag,
            self.stall_limit,
            self.cfg.settings.heartbeat_timeout,
        )
        if self.kb_ok_since is not None:
            self.kb_ok_since = time.monotonic()

    def _kb_heard(self, ok: bool, exc: Exception | None = None) -> None:
        """Track since when the KB answers without a gap (a gap restarts the heartbeat grace)."""
        if ok:
            self.kb_state = "ok"
            if self.kb_ok_since is None:
                self.kb_ok_since = time.monotonic()
        else:
            self.kb_state = f"unreachable: {exc}"
            self.kb_ok_since = None

    def _take_lead(self, term: int) -> bool:
        """Commit a 'leader' entry (proves a majority, brings the state machine up to date), then
        raise the KB's fence to its token before acting: older leaders' writes are refused."""
        try:  # tokens must stay above what the KB holds, even if every replica lost its log
            floor = journal.kb_floor(
                self.kb.request("GET", "/api/v1/placements")["placements"], journal.fence(self.kb)[0]
            )
        except KBError as exc:
            self._kb_heard(False, exc)
            self.why = f"elected leader of term {term}, but no decisions: cannot read the KB ({exc})"
            return False
        try:
            res = self.node.propose({"op": "leader", "kb_floor": floor}, self.cfg.commit_timeout)
        except ProposalError as exc:
            self.why = f"elected leader of term {term} but no decisions: {exc} (no majority acknowledges it)"
            return False
        if not res.get("ok"):
            self.why = f"leader entry refused: {res.get('why')}"
            return False
        token = res["token"]
        try:
            fence = journal.raise_fence(self.kb, token)
        except KBError as exc:
            self.why = f"elected leader of term {term}, but no decisions: cannot raise the KB fence ({exc})"
            log.warning("leader of term %d: cannot raise the KB fence to %s: %s", term, token, exc)
            return False
        if (fence["term"], fence["seq"]) != (token["term"], token["seq"]):
            self.why = f"leader entry's token {token} is older than the KB fence {fence}"
            return False
        log.warning("became leader of term %d; KB fence raised to %s/%s", term, token["term"], token["seq"])
        self.lead_term, self.lead_since, self.reconciled = term, time.monotonic(), False
        self.lead_token = dict(token)
        self.memory = Memory()
        try:  # what recovered when, as the previous leaders saw it: the same stabilisation window
            journal.seed_memory(
                self.memory,
                journal.recovered_in_kb(self.kb, time.time(), self.cfg.settings.stable_seconds),
            )
        except KBError as exc:
            log.warning("leader of term %d: cannot read recent recoveries from the KB: %s", term, exc)
        self.deferred_why = {}
        self.reconciler.everything()  # every cluster once: nobody may have cleaned them
        return True

    def _still_leader(self, term: int) -> bool:
        return self.node.is_leader() and self.node.term() == term and not self.stop_event.is_set()

    # -- decisions -----------------------------------------------------------------------------

    def _detect(self, snapshot: Snapshot) -> int:
        """Commit decisions for this snapshot's triggers; returns how many were taken."""
        machine = self.node.machine
        triggers, observe = detect(snapshot, machine, self.memory, self.cfg.settings, self.replan)
        self._post_notices()
        self._report_failing([t for t in triggers if t.kind == VERSION_FAILING])
        triggers = [t for t in triggers if t.kind != VERSION_FAILING]
        triggers, observe = self._pace(triggers, observe, snapshot)
        self._propose_chunks("observe_many", "versions", [[app, version] for app, version in observe])
        taken = self._decide_all(triggers, snapshot.now)
        inflight = len(machine.inflight)
        waiting = [
            f"{d['app']} waits ({d['detail']})"
            for d in machine.open_decisions()
            if d["status"] == RETRY and str(d.get("detail", "")).startswith("unplaceable")
        ]
        self.why = (
            f"leader of term {self.lead_term}: watching {len(snapshot.inventory.get('clusters', []))} "
            f"clusters and {len(self.apps or ())} applications; {inflight} migration(s) in flight"
            + "".join(f"; {w}" for w in waiting)
            + ("" if triggers or inflight else "; nothing needs doing")
        )
        return taken

    def _post_notices(self) -> None:
        """Tell the KB what the detector saw without moving anything (once per episode)."""
        notices, self.memory.notices = self.memory.notices, []
        for notice in notices:
            log.warning("cluster %s: %s: %s", notice.cluster, notice.kind, notice.text)
            try:
                journal.post_notice(self.kb, notice, self.lead_token)
            except KBError as exc:
                log.info("cannot record %s of %s: %s", notice.kind, notice.cluster, exc)

    def _report_failing(self, triggers: list[Trigger]) -> None:
        """A version that failed on enough clusters is reported once (per leader), never moved,
        and rolled back to the last version that did not fail (unless --no-rollback)."""
        for trigger in triggers:
            key = (trigger.app, trigger.spec_version, trigger.service)
            if key in self.memory.failing_reported:
                continue
            log.warning("not moving %s: %s", trigger.app, trigger.reason)
            try:
                journal.post_version_failing(self.kb, trigger, self.lead_token)
            except KBError as exc:
                log.info("cannot record the failing version of %s: %s", trigger.app, exc)
                continue
            self.memory.failing_reported.add(key)
            if self.cfg.rollback and (trigger.app, trigger.spec_version) not in self.memory.rollback_tried:
                self.memory.rollback_tried.add((trigger.app, trigger.spec_version))
                self._roll_back(trigger)

    def _roll_back(self, trigger: Trigger) -> None:
        """Store the last version that did not fail again as the newest one (fenced); the next
        ticks place it as a new version. Tried once per failing version and leader."""
        try:
            target, why = rollback.restore_target(
                self.kb.application_versions(trigger.app), trigger.spec_version
            )
            if target is None:
                log.warning("not rolling %s back: %s", trigger.app, why)
                return
            stored = self.kb.roll_back(
                trigger.app, int(trigger.spec_version or 0), target, trigger.reason[:8000], self.lead_token
            )
        except KBError as exc:
            log.warning("cannot roll %s back from version %s: %s", trigger.app, trigger.spec_version, exc)
            return
        log.warning(
            "rolled %s back: version %s fails; version %s's spec stored as version %s (%s)",
            trigger.app,
            trigger.spec_version,
            target,
            stored["version"],
            why,
        )
        try:
            journal.post_rolled_back(self.kb, trigger, target, int(stored["version"]), self.lead_token)
        except KBError as exc:
            log.info("cannot record the rollback of %s: %s", trigger.app, exc)

    def _pace(
        self, triggers: list[Trigger], observe: list[tuple[str, int | None]], snapshot: Snapshot
    ) -> tuple[list[Trigger], list[tuple[str, int | None]]]:
        """pacing.py's rules over the detector's triggers: a spec version a deploy is applying
        is left to it, and QoS-drift (failback) moves are admitted at a bounded rate."""
        return self.pacer.pace(
            triggers,
            observe,
            snapshot.now,
            lambda app: self.kb.list_events(application=app, limit=intent.LOOKBACK),
            self.memory.recovered_at,
            self.cfg.settings.stable_seconds,
            {str(a.get("name")): a for a in snapshot.applications},
        )

    def _decide_all(self, triggers: list[Trigger], now: float) -> int:
        """Commit this pass's decisions, up to DECISIONS_PER_ENTRY in one log entry (a failure
        that hits k applications costs one commit, not k); returns how many were taken."""
        results = self._propose_chunks(
            "decide_many",
            "decisions",
            [
                {
                    "app": t.app,
                    "service": t.service,
                    "kind": t.kind,
                    "reason": t.reason,
                    "exclude": list(t.exclude),
                    "key": t.key,
                    "detected_at": t.failed_at,
                    "spec_version": t.spec_version,
                    "pinned": list(t.pinned),
                }
                for t in triggers
            ],
            ts=now,  # decided at the snapshot's time, as the detector judged it
        )
        # no quorum or leadership lost (None): the next pass decides again
        return sum(1 for t, r in zip(triggers, results, strict=True) if r is not None and self._taken(t, r))

    def _taken(self, trigger: Trigger, res: dict[str, Any]) -> bool:
        """Log, count and record one committed decision (False: the log refused it)."""
        if not res.get("ok"):
            log.info("decision on %s not taken: %s", trigger.app, res.get("why"))
            return False
        decision = self._committed(res["id"])
        self.metrics.count_decision(trigger.kind)
        if trigger.failed_at is not None:
            self.metrics.observe("detection_seconds", max(0.0, time.time() - trigger.failed_at))
        log.warning(
            "decision %s (token %s): re-place %s excluding %s because %s",
            res["id"],
            res["token"],
            trigger.app,
            list(trigger.exclude) or "no cluster",
            trigger.reason,
        )
        self._record(decision, fresh=True)
        return True

    def _record(self, decision: dict[str, Any], fresh: bool = False) -> bool:
        """Write the decision to the KB (once); False if the KB is unreachable. A decision this
        replica did not just take may already be there (written by an earlier leader)."""
        if decision["id"] in self.recorded:
            return True
        try:
            if fresh or not any(
                e["ref"]["id"] == decision["id"] and e["type"] == journal.DECISION
                for e in journal.decision_story(self.kb, decision["app"], limit=50)
            ):
                journal.post(
                    self.kb,
                    journal.DECISION,
                    decision,
                    f"decided to re-place {decision['app']}: {decision['reason']}",
                    fence=self.lead_token,
                )
        except KBError as exc:
            log.warning("cannot record decision %s in the KB: %s", decision["id"], exc)
            return False
        self.recorded.add(decision["id"])
        return True

    def _reconcile_lost(self) -> None:
        """Re-decide decisions the KB recorded but the log lost (every replica lost its data)."""
        machine = self.node.machine
        newest = machine.newest_decision_token()  # not last_token: this leader's own entry issued one
        try:
            apps = [a["name"] for a in self.kb.list_applications()]
            lost = journal.unfinished_in_kb(self.kb, newest, apps)
        except KBError as exc:
            log.info("cannot check the KB for lost decisions yet: %s", exc)
            return
        for event in lost:
            r = event["ref"]
            if event["application"] in machine.inflight:
                continue
            res = self._propose(
                {
                    "op": "decide",
                    "app": event["application"],
                    "kind": event.get("reason") or "recovered",
                    "reason": f"recovered from the KB record of decision {r['id']}: {event['message'][:500]}",
                    "exclude": list(r.get("exclude") or []),
                    "key": f"recovered:{r['id']}",
                    "detected_at": event.get("ts"),
                }
            )
            if res and res.get("ok"):
                log.warning(
                    "decision %s re-committed from the KB record of lost decision %s", res["id"], r["id"]
                )
                self._record(self._committed(res["id"]), fresh=True)
                superseded = {
                    "id": r["id"],
                    "app": event["application"],
                    "kind": event.get("reason") or "",
                    "exclude": r["exclude"],
                    "token": {"term": r["term"], "seq": r["seq"]},
                }
                try:
                    journal.post(
                        self.kb,
                        journal.SUPERSEDED,
                        superseded,
                        f"every replica lost its log; carried on as decision {res['id']}",
                        fence=self.lead_token,
                    )
                except KBError as exc:
                    log.info("could not mark %s superseded: %s", r["id"], exc)
        self.reconciled = True

    # -- migrations ------------------------------------------------------------------------------

    def _drive_open(self, snapshot: Snapshot) -> None:
        """Start what may start, within --max-concurrent-runs playbook runs of up to
        --batch-size applications each; the rest wait in decision order (logged, in status)."""
        machine = self.node.machine
        now = time.time()
        room = self._free_runs() * max(1, self.cfg.batch_size)
        ready: list[dict[str, Any]] = []
        waiting: list[dict[str, Any]] = []
        for decision in machine.open_decisions():
            did = decision["id"]
            if did in self.runs:
                continue
            if self.apps is not None and decision["app"] not in self.apps:
                self._end_decision(decision, "cancel", f"application {decision['app']} was deleted")
                continue
            status = decision["status"]
            if status == RUNNING:
                if not self._may_take_over(decision):
                    continue
                if len(ready) >= room:
                    waiting.append(decision)
                    continue
                if self._completed_before(decision):
                    continue
                log.warning(
                    "decision %s: taking over attempt %d of %s (its leader is gone)",
                    did,
                    decision["attempts"],
                    decision["owner"],
                )
                if self._prepare(decision, snapshot):
                    ready.append(machine.get(did) or decision)
            elif status == PENDING or (status == RETRY and now >= decision["not_before"]):
                if len(ready) >= room:
                    waiting.append(decision)
                elif self._prepare(decision, snapshot):
                    ready.append(machine.get(did) or decision)
                elif status == RETRY:
                    self._gone(decision, snapshot)
            elif status == RETRY:
                self._gone(decision, snapshot)  # a waiting decision ends as soon as its trigger is gone
        size = max(1, self.cfg.batch_size)
        for i in range(0, len(ready), size):
            self._start(ready[i : i + size], snapshot)
        self._queued(waiting)

    def _may_take_over(self, decision: dict[str, Any]) -> bool:
        """A running attempt may be taken over: not our own, and its leader's lease is over."""
        if decision["owner"] == self.node.node_id and decision["attempt_term"] == self.node.term():
            return False  # our own run: its outcome is being reported
        waited = time.monotonic() - self.lead_since
        if waited < self.lease_wait:
            # take over the moment the lease ends, not up to a tick later
            self.wake_at = self.lead_since + self.lease_wait
            log.info(
                "decision %s: waiting %.1fs for the previous leader's lease before taking over",
                decision["id"],
                self.lease_wait - waited,
            )
            return False
        return True

    def _free_runs(self) -> int:
        """Playbook runs that may start now (a batch is one run, whatever its size)."""
        live = {id(t) for t in self.runs.values()}
        return max(0, self.cfg.max_concurrent_runs - len(live))

    def _queued(self, waiting: list[dict[str, Any]]) -> None:
        """Say (once per decision, and in the status) which decisions wait for a run slot."""
        self.waiting_slot = [d["id"] for d in waiting]
        for pos, decision in enumerate(waiting, 1):
            if decision["id"] not in self.announced_wait:
                self.announced_wait.add(decision["id"])
                log.warning(
                    "decision %s: %s waits for a run slot (position %d of %d; %d run(s) of at most "
                    "%d at once, --max-concurrent-runs)",
                    decision["id"],
                    decision["app"],
                    pos,
                    len(waiting),
                    len({id(t) for t in self.runs.values()}),
                    self.cfg.max_concurrent_runs,
                )
        self.announced_wait &= set(self.waiting_slot)

    def _gone(self, decision: dict[str, Any], snapshot: Snapshot) -> bool:
        """End a retried cluster-down decision whose application runs on no down cluster any more."""
        if decision["kind"] != "cluster-down" or decision["attempts"] + decision.get("deferrals", 0) == 0:
            return False
        _must, _unstable, on_down = exclusions_now(
            snapshot, self.memory, self.cfg.settings, decision["app"], decision.get("pinned") or []
        )
        if on_down:
            return False
        self._end_decision(
            decision,
            "cancel",
            f"no longer needed: {decision['app']} runs on no down cluster "
            f"now ({', '.join(decision['exclude']) or 'none'} back or left)",
        )
        return True

    def _prepare(self, decision: dict[str, Any], snapshot: Snapshot) -> bool:
        """Before an attempt: re-read health (exclusions as they are now) and drop a decision whose
        trigger is gone. Whether anything can be placed is the batch plan's to judge (``_plan``:
        a decision nothing fits waits, explained, with backoff)."""
        did, app = decision["id"], decision["app"]
        if self._gone(decision, snapshot):
            return False
        must, unstable, _on_down = exclusions_now(
            snapshot, self.memory, self.cfg.settings, app, decision.get("pinned") or []
        )
        avoid = must | unstable  # the batch plan relaxes ``unstable`` if only they fit (healing first)
        exclude, was = sorted(avoid), list(decision["exclude"])
        if exclude != was:
            res = self._propose({"op": "retarget", "id": did, "exclude": exclude})
            if not res or not res.get("ok"):
                return False
            log.warning(
                "decision %s: exclusions re-read from current health: %s -> %s",
                did,
                ", ".join(was) or "none",
                ", ".join(exclude) or "none",
            )
        if self.planner is None:
            self.deferred_why.pop(did, None)
        return True

    def _defer(self, decision: dict[str, Any], why: str) -> None:
        """No attempt now: nothing can be placed. The decision waits, explained (once per reason,
        in the log and the KB), and is checked again with exponential backoff."""
        did, app = decision["id"], decision["app"]
        current = self.node.machine.get(did) or decision
        wait = min(self.cfg.defer_max, self.cfg.backoff * 2 ** int(current.get("deferrals", 0)))
        detail = f"unplaceable: {why}; next check in {wait:.0f}s"
        res = self._propose({"op": "defer", "id": did, "detail": detail, "not_before": time.time() + wait})
        if res and res.get("ok") and self.deferred_why.get(did) != why:
            self.deferred_why[did] = why
            log.warning("decision %s: %s waits: %s", did, app, detail)
            try:
                journal.post(
                    self.kb,
                    journal.DEFERRED,
                    self.node.machine.get(did) or decision,
                    f"{app} waits: {why}; checked again with exponential backoff",
                    fence=self.lead_token,
                )
            except KBError as exc:
                log.info("cannot record that %s waits: %s", did, exc)

    def _completed_before(self, decision: dict[str, Any]) -> bool:
        """The previous leader's attempt finished (per the KB): record success instead of rerunning."""
        try:
            done = journal.done_in_kb(self.kb, decision)
        except KBError as exc:
            log.warning(
                "decision %s: cannot check the KB record (%s); not taking over yet", decision["id"], exc
            )
            return True
        if not done:
            return False
        res = self._propose(
            {
                "op": "finish",
                "id": decision["id"],
                "attempt": decision["attempts"],
                "result": SUCCEEDED,
                "detail": f"completed by the previous leader: {done}",
                "artifacts": decision.get("artifacts"),
            }
        )
        if res and res.get("ok"):
            log.warning(
                "decision %s: completed by the previous leader (%s); not migrating again",
                decision["id"],
                done,
            )
            try:
                journal.post(
                    self.kb,
                    journal.SUCCEEDED,
                    decision,
                    f"confirmed after leader change: {done}",
                    decision["attempts"],
                    decision["attempt_token"],
                    fence=self.lead_token,
                )
            except KBError as exc:
                log.info("could not post confirmation for %s: %s", decision["id"], exc)
        return True

    def _start(self, decisions: list[dict[str, Any]], snapshot: Snapshot) -> None:
        """Plan the batch once (every application, each with the user's stored policy, in one
        pass over this snapshot's inventory), commit each decision's attempt with its plan, and
        run them as one playbook run: a batch of one is an ordinary single run. A decision whose
        application cannot be placed waits (defer) instead."""
        items: list[tuple[dict[str, Any], dict[str, Any]]] = []
        records = {a.get("name"): a for a in snapshot.applications}
        for decision in decisions:
            if not self._record(decision):
                continue  # the durable record comes first
            policy = self._policy(decision["app"], records.get(decision["app"]))
            if policy is None:
                continue  # the KB cannot say how the user wants it placed: try again next tick
            items.append((decision, policy))
        verdicts = self._plan(items, snapshot)
        runnable = []
        for decision, policy in items:
            verdict, detail = verdicts.get(decision["id"], (FREE, None))
            if verdict == DEFER:
                self._defer(decision, str(detail))
            elif verdict != HOLD:
                runnable.append((decision, policy, detail if verdict == PLANNED else None))
        started = self._begin(runnable)
        if not started:
            return
        term = self.node.term()

        def still() -> bool:
            return self._still_leader(term)

        def work() -> None:
            if len(started) == 1:
                decision, attempt, token = started[0]
                outcomes = {decision["id"]: self.executor.run(decision, attempt, token, still)}
            else:
                outcomes = self.executor.run_batch(started, still)
            for decision, attempt, token in started:
                self.finished.put((decision, attempt, token, outcomes[decision["id"]]))
            self.wake.set()

        name = f"run-{started[0][0]['id']}" + (f"+{len(started) - 1}" if len(started) > 1 else "")
        thread = threading.Thread(target=work, name=name, daemon=True)
        placed = snapshot.inventory.get("placements") or {}
        for decision, _attempt, _token in started:
            self.runs[decision["id"]] = thread
            self.run_from[decision["id"]] = (dict(placed.get(decision["app"]) or {}), time.time())
        thread.start()

    def _begin(
        self, batch: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]]
    ) -> list[tuple[dict[str, Any], int, dict[str, int]]]:
        """The committed 'start' of each (decision, policy, plan) of a batch, all in one log
        entry (attempt, token, the policy and the plan it applies), and the KB's start events:
        the (decision, attempt, token) of those that may run now."""
        results = self._propose_chunks(
            "many",
            "commands",
            [
                {
                    "op": "start",
                    "id": decision["id"],
                    "max_attempts": self.cfg.max_attempts,
                    **({"policy": policy} if policy else {}),
                    **({"plan": plan} if plan is not None else {}),
                }
                for decision, policy, plan in batch
            ],
        )
        started = []
        for (decision, policy, plan), res in zip(batch, results, strict=True):
            if not res or not res.get("ok"):
                if res:
                    log.info("decision %s: start refused: %s", decision["id"], res.get("why"))
                if res and res.get("status") == "failed":
                    self._gave_up(decision, str(res.get("why")))
                continue
            attempt, token = res["attempt"], res["token"]
            snapshot = dict(self._committed(decision["id"]))
            if policy:
                log.warning(
                    "decision %s: %s heals with its stored policy %s", decision["id"], snapshot["app"], policy
                )
            if plan is not None:
                log.warning(
                    "decision %s attempt %d: committed plan for %s: %s",
                    decision["id"],
                    attempt,
                    snapshot["app"],
                    "; ".join(
                        f"{svc} -> " + ", ".join(f"{e['cluster']}x{e.get('replicas', 1)}" for e in entries)
                        for svc, entries in sorted(plan.items())
                    ),
                )
            try:
                journal.post(
                    self.kb,
                    journal.STARTED,
                    snapshot,
                    journal.started_text(snapshot, attempt, self.node.node_id),
                    attempt,
                    token,
                )
            except KBError as exc:
                log.warning(
                    "decision %s: cannot record the start in the KB (%s); retrying later", decision["id"], exc
                )
                self._finish_all(
                    [(snapshot, attempt, Outcome("failed", f"KB unreachable before start: {exc}", "", None))]
                )
                continue
            started.append((snapshot, attempt, token))
        return started

    def _plan(
        self, items: list[tuple[dict[str, Any], dict[str, Any]]], snapshot: Snapshot
    ) -> dict[str, tuple[str, Any]]:
        """decision id -> (PLANNED, services) | (DEFER, why) | (HOLD, None) | (FREE, None): one
        placement for every application of the batch, in one pass over the snapshot's inventory,
        each with the user's stored scorer, hysteresis and exclusions plus the decision's.
        Healing beats stability: an application that fits only on a just-recovered cluster is
        planned again with only the clusters it must avoid (and its decision retargeted)."""
        if self.planner is None or not items:
            return {}
        records = {a.get("name"): a for a in snapshot.applications}
        relaxed: dict[str, list[str]] = {}  # decision id -> the exclusions it is planned with

        def requests() -> tuple[list[PlanRequest], dict[str, dict[str, Any]]]:
            out, by_app = [], {}
            for decision, policy in items:
                record = records.get(decision["app"])
                if record is None:
                    continue  # not in this snapshot: the run places it itself
                avoid = set(relaxed.get(decision["id"], decision["exclude"])) | set(
                    policy.get("exclude") or ()
                )
                out.append(
                    PlanRequest(record, tuple(sorted(avoid)), policy.get("scorer"), policy.get("hysteresis"))
                )
                by_app[decision["app"]] = decision
            return out, by_app

        began = time.monotonic()
        reqs, by_app = requests()
        found: BatchPlan = self.planner(reqs, snapshot.inventory)
        strict = dict(found.unplaceable)
        for app in strict:
            decision = by_app[app]
            must, unstable, _on_down = exclusions_now(
                snapshot, self.memory, self.cfg.settings, app, decision.get("pinned") or []
            )
            if unstable & set(decision["exclude"]):
                relaxed[decision["id"]] = sorted(must)
        if relaxed:
            found = self.planner(requests()[0], snapshot.inventory)
        log.info(
            "batch plan: %d of %d application(s) placed in one pass (%.0f ms)",
            len(found.services),
            len(reqs),
            (time.monotonic() - began) * 1000,
        )
        verdicts: dict[str, tuple[str, Any]] = {}
        for app, decision in by_app.items():
            did = decision["id"]
            if app in found.unplaceable:
                verdicts[did] = (DEFER, strict.get(app) or found.unplaceable[app])
                continue
            if app not in found.services:
                continue  # no usable fleet to judge on: the run places (and reports) it
            if did in relaxed and relaxed[did] != list(decision["exclude"]):
                res = self._propose({"op": "retarget", "id": did, "exclude": relaxed[did]})
                if not res or not res.get("ok"):
                    verdicts[did] = (HOLD, None)
                    continue
                log.warning(
                    "decision %s: only a just-recovered cluster fits %s: exclusions %s -> %s",
                    did,
                    app,
                    ", ".join(decision["exclude"]) or "none",
                    ", ".join(relaxed[did]) or "none",
                )
            self.deferred_why.pop(did, None)
            verdicts[did] = (PLANNED, found.services[app])
        return verdicts

    def _policy(self, app: str, record: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The placement policy the user deployed the application with (scorer, hysteresis,
        exclusions): the KB's record of the application holds it (intent.recorded_policy; its
        events only for a record written before); {} if none is recorded, None if the KB cannot
        be read (the attempt waits rather than heal against the user's policy)."""
        try:
            return intent.recorded_policy(
                record, lambda: self.kb.list_events(application=app, limit=intent.LOOKBACK)
            )
        except KBError as exc:
            log.warning("cannot read the stored policy of %s (%s); not starting its migration yet", app, exc)
            return None

    def _judged_policy(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """The stored policy the drift judge uses: the one the heal's plan will use
        (:meth:`_policy`), read from the KB's events only for a record that does not carry it,
        and then once per change of the record, not every tick."""
        if isinstance(record.get("policy"), dict):
            return intent.clean_policy(record["policy"])
        app = str(record.get("name"))
        key = (record.get("version"), record.get("updated"))
        cached = self.judged_policies.get(app)
        if cached is not None and cached[0] == key:
            return cached[1]
        policy = self._policy(app, record)
        if policy is not None:
            self.judged_policies[app] = (key, policy)
        return policy

    def _collect_finished(self) -> None:
        pending = self.unreported
        self.unreported = []
        while True:
            try:
                pending.append(self.finished.get_nowait())
            except queue.Empty:
                break
        for i, (decision, attempt, token, outcome) in enumerate(pending):
            self.runs.pop(decision["id"], None)
            self.metrics.count_migration(outcome.result)
            etype = {SUCCEEDED: journal.SUCCEEDED, CANCELLED: journal.CANCELLED}.get(
                outcome.result, journal.FAILED
            )
            newer = moves.superseding_version(self.kb, decision) if outcome.result != CANCELLED else None
            if newer is not None:  # a newer version was stored meanwhile (issue 34.4): not ours
                etype = journal.MIGRATION_SUPERSEDED
                outcome = moves.superseded(outcome, newer, decision)
                pending[i] = (decision, attempt, token, outcome)
            log.warning(
                "decision %s attempt %d %s: %s (artifacts %s)",
                decision["id"],
                attempt,
                outcome.result,
                outcome.detail,
                outcome.artifacts,
            )
            try:  # the truth goes to the KB even if this replica is no longer leader
                journal.post(
                    self.kb,
                    etype,
                    decision,
                    f"attempt {attempt} by {self.node.node_id} {outcome.result}: "
                    f"{outcome.detail}; artifacts {outcome.artifacts}",
                    attempt,
                    token,
                )
            except KBError as exc:
                log.warning("cannot report decision %s outcome to the KB: %s", decision["id"], exc)
            before, began = self.run_from.pop(decision["id"], ({}, None))
            if outcome.result != CANCELLED:
                label = moves.SUPERSEDED if newer is not None else outcome.result
                moves.record(self.kb, decision, token, label, outcome.detail, before, began)
        # a cancelled run was deposed: the next leader takes over its decision
        ended = [item for item in pending if item[3].result != CANCELLED]
        committed = self._finish_all(
            [(decision, attempt, outcome) for decision, attempt, _token, outcome in ended]
        )
        if self.node.is_leader():
            self.unreported += [item for item, done in zip(ended, committed, strict=True) if not done]

    def _finish_all(self, ended: list[tuple[dict[str, Any], int, Outcome]]) -> list[bool]:
        """Commit the outcome of each (decision, attempt, outcome), all in one log entry (a
        batch of k applications reports with one commit); per item, whether it was committed."""
        now = time.time()
        results = self._propose_chunks(
            "many",
            "commands",
            [
                {
                    "op": "finish",
                    "id": decision["id"],
                    "attempt": attempt,
                    "result": SUCCEEDED if outcome.result == SUCCEEDED else "failed",
                    "detail": outcome.detail,
                    "artifacts": outcome.artifacts,
                    "retry": outcome.result != SUCCEEDED
                    and attempt < self.cfg.max_attempts
                    and not moves.is_superseded(outcome),
                    "not_before": now + self.cfg.backoff * 2 ** (attempt - 1),
                }
                for decision, attempt, outcome in ended
            ],
        )
        for (decision, attempt, outcome), res in zip(ended, results, strict=True):
            if res is None:
                continue
            if outcome.result == SUCCEEDED and decision.get("detected_at"):
                self.metrics.observe("recovery_seconds", max(0.0, now - decision["detected_at"]))
            if res.get("ok") and res.get("status") == "failed" and not moves.is_superseded(outcome):
                self._gave_up(decision, f"gave up after {attempt} attempts: {outcome.detail}")
        return [res is not None for res in results]

    def _end_decision(self, decision: dict[str, Any], op: str, why: str) -> None:
        res = self._propose({"op": op, "id": decision["id"], "detail": why})
        if res and res.get("ok"):
            log.warning("decision %s %s: %s", decision["id"], res.get("status"), why)
            self._gave_up(decision, why)

    def _gave_up(self, decision: dict[str, Any], why: str) -> None:
        try:
            journal.post(
                self.kb,
                journal.GAVE_UP,
                decision,
                f"decision ended without success: {why}",
                fence=self.lead_token,
            )
        except KBError as exc:
            log.info("cannot post end of %s: %s", decision["id"], exc)

    def _committed(self, decision_id: str) -> dict[str, Any]:
        """A decision this replica has just committed and applied (only ended decisions are
        ever trimmed from the log, so it is there)."""
        decision = self.node.machine.get(decision_id)
        if decision is None:
            raise LookupError(f"decision {decision_id} was committed but is not in the replicated log")
        return decision

    def _propose_chunks(
        self, op: str, field: str, items: list[Any], **entry: Any
    ) -> list[dict[str, Any] | None]:
        """Commit ``items`` as ``{op, field: items, **entry}`` entries of up to
        DECISIONS_PER_ENTRY each (decide_many, observe_many, many): per item its result, None
        where its entry did not commit (no quorum, leadership lost: the caller tries again on a
        later pass; nothing more is proposed after it)."""
        results: list[dict[str, Any] | None] = []
        for first in range(0, len(items), DECISIONS_PER_ENTRY):
            chunk = items[first : first + DECISIONS_PER_ENTRY]
            res = self._propose({"op": op, field: chunk, **entry})
            if not res or not res.get("ok"):
                return results + [None] * (len(items) - first)
            got = res.get("results")  # observe_many answers for the whole entry
            results += got if isinstance(got, list) and len(got) == len(chunk) else [res] * len(chunk)
        return results

    def _propose(self, cmd: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.node.propose(cmd, self.cfg.commit_timeout)
        except ProposalError as exc:
            log.warning("could not commit %s: %s", cmd.get("op"), exc)
            self.why = f"no decisions: commit failed ({exc})"
            return None

    # -- status --------------------------------------------------------------------------------

    def _ping_kb(self) -> None:
        """Followers keep track of the KB too, so a new leader knows whether it just came back."""
        if time.monotonic() - self._last_kb_ping < min(5.0, self.cfg.settings.heartbeat_timeout / 3):
            return
        self._last_kb_ping = time.monotonic()
        try:
            self.kb.healthz()
            self._kb_heard(True)
        except KBError as exc:
            self._kb_heard(False, exc)

    def _follower_why(self) -> str:
        peers = self.node.peer_status()
        total = len(peers) + 1
        reach = 1 + sum(peers.values())
        need = total // 2 + 1
        leader = self.node.leader()
        if reach < need:
            gone = ", ".join(p for p, ok in sorted(peers.items()) if not ok)
            return (
                f"no decisions: no quorum - this replica reaches {reach} of {total} replicas "
                f"(unreachable: {gone}); a decision must be committed by a majority of {need}"
            )
        if leader is None:
            return "no decisions yet: election in progress"
        return f"follower: {leader} is the leader and makes the decisions"

    def status(self) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        for _try in range(3):  # pysyncobj mutates its dicts on its own thread
            try:
                raw = self.node.getStatus()
                break
            except RuntimeError:
                time.sleep(0.01)
        machine = self.node.machine
        state = {0: "follower", 1: "candidate", 2: "leader"}.get(raw.get("state", -1), "unknown")
        return {
            "node": self.node.node_id,
            "name": self.cfg.name or self.node.node_id,
            "state": state,
            "is_leader": self.node.is_leader(),
            "leader": self.node.leader(),
            "term": raw.get("raft_term", self.node.term()),
            "commit_index": raw.get("commit_idx", 0),
            "last_applied": raw.get("last_applied", 0),
            "has_quorum": bool(raw.get("has_quorum")),
            "peers": self.node.peer_status(),
            "kb": self.kb_state,
            "why": self.why,
            "token": dict(machine.last_token),
            "inflight": [dict(d) for d in machine.open_decisions()],
            "recent": [dict(d) for d in machine.recent(10)],
            "log_counters": dict(machine.counters),
            "versions": dict(machine.versions),  # app -> spec version placed or observed
            "running_here": sorted(self.runs),
            "max_concurrent_runs": self.cfg.max_concurrent_runs,
            "waiting_for_run_slot": list(self.waiting_slot),  # decision ids, in the order they start
            "survivability": self.survival.status(),  # the leader's last N-1 report (survival.py)
        }
