"""Issue 22: a rollout succeeds only when its new pods stay Ready a minimum time.

A workload without ``minReadySeconds`` whose pods crash-loop is briefly Ready at each start, and
its Deployment status then says ``availableReplicas: 1``. Deploy's waiter (``min_ready``) also
asks that every new pod has been Ready, with no restart, for the window; a pod that crash-loops
fails the rollout at once. Pod and Deployment shapes are the API server's (zeros omitted).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.k8s import waiter
from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import (
    ReadyWindow,
    parse_time,
    ready_since,
    selector_matches,
)
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, MANAGED_BY

LABELS = {MANAGED_BY: "qonnect", APP_LABEL: "shop"}


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def deployment(image: str = "nginx:1.27", min_ready: int | None = None, available: int = 1) -> dict:
    spec: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": image}]},
        },
    }
    if min_ready is not None:
        spec["minReadySeconds"] = min_ready
    status = {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "readyReplicas": available}
    if available:
        status["availableReplicas"] = available
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "generation": 2, "labels": LABELS},
        "spec": spec,
        "status": status,
    }


def pod(
    ready_at: float | None,
    started_at: float | None = None,
    restarts: int = 0,
    crash: bool = False,
    image: str = "nginx:1.27",
    name: str = "web-5d4f8-abcde",
) -> dict:
    ready = ready_at is not None and not crash
    state: dict[str, Any]
    if crash:
        state = {
            "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}
        }
    elif ready:
        state = {"running": {"startedAt": stamp(started_at if started_at is not None else ready_at or 0)}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": image}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": stamp(ready_at or 0),
                }
            ],
            "containerStatuses": [
                {
                    "name": "web",
                    "image": image,
                    "ready": ready,
                    "restartCount": restarts,
                    "state": state,
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}} if restarts else {},
                }
            ],
        },
    }


def test_parse_time_and_selector():
    assert parse_time("1970-01-01T00:00:10Z") == 10.0
    assert parse_time("1970-01-01T00:00:10.123456789Z") == 10.123456
    assert parse_time("1970-01-01T01:00:10.5+01:00") == 10.5
    assert parse_time("") is None and parse_time("yesterday") is None
    assert selector_matches({"matchLabels": {"app": "web"}}, {"app": "web", "x": "y"})
    assert not selector_matches({"matchLabels": {"app": "web"}}, {"app": "db"})
    assert selector_matches(
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, {"app": "web"}
    )
    assert not selector_matches({}, {"app": "web"})


def test_ready_since_is_the_later_of_ready_and_the_last_container_start():
    # a restart that did not flip the Ready condition still restarts the window; whole-second
    # stamps count from the end of their second
    assert ready_since(pod(ready_at=100.0, started_at=130.0)) == 131.0
    assert ready_since(pod(ready_at=100.0)) == 101.0
    assert ready_since(pod(ready_at=None)) is None
    precise = pod(ready_at=100.0)
    precise["status"]["conditions"][0]["lastTransitionTime"] = "1970-01-01T00:01:40.250000Z"
    precise["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = "1970-01-01T00:01:39.5Z"
    assert ready_since(precise) == 100.25


def test_a_pod_ready_long_enough_passes_at_once():
    window = ReadyWindow(3)
    now = 1_000_000.0
    assert window.check(deployment(), [pod(ready_at=now - 60)], now, 0.0).ready
    assert not window.check(deployment(), [pod(ready_at=now - 2.5)], now, 0.0).ready  # 1.5 s at least


def test_a_just_ready_pod_waits_for_the_window_then_passes():
    window = ReadyWindow(3)
    now = 1_000_000.0
    fresh = pod(ready_at=now - 1)  # whole seconds: since now
    state = window.check(deployment(), [fresh], now, 10.0)
    assert not state.ready and not state.failed
    assert "Ready for 0.0s of 3s" in state.reason
    assert not window.check(deployment(), [fresh], now + 2.5, 12.5).ready
    assert window.check(deployment(), [fresh], now + 3, 13.0).ready


def test_the_waiter_s_own_sight_counts_when_the_host_clock_is_behind():
    window = ReadyWindow(3)
    now = 1_000_000.0
    ahead = pod(ready_at=now + 30)  # the cluster's clock is 30 s ahead of this host's
    assert not window.check(deployment(), [ahead], now, 10.0).ready
    assert window.check(deployment(), [ahead], now + 3, 13.0).ready


def test_a_restart_seen_by_the_waiter_restarts_the_window():
    window = ReadyWindow(3)
    now = 1_000_000.0
    assert not window.check(deployment(), [pod(ready_at=now - 1)], now, 10.0).ready
    # 4 s later: restarted once (the pod's timestamps now say Ready for 0.5 s)
    restarted = pod(ready_at=now + 3.5, restarts=1)
    assert not window.check(deployment(), [restarted], now + 4, 14.0).ready


def test_a_crash_looping_pod_fails_the_rollout():
    window = ReadyWindow(3)
    state = window.check(deployment(), [pod(ready_at=None, restarts=2, crash=True)], 1_000_000.0, 0.0)
    assert not state.ready and state.failed
    assert (
        "crash-looping: pod web-5d4f8-abcde: container web CrashLoopBackOff (restarted 2 times"
        in state.reason
    )
    # one restart at start-up is forgiven: only not Ready
    once = window.check(deployment(), [pod(ready_at=None, restarts=1, crash=True)], 1_000_000.0, 0.0)
    assert not once.ready and not once.failed


def test_the_workload_s_own_min_ready_seconds_replaces_the_window():
    assert ReadyWindow(3).applies(deployment())
    assert not ReadyWindow(3).applies(deployment(min_ready=10))
    assert not ReadyWindow(0).applies(deployment())


def test_crash_loop_while_rolling_out_counts_only_the_new_revision():
    window = ReadyWindow(3)
    new = deployment(image="qonnect.test/crash/nginx", available=0)
    old_pod = pod(ready_at=None, restarts=5, crash=True, image="nginx:1.27", name="web-old")
    assert window.crash_loop(new, [old_pod]) == ""
    new_pod = pod(ready_at=None, restarts=2, crash=True, image="qonnect.test/crash/nginx", name="web-new")
    assert window.crash_loop(new, [old_pod, new_pod]).startswith("crash-looping: pod web-new")


class Cluster:
    """A fake client: the Deployment and its pod as functions of the time since the start."""

    def __init__(self, crash: bool) -> None:
        self.crash, self.start, self.pod_lists = crash, time.time(), 0

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        elapsed = time.time() - self.start
        if kind == "Pod":
            self.pod_lists += 1
            if self.crash:  # Ready for 1 s at each start: 0-1 s, then restarts
                if elapsed < 1:
                    return [pod(ready_at=self.start)]
                return [pod(ready_at=None, restarts=2 if elapsed > 1.5 else 1, crash=True)]
            return [pod(ready_at=self.start)]
        if self.crash and elapsed >= 1:
            return [deployment(available=0)]
        return [deployment()]


def test_the_waiter_fails_a_crash_loop_and_passes_a_healthy_rollout():
    crashing = Cluster(crash=True)
    pending = waiter.wait_ready(crashing, "shop", "shop", [("Deployment", "web")], timeout=20, min_ready=3)
    assert len(pending) == 1 and "crash-looping" in pending[0], pending
    assert time.time() - crashing.start < 5  # at once, not at the timeout
    healthy = Cluster(crash=False)
    assert waiter.wait_ready(healthy, "shop", "shop", [("Deployment", "web")], timeout=20, min_ready=2) == []
    assert 1.5 <= time.time() - healthy.start < 5
    # without the window (the old behaviour) the crash-looping rollout "succeeds" at its first Ready
    assert waiter.wait_ready(Cluster(crash=True), "shop", "shop", [("Deployment", "web")], timeout=20) == []


def test_no_pod_list_without_the_window():
    cluster = Cluster(crash=False)
    assert waiter.wait_ready(cluster, "shop", "shop", [("Deployment", "web")], timeout=5) == []
    assert cluster.pod_lists == 0


def test_a_workload_scaled_to_zero_has_no_pod_to_wait_for():
    zero = deployment(available=0)
    zero["spec"]["replicas"] = 0
    zero["status"] = {"observedGeneration": 2}
    assert ReadyWindow(3).check(zero, [], 1_000_000.0, 0.0).ready
    assert not ReadyWindow(3).check(deployment(), [], 1_000_000.0, 0.0).ready


def test_the_module_s_window_a_deploy_3s_a_controller_migration_none_unless_given():
    from ansible_collections.qonnect.core.plugins.module_utils.runners.deploy import min_ready_seconds

    assert min_ready_seconds({}) == 3.0
    assert min_ready_seconds({"min_ready_seconds": None, "fencing": None}) == 3.0
    assert min_ready_seconds({"fencing": {"term": 2, "seq": 5}}) == 0.0
    assert min_ready_seconds({"fencing": {"term": 2, "seq": 5}, "min_ready_seconds": 4}) == 4.0
    assert min_ready_seconds({"min_ready_seconds": 0}) == 0.0


def test_a_crash_loop_fails_a_workload_with_its_own_min_ready_seconds_too():
    class Own(Cluster):
        def list(self, api_version, kind, namespace=None, label_selector=None):
            out = super().list(api_version, kind, namespace, label_selector)
            if kind == "Deployment":
                for d in out:
                    d["spec"]["minReadySeconds"] = 10
                    d["status"].pop("availableReplicas", None)  # Kubernetes holds it back
            return out

    cluster = Own(crash=True)
    pending = waiter.wait_ready(cluster, "shop", "shop", [("Deployment", "web")], timeout=20, min_ready=3)
    assert len(pending) == 1 and "crash-looping" in pending[0], pending
    assert time.time() - cluster.start < 5
