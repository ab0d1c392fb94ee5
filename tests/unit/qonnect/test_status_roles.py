"""`qonnect status` says which copy of a service is a standby (hedged failover, issue 36)."""

from __future__ import annotations

from qonnect import status


def test_a_standby_copy_is_listed_as_one():
    placement = {
        "application": "shop",
        "current": {"web": [{"cluster": "edge-1", "replicas": 1}, {"cluster": "edge-3", "role": "standby"}]},
    }
    workloads = [
        {"cluster": c, "application": "shop", "service": "web", "ready_replicas": 1, "replicas": 1}
        for c in ("edge-1", "edge-3")
    ]
    running = status._running([placement], workloads)
    assert [a["role"] for a in running["edge-1"]] == ["active"]
    assert [a["role"] for a in running["edge-3"]] == ["standby"]
