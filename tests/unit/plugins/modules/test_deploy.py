"""qonnect.core.deploy: plan, apply, record, fencing, check mode, removal."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.qonnect.core.plugins.modules import deploy

ROOT = Path(__file__).resolve().parents[4]
ENERGY = str(ROOT / "examples" / "bookinfo" / "energy-first.yml")


def ready_deployments(cluster):
    return sorted(d["metadata"]["name"] for d in cluster.list("apps/v1", "Deployment", "bookinfo"))


def test_deploy_records_and_is_idempotent(run_module, kb, federation):
    clusters, log = federation
    out = run_module(deploy, {"name": "bookinfo"})
    assert out["changed"] and not out.get("failed"), out
    services = out["plan"]["services"]
    assert kb.placements["bookinfo"]["current"]["ratings"][0]["cluster"] == services["ratings"][0]["cluster"]
    assert ready_deployments(clusters["edge-1"]) == ["ratings-v1"]
    assert ready_deployments(clusters["fog-1"]) == ["details-v1", "reviews-v1", "reviews-v2", "reviews-v3"]
    stub = clusters["cloud-1"].get("v1", "Service", "ratings", "bookinfo")
    assert stub["spec"]["externalName"] == "ratings.bookinfo.svc.edge-1.qonnect.local"
    assert kb.events[-1]["reason"] == "Deployed"
    writes, events = len(log), len(kb.events)
    again = run_module(deploy, {"name": "bookinfo"})
    assert again["changed"] is False and len(log) == writes and len(kb.events) == events


def test_exclude_moves_service_and_cleans_old_cluster(run_module, kb, federation):
    clusters = federation[0]
    run_module(deploy, {"name": "bookinfo"})
    out = run_module(deploy, {"name": "bookinfo", "exclude": ["edge-1"], "reason": "edge-1 failed"})
    assert out["changed"] and out["plan"]["services"]["ratings"][0]["cluster"] == "edge-2"
    assert ready_deployments(clusters["edge-2"]) == ["ratings-v1"]
    assert clusters["edge-1"].get("v1", "Namespace", "bookinfo") is None
    assert kb.events[-1]["message"] == "edge-1 failed (ratings: edge-1 -> edge-2)"  # why, and from -> to


def test_stale_fencing_token_fails(run_module, kb, federation):
    assert not run_module(deploy, {"name": "bookinfo", "fencing": {"term": 5, "seq": 3}}).get("failed")
    out = run_module(deploy, {"name": "bookinfo", "exclude": ["edge-1"], "fencing": {"term": 4, "seq": 9}})
    assert out["failed"] and "fencing token too old" in out["msg"]


def test_check_mode_touches_nothing(run_module, kb, federation):
    _clusters, log = federation
    writes = kb.writes
    out = run_module(deploy, {"name": "bookinfo"}, check_mode=True, diff=True)
    assert out["changed"] and not log and kb.writes == writes and not kb.events
    assert "edge-1: Deployment bookinfo/ratings-v1" in {d["after_header"] for d in out["diff"]}


def test_given_plan_is_checked(run_module, federation):
    out = run_module(deploy, {"name": "bookinfo", "plan": {"services": {"ratings": "edge-1"}}})
    assert out["failed"] and out["msg"].startswith("plan.services.ratings")
    out = run_module(
        deploy, {"name": "bookinfo", "plan": {"services": {"ratings": [{"cluster": "nowhere"}]}}}
    )
    assert out["failed"] and "nowhere" in out["msg"]


def test_unknown_application(run_module, federation):
    out = run_module(deploy, {"name": "nope"})
    assert out["failed"] and out["status"] == 404


def test_remove(run_module, kb, federation):
    clusters = federation[0]
    run_module(deploy, {"name": "bookinfo"})
    out = run_module(deploy, {"name": "bookinfo", "state": "absent"})
    assert out["changed"]
    assert all(c.get("v1", "Namespace", "bookinfo") is None for c in clusters.values())
    assert kb.placements["bookinfo"]["current"] == {}
    # the removal is the history's newest rows: every service from its clusters to none
    removed = [r for r in kb.history("bookinfo")["history"] if r["trigger"] == "remove"]
    assert {r["service"] for r in removed} == {"productpage", "details", "reviews", "ratings"}
    assert all(r["from"] and r["to"] == [] and r["outcome"] == "succeeded" for r in removed), removed
    assert run_module(deploy, {"name": "bookinfo", "state": "absent"})["changed"] is False
    assert len([r for r in kb.history("bookinfo")["history"] if r["trigger"] == "remove"]) == len(removed)


def test_deploy_from_src_stores_the_spec(run_module, kb, federation):
    cost = str(ROOT / "examples" / "bookinfo" / "cost-first.yml")
    out = run_module(deploy, {"src": cost})
    assert out["changed"] and out["version"] == 2  # the fixture stored energy-first as version 1
    assert kb.apps["bookinfo"]["application"]["objective"]["cost"] == 1.0
    again = run_module(deploy, {"src": cost})
    assert again["changed"] is False and again["version"] == 2
    checked = run_module(deploy, {"src": ENERGY}, check_mode=True)
    assert checked["changed"] and kb.apps["bookinfo"]["version"] == 2


def test_failure_grace_reaches_every_workload_for_the_agent(run_module, kb, federation):
    """spec.failureGraceSeconds is written onto each workload, where the agent reads it."""
    clusters = federation[0]
    stored = kb.apps["bookinfo"]["spec"]
    patient = json.loads(json.dumps(stored))
    patient["spec"]["failureGraceSeconds"] = 900
    out = run_module(deploy, {"spec": patient})
    assert out["changed"] and not out.get("failed"), out
    workloads = [d for c in clusters.values() for d in c.list("apps/v1", "Deployment", "bookinfo")]
    assert workloads
    for dep in workloads:
        assert dep["metadata"]["annotations"]["qonnect.io/failure-grace-seconds"] == "900"


def test_a_users_deploy_and_a_move_are_history_rows(run_module, kb, federation):
    """Issue 34.5: each placement change is a row with version, service, from -> to, trigger,
    outcome and duration; an unchanged rerun records nothing; check mode records nothing."""
    run_module(deploy, {"name": "bookinfo"})
    first = kb.history("bookinfo")["history"]
    assert {r["service"] for r in first} == {"productpage", "details", "reviews", "ratings"}
    ratings = next(r for r in first if r["service"] == "ratings")
    assert (ratings["from"], ratings["to"], ratings["trigger"], ratings["outcome"]) == (
        [],
        ["edge-1"],
        "deploy",
        "succeeded",
    )
    assert ratings["version"] == kb.apps["bookinfo"]["version"] and ratings["duration"] >= 0
    run_module(deploy, {"name": "bookinfo"})
    run_module(deploy, {"name": "bookinfo", "exclude": ["edge-1"]}, check_mode=True)
    assert len(kb.history("bookinfo")["history"]) == len(first)
    run_module(deploy, {"name": "bookinfo", "exclude": ["edge-1"]})
    newest = kb.history("bookinfo")["history"]
    assert len(newest) == len(first) + 1
    assert (newest[0]["service"], newest[0]["from"], newest[0]["to"]) == ("ratings", ["edge-1"], ["edge-2"])


class Counted:
    """The KB as the module sees it, counting its calls (each is one HTTP request of KBClient)."""

    def __init__(self, kb):
        self.kb, self.calls = kb, []

    def __getattr__(self, name):
        found = getattr(self.kb, name)
        if not callable(found) or name.startswith("_"):
            return found

        def call(*args, **kwargs):
            self.calls.append(name)
            return found(*args, **kwargs)

        return call


def test_an_unchanged_deploy_asks_the_kb_little(run_module, kb, federation, monkeypatch):
    """Issue 38.6: a deploy that changes nothing made about 11 KB requests - the stored
    application fetched twice, the application's newest 500 events read to compare policies.
    Now at most 5, and never the events (the policy is on the application's record)."""
    from ansible_collections.qonnect.core.plugins.module_utils import module as runner

    counted = Counted(kb)
    monkeypatch.setattr(runner, "kb_client_from_params", lambda params: counted)
    first = run_module(deploy, {"src": ENERGY, "scorer": "borda"})
    assert first["changed"] and not first.get("failed"), first
    assert kb.apps["bookinfo"]["policy"]["scorer"] == "borda"
    counted.calls.clear()
    again = run_module(deploy, {"src": ENERGY, "scorer": "borda"})
    assert again["changed"] is False and not again.get("failed"), again
    assert len(counted.calls) <= 5, counted.calls
    assert "list_events" not in counted.calls and counted.calls.count("get_application") <= 1
    counted.calls.clear()
    moved = run_module(deploy, {"src": ENERGY, "scorer": "weighted"})  # a new policy is recorded
    assert not moved.get("failed"), moved
    assert kb.apps["bookinfo"]["policy"]["scorer"] == "weighted"
    assert "post_event" in counted.calls


def edge_app(name: str, cpu: str = "4") -> dict:
    """A one-Deployment application on the edge tier asking for ``cpu`` CPU."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "web", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]
                },
            },
        },
    }
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {"services": [{"name": "web", "tier": "edge", "manifests": [deployment]}]},
    }


def test_a_list_of_applications_is_planned_together_and_deployed_in_one_run(run_module, kb, federation):
    """Issue 38.6: two applications that each fit on edge-1 alone but not together. Deployed
    one by one against the same fleet report (a loop), both are planned onto edge-1; as one list
    they are planned in one pass, so the second goes where there is room."""
    clusters, _log = federation
    alone = run_module(deploy, {"spec": edge_app("alone")}, check_mode=True)
    assert alone["plan"]["services"]["web"][0]["cluster"] == "edge-1"
    out = run_module(
        deploy, {"applications": [{"spec": edge_app("left")}, {"spec": edge_app("right")}, ENERGY]}
    )
    assert not out.get("failed"), out
    results = out["applications"]
    assert set(results) == {"left", "right", "bookinfo"} and all(r["ok"] for r in results.values())
    placed = {name: results[name]["plan"]["services"]["web"][0]["cluster"] for name in ("left", "right")}
    assert sorted(placed.values()) == ["edge-1", "edge-2"]
    for name, cluster in placed.items():
        assert kb.placements[name]["current"]["web"][0]["cluster"] == cluster
        assert kb.apps[name]["version"] == results[name]["version"] == 1
        assert clusters[cluster].get("apps/v1", "Deployment", "web", name) is not None
    again = run_module(
        deploy, {"applications": [{"spec": edge_app("left")}, {"spec": edge_app("right")}, ENERGY]}
    )
    assert again["changed"] is False and not again.get("failed"), again  # idempotent


def test_every_problem_of_a_list_is_reported_at_once_and_nothing_changes(run_module, kb, federation):
    writes, events = kb.writes, len(kb.events)
    bad_spec = edge_app("typo")
    bad_spec["spec"]["services"][0]["tier"] = "cloude"
    out = run_module(
        deploy,
        {
            "applications": [
                {"spec": bad_spec},
                {"spec": edge_app("ok"), "colour": "red"},
                {"src": ENERGY, "name": "bookinfo"},
                {"spec": edge_app("twice")},
                {"spec": edge_app("twice")},
                {"spec": edge_app("away"), "exclude": ["edge-9"]},
                42,
            ]
        },
    )
    assert out["failed"] and out["msg"].startswith("applications: nothing was deployed")
    errors = out["errors"]
    assert any(e.startswith("applications[0]: spec.services[0].tier") for e in errors), errors
    assert (
        "applications[1].colour: unknown option (expected src, spec, name, scorer, hysteresis, exclude)"
        in errors
    )
    assert any(e.startswith("applications[2]: give exactly one of src, spec, name") for e in errors)
    assert "applications: twice is given more than once" in errors
    assert any(e.startswith("applications[6]: expected a spec file path or a mapping") for e in errors)
    assert kb.writes == writes and len(kb.events) == events and "ok" not in kb.apps
    unknown = run_module(deploy, {"applications": [{"spec": edge_app("away"), "exclude": ["edge-9"]}]})
    assert unknown["failed"] and "applications[0]" in unknown["msg"] and "edge-9" in unknown["msg"]
    assert kb.writes == writes and "away" not in kb.apps


def test_one_application_of_a_list_that_cannot_be_placed_fails_the_task_not_the_others(
    run_module, kb, federation
):
    out = run_module(
        deploy, {"applications": [{"spec": edge_app("huge", cpu="64")}, {"spec": edge_app("small", cpu="1")}]}
    )
    assert out["failed"] and "1 of 2 applications deployed" in out["msg"] and "huge" in out["msg"]
    assert out["applications"]["small"]["ok"] and not out["applications"]["huge"]["ok"]
    assert "small" in kb.placements and "huge" not in kb.placements
