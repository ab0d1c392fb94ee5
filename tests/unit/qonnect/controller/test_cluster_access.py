"""The controller reaches clusters one way, the product library's (issue 38, item 4).

Confirm, capacity, reconcile and self-heal go from a KB cluster record to its Target and client
through k8s/render.py's ``record_target`` / ``record_client`` and read raw JSON through
k8s/client.py's ``raw_get``; no controller module imports the agent, and "credentials broken"
is one rule (placement/model.py) the KB's inventory flag and the detector both apply.
"""

from __future__ import annotations

import ast
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.placement import model
from qonnect.controller import detector, view
from qonnect.controller.capacity import read_capacity
from qonnect.controller.confirm import probe_cluster
from qonnect.kb import merge, migrations, ops, queries
from qonnect.kb.models import Report
from qonnect.kb.storage import Database

CONTROLLER = Path(detector.__file__).resolve().parent
# what the controller used to call with hand-picked record fields: now only the library does
BY_HAND = {"target_of", "get_client", "Target", "ClusterClient", "load_api_client"}


def modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(CONTROLLER.glob("*.py"))]


def imported(tree: ast.Module) -> set[str]:
    """Every module an import statement names, function-local ones included."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_no_controller_module_imports_the_agent():
    found = [
        f"{p.name}: {name}"
        for p, tree in modules()
        for name in sorted(imported(tree))
        if name == "qonnect.agent" or name.startswith("qonnect.agent.")
    ]
    assert found == [], "the controller reads clusters through plugins/module_utils/k8s, not the agent"


def test_no_controller_module_builds_targets_or_clients_by_hand():
    found = [
        f"{p.name}:{node.lineno} {node.id if isinstance(node, ast.Name) else node.attr}"
        for p, tree in modules()
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id in BY_HAND)
        or (isinstance(node, ast.Attribute) and node.attr in BY_HAND)
        or (isinstance(node, ast.alias) and node.name in BY_HAND)
    ]
    assert found == [], "use record_target / record_client (k8s/render.py) and client_of"


def test_the_controller_imports_no_ansible():
    """record_credentials lives in k8s/records.py, not k8s/auth.py (which imports Ansible for
    the modules' option fallbacks): the controller process stays free of it."""
    code = (
        "import sys, qonnect.controller.confirm, qonnect.controller.capacity, "
        "qonnect.controller.reconcile, qonnect.controller.selfheal; "
        "print(sorted(m for m in sys.modules if m == 'ansible' or m.startswith('ansible.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


# -- the record's credentials as they are: path or content, and its context -------------------


class Api(http.server.BaseHTTPRequestHandler):
    tokens: list[str] = []

    def do_GET(self):
        type(self).tokens.append(self.headers.get("Authorization", ""))
        node = {"metadata": {"name": "edge-1-w"}, "status": {"allocatable": {"cpu": "4"}}}
        body = json.dumps({"items": [node] if self.path.startswith("/api/v1/nodes") else []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def two_contexts(server: str) -> dict:
    """The current context names a closed port; only context ``edge`` reaches ``server``."""
    clusters = {"edge": server, "stale": "http://127.0.0.1:9"}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "stale",
        "clusters": [{"name": n, "cluster": {"server": s}} for n, s in clusters.items()],
        "users": [{"name": n, "user": {"token": f"token-{n}"}} for n in clusters],
        "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n in clusters],
    }


@pytest.fixture
def api(tmp_path):
    handler = type("Handler", (Api,), {"tokens": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    doc = two_contexts(f"http://127.0.0.1:{server.server_address[1]}")
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(doc))
    yield handler, str(path), doc
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("form", ["path", "content"])
def test_probe_and_capacity_read_through_the_records_kubeconfig_and_context(api, form):
    handler, path, doc = api
    record = {
        "name": "edge-1",
        "tier": "edge",
        "kubeconfig": path if form == "path" else doc,
        "context": "edge",
    }
    assert probe_cluster("edge-1", record).reachable is True
    assert read_capacity("edge-1", record) == (4.0, frozenset({"edge-1-w"}))
    assert handler.tokens == ["Bearer token-edge"] * 2


# -- one "credentials broken" -------------------------------------------------------------------


def test_credentials_broken_is_one_rule_everywhere():
    assert detector.credentials_broken is model.credentials_broken
    assert queries.credentials_broken is model.credentials_broken
    # the drift rules (triggers, settling) read it through the snapshot, found once per tick
    clusters = [
        {"name": "ok", "reachable": True, "error": None},
        {"name": "refused", "reachable": True, "error": "forbidden: list nodes"},
        {"name": "gone", "reachable": False, "error": "forbidden: x"},
    ]
    snapshot = detector.Snapshot({"clusters": clusters}, [], [], 0.0)
    assert snapshot.broken() == {c["name"] for c in clusters if model.credentials_broken(c)} == {"refused"}
    # the KB's inventory and the controller's cached view judge ages and health by one function
    assert view.aged_cluster is model.aged_cluster
    assert queries.aged_cluster is model.aged_cluster


def test_aged_cluster_judges_health_and_node_ages_at_one_clock():
    entry = {"name": "a", "reachable": True, "error": None, "nodes": [{"name": "n1", "heartbeat_age": 99}]}
    fresh = model.aged_cluster(entry, 2.0, 5.0, timeout=6.0)
    assert fresh["healthy"] is True and fresh["heartbeat_age"] == 2.0
    assert fresh["nodes"][0]["heartbeat_age"] == 5.0
    assert entry["nodes"][0]["heartbeat_age"] == 99  # the entry itself is not changed
    assert model.aged_cluster(entry, 6.5, 5.0, timeout=6.0)["healthy"] is False  # not heard
    assert model.aged_cluster(entry, None, None, timeout=6.0)["healthy"] is False  # never heard
    assert model.aged_cluster(dict(entry, reachable=False), 1.0, 1.0, timeout=6.0)["healthy"] is False
    # refused credentials: its last-known nodes count as fresh as its heartbeat
    broken = model.aged_cluster(dict(entry, error="forbidden: list nodes"), 1.0, 40.0, timeout=6.0)
    assert broken["healthy"] is True and broken["nodes"][0]["heartbeat_age"] == 1.0


@pytest.mark.parametrize(
    ("reachable", "error", "broken"),
    [
        (True, "forbidden: the agent needs these rights: list nodes", True),
        (1, "unauthorized: refused", True),  # the KB's row
        (None, "unauthorized: refused", True),
        (False, "forbidden: x", False),  # no answer at all: a cluster failure, not credentials
        (0, "forbidden: x", False),
        (True, "connection refused", False),
        (True, None, False),
        (None, None, False),
    ],
)
def test_credentials_broken_of_a_cluster_record(reachable, error, broken):
    assert model.credentials_broken({"reachable": reachable, "error": error}) is broken


@pytest.fixture
def kb(tmp_path):
    db = Database(f"sqlite://{tmp_path / 'kb.sqlite'}")
    migrations.migrate(db)
    conn = db.connect()
    ops.create_cluster(conn, {"name": "edge-1", "tier": "edge", "location": "edge-1", "labels": {}}, 0.0)
    yield conn
    db.close()


@pytest.mark.parametrize(
    ("reachable", "error"),
    [(True, "forbidden: the agent needs these rights: list nodes"), (False, "forbidden: x"), (True, None)],
)
def test_the_kb_flag_is_the_rule_of_its_entry(kb, reachable, error):
    """The KB's inventory flag is the rule applied to the entry it serves (real merge, real
    SQLite), so the detector, which applies the rule to that entry, judges as the flag says."""
    report = Report.model_validate({"seq": 1, "ts": 1.0, "reachable": reachable, "error": error})
    merge.apply_reports(kb, [("edge-1", report, 1.0)])
    (entry,) = queries.inventory(kb, 2.0, 10.0)["clusters"]
    assert entry["credentials_broken"] is model.credentials_broken(entry)
    assert entry["credentials_broken"] is (reachable and error is not None)
