"""What an agent report may claim: the bounds that keep a stolen agent token from steering work.

An agent token lets its holder write reports for one cluster. Reports carry observations
(health, nodes and their allocatable and requested resources, workloads, latencies); the facts
placement ranks clusters by - tier, location, labels, and each node's price, energy and
bandwidth - belong to the admin's registration (``merge.nodes_json`` drops the report's
economics; ``queries`` lays the registered ones over the stored nodes). What a report may still
claim is bounded here, so it cannot attract work or silence the real agent:

- ``ts`` at most ``SKEW_SECONDS`` ahead of the KB's clock, and ``seq`` at most that clock in
  microseconds (the agent's sequence numbers, agent/sequence.py) plus the same skew. A bigger
  number would make every real report "older" (``applied: false``) until the clock caught up.
- The cluster's total allocatable CPU, memory and ephemeral storage (over the report's nodes) at
  most the registered ``capacity``, else at most ``CAPACITY_GROWTH`` times the first non-empty
  total accepted since the cluster was (re-)registered (and at least the ``CAPACITY_FLOOR``).
  Growth beyond that - a new rack, or a forged 1000 CPUs - needs an admin re-registration
  (PUT, which starts a new epoch and a new baseline) or a registered ``capacity``.

A refused report is a 422 naming the field, so its sender learns why; the stored state stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from qonnect.kb.models import NodeReport, Report

SKEW_SECONDS = 60.0  # how far ahead of the KB's clock an agent's clock may run
CAPACITY_GROWTH = 4.0  # the total allocatable may grow to this many times its baseline
RESOURCES = ("cpu", "memory", "ephemeral_storage")
# the bound is never below GROWTH x these (a first report of a nearly empty cluster, a test)
CAPACITY_FLOOR = {"cpu": 8.0, "memory": 32 * 2**30, "ephemeral_storage": 200 * 2**30}


def ahead(now: float) -> float:
    """The latest timestamp a report or an event may carry."""
    return now + SKEW_SECONDS


def max_seq(now: float) -> int:
    """The largest sequence number a report may carry at KB time ``now``."""
    return int(ahead(now) * 1_000_000)


def ts_problem(ts: float | None, now: float) -> str | None:
    """Why a timestamp is refused (it is in the future beyond the skew bound), else None."""
    if ts is not None and ts > ahead(now):
        return (
            f"ts: {ts!r} is more than {SKEW_SECONDS:g} s ahead of the KB's clock ({now:.3f}); "
            "check the sender's clock (NTP)"
        )
    return None


def report_problem(report: Report, now: float) -> str | None:
    """Why a report's seq or ts is refused, else None."""
    if report.seq > max_seq(now):
        return (
            f"seq: {report.seq} is beyond the KB's clock in microseconds plus {SKEW_SECONDS:g} s "
            f"({max_seq(now)}); agents number reports by their clock (agent/sequence.py)"
        )
    return ts_problem(report.ts, now)


def totals(nodes: Iterable[NodeReport]) -> dict[str, float]:
    """The total allocatable of each resource over the nodes."""
    out = dict.fromkeys(RESOURCES, 0.0)
    for node in nodes:
        for resource in RESOURCES:
            out[resource] += float(getattr(node.allocatable, resource))
    return out


def baseline_of(nodes: list[NodeReport]) -> dict[str, float] | None:
    """The baseline a first accepted node list sets (None for an empty one: it sets nothing)."""
    found = totals(nodes)
    return found if any(found.values()) else None


def capacity_problem(
    nodes: list[NodeReport], baseline: Mapping[str, Any] | None, registered: Mapping[str, Any] | None
) -> str | None:
    """Why a node list claims implausible capacity, else None."""
    found = totals(nodes)
    for resource in RESOURCES:
        limit, why = _limit(resource, baseline, registered)
        if limit is not None and found[resource] > limit:
            return (
                f"nodes: total allocatable {resource} {found[resource]:g} exceeds {limit:g} ({why}); "
                "an admin re-registration (PUT /api/v1/clusters/{name}) accepts a new baseline"
            )
    return None


def _limit(
    resource: str, baseline: Mapping[str, Any] | None, registered: Mapping[str, Any] | None
) -> tuple[float | None, str]:
    if registered and registered.get(resource) is not None:
        return float(registered[resource]), "the registered capacity"
    if baseline is None:
        return None, ""
    base = float(baseline.get(resource) or 0.0)
    limit = CAPACITY_GROWTH * max(base, CAPACITY_FLOOR[resource])
    return limit, f"{CAPACITY_GROWTH:g} x the first total accepted since registration, {base:g}"
