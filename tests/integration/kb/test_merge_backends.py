"""The report merge writes the same state on PostgreSQL (one statement) as on SQLite.

Random batches of agent reports - duplicated, reordered, with a repeated seq carrying other
content, nodes and workloads appearing and vanishing, clusters that do not exist - go through
``merge.apply_reports`` on both backends; the acknowledgements and everything stored must match,
and match the documented rule (per section, the newest report that carried it).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qonnect.kb import merge, migrations, ops, queries
from qonnect.kb.app import close_state, open_state
from qonnect.kb.deps import Settings
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
        " workloads_seq, changed, nodes_digest, workloads_digest FROM clusters ORDER BY name"
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
        for table in ("workloads", "latencies", "clusters"):
            conn.execute(f"DELETE FROM {table}")
        for name in CLUSTERS:
            ops.create_cluster(conn, {"name": name, "tier": "edge", "location": name, "labels": {}}, 0.0)
        conn.commit()
        got = []
        for batch in batches:
            conn.begin()
            got.append(
                _acks(
                    merge.apply_reports(
                        conn,
                        [(c, Report.model_validate(r), t) for c, r, t in batch],
                        stamp=sum(t for *_x, t in batch),
                    )
                )
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
            assert [n["name"] for n in states[0]["nodes"][cluster]] == sorted(
                n["name"] for n in best["nodes"]
            )
    for batch, result in zip(batches, acks[0], strict=True):
        for (cluster, _r, _t), ack in zip(batch, result, strict=True):
            assert (ack == (404, "cluster 'ghost' does not exist")) == (cluster == "ghost")


def test_postgresql_tables_rewritten_by_reports_leave_room_on_each_page(backends):
    """Updates that fit on their row's page are HOT (no index entries): node rows filled their
    pages, so most of their updates were not; the cluster row now carries the node list."""
    conn = backends[1]
    options = dict(
        conn.all(
            "SELECT relname, array_to_string(reloptions, ',') FROM pg_class"
            " WHERE relname IN ('nodes', 'clusters', 'latencies', 'workloads')"
        )
    )
    assert options == {
        "clusters": "fillfactor=50",
        "latencies": "fillfactor=70",
        "workloads": "fillfactor=70",
    }


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_migration_5_moves_the_stored_nodes_into_the_cluster_row(backend, tmp_path, pg_databases):
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}" if backend == "sqlite" else pg_databases.new())
    try:
        migrations.migrate(db, upto=4)
        conn = db.connect()
        conn.begin()
        for name in ("a", "b", "c"):  # the columns of schema version 4
            conn.execute(
                "INSERT INTO clusters (name, tier, location, labels, created, updated)"
                " VALUES (?, 'edge', ?, '{}', 0, 0)",
                (name, name),
            )
        conn.execute("UPDATE clusters SET nodes_seq = 3, nodes_received = 100.0 WHERE name IN ('a', 'b')")
        for cluster, node in (("a", "n2"), ("a", "n1"), ("c", "stray")):
            data = json.dumps({"name": node, "ready": node == "n1"})
            conn.execute("INSERT INTO nodes (cluster, name, data) VALUES (?, ?, ?)", (cluster, node, data))
        conn.commit()

        assert migrations.migrate(db) == list(range(5, migrations.LATEST + 1))
        nodes = {name: queries.list_nodes(conn, name, 130.0) for name in ("a", "b", "c")}
        assert nodes == {
            "a": [
                {"name": "n1", "ready": True, "heartbeat_age": 30.0},
                {"name": "n2", "ready": False, "heartbeat_age": 30.0},
            ],
            "b": [],  # reported, with no nodes
            "c": [{"name": "stray", "ready": False, "heartbeat_age": None}],  # nothing is dropped
        }
        with pytest.raises(Exception, match="nodes"):
            conn.all("SELECT * FROM nodes")
    finally:
        db.close()


class _StatementLog:
    """psycopg's connection, recording the SQL it is asked to run."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.sql: list[str] = []

    def execute(self, sql, params=None, **kwargs):
        self.sql.append(sql.strip().split()[0].upper())
        return self.raw.execute(sql, params, **kwargs)

    def __getattr__(self, name):
        return getattr(self.raw, name)


def test_a_postgresql_batch_of_reports_is_one_statement_without_begin_or_commit(pg_databases):
    """The merge is one statement, so it needs no transaction around it: one round trip per
    batch instead of three (each one also waits for the writer to get the GIL back)."""
    db = Database(pg_databases.new())
    kb = open_state(Settings(db_url=db.url))
    try:
        conn = db.connect()
        ops.create_cluster(conn, {"name": "c0", "tier": "edge", "location": "c0", "labels": {}}, 0.0)
        writer = kb.writer

        async def report(seq: int):
            rep = Report.model_validate(
                {"seq": seq, "ts": 1.0, "nodes": [{"name": f"n{seq}", "ready": True}]}
            )
            return await writer.submit_bulk("report", ("c0", rep, 10.0 + seq))

        async def reports():
            return await asyncio.gather(*(report(seq) for seq in (2, 3, 1)))

        assert asyncio.run(report(0))["applied"]  # the first batch of a cluster reads its bounds
        spy = writer._conn.raw = _StatementLog(writer._conn.raw)
        acks = asyncio.run(reports())
        assert [a["seq"] for a in acks] == [2, 3, 1]
        assert spy.sql and set(spy.sql) == {"WITH"}, spy.sql
        stored = queries.list_nodes(conn, "c0", 20.0)
        assert [(n["name"], n["heartbeat_age"]) for n in stored] == [("n3", 7.0)]

        spy.sql.clear()  # any other write still gets its transaction
        asyncio.run(writer.submit(lambda c: c.execute("UPDATE clusters SET location = 'x'")))
        assert spy.sql == ["BEGIN", "UPDATE", "COMMIT"]
    finally:
        close_state(kb)
