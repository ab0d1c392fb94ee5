"""Issue 36, hedged failover, end to end on the emulator: real testbed, KB, agents and controller
replicas started through the command line, bookinfo deployed.

While the cluster that runs ratings is suspect (its API does not answer its agent nor the
leader's probe), a standby copy is made elsewhere at once and reviews' address stub points at
it. A blip within the grace ends with the standby removed and everything as it was; a confirmed
failure keeps the standby as the placement (no second move); an application that opted out
(spec.failover.hedge: false) is never run twice; a leader killed between the hedge and the
confirmation leaves the next leader to confirm it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from _controller_stack import BIN, REPO, Stack, small_app, wait_for, wait_run_recorded
from qonnect.controller import journal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

APP = "bookinfo"
OPTIONS = ["--agent-interval", "1"]  # heartbeat timeout 3 s; --cluster-grace: its default (20 s)
CONFIRM = [*OPTIONS, "--cluster-grace", "8"]


@pytest.fixture()
def group(fed: Stack) -> Iterator[Stack]:
    """Controller replicas started by each test; afterwards every cluster healthy again and
    bookinfo back where it was (a test that moved it moves it back by hand)."""
    try:
        yield fed
    finally:
        fed.stop_replicas()
        for c in fed.federation["clusters"]:
            fed.testbed("recover", c["name"])
        wait_for(
            lambda: all(c["healthy"] for c in fed.admin.inventory()["clusters"]),
            60,
            0.5,
            "every cluster healthy again",
        )


def kube(stack: Stack, cluster: str) -> Any:
    from kubernetes import client, config

    record = next(c for c in stack.federation["clusters"] if c["name"] == cluster)
    return client.CoreV1Api(config.new_client_from_config(config_file=record["kubeconfig"]))


def stub(stack: Stack, cluster: str, name: str = "ratings") -> str:
    """The address reviews' cluster gives ``name`` (its ExternalName), '' for a real Service."""
    return kube(stack, cluster).read_namespaced_service(name, APP).spec.external_name or ""


def has_deployment(stack: Stack, cluster: str, app: str, name: str) -> bool:
    from kubernetes import client, config

    record = next(c for c in stack.federation["clusters"] if c["name"] == cluster)
    apps = client.AppsV1Api(config.new_client_from_config(config_file=record["kubeconfig"]))
    return any(d.metadata.name == name for d in apps.list_namespaced_deployment(app).items)


def standby(stack: Stack, app: str, service: str) -> str | None:
    targets = stack.admin.get_placement(app).get("current") or {}
    return next((t["cluster"] for t in targets.get(service, []) if t.get("role") == "standby"), None)


def healthy_on(stack: Stack, app: str, service: str, cluster: str) -> bool:
    return any(
        w["cluster"] == cluster and w.get("service") == service and w["status"] == "Healthy"
        for w in stack.admin.list_workloads(application=app)
    )


def decided(stack: Stack, app: str, after: int) -> list[str]:
    """The kinds of the controller's decisions on ``app`` since event ``after``, in order."""
    return [
        e.get("reason") or ""
        for e in sorted(stack.events(app), key=lambda e: e["id"])
        if e["id"] > after and journal.trusted(e) and e["type"] == journal.DECISION
    ]


def last_event_id(stack: Stack) -> int:
    return max([e["id"] for e in stack.events()] or [0])


def start(stack: Stack, options: list[str], replicas: int = 1) -> None:
    stack.start_replicas(replicas, options)
    wait_for(
        lambda: APP in ((stack.wait_leader(30).status() or {}).get("versions") or {}), 30, 0.2, "observed"
    )


def test_a_blip_within_the_grace_runs_a_standby_then_removes_it_and_changes_nothing(group: Stack):
    stack = group
    start(stack, OPTIONS)
    before = stack.placement(APP)
    target, caller = before["ratings"][0]["cluster"], before["reviews"][0]["cluster"]
    assert f".{target}." in stub(stack, caller)
    after = last_event_id(stack)
    stack.testbed("fail", target)
    t0 = time.monotonic()
    try:
        spare = wait_for(lambda: standby(stack, APP, "ratings"), 15, 0.2, "a standby of ratings")
        wait_for(lambda: healthy_on(stack, APP, "ratings", spare), 15, 0.2, "the standby Healthy")
        ready = time.monotonic() - t0
        assert ready < 15, f"the standby was Healthy {ready:.1f}s after the failure, within the 20 s grace"
        assert f".{spare}." in stub(stack, caller), "reviews calls the live standby"
        assert stack.placement(APP)["ratings"][0]["cluster"] == target  # still the placement
        time.sleep(max(0.0, 15 - (time.monotonic() - t0)))
    finally:
        stack.testbed("recover", target)
    wait_for(lambda: stack.placement(APP) == before, 30, 0.5, "the placement as it was, no standby")
    assert not has_deployment(stack, spare, APP, "ratings-v1"), "the standby copy is removed"
    wait_for(
        lambda: f".{target}." in stub(stack, caller), 10, 0.5, "reviews calls ratings on its cluster again"
    )
    kinds = decided(stack, APP, after)
    assert kinds == ["hedge", "hedge-discard"], kinds
    wait_run_recorded(stack, APP, after, "hedge-discard")  # else the next test re-decides it
    said = [e["message"] for e in stack.events(APP) if e["id"] > after]
    assert any("hedge discarded" in m and spare in m for m in said), said


def test_a_confirmed_failure_keeps_the_standby_as_the_placement(group: Stack):
    stack = group
    start(stack, CONFIRM)
    before = stack.placement(APP)
    target = before["ratings"][0]["cluster"]
    after = last_event_id(stack)
    stack.testbed("fail", target)
    try:
        spare = wait_for(lambda: standby(stack, APP, "ratings"), 15, 0.2, "a standby of ratings")
        wait_for(
            lambda: (
                [t["cluster"] for t in stack.placement(APP)["ratings"]] == [spare]
                and "role" not in stack.placement(APP)["ratings"][0]
            ),
            40,
            0.5,
            "the standby promoted",
        )
        assert decided(stack, APP, after) == ["hedge", "cluster-down"]
        assert healthy_on(stack, APP, "ratings", spare)
    finally:
        stack.testbed("recover", target)
    # the suspect's copy is an orphan, removed once the cluster is back
    wait_for(lambda: not has_deployment(stack, target, APP, "ratings-v1"), 60, 1.0, "the orphan removed")


def test_an_application_that_opted_out_is_never_run_twice(group: Stack):
    stack = group
    body = small_app("single")
    body["spec"]["failover"] = {"hedge": False}
    path = stack.root / "single.yml"
    path.write_text(yaml.safe_dump(body))
    stack.deploy(path)
    target = stack.placement("single")["web"][0]["cluster"]
    start(stack, CONFIRM)
    after = last_event_id(stack)
    stack.testbed("fail", target)
    t0 = time.monotonic()
    try:
        wait_for(lambda: stack.placement("single")["web"][0]["cluster"] != target, 40, 0.5, "moved")
        moved = time.monotonic() - t0
    finally:
        stack.testbed("recover", target)
    assert decided(stack, "single", after) == ["cluster-down"]
    assert moved >= 8, f"moved {moved:.1f}s after the failure: before the 8 s grace"


def test_a_leader_killed_between_the_hedge_and_the_confirmation_leaves_it_to_the_next(group: Stack):
    """The leader that made the standby dies; the next one finds it in the KB's placement and,
    the failure confirmed, promotes it (no second copy, no other cluster)."""
    stack = group
    start(stack, CONFIRM, replicas=3)
    target = stack.placement(APP)["ratings"][0]["cluster"]
    after = last_event_id(stack)
    first = stack.wait_leader(30)
    term = first.status()["term"]
    stack.testbed("fail", target)
    try:
        spare = wait_for(
            lambda: standby(stack, APP, "ratings"), 30, 0.2, "a standby of ratings"
        )  # a loaded CI took > 15 s
        wait_for(lambda: healthy_on(stack, APP, "ratings", spare), 15, 0.2, "the standby Healthy")
        first.kill()
        stack.wait_leader(10, [r for r in stack.replicas if r is not first])
        wait_for(
            lambda: [t["cluster"] for t in stack.placement(APP)["ratings"]] == [spare],
            60,
            0.5,
            "the standby promoted by the next leader",
        )
    finally:
        stack.testbed("recover", target)
    kinds = decided(stack, APP, after)
    assert kinds == ["hedge", "cluster-down"], kinds
    confirm = [
        e
        for e in stack.events(APP)
        if e["id"] > after and journal.trusted(e) and e.get("reason") == "cluster-down"
    ]
    assert confirm[0]["fencing"]["term"] > term, "confirmed by the next leader"


def test_a_hedge_that_does_not_fit_is_not_started_and_says_so(group: Stack):
    """With the hedges' share of free CPU too small for ratings' copy, no standby is made: the
    decision ends saying why, nothing runs twice, and the failure, once confirmed, is healed by
    the ordinary move."""
    stack = group
    start(stack, [*CONFIRM, "--hedge-share", "0.0001"])
    target = stack.placement(APP)["ratings"][0]["cluster"]
    after = last_event_id(stack)
    stack.testbed("fail", target)
    try:
        ended = wait_for(
            lambda: [
                e
                for e in stack.events(APP)
                if e["id"] > after and journal.trusted(e) and e["type"] == journal.GAVE_UP
            ],
            20,
            0.5,
            "the hedge to end without starting",
        )
        assert "hedge not started" in ended[0]["message"] and "share" in ended[0]["message"], ended[0]
        assert standby(stack, APP, "ratings") is None
        wait_for(lambda: stack.healthy_elsewhere(APP, {target}), 60, 0.5, "the confirmed move")
    finally:
        stack.testbed("recover", target)
    assert decided(stack, APP, after) == ["hedge", "cluster-down"]
    started = [
        e
        for e in stack.events(APP)
        if e["id"] > after and journal.trusted(e) and e["type"] == journal.STARTED
    ]
    assert [e.get("reason") for e in started] == ["cluster-down"], "no run for the hedge"


SLOW_IMAGE = "qonnect.test/slow-40s/nginx"  # every start of it takes 40 s (the testbed's fault)


def copies_elsewhere(stack: Stack, app: str, home: str) -> list[str]:
    """The clusters other than ``home`` whose own API lists the application's Deployment."""
    return [
        c["name"]
        for c in stack.federation["clusters"]
        if c["name"] != home and has_deployment(stack, c["name"], app, "web")
    ]


def test_a_hedge_on_a_slow_standby_is_withdrawn_once_its_cluster_is_back(group: Stack):
    """The standby cannot be Ready for 40 s (its image is slow to start) and the cluster is back
    after 10 s: the hedge's run is stopped then, and its copy removed at once, not after the
    run's wait; the placement is as it was."""
    stack = group
    path = stack.root / "slowhedge.yml"
    path.write_text(yaml.safe_dump(small_app("slowhedge", image=SLOW_IMAGE)))
    stack.deploy(path, timeout=240)  # its first copy takes the 40 s too
    try:
        before = stack.placement("slowhedge")
        target = before["web"][0]["cluster"]
        start(stack, OPTIONS)
        after = last_event_id(stack)
        stack.testbed("fail", target)
        try:
            spare = wait_for(lambda: copies_elsewhere(stack, "slowhedge", target), 15, 0.2, "a standby copy")
            time.sleep(max(0.0, 10 - 0.2))
        finally:
            stack.testbed("recover", target)
        back = time.monotonic()
        wait_for(
            lambda: not copies_elsewhere(stack, "slowhedge", target), 30, 0.2, "the standby copy removed"
        )
        gone = time.monotonic() - back
        assert gone < 15, (
            f"the copy on {spare} was removed {gone:.1f}s after the return: the run was not withdrawn"
        )
        wait_for(lambda: stack.placement("slowhedge") == before, 15, 0.5, "the placement as it was")
        assert decided(stack, "slowhedge", after) == ["hedge", "hedge-discard"]
        said = [e["message"] for e in stack.events("slowhedge") if e["id"] > after]
        assert any("hedge withdrawn" in m for m in said), said
        wait_run_recorded(stack, "slowhedge", after, "hedge-discard")
    finally:
        stack.stop_replicas()
        subprocess.run(
            [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "remove.yml"), "-e", "app=slowhedge",
             "-e", f"kb_url={stack.kb_url}", "-e", f"kb_token_file={stack.admin_token}"],
            capture_output=True, timeout=180, env=stack.env, check=True,
        )  # fmt: skip
