"""The agent loop: every interval collect, stamp, buffer, deliver.

Edge autonomy: the loop never stops because the cluster API or the KB is away. A cluster that
cannot be read yields a report with ``reachable: false``, the error, and ``nodes``/``workloads``
null (not observed, so the KB keeps what it knew). A cluster that answers 403 (the agent lacks
RBAC rights) or 401 (its credentials are refused) is reachable: credentials broken, not a
cluster failure. The report has ``reachable: true`` and the error ``forbidden: the agent needs
these rights: ...`` or ``unauthorized: ...``; the KB marks such a cluster ``credentials_broken``
and keeps its last-known nodes usable while the agent keeps reporting (kb/queries.py).
Reports the KB cannot take now stay in the outbox and go out oldest first once it answers
again. The agent never changes its cluster.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from qonnect.agent.buffer import Outbox
from qonnect.agent.collector import MAX_TEXT, CollectError, ForbiddenError
from qonnect.agent.latency import Prober, Smoothed
from qonnect.agent.sequence import Resync, Sequence

log = logging.getLogger(__name__)

# KB answers after which a report is kept for a later retry (the KB or the auth may recover);
# any other 4xx means the KB will never accept this report, so it is dropped.
RETRY_STATUSES = frozenset({0, 401, 403, 404, 408, 429})


class Agent:
    """One Resource Agent for one cluster."""

    def __init__(
        self,
        cluster: str,
        collect: Callable[[], dict],
        kb: Any,
        outbox: Outbox,
        sequence: Sequence,
        interval: float = 5.0,
        latency_targets: Mapping[str, str] | None = None,
        source_address: str | None = None,
        ca_paths: Mapping[str, str] | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        self.cluster = cluster
        self.collect = collect
        self.kb = kb
        self.outbox = outbox
        self.sequence = sequence
        self.resync = Resync(cluster, sequence, kb)  # answers applied: false (seq poisoned)
        self.interval = interval
        self.prober = Prober(
            latency_targets or {},
            timeout=max(0.2, min(2.0, interval / 2)),
            source_address=source_address,
            ca_paths=ca_paths,
        )
        self.smoothed = Smoothed()
        self.stop_event = stop_event or threading.Event()
        self._kb_down: str | None = None
        self._cluster_down: str | None = None

    def build_report(self) -> dict:
        """One report of the current state; never raises for an unreachable cluster."""
        try:
            observed: dict[str, Any] = self.collect()
            reachable, error = True, None
            if self._cluster_down is not None:
                log.warning("cluster %s: API reachable again", self.cluster)
            self._cluster_down = None
        except ForbiddenError as exc:
            # The API server answers: the cluster is up, the agent lacks rights. Reported as such
            # (reachable, with the error), never as a cluster failure; nothing observed this time.
            observed = {"nodes": None, "workloads": None}
            reachable, error = True, str(exc)[:MAX_TEXT]
            if self._cluster_down != error:
                log.error("cluster %s: %s", self.cluster, error)
            self._cluster_down = error
        except CollectError as exc:
            observed = {"nodes": None, "workloads": None}
            reachable, error = False, str(exc)[:MAX_TEXT]
            if self._cluster_down != error:
                log.warning("cluster %s: API unreachable: %s", self.cluster, error)
            self._cluster_down = error
        latencies = self.smoothed.add(self.prober.measure())
        report = {
            "seq": self.sequence.next(),
            "ts": round(time.time(), 6),
            "reachable": reachable,
            "error": error,
            "nodes": observed["nodes"],
            "workloads": observed["workloads"],
            "latencies": latencies,
        }
        if observed.get("server"):  # the API server's version and group-versions, when read
            report["server"] = observed["server"]
        return report

    def flush(self) -> int:
        """Deliver buffered reports oldest first; returns how many left the outbox."""
        sent = 0
        kb_error: str | None = None
        while (report := self.outbox.peek()) is not None and not self.stop_event.is_set():
            try:
                self.resync.acknowledged(report, self.kb.report(self.cluster, report))
            except Exception as exc:  # KBError, or anything else the transport throws
                status = getattr(exc, "status", 0)
                if status in RETRY_STATUSES or status >= 500:
                    kb_error = str(exc)
                    break
                log.error("KB refused report seq=%s for good, dropping it: %s", report["seq"], exc)
                self.resync.refused(report, exc)
            self.outbox.pop()
            sent += 1
        if sent:
            self.outbox.save()
        if kb_error is not None:
            if self._kb_down is None:
                log.warning("KB not taking reports (%s); buffering (%d queued)", kb_error, len(self.outbox))
            self._kb_down = kb_error
        elif sent and self._kb_down is not None:
            log.warning("KB reachable again; delivered %d buffered report(s)", sent)
            self._kb_down = None
        return sent

    def tick(self) -> None:
        """Build a report and deliver the outbox; only what stays undelivered is written to disk."""
        wall, cpu = time.perf_counter(), time.process_time()
        self.outbox.push(self.build_report(), save=False)
        self.flush()
        self.outbox.save()
        log.debug(
            "tick: %.2f ms wall, %.2f ms CPU",
            (time.perf_counter() - wall) * 1000.0,
            (time.process_time() - cpu) * 1000.0,
        )

    def run(self) -> None:
        """Tick every ``interval`` seconds until ``stop_event`` is set."""
        log.info("agent for cluster %s started (interval %gs)", self.cluster, self.interval)
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                self.tick()
            except Exception:  # a bug in one tick must not end the agent: log and go on
                log.exception("agent tick failed")
            self.stop_event.wait(max(0.0, self.interval - (time.monotonic() - started)))
        self.prober.close()
        log.info("agent for cluster %s stopped (%d report(s) buffered)", self.cluster, len(self.outbox))

    def stop(self, *_: object) -> None:
        self.stop_event.set()
