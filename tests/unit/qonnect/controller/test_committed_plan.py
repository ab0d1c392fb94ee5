"""One plan per event, committed (issue 21): when the leader starts the attempts of a batch it
places every application of the batch once, in one ``place_many`` pass over its snapshot's
inventory with each application's stored policy, commits each plan with the attempt's
``start`` entry, and the migration receives exactly that plan.

The loop runs over a real DecisionLog and the real placement engine; only the Raft node, the
KB and the playbook runner are the in-process stand-ins of test_concurrency.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.placement import batch as batch_module
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application, Service
from qonnect.controller import replan
from qonnect.controller.detector import Settings, Snapshot
from qonnect.controller.executor import FAILED, SUCCEEDED, Outcome, decision_vars
from qonnect.controller.statemachine import RETRY, RUNNING, CommandError, DecisionLog
from test_concurrency import _intent, controller, decide, finish_all, settle

REPO = Path(__file__).resolve().parents[4]
PAPER = json.loads((REPO / "examples" / "inventories" / "paper.json").read_text())


def one_service(name: str, tier: str = "any", cpu: float = 0.25) -> Application:
    return Application(
        name=name,
        namespace=name,
        objective={"energy": 0.6, "cost": 0.3, "performance": 0.3, "latency": 0.5},
        services=[
            Service(
                name="web",
                tier=tier,
                replicas=1,
                requests={"cpu": cpu, "memory": 2**27, "ephemeral_storage": 0},
            )
        ],
    )


def snapshot(apps: list[Application], down: str = "edge-1", also_down: tuple[str, ...] = ()) -> Snapshot:
    """The paper fleet with ``down`` (and ``also_down``) silent; every application runs on ``down``."""
    inv = copy.deepcopy(PAPER)
    for cluster in inv["clusters"]:
        cluster["heartbeat_age"] = 100.0 if cluster["name"] in (down, *also_down) else 0.5
    first = next(c for c in inv["clusters"] if c["name"] == down)["nodes"][0]["name"]
    inv["placements"] = {a.name: {"web": [{"cluster": down, "replicas": 1, "nodes": [first]}]} for a in apps}
    records = [{"name": a.name, "application": a.to_dict()} for a in apps]
    return Snapshot(inv, [], records, 1000.0, heard_for=100.0)


def clusters(plan: dict[str, Any]) -> set[str]:
    return {e["cluster"] for entries in plan.values() for e in entries}


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    """Every place_many call the planner makes, with its requests (the engine still plans)."""
    seen: list[list[dict[str, Any]]] = []
    real = batch_module.place_many

    def spy(requests, inventory, *args, **kw):
        seen.append([dict(r) for r in requests])
        return real(requests, inventory, *args, **kw)

    monkeypatch.setattr(batch_module, "place_many", spy)
    return seen


def planning_controller(**cfg: Any):
    c = controller(settings=Settings(hysteresis=0.2), **cfg)
    c.planner = replan.engine_planner("weighted", 0.2)
    return c


# -- the replicated log --------------------------------------------------------------------------


def test_the_start_entry_commits_the_plan_and_a_later_start_replaces_it():
    log = DecisionLog()
    log.apply({"op": "leader", "term": 1, "node": "n1", "ts": 0.0})
    did = log.apply({"op": "decide", "term": 1, "app": "shop", "exclude": ["edge-1"], "reason": "down"})["id"]
    plan = {"web": [{"cluster": "cloud-1", "replicas": 1, "nodes": ["cloud-1-worker"]}]}
    res = log.apply({"op": "start", "term": 1, "node": "n1", "id": did, "plan": plan})
    assert res["ok"] and log.get(did)["plan"] == plan
    plan["web"][0]["cluster"] = "changed"  # the log keeps its own copy
    assert log.get(did)["plan"]["web"][0]["cluster"] == "cloud-1"
    # every replica (and a snapshot of the log) holds the same plan
    assert DecisionLog.from_dict(log.to_dict()).get(did)["plan"]["web"][0]["cluster"] == "cloud-1"
    log.apply({"op": "finish", "term": 1, "id": did, "attempt": 1, "result": FAILED, "retry": True})
    # a malformed plan is refused before anything changes: no attempt is used
    with pytest.raises(CommandError, match="plan"):
        log.apply({"op": "start", "term": 1, "node": "n1", "id": did, "plan": {"web": "cloud-2"}})
    assert log.get(did)["attempts"] == 1 and log.get(did)["status"] == RETRY
    # the next attempt's plan replaces the previous one; an attempt without one keeps none
    other = {"web": [{"cluster": "fog-2", "replicas": 1, "nodes": ["fog-2-worker"]}]}
    log.apply({"op": "start", "term": 2, "node": "n1", "id": did, "plan": other})
    assert log.get(did)["plan"] == other and log.get(did)["attempts"] == 2
    log.apply({"op": "finish", "term": 2, "id": did, "attempt": 2, "result": FAILED, "retry": True})
    log.apply({"op": "start", "term": 2, "node": "n1", "id": did})
    assert "plan" not in log.get(did)


# -- the leader plans a batch once ---------------------------------------------------------------


def test_a_batch_is_planned_once_with_each_applications_policy_and_the_plan_is_committed(calls):
    apps = [one_service("shop", "cloud"), one_service("blog", "any"), one_service("wiki", "fog")]
    snap = snapshot(apps)
    c = planning_controller(max_concurrent_runs=1, batch_size=10)
    _intent(c.kb, "shop", "admin", scorer="optimal", exclude=["cloud-1"])
    _intent(c.kb, "wiki", "admin", hysteresis=0.5, exclude=["fog-1", "fog-2"])
    ids = decide(c, [a.name for a in apps])
    c._drive_open(snap)
    settle(c, c.executor, 1)
    assert len(calls) == 1, calls  # one pass for the whole batch
    got = {r["app"].name: r for r in calls[0]}
    assert list(got) == ["shop", "blog", "wiki"]  # in decision order
    assert (got["shop"]["scorer"], got["shop"]["hysteresis"]) == ("optimal", 0.2)
    assert set(got["shop"]["exclude"]) == {"cloud-1", "edge-1"}  # the user's and the decision's
    assert (got["blog"]["scorer"], got["blog"]["hysteresis"]) == ("weighted", 0.2)  # defaults
    assert set(got["blog"]["exclude"]) == {"edge-1"}
    assert (got["wiki"]["scorer"], got["wiki"]["hysteresis"]) == ("weighted", 0.5)
    assert set(got["wiki"]["exclude"]) == {"edge-1", "fog-1", "fog-2"}
    plans = {c.node.machine.get(i)["app"]: c.node.machine.get(i)["plan"] for i in ids}
    assert clusters(plans["shop"]) <= {"cloud-2", "cloud-3"}
    assert "edge-1" not in clusters(plans["blog"])
    assert clusters(plans["wiki"]) == {"fog-3"}
    assert all(e["nodes"] for p in plans.values() for entries in p.values() for e in entries)
    # the run received the committed plans, each as its migration's `plan`
    ran = c.executor.runs[0]
    assert [d["id"] for d in ran] == ids
    for decision in ran:
        assert decision["status"] == RUNNING
        assert decision_vars(decision, 1, decision["attempt_token"])["plan"] == {
            "services": plans[decision["app"]]
        }
    finish_all(c, c.executor, 1)
    assert all(c.node.machine.get(i)["status"] == SUCCEEDED for i in ids)


def test_an_application_that_cannot_be_placed_waits_and_the_others_start(calls):
    apps = [one_service("shop", "cloud"), one_service("stuck", "edge")]
    c = planning_controller(max_concurrent_runs=1, batch_size=10)
    _intent(c.kb, "stuck", "admin", exclude=["edge-2", "edge-3"])  # edge-1 is down: no edge left
    shop, stuck = decide(c, [a.name for a in apps])
    c._drive_open(snapshot(apps))
    settle(c, c.executor, 1)
    assert len(calls) == 1
    assert [d["id"] for d in c.executor.runs[0]] == [shop]
    waiting = c.node.machine.get(stuck)
    assert waiting["status"] == RETRY and waiting["attempts"] == 0 and "plan" not in waiting
    assert waiting["detail"].startswith("unplaceable: web: no eligible cluster")
    assert any(e.get("application") == "stuck" and "waits" in e.get("message", "") for e in c.kb.events)
    finish_all(c, c.executor, 1)


def test_healing_beats_stability_when_only_a_just_recovered_cluster_fits(calls):
    """As the feasibility check did: a cluster back for less than the stabilisation window is
    avoided, unless the application fits nowhere else; then the decision is retargeted to the
    clusters it must avoid and the plan uses the recovered cluster."""
    apps = [one_service("shop", "any"), one_service("edgy", "edge")]
    snap = snapshot(apps)
    c = planning_controller(max_concurrent_runs=1, batch_size=10)
    c.memory.recovered_at["edge-3"] = snap.now - 1.0  # back a second ago
    _intent(c.kb, "edgy", "admin", exclude=["edge-2"])
    shop, edgy = decide(c, [a.name for a in apps])
    c._drive_open(snap)
    settle(c, c.executor, 1)
    assert [d["id"] for d in c.executor.runs[0]] == [shop, edgy]
    decision = c.node.machine.get(edgy)
    assert clusters(decision["plan"]) == {"edge-3"} and decision["exclude"] == ["edge-1"]
    assert "edge-3" not in clusters(c.node.machine.get(shop)["plan"])  # the others stay off it
    assert c.node.machine.get(shop)["exclude"] == ["edge-1", "edge-3"]
    finish_all(c, c.executor, 1)


def test_a_failed_attempt_is_retried_with_a_plan_computed_afresh(calls):
    """A plan is computed on a snapshot; if its run fails (the fleet changed meanwhile) the
    attempt fails and the next one plans again on the snapshot of its own time."""
    app = one_service("shop", "cloud")
    c = planning_controller(max_concurrent_runs=1, batch_size=10, backoff=0.0)
    real_run = c.executor.run

    def run(decision, attempt, token, still_valid):
        if attempt == 1:  # the planned cluster failed after the plan was made: the deploy fails
            c.executor._one([decision])
            return Outcome(FAILED, "playbook failed (rc 2): the planned cluster refused", "", 2)
        return real_run(decision, attempt, token, still_valid)

    c.executor.run = run
    (did,) = decide(c, ["shop"])
    c._drive_open(snapshot([app]))
    settle(c, c.executor, 1)
    first = c.node.machine.get(did)["plan"]
    (target,) = clusters(first)
    finish_all(c, c.executor, 1)
    assert c.node.machine.get(did)["status"] == RETRY
    c._drive_open(snapshot([app], also_down=(target,)))
    settle(c, c.executor, 2)
    decision = c.node.machine.get(did)
    assert decision["attempts"] == 2 and len(calls) == 2
    assert target not in clusters(decision["plan"]) and decision["plan"] != first
    assert target in decision["exclude"]  # the new attempt's exclusions are re-read too
    ran = c.executor.runs[1][0]
    assert decision_vars(ran, 2, ran["attempt_token"])["plan"] == {"services": decision["plan"]}
    finish_all(c, c.executor, 1)
    assert c.node.machine.get(did)["status"] == SUCCEEDED


# -- what the migration is told --------------------------------------------------------------------


def test_decision_vars_carry_the_committed_plan_and_none_without_one():
    plan = {"web": [{"cluster": "cloud-2", "replicas": 1, "nodes": ["cloud-2-worker"]}]}
    decision = {"id": "d1.2", "app": "shop", "reason": "down", "exclude": ["edge-1"], "plan": plan}
    got = decision_vars(decision, 1, {"term": 1, "seq": 3})
    assert got["plan"] == {"services": plan}
    assert "plan" not in decision_vars({**decision, "plan": None}, 1, {"term": 1, "seq": 3})


def test_the_migration_playbook_hands_the_plan_to_deploy_for_single_runs_and_batches():
    plays = yaml.safe_load((REPO / "playbooks" / "migrate.yml").read_text())
    deploys = [t["qonnect.core.deploy"] for p in plays for t in p["tasks"] if "qonnect.core.deploy" in t]
    assert len(deploys) == 2
    single, batch = deploys
    assert single["plan"] == "{{ plan | default(omit) }}"  # by hand (-e app=X): the deploy places
    assert batch["plan"] == "{{ qonnect_item.plan | default(omit) }}"
