"""What a replica says of itself: its /status document (status.py serves it) and what the
leader's ``why`` says after a detection pass."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from qonnect.controller.detector import Snapshot, Trigger
from qonnect.controller.raft import RaftNode
from qonnect.controller.statemachine import RETRY, DecisionLog


def leader_why(
    term: int | None, snapshot: Snapshot, apps: set[str] | None, machine: DecisionLog, triggers: list[Trigger]
) -> str:
    """What the leader watches, what is in flight and which applications wait (and why)."""
    inflight = len(machine.inflight)
    waiting = [
        f"{d['app']} waits ({d['detail']})"
        for d in machine.open_decisions()
        if d["status"] == RETRY and str(d.get("detail", "")).startswith("unplaceable")
    ]
    return (
        f"leader of term {term}: watching {len(snapshot.inventory.get('clusters', []))} "
        f"clusters and {len(apps or ())} applications; {inflight} migration(s) in flight"
        + "".join(f"; {w}" for w in waiting)
        + ("" if triggers or inflight else "; nothing needs doing")
    )


def status(
    node: RaftNode,
    name: str,
    kb: str,
    why: str,
    running: Iterable[str],
    max_concurrent_runs: int,
    waiting: list[str],
    survivability: dict[str, Any],
    drift_judgements: int = 0,
    rejudged_for: dict[str, int] | None = None,
    fleet_changes: dict[str, int] | None = None,
    drift_carried: int = 0,
) -> dict[str, Any]:
    """The replica's /status document: its Raft state, the KB's, why it (does not) decide, the
    replicated log's decisions, its own runs and the runs waiting for a slot, and how many times
    its QoS-drift judge re-placed an application (it judges only after a change it reads: an
    idle fleet leaves the count still)."""
    raw: dict[str, Any] = {}
    for _try in range(3):  # pysyncobj mutates its dicts on its own thread
        try:
            raw = node.getStatus()
            break
        except RuntimeError:
            time.sleep(0.01)
    machine = node.machine
    state = {0: "follower", 1: "candidate", 2: "leader"}.get(raw.get("state", -1), "unknown")
    return {
        "node": node.node_id,
        "name": name or node.node_id,
        "state": state,
        "is_leader": node.is_leader(),
        "leader": node.leader(),
        "term": raw.get("raft_term", node.term()),
        "commit_index": raw.get("commit_idx", 0),
        "last_applied": raw.get("last_applied", 0),
        "has_quorum": bool(raw.get("has_quorum")),
        "peers": node.peer_status(),
        "kb": kb,
        "why": why,
        "token": dict(machine.last_token),
        "inflight": [dict(d) for d in machine.open_decisions()],
        "recent": [dict(d) for d in machine.recent(10)],
        "log_counters": dict(machine.counters),
        "versions": dict(machine.versions),  # app -> spec version placed or observed
        "running_here": sorted(running),
        "max_concurrent_runs": max_concurrent_runs,
        "waiting_for_run_slot": list(waiting),  # decision ids, in the order they start
        "survivability": survivability,  # the leader's last N-1 report (survival.py)
        "drift_judgements": drift_judgements,
        # judged again because this part of the application's key changed (replan.KEY_PARTS)
        "drift_rejudged_for": dict(rejudged_for or {}),
        # the inventories in which each cluster (or the latency table) changed as the engine reads it
        "drift_fleet_changes": dict(fleet_changes or {}),
        # verdicts kept through a fleet change the engine showed cannot move their plans
        "drift_carried": drift_carried,
    }
