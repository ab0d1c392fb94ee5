"""Issue 34.5: `qonnect history APP` (table and --json) and `qonnect rollback APP --to VERSION`
against a live KB."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support import qonnect_cmd
from test_kb_history import spec

pytestmark = pytest.mark.timeout(120)


def qonnect(live_kb, role: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QONNECT_")}
    env.update(QONNECT_KB_URL=live_kb.url, QONNECT_KB_TOKEN=live_kb.token(role))
    return subprocess.run(
        qonnect_cmd(*args), capture_output=True, text=True, env=env, timeout=60, check=False
    )


def story(live_kb, name: str) -> None:
    """Version 1 ran Ready on edge-1, version 2 failed there, version 3 moved it to edge-2."""
    admin = live_kb.admin
    for image in ("nginx:1", "broken:2", "nginx:3"):
        admin.put_application(name, spec(name, image))
    for version, outcome, src, dst, took in (
        (1, "succeeded", [], ["edge-1"], 4.0),
        (2, "failed", ["edge-1"], ["edge-1"], 30.0),
        (3, "succeeded", ["edge-1"], ["edge-2"], 6.5),
    ):
        admin.record_history(
            name,
            {
                "version": version,
                "trigger": "deploy",
                "outcome": outcome,
                "detail": "Deployment/web: ImagePullBackOff" if outcome == "failed" else "",
                "started": 1000.0 * version,
                "ended": 1000.0 * version + took,
                "changes": [{"service": "web", "from": src, "to": dst}],
                "failed_on": ["edge-1"] if outcome == "failed" else [],
            },
        )


def test_history_table_and_json(live_kb, fresh):
    name = fresh("hcli")
    story(live_kb, name)
    done = qonnect(live_kb, "reader", "history", name)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "version 1: ready; ready on edge-1" in out
    assert "version 2: failed; failed on edge-1" in out
    assert "version 3: ready; ready on edge-2" in out
    table = [line for line in out.splitlines() if " -> " in line and "deploy" in line]
    assert len(table) == 3 and "edge-1 -> edge-2" in table[0] and "- -> edge-1" in table[2]
    assert "failed" in table[1] and "user" in table[1] and "30.0s" in table[1]
    assert "web v2: failed: Deployment/web: ImagePullBackOff" in out
    doc = json.loads(qonnect(live_kb, "reader", "history", name, "--json").stdout)
    assert [r["version"] for r in doc["history"]] == [3, 2, 1]
    assert [v["status"]["state"] for v in doc["versions"]] == ["ready", "failed", "ready"]
    page = json.loads(qonnect(live_kb, "reader", "history", name, "--json", "--limit", "2").stdout)
    assert len(page["history"]) == 2 and page["next"] == page["history"][-1]["id"]
    bad = qonnect(live_kb, "reader", "history", fresh("ghost"))
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


def test_rollback_stores_the_old_spec_as_a_new_version(live_kb, fresh):
    name = fresh("rcli")
    story(live_kb, name)
    refused = qonnect(live_kb, "reader", "rollback", name, "--to", "1")
    assert refused.returncode == 2 and "refused the token" in refused.stderr
    same = qonnect(live_kb, "admin", "rollback", name, "--to", "3")
    assert same.returncode == 2 and "restores an older version (1..2)" in same.stderr
    done = qonnect(live_kb, "admin", "rollback", name, "--to", "1")
    assert done.returncode == 0, done.stderr
    assert "version 4 stored with the spec of version 1 (rollback of version 3)" in done.stdout
    versions = live_kb.admin.application_versions(name)
    assert versions[-1]["version"] == 4 and versions[-1]["spec"] == versions[0]["spec"]
    assert versions[-1]["rollback"]["by"] == "admin" and versions[-1]["status"]["state"] == "pending"
    doc = json.loads(qonnect(live_kb, "reader", "history", name, "--json").stdout)
    assert doc["versions"][-1]["rollback"] == {
        "failing": 3,
        "restores": 1,
        "by": "admin",
        "reason": "rolled back by the user from version 3 to version 1",
    }
