"""A real KB (`qonnect kb serve` on SQLite) holding the nine clusters of the paper profile.

Shared by the tests of this folder (a module of its own, so that no test imports a conftest).

Each cluster is registered by the admin and reports through its own agent token, as a Resource
Agent would; Bookinfo is placed energy-first (productpage cloud-1, details and reviews fog-1,
ratings edge-1) and the agents report its workloads ready.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ansible_collections.qonnect.core.plugins.module_utils.app_source import load_given
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from support import stop_process, wait_for
from support.federation import create_token, registration, serve_kb

REPO = Path(__file__).resolve().parents[3]
PAPER = REPO / "examples" / "inventories" / "paper.json"
BOOKINFO = REPO / "examples" / "bookinfo" / "energy-first.yml"
PLACEMENT = {"productpage": "cloud-1", "details": "fog-1", "reviews": "fog-1", "ratings": "edge-1"}


@dataclass
class Federation:
    """The KB process, its tokens and the cluster records it was given."""

    url: str
    admin: KBClient
    reader_token: str
    reader_token_file: Path
    paper: dict
    agents: dict[str, KBClient] = field(default_factory=dict)
    seq: int = 0

    def token(self, role: str, cluster: str | None = None) -> str:
        body = {"role": role, **({"cluster": cluster} if cluster else {})}
        return self.admin.request("POST", "/api/v1/tokens", body)["token"]

    def report(self, cluster: dict, reachable: bool = True, failing: dict[str, str] | None = None) -> None:
        """One agent report of a cluster: its paper node and the Bookinfo workloads on it
        (``failing``: service -> the reason of its new revision, Progressing while its old pod
        still counts ready)."""
        self.seq += 1
        failing = failing or {}
        workloads = [
            {
                "namespace": "bookinfo",
                "kind": "Deployment",
                "name": f"{svc}-v1",
                "application": "bookinfo",
                "service": svc,
                "status": "Progressing" if svc in failing else "Healthy",
                "reason": failing.get(svc, ""),
                "replicas": 1,
                "ready_replicas": 1,
            }
            for svc, where in PLACEMENT.items()
            if where == cluster["name"]
        ]
        nodes = [{k: v for k, v in n.items() if k != "heartbeat_age"} for n in cluster["nodes"]]
        body = {
            "seq": self.seq,
            "ts": time.time(),
            "reachable": reachable,
            "error": None if reachable else "connection refused by the cluster API",
            "nodes": nodes if reachable else None,
            "workloads": workloads if reachable else None,
        }
        self.agents[cluster["name"]].report(cluster["name"], body)


def start_federation(root: Path) -> tuple[subprocess.Popen, Federation]:
    db = f"sqlite://{root / 'kb.sqlite'}"
    procs: list[subprocess.Popen] = []
    try:
        url = serve_kb(db, root, "--heartbeat-timeout", "120", procs=procs)
        wait_for(KBClient(url, None, timeout=2).healthz, 30, "the KB /healthz", retry_on=(KBError,))
        admin_token = create_token(db, "admin")
        admin = KBClient(url, admin_token)
        paper = json.loads(PAPER.read_text())
        fed = Federation(url, admin, "", root / "reader.token", paper)
        fed.reader_token = fed.token("reader")
        fed.reader_token_file.write_text(fed.reader_token + "\n")
        fed.reader_token_file.chmod(0o600)
        for c in paper["clusters"]:
            admin.register_cluster(  # node economics are the registration's (issue 25)
                {
                    "name": c["name"],
                    "tier": c["tier"],
                    "location": c["location"],
                    "labels": c["labels"],
                    "node_economics": registration(c)["node_economics"],
                }
            )
            fed.agents[c["name"]] = KBClient(url, fed.token("agent", c["name"]))
            fed.report(c)
        app, spec = load_given({"src": str(BOOKINFO)})
        admin.put_application(app.name, spec)
        placement = {
            svc: [{"cluster": where, "replicas": 1, "nodes": [f"{where}-worker"]}]
            for svc, where in PLACEMENT.items()
        }
        admin.put_placement("bookinfo", {"desired": placement, "current": placement})
        admin.post_event(
            {
                "type": "deploy",
                "reason": "applied",
                "message": "bookinfo deployed energy-first",
                "application": "bookinfo",
            }
        )
    except BaseException:
        for proc in procs:
            stop_process(proc)
        raise
    return procs[0], fed
