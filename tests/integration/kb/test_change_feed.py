"""The KB's change feed (``GET /api/v1/changes``), paged inventory and summary, on SQLite and
PostgreSQL: a tick of the controller costs what changed, not the whole fleet (issue 21).

A heartbeat-only report is no change; a node, workload or reachability change is; a silent
cluster is listed as stale from the KB's own receive times without any write; a cursor from
before a restart of the KB is refused (410), and a read without one is the whole state.
"""

from __future__ import annotations

import time

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from qonnect.kb.routes.system import OVERLAP
from test_kb_api import node

BACKENDS = ("sqlite", "postgresql")


def report(seq: int, nodes: list | None, reachable: bool = True, workloads: list | None = None) -> dict:
    body: dict = {"seq": seq, "ts": time.time(), "reachable": reachable, "nodes": nodes}
    if workloads is not None:
        body["workloads"] = workloads
    return body


def names(entries: list[dict]) -> set[str]:
    return {e["name"] for e in entries}


def settle() -> None:
    """Let earlier changes fall out of the feed's overlap window (it re-reads OVERLAP seconds)."""
    time.sleep(OVERLAP + 0.3)


def test_a_heartbeat_alone_is_no_change_a_node_change_is(live_kb, fresh):
    admin = live_kb.admin
    name = fresh("feed")
    admin.register_cluster({"name": name, "tier": "edge"})
    admin.report(name, report(1, [node("n1", cpu=4.0)]))
    settle()
    cursor = admin.changes()["cursor"]
    admin.report(name, report(2, [node("n1", cpu=4.0)]))  # the same nodes: a heartbeat
    got = admin.changes(cursor)
    assert not got["full"]
    assert name not in names(got["clusters"])
    assert name not in names(got["stale"])

    admin.report(name, report(3, [node("n1", cpu=4.0, ready=False)]))  # a node turns NotReady
    got = admin.changes(got["cursor"])
    entry = {c["name"]: c for c in got["clusters"]}[name]
    assert entry["nodes"][0]["ready"] is False
    assert entry["heartbeat"] is not None and abs(entry["heartbeat"] - got["now"]) < 5
    wanted = {c["name"]: c for c in admin.inventory()["clusters"]}[name]
    for key in ("tier", "location", "labels", "reachable", "error", "free", "capacity_baseline"):
        assert entry[key] == wanted[key]


def test_workloads_reachability_placements_and_removals_are_changes(live_kb, fresh):
    admin = live_kb.admin
    name = fresh("feed")
    admin.register_cluster({"name": name, "tier": "edge"})
    work = {"namespace": "ns", "kind": "Deployment", "name": "w", "status": "Healthy", "replicas": 1}
    admin.report(name, report(1, [node("n1")], workloads=[work]))
    settle()
    cursor = admin.changes()["cursor"]
    admin.report(name, report(2, [node("n1")], workloads=[dict(work, status="Failed")]))
    got = admin.changes(cursor)
    assert name in names(got["clusters"])
    assert [w["status"] for w in got["workloads"] if w["cluster"] == name] == ["Failed"]

    settle()
    cursor = got["cursor"]
    admin.report(name, report(3, None, reachable=False))
    got = admin.changes(cursor)
    assert name in names(got["clusters"]) and name in names(got["stale"])

    settle()
    cursor = got["cursor"]
    admin.delete_cluster(name)
    got = admin.changes(cursor)
    assert name in got["removed"]["clusters"] and name not in names(got["clusters"])


def test_a_silent_cluster_is_listed_stale_without_any_write(live_kb, fresh):
    admin = live_kb.admin
    name, never = fresh("feed"), fresh("feed")
    admin.register_cluster({"name": name, "tier": "edge"})
    admin.register_cluster({"name": never, "tier": "edge"})
    admin.report(name, report(1, [node("n1")]))
    got = admin.changes(stale_after=1.0)
    stale = {s["name"]: s for s in got["stale"]}
    assert name not in stale and never in stale and stale[never]["heartbeat"] is None
    time.sleep(1.5)  # nobody writes
    got = admin.changes(got["cursor"], stale_after=1.0)
    stale = {s["name"]: s for s in got["stale"]}
    assert got["now"] - stale[name]["heartbeat"] > 1.0
    assert got["now"] - stale[name]["nodes_received"] > 1.0
    admin.report(name, report(2, [node("n1")]))  # it reports again: no longer stale
    assert name not in names(admin.changes(got["cursor"], stale_after=1.0)["stale"])


def test_the_full_read_equals_the_inventory(live_kb, fresh):
    admin = live_kb.admin
    name = fresh("feed")
    admin.register_cluster({"name": name, "tier": "fog", "labels": {"a": "b"}})
    admin.report(name, report(1, [node("n1"), node("n2", cpu=2.0)]))
    got, inventory = admin.changes(), admin.inventory()
    assert got["full"]
    assert names(got["clusters"]) == names(inventory["clusters"])

    def strip(c: dict) -> dict:
        c = {
            k: v for k, v in c.items() if k not in ("heartbeat_age", "heartbeat", "nodes_received", "healthy")
        }
        c["nodes"] = [{k: v for k, v in n.items() if k != "heartbeat_age"} for n in c["nodes"]]
        return c

    assert [strip(c) for c in got["clusters"]] == [strip(c) for c in inventory["clusters"]]
    assert {p["application"] for p in got["placements"]} >= set(inventory["placements"])


def test_a_cursor_the_kb_does_not_know_is_refused(live_kb):
    with pytest.raises(KBError) as err:
        live_kb.admin.changes("someone-else:1.0")
    assert err.value.status == 410
    with pytest.raises(KBError) as err:
        live_kb.admin.changes("not a cursor")
    assert err.value.status == 410


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cursor_from_before_a_restart_asks_for_a_full_read(backend, db_url_factory, make_token, kb_process):
    db_url = db_url_factory(backend)
    token = make_token(db_url, "admin")
    first = kb_process(db_url)
    kb = KBClient(first.url, token)
    kb.register_cluster({"name": "c1", "tier": "edge"})
    cursor = kb.changes()["cursor"]
    assert not kb.changes(cursor)["full"]
    first.stop()
    second = kb_process(db_url)
    kb = KBClient(second.url, token)
    with pytest.raises(KBError) as err:
        kb.changes(cursor)
    assert err.value.status == 410 and "cursor" in err.value.message
    got = kb.changes()
    assert got["full"] and names(got["clusters"]) == {"c1"}


def test_the_inventory_pages_and_summarises(live_kb, fresh):
    admin = live_kb.admin
    prefix = fresh("page")
    made = [f"{prefix}-{i}" for i in range(5)]
    for name in made:
        admin.register_cluster({"name": name, "tier": "cloud"})
    admin.report(made[0], report(1, [node("n1")]))
    seen, after, pages = [], None, 0
    while True:
        page = admin.inventory_page(limit=2, after=after)
        pages += 1
        seen += [c["name"] for c in page["clusters"]]
        assert len(page["clusters"]) <= 2 and "latency_ms" in page and "placements" in page
        after = page["next"]
        if after is None:
            break
    assert seen == [c["name"] for c in admin.inventory()["clusters"]]
    assert set(made) <= set(seen) and pages >= 3
    assert "next" not in admin.inventory()  # the contract of the whole inventory is unchanged

    summary = admin.summary()
    everything = admin.list_clusters()
    assert summary["clusters"] == len(everything)
    assert summary["healthy"] == sum(1 for c in everything if c["status"]["healthy"])
    sick = {c["name"] for c in summary["unhealthy"]}
    assert set(made[1:]) <= sick and made[0] not in sick
    assert summary["tiers"]["cloud"]["clusters"] >= 5


def test_qonnect_status_summarises_a_large_federation(live_kb, fresh, monkeypatch):
    from qonnect import status

    name = fresh("status")
    live_kb.admin.register_cluster({"name": name, "tier": "edge"})
    live_kb.admin.register_cluster({"name": fresh("status"), "tier": "cloud"})
    kb = live_kb.client("reader")
    doc = status.collect(kb, [], clusters_shown="summary")
    assert "tiers" not in doc and name in {c["name"] for c in doc["summary"]["unhealthy"]}
    text = status.render(doc)
    assert "not healthy (" in text and name in text and "--all lists every cluster" in text

    monkeypatch.setattr(status, "SUMMARY_ABOVE", 1)  # as if the federation were large
    assert "summary" in status.collect(kb, [])
    monkeypatch.setattr(status, "PAGE", 1)
    every = status.collect(kb, [], clusters_shown="all")  # every cluster, a page at a time
    listed = sorted(c["name"] for tier in every["tiers"].values() for c in tier)
    assert listed == sorted(c["name"] for c in live_kb.admin.list_clusters())
    assert name in status.render(every)


def test_a_full_read_comes_in_pages(live_kb, fresh):
    admin = live_kb.admin
    for _i in range(3):
        admin.register_cluster({"name": fresh("paged"), "tier": "edge"})
    whole = admin.changes()
    first = admin.changes(limit=2)
    pages, seen, following = 1, [c["name"] for c in first["clusters"]], first["next"]
    assert first["placements"] == whole["placements"] and first["full"]
    while following:
        page = admin.changes(limit=2, after=following)
        assert page["placements"] == [] and page["applications"] == []  # with the first page only
        seen += [c["name"] for c in page["clusters"]]
        following, pages = page["next"], pages + 1
    assert seen == [c["name"] for c in whole["clusters"]] and pages >= 2
    with pytest.raises(KBError) as err:  # pages are for a full read
        admin.changes(first["cursor"], limit=2)
    assert err.value.status == 422
