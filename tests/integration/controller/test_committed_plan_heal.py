"""One plan per event, committed (issue 21), on real processes: testbed + KB + agents + three
controller replicas, nothing of ours mocked.

An application deployed with ``scorer: optimal`` and an exclusion is failed over. The leader
plans the heal itself with the stored policy and commits the plan with the attempt's ``start``
entry; the migration run receives that plan, hands it to the deploy module as ``plan``, and the
placement the KB ends with is exactly the committed plan (clusters, replicas and nodes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _controller_stack import Stack, small_app, wait_for
from test_fleet_heal import deploy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# a short cluster grace: the heal, not the grace, is this test's subject (issue 35)
OPTIONS = [
    "--agent-interval",
    "1",
    "--max-concurrent-runs",
    "1",
    "--batch-size",
    "10",
    "--cluster-grace",
    "4",
]


@pytest.fixture()
def fleet(tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(tmp_path)
    try:
        stack.start_kb()
        stack.start_testbed(6)
        stack.start_agents(1.0)
        yield stack
    finally:
        stack.close()


def _clusters(placement: dict[str, Any]) -> set[str]:
    return {t["cluster"] for targets in placement.values() for t in targets}


def _canonical(placement: dict[str, Any]) -> dict[str, list[tuple[str, int, tuple[str, ...]]]]:
    return {
        svc: sorted(
            (t["cluster"], int(t.get("replicas", 1)), tuple(sorted(t.get("nodes") or ()))) for t in targets
        )
        for svc, targets in placement.items()
    }


def _deploy_args(run: Path) -> list[dict[str, Any]]:
    """The qonnect.core.deploy module arguments of a migration run (ansible-runner's events)."""
    found = []
    for path in sorted((run / "artifacts" / "run" / "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and "deploy" in str(
            data.get("task_action")
        ):
            found.append(((data.get("res") or {}).get("invocation") or {}).get("module_args") or {})
    return found


def test_a_heal_applies_the_plan_the_leader_committed_with_the_stored_policy(fleet: Stack):
    stack = fleet
    app = "planned"
    names = sorted(c["name"] for c in stack.federation["clusters"])
    allowed = names[:3]
    excluded = sorted(set(names) - set(allowed))
    deploy(stack, small_app(app), scorer="optimal", exclude=excluded)
    (target,) = _clusters(stack.placement(app))
    assert target in allowed
    stack.start_replicas(3, OPTIONS)
    try:
        leader = stack.wait_leader(30)
        wait_for(lambda: app in (leader.status() or {}).get("versions", {}), 30, 0.2, f"{app} observed")
        stack.testbed("fail", target)
        try:
            wait_for(lambda: stack.healthy_elsewhere(app, {target}), 150, 0.5, f"{app} healed off {target}")

            def succeeded() -> dict[str, Any] | None:
                replica = stack.leader()
                recent = ((replica.status() if replica else None) or {}).get("recent", [])
                return next(  # the confirmed move (a hedge's standby copy came before it, issue 36)
                    (
                        d
                        for d in recent
                        if d["app"] == app and d["status"] == "succeeded" and d["kind"] == "cluster-down"
                    ),
                    None,
                )

            decision = wait_for(succeeded, 30, 0.5, "the decision recorded as succeeded")
            # the leader planned with the user's stored policy, plus the decision's exclusion
            assert decision["policy"]["scorer"] == "optimal", decision
            assert decision["policy"]["exclude"] == excluded, decision
            assert target in decision["exclude"], decision
            plan = decision.get("plan")
            assert plan, f"no plan committed with the start entry: {decision}"
            assert set(plan) == {"web"} and all(t["nodes"] for t in plan["web"]), plan
            assert _clusters(plan) <= set(allowed) - {target}, plan
            # ... and the KB ends with exactly the committed plan
            assert _canonical(stack.placement(app)) == _canonical(plan), (stack.placement(app), plan)
            # the run received the plan and handed it to the deploy module as is
            runs = [
                p
                for r in stack.replicas
                for p in sorted((r.data_dir / "runs").glob(f"{decision['id']}-*"))
                if (p / "env" / "extravars").exists()
            ]
            assert runs, "no migration run of the decision"
            run = runs[-1]
            extravars = yaml.safe_load((run / "env" / "extravars").read_text())
            item = next(i for i in extravars.get("batch") or [extravars] if i["app"] == app)
            assert item["plan"] == {"services": plan}, item
            args = _deploy_args(run)
            assert args and _canonical(args[-1]["plan"]["services"]) == _canonical(plan), args
        finally:
            stack.testbed("recover", target)
    finally:
        stack.stop_replicas()
