"""Issue 34.8: a deploy waiting on a slow rollout posts progress events to the KB (every
PROGRESS_SECONDS per cluster) instead of printing nothing for minutes; a fast one posts none."""

from __future__ import annotations

from ansible_collections.qonnect.core.plugins.module_utils.runners import progress
from ansible_collections.qonnect.core.plugins.modules import deploy


def test_a_slow_rollout_reports_its_progress(run_module, kb, federation, monkeypatch):
    clusters = federation[0]
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.3)
    clusters["edge-1"].ready = False  # ratings never becomes ready there
    out = run_module(deploy, {"name": "bookinfo", "wait_timeout": 2, "min_ready_seconds": 0})
    assert out["failed"], out
    waiting = [e for e in kb.events if e.get("reason") == "Waiting"]
    assert len(waiting) >= 2, kb.events
    assert all(e["cluster"] == "edge-1" and e["application"] == "bookinfo" for e in waiting)
    first = waiting[0]["message"]
    assert first.startswith("waiting for Deployment/ratings-v1 on edge-1: "), first
    assert "replicas ready" in first and first.endswith(" s of 2 s)"), first


def test_a_fast_rollout_posts_no_progress(run_module, kb, federation):
    out = run_module(deploy, {"name": "bookinfo", "min_ready_seconds": 0})
    assert not out.get("failed"), out
    assert not [e for e in kb.events if e.get("reason") == "Waiting"]
