"""Issue 34.4 on real processes (testbed + KB + agents + a controller replica): a user's deploy
of a failing version, then a fix, while the controller watches.

Before: the controller decided ``spec-changed 2 -> 3`` for the failed version, ran it for about
4 minutes, and recorded that run ``succeeded`` when the user's fix made the clusters Ready. Now
the failed version is left alone (its deploy marked it failed), the fix is observed, not placed
twice, and the history says exactly what ran Ready where.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from _controller_stack import Stack, small_app, wait_for
from qonnect.controller import journal
from test_fleet_heal import deploy, ours

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

APP = "orders"
BROKEN = "qonnect.test/pull-fail/nginx"  # the testbed's kubelets never pull it (docs/testbed.md)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(tmp_path_factory.mktemp("ordering"))
    try:
        stack.start_kb()
        stack.start_testbed(3)
        stack.start_agents(1.0)
        yield stack
    finally:
        stack.close()


def test_a_failed_version_is_never_recorded_succeeded_and_the_fix_wins(fleet: Stack) -> None:
    stack = fleet
    deploy(stack, small_app(APP, "1"))
    stack.start_replicas(1, ["--agent-interval", "1"])
    try:
        leader = stack.wait_leader(30)
        wait_for(lambda: (leader.status() or {}).get("versions", {}).get(APP) == 1, 30, 0.2, "v1 observed")
        deploy(stack, small_app(APP, "2", image=BROKEN), check=False, wait_timeout=15)
        versions = {v["version"]: v["status"] for v in stack.admin.application_versions(APP)}
        assert versions[2]["state"] == "failed" and versions[2]["ready"] == [], versions
        time.sleep(8)  # several controller ticks: the failed version is not the controller's to place
        waiting = (leader.status() or {}).get("waiting") or {}
        assert [e for e in ours(stack, APP) if e["type"] == journal.DECISION] == [], waiting
        deploy(stack, small_app(APP, "3"))  # the user's fix
        wait_for(lambda: (leader.status() or {}).get("versions", {}).get(APP) == 3, 30, 0.2, "v3 observed")
        time.sleep(3)
        events = ours(stack, APP)
        assert [e for e in events if e["type"] == journal.DECISION] == [], [e["message"] for e in events]
        assert not [e for e in events if e["type"] == journal.SUCCEEDED]
        history = stack.admin.history(APP)["history"]
        story = [(r["version"], r["trigger"], r["outcome"], r["from"], r["to"]) for r in reversed(history)]
        where = history[-1]["to"]
        assert story[0] == (1, "deploy", "succeeded", [], where), story
        assert story[1][:3] == (2, "deploy", "failed") and story[1][3] == where, story
        assert story[2][:3] == (3, "deploy", "succeeded"), story
        assert len(story) == 3 and all(r["by"] == "admin" and r["duration"] > 0 for r in history)
        assert not any(v == 2 and outcome == "succeeded" for v, _t, outcome, _f, _to in story)
        status = {v["version"]: v["status"] for v in stack.admin.application_versions(APP)}
        assert (status[1]["state"], status[2]["state"], status[3]["state"]) == ("ready", "failed", "ready")
        assert status[3]["ready"] == story[2][4] and status[2]["ready"] == []
        logs = leader.log()
        assert "failed in its user's deploy" in logs
        intents = [e for e in stack.events(APP) if e["type"] == "deploy.intent"]
        assert intents and all(not e["message"].startswith("{") and e.get("data") for e in intents)
    finally:
        stack.stop_replicas()


def test_a_controller_run_overtaken_by_a_users_deploy_is_superseded(fleet: Stack) -> None:
    """The controller places version 2 (stored through the KB API: no deploy applies it), whose
    pods take 45 s to start; meanwhile the user deploys version 3. The controller's run stops (or
    ends) and is recorded "superseded by version 3", never succeeded, never retried; version 2
    is ready nowhere, version 3 is."""
    stack, app = fleet, "billing"
    deploy(stack, small_app(app, "1"))
    stack.start_replicas(1, ["--agent-interval", "1"])
    try:
        leader = stack.wait_leader(30)
        wait_for(lambda: (leader.status() or {}).get("versions", {}).get(app) == 1, 30, 0.2, "v1 observed")
        stack.admin.put_application(app, small_app(app, "2", image="qonnect.test/slow-45s/nginx"))

        def started() -> list[dict]:
            return [e for e in ours(stack, app) if e["type"] == journal.STARTED]

        wait_for(started, 60, 0.2, "the controller's run for version 2")
        deploy(stack, small_app(app, "3"))  # the user's fix, while that run waits for version 2

        def ended() -> list[dict]:
            return [
                e
                for e in ours(stack, app)
                if e["type"] in (journal.MIGRATION_SUPERSEDED, journal.SUCCEEDED, journal.FAILED)
            ]

        # the run notices the newer version at its next fence check; on a loaded CI host (four
        # workers, real control planes beside) that once took over 120 s: the bound, not the check
        outcome = wait_for(ended, 200, 0.5, "the controller's run to end")
        assert [e["type"] for e in outcome] == [journal.MIGRATION_SUPERSEDED], [e["message"] for e in outcome]
        assert "superseded by version 3" in outcome[0]["message"]
        wait_for(lambda: (leader.status() or {}).get("versions", {}).get(app) == 3, 60, 0.2, "v3 observed")
        time.sleep(3)
        assert len(started()) == 1  # not retried
        assert not [e for e in ours(stack, app) if e["type"] == journal.SUCCEEDED]
        history = stack.admin.history(app)["history"]
        controller_rows = [r for r in history if r["by"] == "controller"]
        assert [(r["version"], r["trigger"], r["outcome"]) for r in controller_rows] == [
            (2, "spec-changed", "superseded")
        ], history
        assert controller_rows[0]["decision"] == outcome[0]["ref"]["id"]
        status = {v["version"]: v["status"] for v in stack.admin.application_versions(app)}
        assert status[2]["state"] == "pending" and status[2]["ready"] == [], status
        assert status[3]["state"] == "ready", status
    finally:
        stack.stop_replicas()


def test_a_heal_is_a_history_row_from_the_failed_cluster(fleet: Stack) -> None:
    """Issue 34.5: a cluster-down move is recorded with from -> to, its decision, its outcome
    and duration; the version is then ready where it moved."""
    stack, app = fleet, "ledger"
    deploy(stack, small_app(app, "1"))
    (target,) = {t["cluster"] for targets in stack.placement(app).values() for t in targets}
    stack.start_replicas(1, ["--agent-interval", "1", "--cluster-grace", "4"])  # the heal, not the grace
    try:
        leader = stack.wait_leader(30)
        wait_for(lambda: app in (leader.status() or {}).get("versions", {}), 30, 0.2, f"{app} observed")
        stack.testbed("fail", target)
        try:
            wait_for(lambda: stack.healthy_elsewhere(app, {target}), 150, 0.5, f"{app} healed off {target}")

            def moved() -> list[dict]:
                return [r for r in stack.admin.history(app)["history"] if r["by"] == "controller"]

            def healed() -> list[dict]:
                rows = moved()
                return rows if rows and rows[0]["trigger"] == "cluster-down" else []

            rows = wait_for(healed, 30, 0.5, "the heal's history row")
        finally:
            stack.testbed("recover", target)
        (now,) = {t["cluster"] for targets in stack.placement(app).values() for t in targets}
        # newest first: the confirmed move, then the hedged failover's standby copy (issue 36)
        row, hedge = rows
        assert (row["version"], row["service"], row["trigger"], row["outcome"]) == (
            1,
            "web",
            "cluster-down",
            "succeeded",
        )
        assert (hedge["trigger"], hedge["from"], hedge["to"]) == ("hedge", [target], sorted([target, now])), (
            hedge
        )
        assert (row["from"], row["to"]) == (sorted([target, now]), [now]) and now != target, row
        decisions = [e for e in ours(stack, app) if e["type"] == journal.DECISION]
        assert row["decision"] == decisions[-1]["ref"]["id"] and row["duration"] > 0
        status = stack.admin.application_versions(app)[0]["status"]
        assert now in status["ready"] and target not in status.get("failed", []), status
    finally:
        stack.stop_replicas()
