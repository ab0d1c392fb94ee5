"""A 401 from the cluster API is refused credentials, not a cluster down (issue 22, item 3)."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from qonnect.agent.collector import Collector, ForbiddenError
from support.specs import kubeconfig as kubeconfig_doc


class Unauthorized(BaseHTTPRequestHandler):
    def do_GET(self):
        data = json.dumps({"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401})
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args):
        pass


def test_401_is_credentials_refused_on_a_reachable_cluster(tmp_path):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Unauthorized)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        kubeconfig = tmp_path / "kubeconfig.yaml"
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        kubeconfig.write_text(yaml.safe_dump(kubeconfig_doc(url, "revoked-token")))
        with pytest.raises(ForbiddenError) as err:
            Collector(str(kubeconfig), timeout=5).collect()
        assert err.value.status == 401
        assert "refuses the agent's credentials" in str(err.value)
        assert "revoked-token" not in str(err.value)
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- issue 22 item 3: refused credentials keep the last-known capacity and move nothing -----------

NODE_REPORT = {
    "name": "n1",
    "ready": True,
    "schedulable": True,
    "allocatable": {"cpu": 4.0, "memory": 8 * 2**30, "ephemeral_storage": 0},
    "requested": {"cpu": 1.0, "memory": 2**30, "ephemeral_storage": 0},
}


def _report(conn, seq, ts, **body):
    from qonnect.kb import merge
    from qonnect.kb.models import Report

    conn.begin()
    merge.apply_reports(conn, [("edge-1", Report.model_validate({"seq": seq, "ts": ts, **body}), ts)])
    conn.commit()


@pytest.mark.parametrize(
    "error",
    [
        "forbidden: the agent needs these rights: list nodes (all namespaces) (grant the ClusterRole in "
        "docs/rbac/agent-clusterrole.yml)",
        "unauthorized: the cluster API refuses the agent's credentials (HTTP 401 listing nodes)",
    ],
)
def test_refused_credentials_keep_the_last_known_capacity(tmp_path, error):
    """A minute of 401/403 reports (nodes null: not observed) after one good report: the
    inventory still offers the cluster's last-known free capacity and says its credentials are
    broken; the detector moves nothing and announces it once."""
    from qonnect.kb import migrations
    from qonnect.kb.storage import Database

    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    migrations.migrate(db)
    with contextlib.closing(db):
        _capacity_stays(db.connect(), error)


def _capacity_stays(kb_conn, error):
    import time

    from qonnect.controller.detector import Memory, Settings, Snapshot
    from qonnect.controller.statemachine import DecisionLog
    from qonnect.controller.triggers import detect
    from qonnect.kb import ops, queries

    t0 = time.time() - 60
    ops.create_cluster(kb_conn, {"name": "edge-1", "tier": "edge", "location": "edge-1", "labels": {}}, t0)
    _report(kb_conn, 1, t0, nodes=[NODE_REPORT], workloads=[])
    for i in range(2, 60):
        _report(kb_conn, i, t0 + i, reachable=True, error=error, nodes=None, workloads=None)
    inv = queries.inventory(kb_conn, t0 + 60, 6.0)
    (edge,) = inv["clusters"]
    assert edge["credentials_broken"] is True and edge["reachable"] is True and edge["healthy"] is True
    assert edge["error"] == error
    assert edge["free"]["cpu"] == 3.0, "last-known capacity, not zero"
    log = DecisionLog()
    log.apply({"op": "observe", "app": "shop", "version": 1, "term": 1, "node": "n"})
    inv["placements"] = {"shop": {"web": [{"cluster": "edge-1", "replicas": 1}]}}
    memory = Memory()
    for now in (t0 + 60, t0 + 120):
        snapshot = Snapshot(inv, [], [{"name": "shop", "version": 1, "application": {}}], now)
        assert detect(snapshot, log, memory, Settings()) == ([], [])
    assert [n.kind for n in memory.notices] == ["credentials-broken"]


def test_the_inventory_response_carries_the_agents_error():
    """The KB's response model takes the new fields (it forbids unknown ones)."""
    from qonnect.kb.models import InventoryCluster

    cluster = InventoryCluster.model_validate(
        {
            "name": "edge-1",
            "tier": "edge",
            "location": "edge-1",
            "labels": {},
            "healthy": False,
            "reachable": False,
            "error": "listing nodes: ConnectTimeoutError: timed out",
            "credentials_broken": False,
            "nodes": [],
            "free": {},
        }
    )
    assert cluster.error.endswith("timed out") and cluster.reachable is False
