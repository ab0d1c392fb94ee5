"""A version that fails wherever it goes stops moving (issue 22.4).

Reproduced on the emulator stack: a crash-looping version was moved 4 times in 3.6 minutes
(edge-3 -> edge-2 -> edge-1 -> edge-2 -> edge-1), each decision excluding only the cluster it
had just failed on. Now each move avoids every cluster that version already failed on (by the
replicated decision log), and once it failed on ``max_version_failures`` clusters the detector
returns a ``version-failing`` trigger the leader reports and never acts on.
"""

from __future__ import annotations

from dataclasses import replace

from qonnect.controller.detector import VERSION_FAILING, Memory, Snapshot, detect
from qonnect.controller.statemachine import DecisionLog
from test_controller_detector import S, cluster, known, on


def failing(where: str, version: int = 2, now: float = 1000.0) -> Snapshot:
    """shop v``version`` placed on ``where`` and crash-looping there."""
    workloads = [
        {
            "cluster": where,
            "application": "shop",
            "service": "web",
            "status": "Failed",
            "reason": "CrashLoopBackOff: back-off restarting failed container",
            "since": now - 5,
        }
    ]
    clusters = [cluster(f"edge-{i}") for i in (1, 2, 3)]
    apps = [{"name": "shop", "version": version, "application": {}}]
    return Snapshot({"clusters": clusters, "placements": {"shop": {"web": on(where)}}}, workloads, apps, now)


def moved(log: DecisionLog, trigger, ts: float) -> None:
    """The leader's decision on the trigger, ended as the executor ends it (succeeded)."""
    res = log.apply(
        {
            "op": "decide",
            "term": 1,
            "node": "n",
            "app": trigger.app,
            "service": trigger.service,
            "kind": trigger.kind,
            "reason": trigger.reason,
            "exclude": list(trigger.exclude),
            "pinned": list(trigger.pinned),
            "spec_version": trigger.spec_version,
            "ts": ts,
        }
    )
    assert log.apply({"op": "start", "term": 1, "node": "n", "id": res["id"], "ts": ts})["ok"]
    finish = {"op": "finish", "term": 1, "node": "n", "id": res["id"], "attempt": 1, "result": "succeeded"}
    assert log.apply({**finish, "ts": ts + 5})["ok"]


def test_each_move_avoids_every_cluster_the_version_failed_on_then_it_stops():
    log = known(DecisionLog(), version=2)
    first = detect(failing("edge-3"), log, Memory(), S)[0]
    assert [(t.kind, t.exclude) for t in first] == [("workload-failed", ("edge-3",))]
    moved(log, first[0], 1000.0)
    second = detect(failing("edge-2", now=1100.0), log, Memory(), S)[0]
    assert [t.kind for t in second] == [VERSION_FAILING], [t.reason for t in second]
    why = second[0].reason
    assert "version 2 of shop" in why and "edge-3" in why and "CrashLoopBackOff" in why, why
    assert second[0].pinned == ("edge-2", "edge-3")


def test_a_higher_bound_accumulates_the_exclusions_until_it_is_reached():
    settings = replace(S, max_version_failures=3)
    log = known(DecisionLog(), version=2)
    for where, now in (("edge-3", 1000.0), ("edge-2", 1100.0)):
        (trigger,) = detect(failing(where, now=now), log, Memory(), settings)[0]
        assert trigger.kind == "workload-failed"
        moved(log, trigger, now)
    assert trigger.exclude == ("edge-2", "edge-3") and "already failed on edge-3" in trigger.reason
    (last,) = detect(failing("edge-1", now=1200.0), log, Memory(), settings)[0]
    assert last.kind == VERSION_FAILING and last.pinned == ("edge-1", "edge-2", "edge-3")


def test_a_new_version_starts_with_a_clean_record():
    log = known(DecisionLog(), version=2)
    (trigger,) = detect(failing("edge-3"), log, Memory(), S)[0]
    moved(log, trigger, 1000.0)
    log.apply({"op": "observe", "app": "shop", "version": 3, "term": 1, "node": "n"})
    (fresh,) = detect(failing("edge-2", version=3, now=1100.0), log, Memory(), S)[0]
    assert fresh.kind == "workload-failed" and fresh.exclude == ("edge-2",)


def test_a_failing_version_is_not_judged_for_drift_either():
    """The version-failing trigger holds the application: no drift move sneaks it elsewhere."""
    log = known(DecisionLog(), version=2)
    (trigger,) = detect(failing("edge-3"), log, Memory(), S)[0]
    moved(log, trigger, 1000.0)
    calls = []

    def replan(*args):
        calls.append(args)
        return {"web": on("edge-1")}, "objective 0.5 -> 0.9"

    triggers = detect(failing("edge-2", now=2000.0), log, Memory(), S, replan)[0]
    assert [t.kind for t in triggers] == [VERSION_FAILING] and calls == []
