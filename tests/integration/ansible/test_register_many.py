"""register_clusters registers many clusters in one module run (issue 21.7).

A real ``qonnect kb serve`` on SQLite and real ``ansible-playbook`` runs of
qonnect.core.register_clusters: 1000 clusters in under 60 s (one run per cluster took 4.7-6.7 s
each, 78 min for 1000), a second run changes nothing, check mode writes nothing and shows the
diff, and every cluster that cannot be registered is named in one failure with nothing written.
No cluster is read (gather_nodes=false): the paper-testbed test in test_playbooks.py covers the
same playbook with gather_nodes.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from ansible_federation import Federation, recap
from support import stop_process
from support.federation import create_token, serve_kb

MANY = 1000
TARGET_SECONDS = 60.0
TIERS = ("cloud", "fog", "edge")


class KB:
    def __init__(self, base: Path, url: str, token_file: Path) -> None:
        self.base = base
        self.federation = Federation(base, url, token_file, {})  # a KB, no testbed clusters

    def names(self, prefix: str) -> dict[str, dict]:
        return {c["name"]: c for c in self.federation.kb().list_clusters() if c["name"].startswith(prefix)}

    def playbook(self, clusters: list[dict], *args: str) -> tuple[subprocess.CompletedProcess, float]:
        """register_clusters with ``clusters`` as extra vars (gather_nodes off); (result, seconds)."""
        vars_file = self.base / f"clusters-{time.monotonic_ns()}.json"
        vars_file.write_text(json.dumps({"clusters": clusters}))
        start = time.monotonic()
        extra = ("-e", f"@{vars_file}", "-e", "gather_nodes=false", *args)
        result = self.federation.playbook("qonnect.core.register_clusters", *extra, timeout=300)
        return result, time.monotonic() - start


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    base = tmp_path_factory.mktemp("register-many")
    db = f"sqlite:///{base / 'kb.sqlite'}"
    token = base / "admin.token"
    create_token(db, "admin", name="admin", path=token)
    procs: list[subprocess.Popen] = []
    try:
        yield KB(base, serve_kb(db, base, procs=procs), token)
    finally:
        for proc in procs:
            stop_process(proc)


def declared(prefix: str, count: int) -> list[dict]:
    return [
        {
            "name": f"{prefix}{i:04d}",
            "tier": TIERS[i % 3],
            "location": f"site-{i % 50}",
            "server": f"https://10.{i // 250}.{i % 250}.1:6443",
            "labels": {"zone": f"z{i % 4}"},
            # keys a federation file has that the module does not take: the playbook drops them
            "address": f"10.{i // 250}.{i % 250}.1",
            "nodes": 1,
        }
        for i in range(count)
    ]


def test_a_thousand_clusters_register_in_one_run_under_a_minute(kb):
    clusters = declared("many-", MANY)
    result, seconds = kb.playbook(clusters)
    print(f"register {MANY} clusters: {seconds:.1f} s")
    counts = recap(result)
    assert counts["failed"] == 0 and counts["changed"] == 1, result.stdout[-3000:]
    assert seconds < TARGET_SECONDS, f"{MANY} clusters took {seconds:.1f} s"
    stored = kb.names("many-")
    assert len(stored) == MANY
    first = stored["many-0001"]
    assert (first["tier"], first["location"], first["labels"]) == ("fog", "site-1", {"zone": "z1"})
    assert first["server"] == "https://10.0.1.1:6443"

    again, seconds = kb.playbook(clusters)
    print(f"re-run, nothing to change: {seconds:.1f} s")
    assert recap(again)["changed"] == 0 and recap(again)["failed"] == 0, again.stdout[-3000:]
    assert seconds < TARGET_SECONDS


def test_check_mode_shows_the_diff_and_writes_nothing(kb):
    clusters = declared("diff-", 4)
    assert recap(kb.playbook(clusters[:2])[0])["changed"] == 1
    before = kb.names("diff-")
    clusters[0]["labels"] = {"zone": "moved"}
    result, _kb_log = kb.playbook(clusters, "--check", "--diff")
    assert recap(result)["changed"] == 1 and recap(result)["failed"] == 0, result.stdout[-3000:]
    assert kb.names("diff-") == before  # nothing written
    out = result.stdout
    assert '"moved"' in out and "diff-0002" in out and "diff-0003" in out
    assert "diff-0001" not in out  # unchanged clusters are not in the diff
    result, _kb_log = kb.playbook(clusters)
    assert recap(result)["changed"] == 1
    after = kb.names("diff-")
    assert len(after) == 4 and after["diff-0000"]["labels"] == {"zone": "moved"}
    assert recap(kb.playbook(clusters)[0])["changed"] == 0


def test_every_failing_cluster_is_named_at_once_and_nothing_is_written(kb):
    clusters = declared("bad-", 5)
    for i in (1, 3):
        del clusters[i]["tier"]
    result, _kb_log = kb.playbook(clusters)
    assert recap(result)["failed"] == 1
    msg = result.stdout
    assert "2 of 5 cluster(s) failed (nothing was written)" in msg, msg[-3000:]
    for name in ("bad-0001", "bad-0003"):
        assert re.search(rf"{name}: tier: required to register a new cluster", msg), msg[-3000:]
    assert kb.names("bad-") == {}  # the three good ones were not written either


def test_removing_many_clusters_in_one_run(kb):
    clusters = declared("gone-", 3)
    assert recap(kb.playbook(clusters)[0])["changed"] == 1
    result, _kb_log = kb.playbook([dict(c, state="absent") for c in clusters[:2]])
    assert recap(result)["changed"] == 1
    assert list(kb.names("gone-")) == ["gone-0002"]
