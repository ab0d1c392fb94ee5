"""Issue 34.1: the KB keeps what each cluster's API server says of itself (version and served
group-versions, from the agent's report with the highest seq that carried them) and serves it
in the inventory; a report without it keeps the stored one; a re-registration starts afresh.
Runs the KB's real merge and inventory on a real SQLite database."""

from __future__ import annotations

import pytest
from qonnect.kb import merge, migrations, ops, queries
from qonnect.kb.models import Report
from qonnect.kb.storage import Database

SERVER = {"kube_version": "v1.34.4", "api_versions": ["v1", "apps/v1", "autoscaling/v2"]}


@pytest.fixture
def conn(tmp_path):
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    migrations.migrate(db)
    connection = db.connect()
    ops.create_cluster(
        connection, {"name": "edge-1", "tier": "edge", "location": "edge-1", "labels": {}}, 0.0
    )
    yield connection
    db.close()


def report(conn, seq: int, server: dict | None = None) -> dict:
    body: dict = {"seq": seq, "ts": 1.0}
    if server is not None:
        body["server"] = server
    return merge.apply_reports(conn, [("edge-1", Report.model_validate(body), 1.0)])[0]


def served(conn) -> tuple:
    (entry,) = queries.inventory(conn, 2.0, 10.0)["clusters"]
    return entry["kube_version"], entry["api_versions"]


def test_inventory_serves_the_newest_server_report(conn):
    assert served(conn) == (None, [])
    report(conn, 10, SERVER)
    assert served(conn) == ("v1.34.4", ["apps/v1", "autoscaling/v2", "v1"])
    report(conn, 11)  # most reports carry no server: the stored one stays
    assert served(conn) == ("v1.34.4", ["apps/v1", "autoscaling/v2", "v1"])
    report(conn, 5, {"kube_version": "v1.33.0", "api_versions": ["v1"]})  # late: older seq
    assert served(conn) == ("v1.34.4", ["apps/v1", "autoscaling/v2", "v1"])
    report(conn, 12, {"kube_version": "v1.35.0", "api_versions": ["v1", "apps/v1"]})  # upgraded
    assert served(conn) == ("v1.35.0", ["apps/v1", "v1"])


def test_a_new_server_version_is_a_material_change(conn):
    report(conn, 1, SERVER)
    before = conn.one("SELECT changed FROM clusters WHERE name = 'edge-1'")[0]
    report(conn, 2, SERVER)
    assert conn.one("SELECT changed FROM clusters WHERE name = 'edge-1'")[0] == before
    merge.apply_reports(
        conn,
        [
            (
                "edge-1",
                Report.model_validate({"seq": 3, "ts": 1.0, "server": {**SERVER, "kube_version": "v1.35.0"}}),
                1.0,
            )
        ],
        stamp=before + 100.0,
    )
    assert conn.one("SELECT changed FROM clusters WHERE name = 'edge-1'")[0] == before + 100.0


def test_a_reregistration_takes_the_next_agents_server_whatever_its_seq(conn):
    report(conn, 100, SERVER)
    ops.put_cluster(conn, {"name": "edge-1", "tier": "edge", "location": "edge-1", "labels": {}}, 5.0)
    report(conn, 1, {"kube_version": "v1.30.0", "api_versions": ["v1"]})
    assert served(conn) == ("v1.30.0", ["v1"])


def test_the_report_model_bounds_the_server():
    with pytest.raises(ValueError):
        Report.model_validate({"seq": 1, "ts": 1.0, "server": {"kube_version": "", "api_versions": []}})
    with pytest.raises(ValueError):
        Report.model_validate(
            {"seq": 1, "ts": 1.0, "server": {"kube_version": "v1", "api_versions": ["x"] * 1001}}
        )
    with pytest.raises(ValueError):
        Report.model_validate(
            {"seq": 1, "ts": 1.0, "server": {"kube_version": "v1", "api_versions": [], "x": 1}}
        )
