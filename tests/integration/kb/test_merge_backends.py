"""The report merge writes the same state on PostgreSQL (one statement) as on SQLite.

Random batches of agent reports - duplicated, reordered, with a repeated seq carrying other
content, nodes and workloads appearing and vanishing, clusters that do not exist - go through
``merge.apply_reports`` on both backends; the acknowledgements and everything stored must match,
and match the documented rule (per section, the newest report that carried it).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qonnect.kb import merge, migrations, ops, queries
from qonnect.kb.models import Report
from qonnect.kb.storage import Database

CLUSTERS = ["c0", "c1", "c2"]


@pytest.fixture(scope="module")
def backends(tmp_path_factory, pg_databases):
    dbs = [
        Database(f"sqlite://{tmp_path_factory.mktemp('merge') / 'kb.sqlite'}"),
        Database(pg_databases.new()),
    ]
    conns = []
    for db in dbs:
        migrations.migrate(db)
        conns.append(db.connect(writer=True))
    yield conns
    for db in dbs:
        db.close()


node = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["n1", "n2", "n3"]),
        "ready": st.booleans(),
        "allocatable": st.fixed_dictionaries({"cpu": st.integers(0, 9).map(float)}),
    }
)
workload = st.fixed_dictionaries(
    {
        "namespace": st.just("ns"),
        "kind": st.just("Deployment"),
        "name": st.sampled_from(["w1", "w2"]),
        "application": st.sampled_from(["a", None]),
        "status": st.sampled_from(["Healthy", "Failed"]),
    }
)
report = st.fixed_dictionaries(
    {
        "seq": st.integers(1, 8),
        "ts": st.floats(0, 1e9),
        "reachable": st.booleans(),
        "error": st.sampled_from([None, "timeout", 'quote " and \\ backslash']),
        "nodes": st.none() | st.lists(node, max_size=3, unique_by=lambda n: n["name"]),
        "workloads": st.none() | st.lists(workload, max_size=2, unique_by=lambda w: w["name"]),
        "latencies": st.dictionaries(st.sampled_from(["kb", "c1", "p"]), st.floats(0, 1000), max_size=2),
    }
)
item = st.tuples(st.sampled_from([*CLUSTERS, "ghost"]), report, st.floats(1e9, 2e9))


def _state(conn) -> dict:
    clusters = conn.all(
        "SELECT name, report_seq, heartbeat, report_ts, reachable, error, nodes_seq, nodes_received,"
        " workloads_seq FROM clusters ORDER BY name"
    )
    return {
        "clusters": [tuple(r) for r in clusters],
        "nodes": {c: queries.list_nodes(conn, c, 2e9) for c in CLUSTERS},
        "workloads": queries.list_workloads(conn, None, None),
        "latencies": [tuple(r) for r in conn.all("SELECT * FROM latencies ORDER BY cluster, peer")],
    }


def _acks(result: list) -> list:
    return [r if isinstance(r, dict) else (r.status_code, r.detail) for r in result]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(item, min_size=1, max_size=8), min_size=1, max_size=4))
def test_both_backends_store_the_same_merge(backends, batches):
    states, acks = [], []
    for conn in backends:
        conn.begin()
        for table in ("nodes", "workloads", "latencies", "clusters"):
            conn.execute(f"DELETE FROM {table}")
        for name in CLUSTERS:
            ops.create_cluster(conn, {"name": name, "tier": "edge", "location": name, "labels": {}}, 0.0)
        conn.commit()
        got = []
        for batch in batches:
            conn.begin()
            got.append(
                _acks(merge.apply_reports(conn, [(c, Report.model_validate(r), t) for c, r, t in batch]))
            )
            conn.commit()
        states.append(_state(conn))
        acks.append(got)
    assert acks[0] == acks[1]
    assert states[0] == states[1]

    every = [(c, r) for batch in batches for c, r, _t in batch if c != "ghost"]
    for cluster in CLUSTERS:
        mine = [r for c, r in every if c == cluster]
        with_nodes = [r for r in mine if r["nodes"] is not None]
        if with_nodes:  # the first report with the highest seq wins
            best = max(with_nodes, key=lambda r: r["seq"])
            assert sorted(n["name"] for n in states[0]["nodes"][cluster]) == sorted(
                n["name"] for n in best["nodes"]
            )
    for batch, result in zip(batches, acks[0], strict=True):
        for (cluster, _r, _t), ack in zip(batch, result, strict=True):
            assert (ack == (404, "cluster 'ghost' does not exist")) == (cluster == "ghost")


def test_postgresql_tables_rewritten_by_reports_leave_room_on_each_page(backends):
    """Updates that fit on their row's page are HOT (no index entries): node rows filled their
    pages, so most of their updates were not."""
    conn = backends[1]
    options = dict(
        conn.all(
            "SELECT relname, array_to_string(reloptions, ',') FROM pg_class"
            " WHERE relname IN ('nodes', 'clusters', 'latencies', 'workloads')"
        )
    )
    assert options == {
        "nodes": "fillfactor=50",
        "clusters": "fillfactor=70",
        "latencies": "fillfactor=70",
        "workloads": "fillfactor=70",
    }
