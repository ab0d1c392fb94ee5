"""Reports are merge-safe: duplicated, delayed, reordered or compacted reports converge.

The reports go through the KB's own merge (``qonnect.kb.merge.apply_reports`` on its SQLite
storage), so this checks the real rule, and the agent's outbox compaction against it.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qonnect.agent.buffer import Outbox
from qonnect.kb import merge, ops, queries
from qonnect.kb.migrations import migrate
from qonnect.kb.models import Report
from qonnect.kb.storage import Database

NOW = 1_800_000_000.0
_names = itertools.count()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    database = Database(f"sqlite:///{tmp_path_factory.mktemp('kb') / 'kb.sqlite'}")
    migrate(database)
    database.writer = database.connect()
    # durability is not under test here: skip the fsync of every transaction
    database.writer.execute("PRAGMA synchronous=OFF")
    yield database
    database.close()


def _write(db: Database, fn) -> None:
    conn = db.writer
    conn.begin()
    try:
        fn(conn)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def new_cluster(db: Database) -> str:
    name = f"c{next(_names)}"
    record = {"name": name, "tier": "edge", "location": name, "labels": {}}
    _write(db, lambda conn: ops.create_cluster(conn, record, NOW))
    return name


def deliver(db: Database, cluster: str, reports: list[dict], batches: list[int] | None = None) -> None:
    """Apply reports through the KB's merge, in batches of the given sizes (the KB's writer
    groups concurrent reports into one transaction), one by one by default."""
    items = [(cluster, Report.model_validate(r), NOW) for r in reports]
    sizes = iter(batches or [])
    while items:
        size = max(1, next(sizes, 1))
        batch, items = items[:size], items[size:]
        _write(db, lambda conn, batch=batch: merge.apply_reports(conn, batch))


def state(db: Database, cluster: str) -> dict:
    """What the KB says about the cluster, without receive-time dependent ages."""
    with db.reader() as conn:
        status = queries.get_cluster(conn, cluster, NOW, 15.0, credentials=False)["status"]
        nodes = queries.list_nodes(conn, cluster, NOW)
        workloads = [
            {k: v for k, v in w.items() if k != "cluster"}
            for w in queries.list_workloads(conn, None, cluster)
        ]
        latency = queries.latency_matrix(conn).get(cluster, {})
    for node in nodes:
        node.pop("heartbeat_age")
    status.pop("heartbeat_age")
    return {"status": status, "nodes": nodes, "workloads": workloads, "latency": latency}


node_st = st.builds(
    lambda name, ready, cpu: {"name": name, "ready": ready, "allocatable": {"cpu": cpu}},
    st.sampled_from(["n1", "n2", "n3"]),
    st.booleans(),
    st.integers(0, 8).map(float),
)
workload_st = st.builds(
    lambda name, status: {
        "namespace": "app",
        "kind": "Deployment",
        "name": name,
        "application": "shop",
        "service": name,
        "status": status,
    },
    st.sampled_from(["web", "db"]),
    st.sampled_from(["Healthy", "Progressing", "Failed"]),
)


def _unique(items: list[dict], key) -> list[dict]:
    return list({key(i): i for i in items}.values())


@st.composite
def reports(draw, max_size: int = 8) -> list[dict]:
    """Reports one agent sent, in the order it sent them (seq strictly growing)."""
    count = draw(st.integers(1, max_size))
    seqs = sorted(draw(st.lists(st.integers(1, 10**15), min_size=count, max_size=count, unique=True)))
    out = []
    for seq in seqs:
        reachable = draw(st.booleans())
        nodes = draw(st.lists(node_st, max_size=3)) if reachable else None
        workloads = draw(st.lists(workload_st, max_size=2)) if reachable else None
        out.append(
            {
                "seq": seq,
                "ts": float(seq) / 1e6,
                "reachable": reachable,
                "error": None if reachable else f"down at {seq}",
                "nodes": None if nodes is None else _unique(nodes, lambda n: n["name"]),
                "workloads": None if workloads is None else _unique(workloads, lambda w: w["name"]),
                "latencies": draw(
                    st.dictionaries(st.sampled_from(["kb", "p1", "p2"]), st.integers(0, 100).map(float))
                ),
            }
        )
    return out


@settings(max_examples=60, deadline=None)
@given(sent=reports(), data=st.data())
def test_duplicated_delayed_and_reordered_reports_converge(db, sent, data):
    in_order = new_cluster(db)
    deliver(db, in_order, sent)
    extra = data.draw(st.lists(st.sampled_from(sent), max_size=len(sent)), label="duplicates")
    schedule = data.draw(st.permutations(sent + extra), label="delivery order")
    batches = data.draw(st.lists(st.integers(1, 4)), label="batch sizes")
    shuffled = new_cluster(db)
    deliver(db, shuffled, schedule, batches)
    assert state(db, shuffled) == state(db, in_order)
    assert state(db, in_order)["status"]["seq"] == sent[-1]["seq"]


@settings(max_examples=60, deadline=None)
@given(sent=reports(max_size=12), capacity=st.integers(2, 4), data=st.data())
def test_outbox_compaction_loses_nothing_current(db, sent, capacity, data):
    """The KB is up or down after each report; what the outbox delivers ends in the same state."""
    direct = new_cluster(db)
    deliver(db, direct, sent)
    buffered = new_cluster(db)
    outbox = Outbox(capacity)
    for report in sent:
        outbox.push(report)
        if data.draw(st.booleans(), label="KB up"):
            deliver(db, buffered, [outbox.pop() for _report in range(len(outbox))])
    deliver(db, buffered, list(outbox))
    assert state(db, buffered) == state(db, direct)
