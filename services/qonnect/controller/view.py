"""The controller's cached view of the KB, kept current from the KB's change feed (issue 21).

Reading the whole federation every tick costs O(fleet): at 1000 clusters 3.75 MB and several
seconds, longer than the tick. The KB's feed (``GET /api/v1/changes``) answers, with a cursor,
only what changed materially since the caller's cursor - cluster (re-)registrations and
removals, node list, workload list, reachability or error changes, placements, applications -
plus the few clusters whose heartbeat or nodes are older than ``stale_after`` (computed from the
KB's own receive times, so a silent cluster shows without any write). A heartbeat alone is no
change, so a tick of a quiet fleet reads a few hundred bytes.

Ages are kept correct against the KB's clock: each cluster entry keeps the KB's receive times
(``heartbeat``, ``nodes_received``). A stale cluster's times come with every read; any other
cluster's heartbeat and nodes are at most ``stale_after`` old by the KB's own judgement, so its
age is its last known receive time's age, capped at ``stale_after`` (< the detector's heartbeat
timeout and the placement engine's 15 s node limit, so such a cluster is judged exactly as by a
full read).

The view reads everything again (``full``) on its first read, when the KB does not know the
cursor (410: the KB restarted), after a pause longer than ``resync_every`` (e.g. a follower
that becomes leader), and every ``resync_every`` seconds in a background thread with its own
longer timeout (a full read at 1000 clusters takes longer than the tick's KB timeout); the
fetched state replaces the view at the next tick, followed at once by the changes since it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import (
    aged_cluster,
    current_placement,
    latency_matrix,
)

from qonnect.controller.detector import Snapshot

log = logging.getLogger(__name__)

RESYNC_EVERY = 60.0  # seconds between full reads (a safety net: the feed alone is complete)
STALE_AFTER = 3.0  # clusters older than this are listed by the KB with their receive times
FULL_TIMEOUT = 60.0  # seconds a full read may take (its own client)
PAGE = 250  # clusters per page of a full read: the KB answers other readers between pages
RAW = ("heartbeat", "nodes_received")


def _age(now: float, then: float | None) -> float | None:
    return None if then is None else round(max(0.0, now - then), 3)


class FleetView:
    """The KB's inventory, workloads, applications and placements, updated from the change feed."""

    def __init__(
        self,
        kb: Any,
        resync_every: float = RESYNC_EVERY,
        stale_after: float = STALE_AFTER,
        full_timeout: float = FULL_TIMEOUT,
        background: bool = True,
    ) -> None:
        self.kb = kb
        self.full_kb = kb.with_timeout(full_timeout) if hasattr(kb, "with_timeout") else kb
        self.resync_every = resync_every
        self.stale_after = stale_after
        self.background = background
        self.cursor: str | None = None
        self.read_at: float | None = None  # monotonic time of the last read
        self.synced_at = 0.0  # monotonic time of the last full read applied
        self.kb_now = 0.0  # the KB's clock at the last read
        self.timeout = 15.0  # the KB's heartbeat timeout (healthy)
        self.clusters: dict[str, dict[str, Any]] = {}
        self.workloads: dict[str, list[dict[str, Any]]] = {}
        self.latencies: dict[tuple[str, str], float] = {}
        self.placements: dict[str, dict[str, Any]] = {}
        self.applications: dict[str, dict[str, Any]] = {}
        self.stale: dict[str, dict[str, Any]] = {}
        self.full_reads = 0
        self.reads = 0
        self._built: dict[str, tuple[tuple, dict[str, Any]]] = {}  # cluster -> (ages, entry)
        self._cached: dict[str, Any] = {}  # derived lists, dropped when their source changes
        self._pending: dict[str, Any] | None = None  # a full read fetched in the background
        self._thread: threading.Thread | None = None
        self._tried = 0.0
        self._lock = threading.Lock()

    # -- reading -------------------------------------------------------------------------------
    def read(self, now: float) -> tuple[Snapshot, list[dict[str, Any]]]:
        """One tick's view: the Snapshot the detector reads and the placement records.
        Raises KBError when the KB cannot be read (the view keeps its state for the next tick)."""
        mono = time.monotonic()
        if self.cursor is None or self.read_at is None or mono - self.read_at > self.resync_every:
            self._apply(self._full())
        else:
            with self._lock:
                pending, self._pending = self._pending, None
            if pending is not None:
                self._apply(pending)
            try:
                doc = self.kb.changes(self.cursor, stale_after=self.stale_after)
            except KBError as exc:
                if exc.status != 410:
                    raise
                log.info("the KB does not know our cursor (%s): reading everything again", exc.message)
                doc = self._full()
            self._apply(doc)
            if mono - self.synced_at > self.resync_every and mono - self._tried > 5.0:
                self._resync_later(mono)
        self.read_at = mono
        self.reads += 1
        return self.snapshot(now), self.placement_records()

    def _full(self) -> dict[str, Any]:
        doc = self._fetch_full()
        self.synced_at = time.monotonic()
        return doc

    def _fetch_full(self) -> dict[str, Any]:
        """Everything, a page of clusters at a time; the first page's cursor covers the whole read
        (what changed while the pages were read comes again with the next changes)."""
        doc = self.full_kb.changes(stale_after=self.stale_after, limit=PAGE)
        following = doc.get("next")
        while following:
            page = self.full_kb.changes(stale_after=self.stale_after, limit=PAGE, after=following)
            for key in ("clusters", "workloads", "latencies"):
                doc[key] = doc[key] + page[key]
            doc["stale"], doc["now"] = page["stale"], page["now"]
            following = page.get("next")
        return doc

    def _resync_later(self, mono: float) -> None:
        """Fetch a full read now, to replace the view at the next tick."""
        self._tried = mono
        if not self.background:
            self._apply(self._full())
            return
        if self._thread is not None and self._thread.is_alive():
            return

        def fetch() -> None:
            try:
                doc = self._fetch_full()
            except KBError as exc:
                log.warning("periodic full read of the KB failed (retried in 5 s): %s", exc)
                return
            with self._lock:
                self._pending = doc
            self.synced_at = time.monotonic()

        self._thread = threading.Thread(target=fetch, name="kb-full-read", daemon=True)
        self._thread.start()

    # -- applying the feed -----------------------------------------------------------------------
    def _apply(self, doc: dict[str, Any]) -> None:
        """Bring the view up to one feed document, part by part: a full read first drops
        everything, a changed cluster's entry goes before its workloads and latencies."""
        if doc.get("full"):
            self._reset()
        self._apply_removals(doc)
        self._apply_clusters(doc)
        self._apply_workloads_and_latencies(doc)
        self._apply_placements_and_applications(doc)
        self._advance(doc)

    def _reset(self) -> None:
        """A full read replaces everything: what it does not list no longer exists."""
        self.full_reads += 1
        self.clusters, self.workloads, self.latencies = {}, {}, {}
        self.placements, self.applications = {}, {}
        self._built = {}
        self._cached = {}

    def _apply_removals(self, doc: dict[str, Any]) -> None:
        """Removed clusters take their workloads and latencies along; removed applications their
        placement."""
        removed = doc.get("removed") or {}
        for name in removed.get("clusters") or []:
            self.clusters.pop(name, None)
            self.workloads.pop(name, None)
            self._built.pop(name, None)
            self.latencies = {k: v for k, v in self.latencies.items() if k[0] != name}
            self._dirty("clusters", "workloads", "latency")
        for name in removed.get("applications") or []:
            self.applications.pop(name, None)
            self.placements.pop(name, None)
            self._dirty("applications", "placements")

    def _apply_clusters(self, doc: dict[str, Any]) -> None:
        """A changed cluster comes whole: its workloads and latencies follow in the same document,
        so the old ones are dropped."""
        changed = [c["name"] for c in doc.get("clusters") or []]
        for entry in doc.get("clusters") or []:
            self.clusters[entry["name"]] = entry
            self.workloads[entry["name"]] = []
            self._built.pop(entry["name"], None)
        if changed:
            gone = set(changed)
            self.latencies = {k: v for k, v in self.latencies.items() if k[0] not in gone}
            self._dirty("clusters", "workloads", "latency")

    def _apply_workloads_and_latencies(self, doc: dict[str, Any]) -> None:
        """The workloads and latency rows of the clusters just listed (their old ones were dropped
        with the cluster entry)."""
        for w in doc.get("workloads") or []:
            self.workloads.setdefault(w["cluster"], []).append(w)
        for cluster, peer, ms in doc.get("latencies") or []:
            self.latencies[(cluster, peer)] = ms

    def _apply_placements_and_applications(self, doc: dict[str, Any]) -> None:
        """Placement records and application specs replace the stored ones of the same name."""
        for record in doc.get("placements") or []:
            self.placements[record["application"]] = record
            self._dirty("placements")
        for record in doc.get("applications") or []:
            self.applications[record["name"]] = record
            self._dirty("applications")

    def _advance(self, doc: dict[str, Any]) -> None:
        """The stale clusters, the KB's clock and limits, and last the cursor the next read starts
        from: it moves only once the whole document is applied."""
        self.stale = {s["name"]: s for s in doc.get("stale") or []}
        self.kb_now = float(doc["now"])
        self.timeout = float(doc.get("heartbeat_timeout") or self.timeout)
        self.stale_after = float(doc.get("stale_after") or self.stale_after)
        self.cursor = doc["cursor"]

    def _dirty(self, *keys: str) -> None:
        for key in keys:
            self._cached.pop(key, None)

    # -- the snapshot ----------------------------------------------------------------------------
    def _cluster(self, name: str) -> dict[str, Any]:
        """The inventory entry of a cluster with its ages as of the KB's clock at the last read."""
        entry = self.clusters[name]
        stale = self.stale.get(name)
        now, cap = self.kb_now, self.stale_after
        if stale is not None:  # the KB gave its receive times with this read
            age = _age(now, stale["heartbeat"])
            node_age = _age(now, stale["nodes_received"])
            reachable = stale["reachable"]
        else:  # the KB says both are at most stale_after old
            hb, nr = entry.get("heartbeat"), entry.get("nodes_received")
            age = cap if hb is None else min(cap, _age(now, hb) or 0.0)
            node_age = cap if nr is None else min(cap, _age(now, nr) or 0.0)
            reachable = entry.get("reachable")
        key = (age, node_age, reachable)
        built = self._built.get(name)
        if built is not None and built[0] == key:
            return built[1]
        out = aged_cluster(
            {**{k: v for k, v in entry.items() if k not in RAW}, "reachable": reachable},
            age,
            node_age,
            self.timeout,
        )
        self._built[name] = (key, out)
        return out

    def inventory(self) -> dict[str, Any]:
        """The view as ``GET /inventory`` answers it (ages as of the last read)."""
        names = self._cached.get("clusters")
        if names is None:
            names = self._cached["clusters"] = sorted(self.clusters)
        placements = self._cached.get("placements")
        if placements is None:
            placements = self._cached["placements"] = {  # as journal.read_whole: every record
                app: current_placement(self.placements[app]) for app in sorted(self.placements)
            }
        return {
            "clusters": [self._cluster(n) for n in names],
            "latency_ms": self.latency_matrix(),
            "placements": placements,
        }

    def latency_matrix(self) -> dict[str, dict[str, float]]:
        """As the KB computes it: by location, the larger of both ends (placement.model.latency_matrix)."""
        found = self._cached.get("latency")
        if found is not None:
            return found
        locations = {n: c.get("location", n) for n, c in self.clusters.items()}
        out = latency_matrix(
            ((cluster, peer, ms) for (cluster, peer), ms in sorted(self.latencies.items())), locations
        )
        self._cached["latency"] = out
        return out

    def workload_list(self) -> list[dict[str, Any]]:
        found = self._cached.get("workloads")
        if found is None:
            found = self._cached["workloads"] = [
                w for name in sorted(self.workloads) for w in self.workloads[name]
            ]
        return found

    def application_list(self) -> list[dict[str, Any]]:
        found = self._cached.get("applications")
        if found is None:
            found = self._cached["applications"] = [self.applications[n] for n in sorted(self.applications)]
        return found

    def placement_records(self) -> list[dict[str, Any]]:
        return [self.placements[a] for a in sorted(self.placements)]

    def snapshot(self, now: float) -> Snapshot:
        return Snapshot(
            inventory=self.inventory(),
            workloads=self.workload_list(),
            applications=self.application_list(),
            now=now,
        )
