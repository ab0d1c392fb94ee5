"""Property: agent reports merge to one state whatever their order and duplication.

Runs the KB's real merge (``merge.apply_reports``) on a real SQLite database; the converged state
must also be what the documented rule says: per section, the newest report that carried it.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qonnect.kb import merge, migrations, ops, queries
from qonnect.kb.models import Report
from qonnect.kb.storage import Database

NODE_NAMES = ["n1", "n2", "n3"]
_counter = itertools.count()


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    db = Database(f"sqlite://{tmp_path_factory.mktemp('merge') / 'kb.sqlite'}")
    migrations.migrate(db)
    connection = db.connect()
    yield connection
    db.close()


def node(name: str, cpu: int) -> dict:
    return {"name": name, "ready": cpu % 2 == 0, "allocatable": {"cpu": float(cpu)}}


@st.composite
def reports(draw) -> list[dict]:
    seqs = draw(st.lists(st.integers(1, 50), min_size=1, max_size=6, unique=True))
    out = []
    for seq in seqs:
        body: dict = {"seq": seq, "ts": float(seq), "reachable": draw(st.booleans())}
        if draw(st.booleans()):
            names = draw(st.lists(st.sampled_from(NODE_NAMES), unique=True, max_size=3))
            body["nodes"] = [node(n, draw(st.integers(0, 9))) for n in names]
        elif draw(st.booleans()):
            body["nodes"] = None
        if draw(st.booleans()):
            body["workloads"] = [
                {
                    "namespace": "ns",
                    "kind": "Deployment",
                    "name": f"w{seq % 3}",
                    "status": draw(st.sampled_from(["Healthy", "Failed"])),
                }
            ]
        body["latencies"] = draw(
            st.dictionaries(st.sampled_from(["kb", "p1", "p2"]), st.floats(0, 100), max_size=2)
        )
        out.append(body)
    return out


def state(conn, cluster: str) -> dict:
    row = conn.one("SELECT report_seq, reachable, error FROM clusters WHERE name = ?", (cluster,))
    nodes = {n.pop("name"): n for n in queries.list_nodes(conn, cluster, 0.0)}
    for data in nodes.values():
        data.pop("heartbeat_age")  # receive time, not merged state
    workloads = queries.list_workloads(conn, None, cluster)
    for data in workloads:
        data.pop("cluster")
    return {
        "cluster": row,
        "nodes": nodes,
        "workloads": workloads,
        "latencies": conn.all(
            "SELECT peer, ms, seq FROM latencies WHERE cluster = ? ORDER BY peer", (cluster,)
        ),
    }


def apply_all(conn, bodies: list[dict], batches: list[int] | None = None) -> dict:
    """Apply the reports one by one, or in batches of the given sizes (as the writer does)."""
    cluster = f"c{next(_counter)}"
    conn.begin()
    ops.create_cluster(conn, {"name": cluster, "tier": "edge", "location": cluster, "labels": {}}, 0.0)
    items = [(cluster, Report.model_validate(b), 1.0) for b in bodies]
    if batches is None:
        for item in items:
            assert merge.apply_reports(conn, [item])[0]["seq"] == item[1].seq
    else:
        start = 0
        for size in [*batches, len(items)]:
            merge.apply_reports(conn, items[start : start + size])
            start += size
    conn.commit()
    return state(conn, cluster)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=reports(), data=st.data())
def test_any_order_and_duplication_converges_to_the_newest_per_key(conn, bodies, data):
    in_order = apply_all(conn, sorted(bodies, key=lambda b: b["seq"]))
    shuffled = data.draw(st.permutations(bodies))
    duplicated = shuffled + data.draw(st.lists(st.sampled_from(bodies), max_size=4))
    assert apply_all(conn, duplicated) == in_order
    batches = data.draw(st.lists(st.integers(1, 4), max_size=4))
    assert apply_all(conn, duplicated, batches) == in_order

    newest = max(bodies, key=lambda b: b["seq"])
    assert in_order["cluster"] == (newest["seq"], int(newest["reachable"]), None)
    with_nodes = [b for b in bodies if b.get("nodes") is not None]
    expected_nodes = (
        sorted(n["name"] for n in max(with_nodes, key=lambda b: b["seq"])["nodes"]) if with_nodes else []
    )
    assert sorted(in_order["nodes"]) == expected_nodes
    for peer, ms, seq in in_order["latencies"]:
        best = max((b for b in bodies if peer in b["latencies"]), key=lambda b: b["seq"])
        assert (ms, seq) == (best["latencies"][peer], best["seq"])


def test_a_report_for_an_unknown_cluster_is_a_404(conn):
    from fastapi import HTTPException

    conn.begin()
    ghost = merge.apply_reports(conn, [("ghost", Report.model_validate({"seq": 1, "ts": 1.0}), 1.0)])
    conn.rollback()
    assert isinstance(ghost[0], HTTPException)
    assert ghost[0].status_code == 404 and "ghost" in ghost[0].detail
