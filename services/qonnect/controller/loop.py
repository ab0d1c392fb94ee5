"""One controller replica: its lifecycle, and the tick that turns KB observations into committed
decisions and committed decisions into migration runs.

Each job of a tick lives in a module of its own; this one wires them and runs them in order:
leadership.py (taking the lead, fencing, leases), detection.py (the detector's triggers and
notices), deciding.py (committing decisions), scheduling.py (what starts when, deferral),
planning.py (the batch plan), runs.py (starting and finishing runs), report.py (/status), with
the state they share in state.py and the replica's configuration in config.py.

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
import threading
import time
from dataclasses import dataclass
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.scorers import DEFAULT_SCORER

from qonnect.controller import journal, proctree, report
from qonnect.controller.capacity import CapacityWatch
from qonnect.controller.commits import Commits
from qonnect.controller.config import Config, default_concurrency, migration_vars
from qonnect.controller.confirm import Confirmer
from qonnect.controller.deciding import Deciding
from qonnect.controller.detection import Detection
from qonnect.controller.detector import Snapshot, down_clusters
from qonnect.controller.executor import Executor
from qonnect.controller.leadership import Leadership, follower_why
from qonnect.controller.planning import Plans
from qonnect.controller.raft import RaftNode
from qonnect.controller.reconcile import Reconciler
from qonnect.controller.records import RecordCache
from qonnect.controller.replan import ChangeGate, Planner, drift_judge
from qonnect.controller.runs import Runs
from qonnect.controller.scheduling import Scheduler
from qonnect.controller.state import KBContact, Lead, Wake, Why
from qonnect.controller.status import Metrics, StatusServer
from qonnect.controller.survival import Watch

__all__ = ["Config", "Connections", "Controller", "Ticks", "connect", "default_concurrency", "migration_vars"]

log = logging.getLogger("qonnect.controller")


@dataclass
class Connections:
    """What a replica talks to: the KB, its Raft node, the playbook runner, and the watchdog
    that kills the runner's processes if the replica dies."""

    kb: KBClient
    node: RaftNode
    executor: Executor
    watchdog: proctree.Watchdog | None = None


def connect(cfg: Config) -> Connections:
    """The replica's KB client, Raft node and executor, its watchdog started."""
    kb = KBClient(cfg.kb_url, cfg.token, timeout=max(2.0, cfg.tick * 3))
    node = RaftNode(cfg.self_addr, cfg.peers, cfg.secret, cfg.data_dir, cfg.timing)
    owner = proctree.new_owner(cfg.name or cfg.self_addr)
    watchdog = proctree.Watchdog(owner)
    watchdog.start()  # kills this replica's runs if it dies, even by SIGKILL
    executor = Executor(
        cfg.playbook,
        f"{cfg.data_dir}/runs",
        cfg.kb_url,
        cfg.token_file,
        cfg.run_timeout,
        migration_vars(cfg),
        owner=owner,
    )
    return Connections(kb, node, executor, watchdog)


class Ticks:
    """The loop's own pace. A tick (or a KB read) much later than planned means this host (or
    we) stalled and agents were not heard: then, as after a KB outage, heartbeats count again
    only once agents had a whole timeout to be heard."""

    def __init__(self, tick: float, limit: float, heartbeat_timeout: float, contact: KBContact) -> None:
        self.tick = tick
        self.limit = limit
        self.heartbeat_timeout = heartbeat_timeout
        self.contact = contact
        self.last: float | None = None  # monotonic start of the previous tick (loop lag)

    def lag(self) -> None:
        """Measure this loop's own lag (time between ticks beyond the tick)."""
        now = time.monotonic()
        if self.last is not None:
            self.stalled(now - self.last - self.tick, "the controller loop ran late by")
        self.last = now

    def stalled(self, lag: float, what: str) -> None:
        """After a stall of this host (or of the KB's answers), staleness is not failure: as after
        a KB outage, heartbeats count again only once agents had a whole timeout to be heard."""
        if lag <= self.limit:
            return
        log.warning(
            "%s %.1fs (> %.1fs): this host stalled; judging no cluster by heartbeat age for %gs",
            what,
            lag,
            self.limit,
            self.heartbeat_timeout,
        )
        self.contact.restart_grace()


class Controller:
    """A replica: Raft node + detector + executor + status server."""

    def __init__(
        self,
        cfg: Config,
        planner: Planner | None = None,
        judge_drift: bool = True,
        *,
        connections: Connections | None = None,
    ) -> None:
        """``planner``: the heal's planner (None: each migration places for itself, and no drift
        is judged); ``judge_drift``: whether QoS drift is judged, by that same planner with each
        application's stored policy; ``connections``: what the replica talks to (default: the
        ones ``cfg`` names, see :func:`connect`)."""
        ends = connections or connect(cfg)
        self.cfg = cfg
        self.kb, self.node, self.executor, self.watchdog = ends.kb, ends.node, ends.executor, ends.watchdog
        self.metrics = Metrics()
        self.why = Why()
        self.contact = KBContact()
        self.lead = Lead()
        self.wake = Wake()
        self.stop_event = threading.Event()
        # a tick this much later than planned: the host (or we) stalled, agents were not heard
        stall_limit = max(2.0 * cfg.tick, cfg.settings.heartbeat_timeout / 2)
        self.ticks = Ticks(cfg.tick, stall_limit, cfg.settings.heartbeat_timeout, self.contact)
        self.commits = Commits(self.node, cfg.commit_timeout, self.why)
        self.leadership = Leadership(
            self.node,
            self.kb,
            self.lead,
            self.contact,
            self.why,
            self.wake,
            self.stop_event,
            cfg.commit_timeout,
            cfg.settings.stable_seconds,
            # a deposed leader stops within leader_fallback (+ a tick and the runner's cancel poll)
            cfg.timing.leader_fallback + 0.5,
        )
        self.plans = Plans(self.kb, planner, self.commits, self.lead, cfg.settings)
        replan = (  # judged again only when what it depends on changed
            ChangeGate(drift_judge(planner, self.plans.judged_policy))
            if planner is not None and judge_drift
            else None
        )
        self.drift_gate = replan  # its count of judgements is in /status and /metrics
        self.detection = Detection(self.kb, self.lead, cfg, replan)
        self.deciding = Deciding(self.node, self.kb, self.commits, self.lead, self.metrics)
        self.runs = Runs(
            self.node,
            self.kb,
            self.executor,
            cfg,
            self.commits,
            self.lead,
            self.deciding,
            self.leadership,
            self.metrics,
            self.wake,
        )
        self.scheduler = Scheduler(
            self.node,
            self.kb,
            cfg,
            self.commits,
            self.lead,
            self.leadership,
            self.deciding,
            self.plans,
            self.runs,
        )
        self.reconciler = Reconciler(
            self.kb, lambda app: app in self.node.machine.inflight, self.leadership.still_leader
        )
        records = RecordCache(self.kb.list_clusters)  # one read of every record per 30 s, shared
        self.confirmer = Confirmer(records)  # the leader's own probes of suspects
        self.capacity = CapacityWatch(records)  # ... and of capacity claims
        self.survival = Watch(  # the leader's N-1 survivability report, off the tick
            self.kb, (DEFAULT_SCORER, cfg.settings.hysteresis), cfg.survivability_every, cfg.survive_labels
        )
        self.http: StatusServer | None = None

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
            if self.wake.at is not None:  # e.g. a lease that ends before the next tick
                pause = min(pause, self.wake.at - time.monotonic())
                self.wake.at = None
            self.wake.event.wait(max(0.05, pause))
            self.wake.event.clear()
        self.shutdown()

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.event.set()

    def shutdown(self) -> None:
        killed = self.executor.kill_all()  # SIGTERM: no run of ours outlives us
        if killed:
            log.warning("stopping: killed %d process(es) of running migrations", killed)
        for thread in list(self.runs.threads.values()):
            thread.join(timeout=5)
        if self.http:
            self.http.stop()
        self.node.destroy()
        if self.watchdog is not None:
            self.watchdog.stop()

    # -- one tick ------------------------------------------------------------------------------

    def step(self) -> None:
        self.ticks.lag()
        self.runs.collect_finished()
        if not self.node.is_leader():
            self.leadership.follow()
            self.why.text = follower_why(self.node)
            self.contact.ping(self.kb, self.cfg.settings.heartbeat_timeout)
            return
        term = self.node.term()
        if self.lead.term != term:
            if not self.leadership.take_lead(term):
                return
            self.reconciler.everything()  # every cluster once: nobody may have cleaned them
        if not self.lead.reconciled:
            self.deciding.reconcile_lost()
        try:
            read_at = time.monotonic()
            snapshot, placements = journal.read_snapshot(self.kb, time.time())
        except KBError as exc:
            self.contact.heard(False, exc)
            self.why.text = f"leader of term {term}, but no decisions: cannot read the KB ({exc})"
            return
        self.contact.heard(True)
        self.ticks.stalled(time.monotonic() - read_at, "reading the KB took")
        heard_for = time.monotonic() - (self.contact.ok_since or time.monotonic())
        suspects = down_clusters(snapshot, self.cfg.settings)
        snapshot = dataclasses.replace(
            snapshot,
            heard_for=heard_for,
            probes=self.confirmer.probes(suspects),
            unconfirmed=self.capacity.unconfirmed(snapshot.inventory.get("clusters", [])),
        )
        apps = {a["name"] for a in snapshot.applications}
        if heard_for < self.cfg.settings.heartbeat_timeout:
            self.why.text = (
                f"leader of term {term}: the KB answers again since {heard_for:.1f}s; waiting "
                f"{self.cfg.settings.heartbeat_timeout:g}s for agents to report before judging clusters"
            )
            return
        self.runs.withdraw(self.scheduler.withdrawn_hedges(snapshot))  # their cluster is back
        self.scheduler.drive_open(snapshot, apps)
        if self._detect(snapshot, apps):
            self.scheduler.drive_open(snapshot, apps)  # start what was just decided now, not a tick later
        down = set(down_clusters(snapshot, self.cfg.settings))
        self.reconciler.tick(snapshot, self.lead.memory, down, self.lead.term, self.lead.token)
        self.survival.tick(
            snapshot, placements, term, self.lead.token, lambda: self.leadership.still_leader(term)
        )

    def _detect(self, snapshot: Snapshot, apps: set[str]) -> int:
        """Commit decisions for this snapshot's triggers; returns how many were taken."""
        machine = self.node.machine
        triggers, observe = self.detection.triggers(snapshot, machine)
        taken = self.deciding.commit(triggers, observe, snapshot.now)
        self.why.text = report.leader_why(self.lead.term, snapshot, apps, machine, triggers)
        return taken

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return report.status(
            self.node,
            self.cfg.name,
            self.contact.state,
            self.why.text,
            self.runs.threads,
            self.cfg.max_concurrent_runs,
            self.scheduler.waiting_slot,
            self.survival.status(),
            self.drift_gate.judged if self.drift_gate is not None else 0,
            dict(self.drift_gate.reasons) if self.drift_gate is not None else {},
            dict(self.drift_gate.fleet_changes) if self.drift_gate is not None else {},
            self.drift_gate.carried if self.drift_gate is not None else 0,
        )
