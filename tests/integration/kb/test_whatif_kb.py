"""Issue 37: ``qonnect plan --fail`` and ``qonnect survivability`` read the fleet from a real KB
(`qonnect kb serve` on SQLite): every stored application with the policy of its last deploy,
as the controller's heal reads them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.app_source import load_given
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent
from support import qonnect_cmd, stop_process, wait_for
from support.federation import create_token, registration, serve_kb

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[3]
PAPER = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())
ENERGY = ROOT / "examples" / "bookinfo" / "energy-first.yml"
HOME = {"productpage": "cloud-1", "details": "fog-1", "reviews": "fog-1", "ratings": "edge-1"}
# an application whose one service may only run on fog-1 (its clusterSelector)
PINNED = {
    "apiVersion": "qonnect.io/v1",
    "kind": "Application",
    "metadata": {"name": "pinned"},
    "spec": {
        "services": [
            {
                "name": "web",
                "tier": "fog",
                "constraints": {"clusterSelector": {"matchLabels": {"qonnect.io/profile": "energy"}}},
                "manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}}],
            }
        ]
    },
}


def placed(where: dict[str, str]) -> dict:
    return {svc: [{"cluster": c, "replicas": 1, "nodes": [f"{c}-worker"]}] for svc, c in where.items()}


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    """A KB holding the paper's nine clusters (each reported by its own agent token), Bookinfo
    deployed energy-first with the policy 'exclude fog-2', and ``pinned`` on fog-1."""
    root = tmp_path_factory.mktemp("whatif-kb")
    db = f"sqlite://{root / 'kb.sqlite'}"
    procs: list[subprocess.Popen] = []
    try:
        url = serve_kb(db, root, "--heartbeat-timeout", "600", procs=procs)
        wait_for(KBClient(url, None, timeout=2).healthz, 30, "the KB /healthz", retry_on=(KBError,))
        admin_file = root / "admin.token"
        create_token(db, "admin", path=admin_file)
        admin = KBClient(url, admin_file.read_text().strip())
        for seq, c in enumerate(PAPER["clusters"], 1):
            admin.register_cluster(
                {
                    "name": c["name"],
                    "tier": c["tier"],
                    "location": c["location"],
                    "labels": c["labels"],
                    "node_economics": registration(c)["node_economics"],
                }
            )
            agent = KBClient(
                url, admin.request("POST", "/api/v1/tokens", {"role": "agent", "cluster": c["name"]})["token"]
            )
            nodes = [{k: v for k, v in n.items() if k != "heartbeat_age"} for n in c["nodes"]]
            agent.report(
                c["name"], {"seq": seq, "ts": time.time(), "reachable": True, "nodes": nodes, "workloads": []}
            )
        app, spec = load_given({"src": str(ENERGY)})
        admin.put_application(app.name, spec)
        admin.put_placement("bookinfo", {"desired": placed(HOME), "current": placed(HOME)})
        policy = {"scorer": "weighted", "hysteresis": 0.1, "exclude": ["fog-2"]}
        admin.post_event(intent.event("bookinfo", intent.APPLIED, policy, 1))
        admin.put_application("pinned", PINNED)
        admin.put_placement(
            "pinned", {"desired": placed({"web": "fog-1"}), "current": placed({"web": "fog-1"})}
        )
        reader = root / "reader.token"
        reader.write_text(admin.request("POST", "/api/v1/tokens", {"role": "reader"})["token"] + "\n")
        reader.chmod(0o600)
        yield url, reader
    finally:
        for proc in procs:
            stop_process(proc)


def qonnect(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QONNECT_")}
    return subprocess.run(
        qonnect_cmd(*args),
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
        check=False,
    )


def test_plan_fail_from_the_kb_uses_each_stored_policy(kb):
    url, reader = kb
    run = qonnect("plan", "--fail", "fog-1", "--kb", url, "--token-file", str(reader), "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert sorted(doc["applications"]) == ["bookinfo", "pinned"]
    bookinfo = doc["applications"]["bookinfo"]
    # the stored policy excludes fog-2: the heal moves details and reviews to fog-3, not fog-2
    assert bookinfo["placed"] and bookinfo["moves"]["details"] == {"from": ["fog-1"], "to": ["fog-3"]}
    assert bookinfo["moves"]["productpage"] == {"from": ["cloud-1"], "to": ["cloud-1"]}
    pinned = doc["applications"]["pinned"]
    assert pinned["placed"] is False and "web: no eligible cluster" in pinned["reason"]
    assert doc["survivable"] is False
    text = qonnect(
        "plan", "--fail", "fog-1", env={"QONNECT_KB_URL": url, "QONNECT_KB_TOKEN": reader.read_text().strip()}
    )
    assert text.returncode == 0, text.stderr
    assert "  details      fog-1 -> fog-3" in text.stdout
    assert "pinned: CANNOT be re-placed" in text.stdout


def test_survivability_from_the_kb_gates_with_its_exit_code(kb):
    url, reader = kb
    run = qonnect("survivability", "--kb", url, "--token-file", str(reader))
    assert run.returncode == 1, run.stderr
    assert run.stdout.startswith("N-1 survivability of 2 applications on 9 clusters: NOT survivable")
    assert "does NOT survive cluster fog-1: web: no eligible cluster" in run.stdout
    assert "  bookinfo     any one cluster  survives" in run.stdout
    doc = json.loads(qonnect("survivability", "--kb", url, "--token-file", str(reader), "--json").stdout)
    assert doc["survivable"] is False
    assert [v["scenario"] for v in doc["applications"]["pinned"]["violations"]] == ["cluster fog-1"]


def test_kb_errors_are_usage_errors(kb):
    url, reader = kb
    run = qonnect("survivability", "--kb", url)
    assert run.returncode == 2 and "--token-file: expected a file holding a KB token" in run.stderr
    run = qonnect("plan", "--fail", "fog-11", "--fail", "edge-1", "--kb", url, "--token-file", str(reader))
    assert (
        run.returncode == 2 and "--fail: 'fog-11' is not a known cluster (did you mean fog-1?)" in run.stderr
    )
    assert "Traceback" not in run.stderr
