"""Issue 22, "rollouts that really succeed", on both engines: deploy's Deployer (the engine of
qonnect.core.deploy, with the module's default minimum-ready window) against cluster cloud-1.

A crash-looping image (``qonnect.test/crash/...``: each start Ready for a second, then exit 1 and
CrashLoopBackOff) in a Deployment without ``minReadySeconds`` used to pass the waiter at its first
Ready moment; now its rollout fails, naming the crash loop, well before the wait timeout. A
healthy image still succeeds, once its pod has been Ready for the window. The emulator runs its
own one-cluster federation; the real engine's half uses the session's ``tiers`` federation.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import Deployer, Target
from qonnect_testbed.kube import KubeFederation
from support.federation import started_testbed

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("kube-tiers"),  # the session's `tiers` federation: one worker starts it,
]

WINDOW = 3.0  # plugins/modules/deploy.py min_ready_seconds' default
CLUSTER = "cloud-1"


@pytest.fixture(scope="module", params=["emulator", "kube"])
def kubeconfig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "kube":
        tiers: KubeFederation = request.getfixturevalue("tiers")
        yield str(tiers.kubeconfig(CLUSTER))
        return
    directory = tmp_path_factory.mktemp("min-ready-emulator")
    args = ("--profile", "tiers", "--clusters", "1", "--start-delay", "0.3")
    with started_testbed(directory, *args) as doc:
        (entry,) = [c for c in doc["clusters"] if c["name"] == CLUSTER]
        yield entry["kubeconfig"]


def deployment(image: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


def deployer(kubeconfig: str, namespace: str, image: str, first: bool) -> Deployer:
    return Deployer(
        namespace,
        namespace,
        {"web": [deployment(image)]},
        {"web": [{"cluster": CLUSTER, "replicas": 1}]},
        {CLUSTER: Target(CLUSTER, kubeconfig)},
        previous=set() if first else {CLUSTER},
        wait_timeout=120,
        min_ready_seconds=WINDOW,
    )


def test_a_crash_looping_version_fails_its_rollout_a_healthy_one_succeeds(kubeconfig: str):
    namespace = f"rollout-{int(time.time() * 1000) % 10**8}"
    started = time.monotonic()
    healthy = deployer(kubeconfig, namespace, "registry.k8s.io/pause:3.10", True).run()
    took = time.monotonic() - started
    try:
        assert not healthy["failed"], healthy["message"]
        assert took >= WINDOW, f"the healthy rollout returned after {took:.1f}s, inside the window"
        print(f"healthy rollout: {took:.1f}s")
        started = time.monotonic()
        crashing = deployer(kubeconfig, namespace, "qonnect.test/crash/nginx:1.27", False).run()
        took = time.monotonic() - started
        assert crashing["failed"], crashing["message"]
        (error,) = [r["error"] for r in crashing["clusters"].values() if r["status"] == "failed"]
        assert "crash-looping" in error and "CrashLoopBackOff" in error, error
        assert took < 60, f"the crash loop was noticed only after {took:.1f}s"
        print(f"crash-looping rollout failed after {took:.1f}s: {error}")
    finally:
        deployer(kubeconfig, namespace, "registry.k8s.io/pause:3.10", False).remove()


def test_the_workload_s_own_min_ready_seconds_is_kept(kubeconfig: str):
    """A Deployment with its own minReadySeconds is judged by Kubernetes' availability alone."""
    namespace = f"rollout-own-{int(time.time() * 1000) % 10**8}"
    manifest = deployment("registry.k8s.io/pause:3.10")
    manifest["spec"]["minReadySeconds"] = 1
    run = Deployer(
        namespace,
        namespace,
        {"web": [manifest]},
        {"web": [{"cluster": CLUSTER, "replicas": 1}]},
        {CLUSTER: Target(CLUSTER, kubeconfig)},
        wait_timeout=120,
        min_ready_seconds=60,  # would time the test out if it applied
    )
    started = time.monotonic()
    try:
        out = run.run()
        assert not out["failed"], out["message"]
        assert time.monotonic() - started < 50
    finally:
        run.remove()


def test_a_crash_looping_pod_never_counts_available_under_min_ready_seconds(kubeconfig: str):
    """Kubernetes' own minReadySeconds (the Deployment controller) counts from the pod's Ready
    ``lastTransitionTime``: each restart of a crash loop must move it, as a kubelet does, or a
    pod Ready for one second after a restart counts as available (the real engine's simulated
    kubelet stamped the binding time). Through two restarts (10 s back-off), never available;
    the rollout fails, on the crash loop, not on the timeout."""
    namespace = f"rollout-crash-{int(time.time() * 1000) % 10**8}"
    manifest = deployment("qonnect.test/crash/nginx:1.27")
    manifest["spec"]["minReadySeconds"] = 4
    run = Deployer(
        namespace,
        namespace,
        {"web": [manifest]},
        {"web": [{"cluster": CLUSTER, "replicas": 1}]},
        {CLUSTER: Target(CLUSTER, kubeconfig)},
        wait=False,
    )
    try:
        assert not run.run()["failed"]
        client = get_client(CLUSTER, kubeconfig)
        deadline, restarts, seen_ready = time.monotonic() + 30, 0, 0
        while time.monotonic() < deadline:
            live = client.get("apps/v1", "Deployment", "web", namespace) or {}
            assert not (live.get("status") or {}).get("availableReplicas"), live.get("status")
            for pod in client.list("v1", "Pod", namespace):
                status = pod.get("status") or {}
                restarts = max(
                    restarts, sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or [])
                )
                ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
                seen_ready += ready.get("status") == "True"
            time.sleep(0.2)
        assert restarts >= 2 and seen_ready, (
            f"only {restarts} restarts in 30 s, Ready seen {seen_ready} times"
        )
    finally:
        run.remove()
