"""Issue 22, "confirm before acting", on real control planes (``--engine kube``).

One shared stack for every trial (CI time): the ``tiers`` profile's three real clusters
(kube-apiserver, etcd, controller-manager, scheduler; simulated kubelets), the KB, one agent per
cluster with the least-privilege agent ClusterRole (docs/rbac/), Bookinfo deployed with the
deploy playbook, one controller replica. Each trial restores the fleet (agents, API servers)
before the next, and asserts what issue 22 asks, from the controller's events in the KB and from
the cluster itself (the workloads still there, Ready):

- the API server of ratings' cluster paused (SIGSTOP) for 15 s: no migration;
- the agent's credentials refused, 403 (a token without the rights) and 401 (a token the API
  server does not know): a ``credentials-broken`` notice, the last capacity kept, no migration;
- a new version that crash-loops: its rollout fails (deploy's minimum-ready window), the version
  moves at most once (the default bound: 2 clusters), one ``controller.version.failing`` event,
  then one rollback to the previous version, which runs Healthy.

The emulator versions are tests/integration/controller/test_confirmed_failure.py and
test_fleet_heal.py; their helpers are reused here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "controller"))

from _controller_stack import BIN, REPO, small_app, wait_for
from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import get_client
from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import readiness
from ansible_collections.qonnect.core.plugins.module_utils.keys import GRACE_ANNOTATION
from qonnect.controller import journal
from qonnect_testbed.kube import KubeFederation
from test_confirmed_failure import decisions, hosting, last_event_id, notices, restart_agent
from test_story import KubeStack, movable_bookinfo

pytestmark = [pytest.mark.timeout(900)]

APP = "bookinfo"
OPTIONS = ["--agent-interval", "1"]  # heartbeat timeout 3 s; --cluster-grace: its default
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def fleet(kube_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeStack]:
    t0 = time.monotonic()
    stack = KubeStack(tmp_path_factory.mktemp("confirm-kube"))
    try:
        stack.start_kb()
        stack.start_testbed()
        stack.start_agents(1.0)
        stack.deploy(movable_bookinfo(stack.root), timeout=400)
        wait_for(
            lambda: stack.healthy_elsewhere(APP, set()), 180, 0.5, "bookinfo Healthy on the real clusters"
        )
        stack.start_replicas(1, OPTIONS)
        stack.wait_leader(timeout=60)
        TIMINGS["setup"] = time.monotonic() - t0
        yield stack
    finally:
        stack.close()
        print("kube confirm trials, seconds:", json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))


@pytest.fixture()
def trial(fleet: KubeStack, request: pytest.FixtureRequest) -> Iterator[KubeStack]:
    """Afterwards: every agent back with its own credentials, every cluster healthy again."""
    t0 = time.monotonic()
    try:
        yield fleet
    finally:
        for name, proc in list(fleet.agents.items()):
            if proc.poll() is not None or getattr(proc, "restricted", False):
                restart_agent(fleet, name)
        wait_for(
            lambda: all(
                c["healthy"] and not c["credentials_broken"] for c in fleet.admin.inventory()["clusters"]
            ),
            90,
            0.5,
            "every cluster healthy again",
        )
        TIMINGS[request.node.name] = time.monotonic() - t0


def ready_on_cluster(stack: KubeStack, cluster: str) -> dict[str, int]:
    """Bookinfo's Deployments on one cluster, read from its API server: name -> ready replicas."""
    admin = stack.testbed_dir / "kubeconfigs" / f"{cluster}.yaml"
    client = get_client(cluster, str(admin))
    return {
        d["metadata"]["name"]: int((d.get("status") or {}).get("readyReplicas") or 0)
        for d in client.list("apps/v1", "Deployment", APP)
    }


def assert_nothing_moved(stack: KubeStack, target: str, after: int, before: dict[str, int]) -> None:
    assert decisions(stack, after) == [], [e["message"] for e in decisions(stack, after)]
    assert hosting(stack) == target
    live = ready_on_cluster(stack, target)
    assert live == before and all(live.values()), (before, live)


def test_an_api_server_paused_15_seconds_moves_nothing(trial: KubeStack):
    stack = trial
    target, after = hosting(stack), last_event_id(stack)
    before = ready_on_cluster(stack, target)
    pid = next(c for c in KubeFederation(stack.testbed_dir).status()["clusters"] if c["name"] == target)[
        "pids"
    ]["kube-apiserver"]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(15)
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(15)  # past the cluster grace: a cluster judged down would have been decided by now
    assert_nothing_moved(stack, target, after, before)
    seen = notices(stack, target, after)
    if journal.CLUSTER_EVENT + "cluster-suspect" in seen:  # then its recovery is recorded too
        wait_for(lambda: journal.RECOVERED in notices(stack, target, after), 30, 0.5, "the recovery recorded")


def _refused(stack: KubeStack, kubeconfig: str, status: int) -> None:
    target, after = hosting(stack), last_event_id(stack)
    before_live = ready_on_cluster(stack, target)
    before = next(c for c in stack.admin.inventory()["clusters"] if c["name"] == target)
    restart_agent(stack, target, kubeconfig)
    # > the 15 s after which unreported nodes stopped counting (zero free capacity)
    cluster = wait_for(
        lambda: next(
            (
                c
                for c in stack.admin.inventory()["clusters"]
                if c["name"] == target and c["credentials_broken"]
            ),
            None,
        ),
        30,
        0.5,
        f"credentials broken ({status})",
    )
    time.sleep(20)
    cluster = next(c for c in stack.admin.inventory()["clusters"] if c["name"] == target)
    assert cluster["credentials_broken"] is True and cluster["healthy"] is True, cluster
    assert (
        f"HTTP {status}" in cluster["error"]
        or ("forbidden" if status == 403 else "unauthorized") in cluster["error"]
    ), cluster["error"]
    assert cluster["free"] == before["free"], "the last-known capacity stands"
    assert notices(stack, target, after).count(journal.CLUSTER_EVENT + "credentials-broken") == 1
    assert_nothing_moved(stack, target, after, before_live)


def test_agent_credentials_refused_403_move_nothing(trial: KubeStack):
    entry = next(c for c in trial.federation["clusters"] if c["name"] == hosting(trial))
    _refused(trial, entry["restricted_kubeconfig"], 403)


def test_agent_credentials_refused_401_move_nothing(trial: KubeStack):
    target = hosting(trial)
    entry = next(c for c in trial.federation["clusters"] if c["name"] == target)
    doc = yaml.safe_load(Path(entry["kubeconfig"]).read_text())
    doc["users"][0]["user"] = {"token": "not-a-token-this-api-server-issued"}
    path = trial.root / f"{target}-unknown-token.yaml"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    _refused(trial, str(path), 401)


def deploy(stack: KubeStack, body: dict, **extra: object) -> subprocess.CompletedProcess:
    path = stack.root / f"{body['metadata']['name']}-{time.monotonic_ns()}.yml"
    path.write_text(yaml.safe_dump(body))
    args = {
        "app_file": str(path),
        "kb_url": stack.kb_url,
        "kb_token_file": str(stack.admin_token),
        "wait_timeout": 90,
        **extra,
    }
    return subprocess.run(
        [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "deploy.yml"), "-e", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=stack.env,
        cwd=stack.root,
        check=False,
    )


def test_a_crash_looping_version_fails_its_rollout_moves_once_then_rolls_back(trial: KubeStack):
    stack = trial
    leader = stack.wait_leader(30)
    first = deploy(stack, small_app("crashy", "1"))
    assert first.returncode == 0, first.stdout[-3000:]  # a healthy rollout still succeeds
    wait_for(lambda: (leader.status() or {}).get("versions", {}).get("crashy") == 1, 60, 0.5, "v1 observed")
    after = last_event_id(stack)
    crashing = small_app("crashy", "2", image="qonnect.test/crash/nginx", annotations={GRACE_ANNOTATION: "5"})
    # the user's rollout counts as done (each start is briefly Ready; min_ready_seconds 0), so the
    # version is placed and its failures are the controller's: a deploy that failed marks its
    # version failed, and the controller leaves such a version to its user (issue 34.4; the
    # failed deploy's own message is test_failure_reasons.py's crash-loop case on this engine)
    deploy(stack, crashing, min_ready_seconds=0)

    def failing() -> list[dict]:
        return [
            e
            for e in stack.events("crashy")
            if e["id"] > after and e["type"] == journal.VERSION_FAILING and e["role"] == "controller"
        ]

    def rolled_back() -> list[dict]:
        return [
            e
            for e in stack.events("crashy")
            if e["id"] > after and e["type"] == journal.ROLLED_BACK and e["role"] == "controller"
        ]

    reported = wait_for(failing, 300, 1.0, "the controller to report the failing version")
    assert "version 2 of crashy" in reported[0]["message"], reported[0]["message"]
    wait_for(rolled_back, 120, 1.0, "the rollback")
    moves = [
        e
        for e in decisions_of(stack, "crashy", after)
        if e["reason"] in ("workload-failed", "workload-stuck")
    ]
    assert len(moves) <= 1, [e["message"] for e in moves]
    if moves:  # the one move avoided the cluster the version failed on
        assert moves[0]["ref"]["exclude"], moves[0]
    (rolled,) = rolled_back()
    assert "rolled crashy back from version 2 to version 1's spec, stored as version 3" in rolled["message"]
    assert "CrashLoopBackOff" in rolled["message"], rolled["message"]
    versions = stack.admin.application_versions("crashy")
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert versions[2]["spec"] == versions[0]["spec"]
    wait_for(lambda: stack.healthy_elsewhere("crashy", set()), 180, 1.0, "version 3 Healthy")

    def rolled_back_on_cluster() -> bool:  # read from the cluster itself: version 1's image, Ready
        cluster = stack.placement("crashy")["web"][0]["cluster"]
        kubeconfig = stack.testbed_dir / "kubeconfigs" / f"{cluster}.yaml"
        live = get_client(cluster, str(kubeconfig)).get("apps/v1", "Deployment", "web", "crashy") or {}
        image = (((live.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers", [{}])[
            0
        ]
        return image.get("image") == "nginx" and readiness(live).ready

    wait_for(rolled_back_on_cluster, 120, 1.0, "version 1's spec Ready on its cluster")
    print("crash trial:", [e["message"][:200] for e in decisions_of(stack, "crashy", after)])
    assert len(failing()) == 1 and len(rolled_back()) == 1


def decisions_of(stack: KubeStack, app: str, after: int) -> list[dict]:
    return [
        e
        for e in stack.events(app)
        if e["id"] > after and journal.trusted(e) and e["type"] == journal.DECISION
    ]
