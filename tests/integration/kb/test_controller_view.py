"""The controller's cached view (services/qonnect/controller/view.py), kept current from the KB's
change feed, equals a full read of the KB after any sequence of changes, on SQLite and
PostgreSQL: the detector sees the same Snapshot as when it read the whole federation."""

from __future__ import annotations

import time
import uuid

from qonnect.controller import journal
from qonnect.controller import view as view_module
from qonnect.controller.view import FleetView
from test_kb_api import node, spec


def report(
    seq: int,
    nodes: list | None,
    reachable: bool = True,
    workloads: list | None = None,
    latencies: dict | None = None,
) -> dict:
    return {
        "seq": seq,
        "ts": time.time(),
        "reachable": reachable,
        "nodes": nodes,
        "workloads": workloads,
        "latencies": latencies or {},
    }


def work(name: str, status: str = "Healthy", app: str = "shop") -> dict:
    return {
        "namespace": "ns",
        "kind": "Deployment",
        "name": name,
        "application": app,
        "service": name,
        "status": status,
        "replicas": 1,
        "ready_replicas": 1,
    }


def without_ages(inventory: dict) -> dict:
    clusters = []
    for c in inventory["clusters"]:
        c = {k: v for k, v in c.items() if k not in ("heartbeat_age", "healthy")}
        c["nodes"] = [{k: v for k, v in n.items() if k != "heartbeat_age"} for n in c["nodes"]]
        clusters.append(c)
    return dict(inventory, clusters=clusters)


def assert_same(view: FleetView, kb) -> None:
    now = time.time()
    got, records = view.read(now)
    want, want_records = journal.read_whole(kb, now)
    assert without_ages(got.inventory) == without_ages(want.inventory)
    for mine, theirs in zip(got.inventory["clusters"], want.inventory["clusters"], strict=True):
        age = theirs["heartbeat_age"]
        if age is None or abs(age - view.timeout) > 1.0:  # not crossing the timeout between both reads
            assert mine["healthy"] == theirs["healthy"], mine["name"]
        if theirs["heartbeat_age"] is None or theirs["heartbeat_age"] > view.stale_after + 0.5:
            assert mine["heartbeat_age"] is not None or theirs["heartbeat_age"] is None
            if theirs["heartbeat_age"] is not None:  # exact for a stale cluster (KB receive times)
                assert abs(mine["heartbeat_age"] - theirs["heartbeat_age"]) < 1.0, mine["name"]
        else:  # capped at stale_after: never judged older than it is by more than the cap
            assert mine["heartbeat_age"] <= view.stale_after + 1e-6
        for a, b in zip(mine["nodes"], theirs["nodes"], strict=True):
            if b["heartbeat_age"] is not None and b["heartbeat_age"] > view.stale_after + 0.5:
                assert abs(a["heartbeat_age"] - b["heartbeat_age"]) < 1.0
            else:
                assert a["heartbeat_age"] <= view.stale_after + 1e-6
    assert got.workloads == want.workloads
    assert [a["name"] for a in got.applications] == [a["name"] for a in want.applications]
    assert [a["version"] for a in got.applications] == [a["version"] for a in want.applications]
    assert [(r["application"], r["current"], r["desired"]) for r in records] == [
        (r["application"], r["current"], r["desired"]) for r in want_records
    ]


def test_the_view_equals_a_full_read_after_changes(live_kb, monkeypatch):
    monkeypatch.setattr(view_module, "PAGE", 2)  # its full reads come in pages of 2 clusters
    kb = live_kb.client("controller")
    admin = live_kb.admin
    tag = uuid.uuid4().hex[:6]
    a, b, c, d = (f"view-{tag}-{x}" for x in "abcd")
    for name in (a, b, c):
        admin.register_cluster({"name": name, "tier": "edge", "labels": {"zone": "one"}})
    admin.report(a, report(1, [node("a1"), node("a2", cpu=2.0)], workloads=[work("web")]))
    admin.report(b, report(1, [node("b1")], workloads=[], latencies={a: 12.0, "kb": 1.0}))
    view = FleetView(kb, background=False)
    assert_same(view, kb)
    assert view.full_reads == 1

    admin.report(a, report(2, [node("a1"), node("a2", cpu=2.0)], workloads=[work("web")]))  # heartbeat
    admin.report(
        a, report(3, [node("a1", ready=False), node("a2", cpu=2.0)], workloads=[work("web", "Failed")])
    )
    admin.report(b, report(2, None, reachable=False))
    admin.delete_cluster(c)
    admin.register_cluster({"name": d, "tier": "cloud"})
    admin.update_cluster(a, {"labels": {"zone": "two"}})
    app = f"view-{tag}"
    admin.put_application(app, spec(app))
    admin.put_placement(app, {"desired": {"web": [{"cluster": a, "replicas": 1}]}})
    assert_same(view, kb)
    assert view.full_reads == 1  # all of it from the feed

    time.sleep(1.5)  # silence: b and a age in the KB without any write
    admin.report(b, report(3, [node("b1")], workloads=[work("db")], latencies={a: 30.0, d: 5.0}))
    admin.delete_application(app)
    assert_same(view, kb)

    view.cursor = "from-another-kb:1.0"  # e.g. the KB restarted: 410, then a full read
    assert_same(view, kb)
    assert view.full_reads == 2
