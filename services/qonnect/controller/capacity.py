"""The leader's own look at a cluster whose reported capacity jumped, before work moves there.

Capacity is an agent's observation, and an agent token can be stolen (issue 25): the KB bounds
what a report may claim, but a claim within the bounds would still pull work. So a cluster whose
reported CPU grew by more than ``JUMP`` over the last confirmed value, or that reports a node not
seen before, is not a target of any move until the leader has read the cluster's nodes itself
(through the kubeconfig of its KB record) and found at least ``TOLERANCE`` of the reported CPU
and every reported node. Workloads already there are not affected: nothing moves *because* of
an unconfirmed claim. The first sight of a cluster is its baseline (the state the leader found)
unless its CPU is a jump over the KB's baseline of the registration's epoch (the first node list
accepted since the admin registered it): a claim made before this leader took over is looked at
too.

Bounded like controller/confirm.py: reads run in a small thread pool, one per cluster at a
time, each with a short timeout, and are repeated at most every ``REREAD`` seconds while the
claim stays unconfirmed; ``unconfirmed()`` never waits for one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError, raw_get
from ansible_collections.qonnect.core.plugins.module_utils.k8s.render import record_client
from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity

from qonnect.controller.records import Fetch, RecordCache, as_cache

log = logging.getLogger(__name__)

JUMP = 1.25  # reported CPU above the confirmed baseline by this factor needs a look
TOLERANCE = 0.9  # the cluster's own nodes must show this share of the reported CPU
READ_TIMEOUT = 3.0
REREAD = 10.0
MAX_PARALLEL = 2

# (total allocatable CPU, node names) as the cluster's API shows them, or why it cannot tell
Capacity = tuple[float, frozenset[str]]


def reported(cluster: dict[str, Any]) -> Capacity:
    """Total allocatable CPU and node names of a cluster as its agent reported them."""
    nodes = [n for n in cluster.get("nodes") or [] if isinstance(n, dict)]
    cpu = 0.0
    for n in nodes:
        value = (n.get("allocatable") or {}).get("cpu")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            cpu += float(value)
    return cpu, frozenset(str(n.get("name")) for n in nodes)


def first_sight(cluster: dict[str, Any], cpu: float, nodes: frozenset[str]) -> Capacity | None:
    """What a leader seeing the cluster for the first time must confirm the report against:
    the KB's capacity baseline of the registration's epoch (its first accepted node list) when
    the report claims a jump over it (a claim made before this leader's time), else None (the
    report is the baseline)."""
    epoch = cluster.get("capacity_baseline")
    first = epoch.get("cpu") if isinstance(epoch, dict) else None
    if not isinstance(first, (int, float)) or isinstance(first, bool) or cpu <= float(first) * JUMP + 1e-9:
        return None
    return float(first), frozenset()


def read_capacity(name: str, record: dict[str, Any], timeout: float = READ_TIMEOUT) -> Capacity | str:
    """The cluster's nodes read through its KB record's kubeconfig (or why they cannot be)."""
    if not record.get("kubeconfig"):
        return "no kubeconfig in its KB record"
    try:
        client = record_client(name, record)
        body = json.loads(raw_get(client.api, "/api/v1/nodes", {}, timeout))
    except K8sError as exc:
        return f"cannot read its nodes: {exc.message}"
    except Exception as exc:  # transport errors, a 403 without `list nodes`, bad JSON
        status = getattr(exc, "status", None)
        return f"cannot read its nodes ({f'HTTP {status}' if status else type(exc).__name__})"
    cpu, names = 0.0, set()
    for item in body.get("items") or []:
        names.add(str((item.get("metadata") or {}).get("name")))
        try:
            cpu += parse_quantity(((item.get("status") or {}).get("allocatable") or {}).get("cpu") or 0)
        except (TypeError, ValueError):
            continue
    return cpu, frozenset(names)


class CapacityWatch:
    """Which clusters claim capacity the leader has not confirmed, and why (never blocks)."""

    def __init__(
        self,
        records: RecordCache | Fetch,
        read: Callable[[str, dict[str, Any]], Capacity | str] = read_capacity,
        max_parallel: int = MAX_PARALLEL,
        reread: float = REREAD,
    ) -> None:
        self.records = as_cache(records)  # the KB's cluster records, with credentials
        self.read = read
        self.reread = reread
        self.pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="capacity")
        self.lock = threading.Lock()
        self.baseline: dict[str, Capacity] = {}
        self.results: dict[str, tuple[float, Capacity | str]] = {}  # cluster -> (when, what was read)
        self.running: dict[str, Future[None]] = {}

    def unconfirmed(self, clusters: Iterable[dict[str, Any]]) -> dict[str, str]:
        """cluster -> why its reported capacity is not trusted yet (a read is started for it)."""
        out: dict[str, str] = {}
        now = time.time()
        for cluster in clusters:
            name = cluster.get("name")
            cpu, nodes = reported(cluster)
            if not name or not nodes:
                continue  # nothing reported (down, credentials broken): no claim to check
            base = self.baseline.get(name)
            if base is None:
                base = first_sight(cluster, cpu, nodes)
                if base is None:
                    self.baseline[name] = (cpu, nodes)  # first sight: the state the leader found
                    continue
            if cpu <= base[0] * JUMP + 1e-9 and nodes <= base[1]:
                continue  # within what was confirmed (a drained node coming back needs no look)
            why = self._judge(name, cpu, nodes, base, now)
            if why is None:
                log.warning(
                    "cluster %s: its new capacity (%g CPU, %d nodes) is confirmed by its API",
                    name,
                    cpu,
                    len(nodes),
                )
                self.baseline[name] = (cpu, nodes)
            else:
                out[name] = why
        return out

    def _judge(self, name: str, cpu: float, nodes: frozenset[str], base: Capacity, now: float) -> str | None:
        claim = f"reports {cpu:g} CPU on {len(nodes)} node(s), " + (
            f"{base[0]:g} CPU on {len(base[1])} confirmed"
            if base[1]
            else f"{base[0]:g} CPU in the first report since its registration"
        )
        with self.lock:
            when, seen = self.results.get(name, (0.0, "not read yet"))
            if now - when > self.reread and name not in self.running:
                self.running[name] = self.pool.submit(self._read, name)
        if isinstance(seen, str):
            return f"{claim}; the controller could not confirm it ({seen})"
        real_cpu, real_nodes = seen
        if real_cpu >= cpu * TOLERANCE - 1e-9 and nodes <= real_nodes:
            return None
        missing = sorted(nodes - real_nodes)
        return f"{claim}; its API shows {real_cpu:g} CPU on {len(real_nodes)} node(s)" + (
            f" (no node {', '.join(missing[:5])})" if missing else ""
        )

    def _read(self, name: str) -> None:
        try:
            record = self.records.get(name)
            result: Capacity | str = self.read(name, record) if record else "the KB has no record of it"
        except Exception as exc:  # the KB away, a bug: not confirmed, logged
            log.warning("reading the capacity of cluster %s failed: %s", name, exc)
            result = f"cannot read: {exc}"
        with self.lock:
            self.results[name] = (time.time(), result)
            self.running.pop(name, None)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
