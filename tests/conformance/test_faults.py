"""Faults real clusters have, triggered the same way on every engine (docs/testbed.md, Faults)."""

from __future__ import annotations

import pytest
from conformance_engines import container_state, pod
from support import wait_for

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(180)]


def _ready(p) -> str:
    return {c.type: c.status for c in p.status.conditions or []}.get("Ready", "")


def test_image_pull_failure_is_errimagepull_then_backoff(engine, ns):
    core = engine.core()
    core.create_namespaced_pod(ns, pod("pull", image="qonnect.test/pull-fail/app:1"))
    reasons: set[str] = set()

    def both():
        p = core.read_namespaced_pod("pull", ns)
        kind, reason, _restarts = container_state(p)
        if kind == "waiting":
            reasons.add(reason)
        return p if {"ErrImagePull", "ImagePullBackOff"} <= reasons else None

    p = wait_for(both, timeout=90, interval=0.2, what="ErrImagePull and ImagePullBackOff")
    assert p.status.phase == "Pending" and _ready(p) == "False"
    assert p.status.container_statuses[0].restart_count == 0 and not p.status.container_statuses[0].ready
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=pull").items
    assert {"Failed", "BackOff"} <= {e.reason for e in events}


def test_transient_pull_failure_clears_by_itself(engine, ns):
    core = engine.core()
    core.create_namespaced_pod(ns, pod("flaky", image="qonnect.test/pull-flaky-4s/app:1"))
    failed = wait_for(
        lambda: (
            container_state(core.read_namespaced_pod("flaky", ns))[1] in ("ErrImagePull", "ImagePullBackOff")
        ),
        timeout=60,
        interval=0.2,
        what="a failed pull first",
    )
    assert failed
    p = wait_for(
        lambda: (
            (x := core.read_namespaced_pod("flaky", ns)).status.phase == "Running"
            and _ready(x) == "True"
            and x
        ),
        timeout=90,
        interval=0.2,
        what="Running and Ready after the transient failure",
    )
    assert container_state(p)[0] == "running"


def test_crash_loop(engine, ns):
    core = engine.core()
    core.create_namespaced_pod(ns, pod("crash", image="qonnect.test/crash/app:1"))

    def looping():
        p = core.read_namespaced_pod("crash", ns)
        kind, reason, restarts = container_state(p)
        return p if (kind, reason) == ("waiting", "CrashLoopBackOff") and restarts >= 1 else None

    p = wait_for(looping, timeout=90, interval=0.2, what="CrashLoopBackOff")
    status = p.status.container_statuses[0]
    assert p.status.phase == "Running" and _ready(p) == "False" and not status.ready
    assert (status.last_state.terminated.reason, status.last_state.terminated.exit_code) == ("Error", 1)


def test_slow_image_is_container_creating_until_pulled(engine, ns):
    core = engine.core()
    core.create_namespaced_pod(ns, pod("slow", image="qonnect.test/slow-5s/app:1"))
    creating = wait_for(
        lambda: (x := core.read_namespaced_pod("slow", ns)).spec.node_name and x, timeout=60, what="pod bound"
    )
    assert creating
    p = core.read_namespaced_pod("slow", ns)
    assert p.status.phase == "Pending"
    assert container_state(p)[:2] in (("waiting", "ContainerCreating"), ("", ""))
    wait_for(
        lambda: core.read_namespaced_pod("slow", ns).status.phase == "Running", timeout=60, what="Running"
    )
