"""A capacity claim the leader has not confirmed attracts no move (controller/capacity.py, issue 25).

The reproduction: edge-3's stolen agent token claimed 1000 CPUs (within the KB's bounds a claim
can still be several times the real size) and ~1 s later a QoS-drift move put ratings there.
"""

from __future__ import annotations

import time

from qonnect.controller.capacity import CapacityWatch, reported
from qonnect.controller.detector import Memory, Settings, Snapshot
from qonnect.controller.statemachine import DecisionLog
from qonnect.controller.triggers import detect

S = Settings(heartbeat_timeout=6.0, node_grace=10.0, stable_seconds=0.0, min_dwell=0.0)


def cluster(name: str, cpus: list[float]) -> dict:
    nodes = [
        {"name": f"{name}-n{i}", "ready": True, "schedulable": True, "allocatable": {"cpu": c}}
        for i, c in enumerate(cpus)
    ]
    return {"name": name, "tier": "edge", "healthy": True, "heartbeat_age": 1.0, "nodes": nodes}


def settled(watch: CapacityWatch, clusters: list[dict], timeout: float = 5.0) -> dict[str, str]:
    """unconfirmed() once the reads it started have finished."""
    deadline = time.monotonic() + timeout
    out = watch.unconfirmed(clusters)
    while watch.running and time.monotonic() < deadline:
        time.sleep(0.01)
    return watch.unconfirmed(clusters) if out else out


def test_a_jump_is_unconfirmed_until_the_clusters_own_nodes_show_it():
    real = {"edge-3": (8.0, frozenset({"edge-3-n0"}))}
    reads: list[str] = []

    def read(name: str, record: dict):
        reads.append(name)
        return real[name]

    watch = CapacityWatch(lambda: [{"name": "edge-3"}], read, reread=0.0)
    assert watch.unconfirmed([cluster("edge-3", [8.0])]) == {}  # first sight: the baseline, no read
    assert watch.unconfirmed([cluster("edge-3", [9.0])]) == {} and reads == []  # within the jump
    forged = [cluster("edge-3", [1000.0])]
    why = settled(watch, forged)["edge-3"]
    assert "reports 1000 CPU on 1 node(s)" in why and "its API shows 8 CPU on 1 node(s)" in why
    invented = [cluster("edge-3", [8.0, 8.0])]  # a node the cluster does not have
    assert "no node edge-3-n1" in settled(watch, invented)["edge-3"]
    real["edge-3"] = (16.0, frozenset({"edge-3-n0", "edge-3-n1"}))  # the admin really added one
    assert settled(watch, invented) == {}
    assert watch.unconfirmed(invented) == {} and watch.baseline["edge-3"][0] == 16.0


def test_an_unreadable_cluster_stays_unconfirmed_and_reads_are_bounded():
    calls: list[float] = []

    def read(name: str, record: dict):
        calls.append(time.monotonic())
        return "cannot read its nodes (HTTP 403)"

    watch = CapacityWatch(lambda: [{"name": "edge-3"}], read, reread=60.0)
    watch.unconfirmed([cluster("edge-3", [4.0])])
    for _tick in range(20):
        why = settled(watch, [cluster("edge-3", [400.0])])
    assert "could not confirm it (cannot read its nodes (HTTP 403))" in why["edge-3"]
    assert len(calls) == 1  # one read per reread period, not one a tick
    assert reported(cluster("x", [1.5, 2.5])) == (4.0, frozenset({"x-n0", "x-n1"}))


def test_a_new_leader_checks_a_claim_made_before_it_took_over():
    """First sight is the baseline, except when it is a jump over the KB's baseline of the
    registration's epoch: a forgery sent while no leader watched is read before work moves."""
    reads: list[str] = []

    def read(name: str, record: dict):
        reads.append(name)
        return 8.0, frozenset({"edge-3-n0"})

    watch = CapacityWatch(lambda: [{"name": "edge-3"}, {"name": "edge-2"}], read, reread=0.0)
    forged = {**cluster("edge-3", [30.0]), "capacity_baseline": {"cpu": 8.0, "memory": 1.0}}
    honest = {**cluster("edge-2", [9.0]), "capacity_baseline": {"cpu": 8.0}}
    why = settled(watch, [forged, honest])
    assert set(why) == {"edge-3"} and reads == ["edge-3"]
    assert "reports 30 CPU on 1 node(s), 8 CPU in the first report since its registration" in why["edge-3"]
    assert "its API shows 8 CPU on 1 node(s)" in why["edge-3"] and "edge-3" not in watch.baseline
    assert watch.baseline["edge-2"] == (9.0, frozenset({"edge-2-n0"}))
    fresh = CapacityWatch(lambda: [], read)  # a KB without the field (older): the report stands
    assert fresh.unconfirmed([cluster("edge-3", [30.0])]) == {}


def test_no_move_goes_to_an_unconfirmed_cluster():
    """The drift replan and failure moves avoid it; the notice says why, once."""
    seen: list[tuple] = []

    def replan(record, inventory, current, exclude):
        seen.append(exclude)
        return (
            ({"web": [{"cluster": "edge-2", "replicas": 1}]}, "objective 0.5 -> 0.9")
            if "edge-3" in exclude
            else (
                {"web": [{"cluster": "edge-3", "replicas": 1}]},
                "objective 0.5 -> 0.99",
            )
        )

    log = DecisionLog()
    log.apply({"op": "observe", "app": "ratings", "version": 1, "term": 1, "node": "n"})
    inventory = {
        "clusters": [cluster("edge-1", [4.0]), cluster("edge-2", [4.0]), cluster("edge-3", [1000.0])],
        "placements": {"ratings": {"web": [{"cluster": "edge-1", "replicas": 1}]}},
    }
    apps = [{"name": "ratings", "version": 1, "application": {}}]
    memory = Memory()
    why = {"edge-3": "reports 1000 CPU on 1 node(s), 8 CPU on 1 confirmed; its API shows 8 CPU"}
    for now in (1000.0, 1001.0):
        snapshot = Snapshot(inventory, [], apps, now, heard_for=60.0, unconfirmed=why)
        triggers, _observe = detect(snapshot, log, memory, S, replan)
        assert all("edge-3" in t.exclude for t in triggers)
    assert seen and all("edge-3" in e for e in seen)
    (notice,) = [n for n in memory.notices if n.kind == "capacity-unconfirmed"]
    assert notice.cluster == "edge-3" and "no move goes there until its API confirms it" in notice.text


def test_the_leaders_probes_share_one_read_of_the_cluster_records():
    """A capacity read and a suspect probe of many clusters fetch the KB's full cluster list
    (1000 records in a large fleet) once per TTL between them, not once per cluster."""
    from qonnect.controller.confirm import Confirmer
    from qonnect.controller.detector import ApiProbe
    from qonnect.controller.records import RecordCache

    fetched: list[float] = []

    def fetch() -> list[dict]:
        fetched.append(time.monotonic())
        return [{"name": f"c{i}", "kubeconfig": "k"} for i in range(100)]

    records = RecordCache(fetch, ttl=60.0, min_gap=60.0)
    seen: list[str] = []
    confirmer = Confirmer(
        records, lambda name, record: seen.append(record["name"]) or ApiProbe(True, "ok", time.time())
    )
    watch = CapacityWatch(
        records, lambda name, record: (seen.append(name) or 1.0, frozenset({"n"})), reread=0.0
    )
    names = [f"c{i}" for i in range(100)]
    confirmer.probes(names)
    for name in names:
        watch._read(name)
    deadline = time.monotonic() + 5
    while confirmer.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(seen) == 200 and len(fetched) == 1
    assert records.get("c-new") is None and len(fetched) == 1  # an unknown name waits out min_gap
    confirmer.close()
    watch.close()
