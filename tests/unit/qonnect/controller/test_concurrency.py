"""Bounded, batched execution (issue 21): a fleet's failure starts at most --max-concurrent-runs
playbook runs, each healing up to --batch-size applications; the rest wait in decision order,
said in the log and the status; a heal runs with the policy the user deployed with.

The loop runs over a real DecisionLog; only the Raft node, the KB and the playbook runner are
stand-ins (in-process fakes of external systems, no network)."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement import batch as batch_module
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application, Service
from ansible_collections.qonnect.core.plugins.module_utils.runners import intent
from qonnect.controller import replan
from qonnect.controller.detector import Settings, Snapshot
from qonnect.controller.executor import FAILED, SUCCEEDED, Outcome, decision_vars
from qonnect.controller.loop import Config, Connections, Controller, default_concurrency
from qonnect.controller.statemachine import PENDING, RETRY, RUNNING, CommandError, DecisionLog


class Node:
    """A one-replica 'Raft': commits apply to the real decision log at once."""

    node_id = "n1"

    def __init__(self) -> None:
        self.machine = DecisionLog()
        self.machine.apply({"op": "leader", "term": 1, "node": "n1", "ts": 0.0})

    def term(self) -> int:
        return 1

    def is_leader(self) -> bool:
        return True

    def propose(self, cmd: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self.machine.apply({"term": 1, "node": "n1", "ts": time.time(), **cmd})


class KB:
    """The KB's event log."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []

    def post_event(self, body: dict[str, Any], role: str = "controller") -> dict[str, Any]:
        self.events.append({**body, "id": len(self.events) + 1, "role": role, "ts": time.time()})
        return self.events[-1]

    def list_events(self, application: str | None = None, limit: int = 100, **_kw: Any) -> list[dict]:
        return [e for e in self.events if application in (None, e.get("application"))][-limit:]

    def get_placement(self, app: str) -> dict[str, Any]:
        return {"application": app, "desired": {}, "current": {}}

    def record_history(self, app: str, record: dict[str, Any]) -> dict[str, Any]:
        self.history.append({**record, "application": app})
        return {"recorded": len(record["changes"])}

    def list_clusters(self) -> list[dict[str, Any]]:
        return []


class Runner:
    """The playbook runner: each run blocks until released; records what ran together."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live = 0
        self.peak = 0
        self.runs: list[list[dict[str, Any]]] = []  # decisions of each run, in start order
        self.release = threading.Semaphore(0)

    def _one(self, decisions: list[dict[str, Any]]) -> None:
        with self.lock:
            self.live += 1
            self.peak = max(self.peak, self.live)
            self.runs.append(decisions)
        self.release.acquire(timeout=10)
        with self.lock:
            self.live -= 1

    def run(self, decision, attempt, token, still_valid) -> Outcome:
        self._one([decision])
        return Outcome(SUCCEEDED, "ok", "", 0)

    def run_batch(self, items, still_valid) -> dict[str, Outcome]:
        self._one([d for d, _a, _t in items])
        return {d["id"]: Outcome(SUCCEEDED, "ok", "", 0) for d, _a, _t in items}

    def kill_all(self) -> int:
        return 0


def controller(planner: Any = None, **cfg: Any) -> Controller:
    """A Controller wired to the fakes above (no Raft, KB or HTTP started), leading term 1."""
    c = Controller(
        Config("127.0.0.1:1", [], "http://kb", "t", "/t", "s" * 32, "/d", "migrate.yml", **cfg),
        planner,
        judge_drift=False,
        connections=Connections(KB(), Node(), Runner()),
    )
    c.lead.token = {"term": 1, "seq": 1}
    c.lead.since, c.leadership.lease_wait = time.monotonic(), 0.0
    return c


def decide(c: Controller, apps: list[str]) -> list[str]:
    ids = []
    for app in apps:
        res = c.node.propose({"op": "decide", "app": app, "exclude": ["edge-1"], "reason": "edge-1 down"}, 1)
        ids.append(res["id"])
    return ids


APPS = ["shop", *(f"app{i}" for i in range(6))]
SNAPSHOT = Snapshot(  # edge-1 is down and runs every application
    {
        "clusters": [{"name": "edge-1", "heartbeat_age": 100.0}, {"name": "cloud-1", "heartbeat_age": 0.5}],
        "placements": {app: {"web": [{"cluster": "edge-1"}]} for app in APPS},
    },
    [],
    [],
    1000.0,
    heard_for=100.0,
)


def settle(c: Controller, runner: Runner, runs: int) -> None:
    deadline = time.monotonic() + 5
    while len(runner.runs) < runs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(runner.runs) == runs


def finish_all(c: Controller, runner: Runner, n: int) -> None:
    for _run in range(n):
        runner.release.release()
    deadline = time.monotonic() + 5
    while runner.live and time.monotonic() < deadline:
        time.sleep(0.01)
    for thread in set(c.runs.threads.values()):
        thread.join(timeout=5)
    c.runs.collect_finished()


def test_default_concurrency_is_sized_for_the_host():
    import os

    assert default_concurrency() == max(1, (os.cpu_count() or 2) // 2)
    assert Config("a:1", [], "u", "t", "/t", "s", "/d", "p").max_concurrent_runs == default_concurrency()


def test_at_most_max_concurrent_runs_the_rest_wait_in_order(caplog: pytest.LogCaptureFixture):
    c = controller(max_concurrent_runs=2, batch_size=1)
    runner = c.executor
    ids = decide(c, [f"app{i}" for i in range(5)])
    with caplog.at_level(logging.WARNING, logger="qonnect.controller"):
        c.scheduler.drive_open(SNAPSHOT)
        settle(c, runner, 2)
        c.scheduler.drive_open(SNAPSHOT)  # a second pass in the same tick starts nothing more
    assert runner.peak == 2 and len(runner.runs) == 2
    assert [r[0]["id"] for r in runner.runs] == ids[:2]
    assert c.scheduler.waiting_slot == ids[2:]  # in decision order
    status = {d["id"]: d["status"] for d in c.node.machine.open_decisions()}
    assert [status[i] for i in ids] == [RUNNING, RUNNING, PENDING, PENDING, PENDING]
    waits = [r.getMessage() for r in caplog.records if "waits for a run slot" in r.getMessage()]
    assert len(waits) == 3 and "position 1 of 3" in waits[0] and "app2" in waits[0]
    finish_all(c, runner, 2)
    c.scheduler.drive_open(SNAPSHOT)
    settle(c, runner, 4)
    assert runner.peak == 2 and c.scheduler.waiting_slot == ids[4:]
    finish_all(c, runner, 2)
    c.scheduler.drive_open(SNAPSHOT)
    settle(c, runner, 5)
    finish_all(c, runner, 1)
    assert runner.peak == 2
    assert all(c.node.machine.get(i)["status"] == SUCCEEDED for i in ids)
    assert max(c.node.machine.get(i)["attempts"] for i in ids) == 1


def test_one_run_heals_a_batch_each_with_its_own_attempt_and_token():
    c = controller(max_concurrent_runs=1, batch_size=4)
    runner = c.executor
    ids = decide(c, [f"app{i}" for i in range(6)])
    c.scheduler.drive_open(SNAPSHOT)
    settle(c, runner, 1)
    assert [d["id"] for d in runner.runs[0]] == ids[:4]  # one playbook start for four applications
    tokens = {(d["attempt_token"]["term"], d["attempt_token"]["seq"]) for d in runner.runs[0]}
    assert len(tokens) == 4  # each attempt is fenced by its own token
    assert c.scheduler.waiting_slot == ids[4:]
    finish_all(c, runner, 1)
    c.scheduler.drive_open(SNAPSHOT)
    settle(c, runner, 2)
    assert [d["id"] for d in runner.runs[1]] == ids[4:]
    finish_all(c, runner, 1)
    assert all(c.node.machine.get(i)["status"] == SUCCEEDED for i in ids)
    assert runner.peak == 1


def counting(c: Controller) -> list[str]:
    """The op of every entry the controller proposes from now on, in order."""
    ops: list[str] = []
    propose = c.node.propose

    def counted(cmd: dict[str, Any], timeout: float) -> dict[str, Any]:
        ops.append(cmd["op"])
        return propose(cmd, timeout)

    c.node.propose = counted  # type: ignore[method-assign]
    return ops


def test_a_batch_starts_and_reports_with_one_log_entry_each():
    """Issue 21: each application of a batch had its own 'start' entry (and its own 'finish'):
    50 applications waited 5.1 s between the batch plan and the playbook's start. A batch's
    starts now commit in one entry, and its outcomes in one."""
    c = controller(max_concurrent_runs=1, batch_size=20)
    ops = counting(c)
    ids = decide(c, [f"app{i}" for i in range(6)] + ["shop"])
    ops.clear()
    c.scheduler.drive_open(SNAPSHOT)
    settle(c, c.executor, 1)
    assert ops == ["many"] and len(c.executor.runs[0]) == 7
    assert all(c.node.machine.get(i)["status"] == RUNNING for i in ids)
    ops.clear()
    finish_all(c, c.executor, 1)
    assert ops == ["many"]
    assert all(c.node.machine.get(i)["status"] == SUCCEEDED for i in ids)
    assert c.runs.unreported == []


def test_a_pass_commits_its_decisions_at_the_snapshot_s_time_in_one_entry():
    from qonnect.controller.detector import Trigger

    c = controller()
    ops = counting(c)
    triggers = [Trigger(app, "cluster-down", "edge-1 down", ("edge-1",)) for app in ("app0", "app1", "app0")]
    assert c.deciding.decide_all(triggers, 1234.5) == 2  # the second decision on app0 waits for the first
    assert ops == ["decide_many"]
    decided = [d["decided_at"] for d in c.node.machine.open_decisions()]
    assert decided == [1234.5, 1234.5]


def test_outcomes_that_could_not_commit_are_reported_again_on_the_next_pass():
    c = controller(max_concurrent_runs=1, batch_size=3)
    ids = decide(c, ["app0", "app1", "app2"])
    c.scheduler.drive_open(SNAPSHOT)
    settle(c, c.executor, 1)
    c.commits.propose = lambda cmd: None  # type: ignore[method-assign]  # no quorum for now
    finish_all(c, c.executor, 1)
    assert [d["id"] for d, _a, _t, _o in c.runs.unreported] == ids
    assert all(c.node.machine.get(i)["status"] == RUNNING for i in ids)
    del c.commits.propose  # the quorum is back
    c.runs.collect_finished()
    assert c.runs.unreported == [] and all(c.node.machine.get(i)["status"] == SUCCEEDED for i in ids)


def _intent(kb: KB, app: str, role: str, **policy: Any) -> None:
    kb.post_event(intent.event(app, intent.APPLIED, {"exclude": [], **policy}, 1), role=role)


def test_a_heal_runs_with_the_policy_the_user_deployed_with():
    c = controller(max_concurrent_runs=1, batch_size=1)
    _intent(c.kb, "shop", "admin", scorer="optimal", hysteresis=0.3, exclude=["cloud-2"])
    _intent(c.kb, "shop", "agent", scorer="borda", exclude=["cloud-1", "cloud-3"])  # not a deployer
    (did,) = decide(c, ["shop"])
    c.scheduler.drive_open(SNAPSHOT)
    settle(c, c.executor, 1)
    ran = c.executor.runs[0][0]
    assert c.node.machine.get(did)["policy"] == {
        "scorer": "optimal",
        "hysteresis": 0.3,
        "exclude": ["cloud-2"],
    }
    got = decision_vars(ran, 1, ran["attempt_token"])
    assert got["scorer"] == "optimal" and got["hysteresis"] == 0.3
    assert got["exclude"] == ["cloud-2", "edge-1"]  # the user's exclusion and the decision's
    finish_all(c, c.executor, 1)


def test_a_heal_uses_the_policy_on_the_applications_record_however_many_events_follow():
    """Issue 38: the policy was found by scanning the application's newest 500 events, so an
    application with more events lost it. The KB now keeps it on the application's record."""
    c = controller(max_concurrent_runs=1, batch_size=1)
    _intent(c.kb, "shop", "admin", scorer="borda", exclude=["cloud-3"])  # older, buried below
    for i in range(1000):
        c.kb.post_event(
            {"type": "note", "reason": "noise", "application": "shop", "message": str(i)}, role="admin"
        )
    stored = {"scorer": "optimal", "hysteresis": 0.3, "exclude": ["cloud-2"]}
    snapshot = dataclasses.replace(SNAPSHOT, applications=[{"name": "shop", "version": 1, "policy": stored}])
    (did,) = decide(c, ["shop"])
    c.scheduler.drive_open(snapshot)
    settle(c, c.executor, 1)
    assert c.node.machine.get(did)["policy"] == stored
    got = decision_vars(c.executor.runs[0][0], 1, c.executor.runs[0][0]["attempt_token"])
    assert got["scorer"] == "optimal" and got["exclude"] == ["cloud-2", "edge-1"]
    finish_all(c, c.executor, 1)


def test_without_a_stored_policy_the_controller_defaults_apply():
    c = controller(max_concurrent_runs=1)
    (did,) = decide(c, ["shop"])
    c.scheduler.drive_open(SNAPSHOT)
    settle(c, c.executor, 1)
    ran = c.executor.runs[0][0]
    got = decision_vars(ran, 1, ran["attempt_token"])
    assert "scorer" not in got and got["exclude"] == ["edge-1"]  # migration_vars' defaults stay
    assert "policy" not in c.node.machine.get(did)
    finish_all(c, c.executor, 1)


def test_the_batch_results_split_per_decision():
    from qonnect.controller.executor import FAILED, batch_results, split_outcome

    class Ran:  # ansible-runner's task events of a batch run: one deploy task for the whole batch
        events = [
            {"event": "runner_on_ok", "event_data": {"host": "localhost", "res": {}}},
            {
                "event": "runner_on_ok",
                "event_data": {
                    "host": "localhost",
                    "res": {
                        "batch": {
                            "d1.2": {"app": "a", "ok": True, "msg": "deployed to edge-2"},
                            "d1.3": {"app": "b", "ok": False, "msg": "cloud-2 refused"},
                        }
                    },
                },
            },
        ]

    items = [
        ({"id": "d1.2", "app": "a"}, 1, {}),
        ({"id": "d1.3", "app": "b"}, 2, {}),
        ({"id": "d1.4"}, 1, {}),
    ]
    got = split_outcome(Outcome(SUCCEEDED, "playbook succeeded", "/art", 0), items, batch_results(Ran()))
    assert got["d1.2"].result == SUCCEEDED
    assert got["d1.3"].result == FAILED and "cloud-2 refused" in got["d1.3"].detail
    assert got["d1.4"].result == FAILED  # no result of its own: never counted as done
    assert {
        o.result for o in split_outcome(Outcome(SUCCEEDED, "", "", 0), items, batch_results(None)).values()
    } == {FAILED}


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--max-concurrent-runs", "0"), ("--batch-size", "0"), ("--max-drift-moves-per-minute", "-1")],
)
def test_the_new_flags_refuse_bad_values_by_name(capsys, tmp_path, flag, value):
    import secrets

    from qonnect import cli

    token = tmp_path / "kb.token"
    token.write_text("t")
    secret = tmp_path / "raft.secret"
    secret.write_text(secrets.token_hex(32))
    secret.chmod(0o600)
    argv = ["controller", "run", "--id", "c1", "--self", "127.0.0.1:1", "--peers", "127.0.0.1:2"]
    argv += ["--kb", "http://127.0.0.1:9", "--token-file", str(token), "--raft-secret-file", str(secret)]
    assert cli.main([*argv, flag, value]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err


# -- one plan per event, committed (issue 21) ----------------------------------------
# One plan per event, committed (issue 21): when the leader starts the attempts of a batch it
# places every application of the batch once, in one ``place_many`` pass over its snapshot's
# inventory with each application's stored policy, commits each plan with the attempt's
# ``start`` entry, and the migration receives exactly that plan.
#
# The loop runs over a real DecisionLog and the real placement engine; only the Raft node, the
# KB and the playbook runner are the in-process stand-ins of test_concurrency.py.

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
    return controller(replan.engine_planner("weighted", 0.2), settings=Settings(hysteresis=0.2), **cfg)


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
    c.scheduler.drive_open(snap)
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
    c.scheduler.drive_open(snapshot(apps))
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
    c.lead.memory.recovered_at["edge-3"] = snap.now - 1.0  # back a second ago
    _intent(c.kb, "edgy", "admin", exclude=["edge-2"])
    shop, edgy = decide(c, [a.name for a in apps])
    c.scheduler.drive_open(snap)
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
    c.scheduler.drive_open(snapshot([app]))
    settle(c, c.executor, 1)
    first = c.node.machine.get(did)["plan"]
    (target,) = clusters(first)
    finish_all(c, c.executor, 1)
    assert c.node.machine.get(did)["status"] == RETRY
    c.scheduler.drive_open(snapshot([app], also_down=(target,)))
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
    assert batch["batch"] == "{{ batch }}"  # each item carries its plan (decision_vars)
    assert set(batch) >= {"batch", "batch_workers", "kubeconfigs"}


def test_the_drift_judge_reads_the_policy_the_heal_will_use_once_per_record_change():
    """Issue 38 (one judge): drift is judged with the policy the heal's plan uses. A record that
    carries it costs no KB read; one written before the KB kept it is read from the events once
    per change of the record, not on every tick."""
    c = controller()
    reads = []
    list_events = c.kb.list_events

    def counted(*args: Any, **kw: Any) -> list[dict]:
        reads.append(kw.get("application"))
        return list_events(*args, **kw)

    c.kb.list_events = counted
    stored = {"scorer": "optimal", "hysteresis": 0.3, "exclude": ["cloud-2"], "junk": 1}
    assert c.plans.judged_policy({"name": "shop", "version": 1, "policy": stored}) == {
        "scorer": "optimal",
        "hysteresis": 0.3,
        "exclude": ["cloud-2"],
    }
    assert reads == []
    _intent(c.kb, "old", "admin", scorer="borda", exclude=[])
    old = {"name": "old", "version": 2, "updated": 10.0, "policy": None}
    for _tick in range(5):
        assert c.plans.judged_policy(old) == {"scorer": "borda", "exclude": []}
    assert reads == ["old"]
    _intent(c.kb, "old", "admin", scorer="weighted", hysteresis=0.2, exclude=[])
    assert c.plans.judged_policy({**old, "updated": 11.0}) == {
        "scorer": "weighted",
        "hysteresis": 0.2,
        "exclude": [],
    }
    assert reads == ["old", "old"]

    def away(*args: Any, **kw: Any) -> list[dict]:
        raise KBError(0, "connection refused")

    c.kb.list_events = away
    assert c.plans.judged_policy({**old, "updated": 12.0}) is None  # unknown now: no drift judged
    assert c.plans.judged_policies["old"][0] == (2, 11.0)  # and nothing wrong cached
