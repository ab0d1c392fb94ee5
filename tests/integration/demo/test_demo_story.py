"""The demo's five steps played end to end on real processes, each step's outcome checked in the
KB and on the clusters themselves (not only that the step returned).

It plays what ``qonnect demo up [--engine E]`` plays: the same Stack set-up and the same STEPS.
The emulator runs in every ``make test``. QONNECT_DEMO_ENGINES=emulator,kube adds the real
engine (nine real control planes): 7 min on two busy cores, more than the suite's budget allows
(docs/demo.md, "The real engine").
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError
from ansible_collections.qonnect.core.plugins.module_utils.keys import FENCING_ANNOTATION, SERVICE_LABEL
from ansible_collections.qonnect.core.plugins.module_utils.qos import CRITERIA
from qonnect.demo.stack import Stack, _is_ours
from qonnect.demo.steps import APP, STEPS, Story, objective_of
from support import run_qonnect, wait_for

ENGINES = [e.strip() for e in os.environ.get("QONNECT_DEMO_ENGINES", "emulator").split(",") if e.strip()]
NAMESPACE = "bookinfo"
SETTLE = 90.0  # seconds the clusters get to match the KB after a step (old copies terminating)


def _param(engine: str) -> Any:
    marks = [pytest.mark.timeout(1500 if engine == "kube" else 600)]
    if engine == "kube":
        marks.append(pytest.mark.kube)
    return pytest.param(engine, marks=marks, id=engine)


pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- the clusters


class Clusters:
    """The federation's clusters through their kubeconfigs, as a user's kubectl sees them."""

    def __init__(self, federation: dict[str, Any]) -> None:
        from kubernetes import client, config

        self.api: dict[str, Any] = {}
        for entry in federation["clusters"]:
            api_client = config.new_client_from_config(config_file=entry["kubeconfig"])
            api_client.configuration.retries = 0  # a failed cluster answers "refused" at once
            self.api[entry["name"]] = client.AppsV1Api(api_client)

    def deployments(self, cluster: str) -> list[Any]:
        return self.api[cluster].list_namespaced_deployment(NAMESPACE, _request_timeout=15).items

    def running(self, cluster: str) -> dict[str, list[Any]]:
        """service -> its Deployments on the cluster (only services whose Deployments are all ready)."""
        found: dict[str, list[Any]] = {}
        ready: dict[str, bool] = {}
        for d in self.deployments(cluster):
            service = (d.metadata.labels or {}).get(SERVICE_LABEL)
            if not service:
                continue
            found.setdefault(service, []).append(d)
            want = d.spec.replicas or 0
            ok = (
                want > 0
                and (d.status.ready_replicas or 0) >= want
                and (d.status.updated_replicas or 0) >= want
            )
            ready[service] = ready.get(service, True) and ok
        return {s: deps for s, deps in found.items() if ready[s]}

    def present(self, cluster: str) -> set[str]:
        """Services with any Deployment on the cluster, ready or not."""
        return {(d.metadata.labels or {}).get(SERVICE_LABEL) for d in self.deployments(cluster)} - {None}

    def refuses(self, cluster: str) -> bool:
        try:
            self.deployments(cluster)
        except Exception as exc:  # urllib3's MaxRetryError / NewConnectionError: nothing listens
            return "refused" in str(exc).lower() or "max retries" in str(exc).lower()
        return False

    def match(self, placement: dict[str, list[str]], down: set[str]) -> bool:
        """Every reachable cluster runs exactly the services the KB places on it, all ready."""
        for cluster in self.api:
            if cluster in down:
                continue
            placed = {s for s, where in placement.items() if cluster in where}
            if set(self.running(cluster)) != placed or self.present(cluster) != placed:
                return False
        return True


def settle(clusters: Clusters, story: Story, down: set[str], timeout: float = SETTLE) -> dict[str, list[str]]:
    """Wait until the clusters run what the KB places (a moved copy may still be terminating)."""
    placement = story.placement()
    wait_for(
        lambda: clusters.match(placement, down),
        timeout,
        f"the clusters to run exactly {placement} (failed: {sorted(down)})",
        interval=1.0,
    )
    return placement


# --------------------------------------------------------------------------- what a step changed


@dataclass
class Before:
    """What the KB and the replicas said when a step started."""

    placement: dict[str, list[str]]
    event: int
    leader: dict[str, Any] | None
    failed: list[str]


def snapshot(story: Story) -> Before:
    newest = story.kb.list_events(limit=1)
    try:
        placement = story.placement()
    except KBError as exc:
        assert exc.status == 404, exc  # before the first deploy: no application yet
        placement = {}
    return Before(
        placement=placement,
        event=max([e["id"] for e in newest] or [0]),
        leader=story.stack.leader(),
        failed=list(story.failed),
    )


def events_since(story: Story, before: Before, prefix: str = "controller.") -> list[dict[str, Any]]:
    return [
        e
        for e in story.kb.list_events(after_id=before.event, application=APP, limit=500)
        if e["type"].startswith(prefix)
    ]


def decisions(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "controller.decision"]


def stored_objective(story: Story) -> dict[str, float]:
    return story.kb.get_application(APP)["application"]["objective"]


def example_objective(stack: Stack, name: str) -> dict[str, float]:
    """The example spec's weights, every criterion the KB stores (an unset one is 0)."""
    path = stack.collection / "examples" / "bookinfo" / name
    weights = yaml.safe_load(path.read_text())["spec"]["objective"]
    return {k: float(weights.get(k, 0.0)) for k in CRITERIA}


def healthy(story: Story) -> dict[str, bool]:
    return {c["name"]: bool(c.get("healthy")) for c in story.kb.inventory()["clusters"]}


# --------------------------------------------------------------------------- the checks per step


def check_deploy(story: Story, clusters: Clusters, before: Before) -> None:
    from qonnect.demo.steps import _engine

    assert before.placement == {}
    assert stored_objective(story) == example_objective(story.stack, "energy-first.yml")
    engine, application = _engine()
    app = application.from_dict(story.kb.get_application(APP)["application"])
    plan = engine.place(app, story.kb.inventory(), current={})
    placement = settle(clusters, story, set())
    assert placement == {s: sorted(plan.clusters(s)) for s in plan.services}
    tiers = {c["name"]: c["tier"] for c in story.kb.list_clusters()}
    wanted = {s.name: s.tier for s in app.services}
    assert {s: {tiers[c] for c in where} for s, where in placement.items()} == {
        s: {t} for s, t in wanted.items()
    }
    assert any(e["type"] == "deploy" and e["role"] == "admin" for e in events_since(story, before, "deploy"))
    assert decisions(events_since(story, before)) == []


def check_cost_first(story: Story, clusters: Clusters, before: Before) -> None:
    assert stored_objective(story) == example_objective(story.stack, "cost-first.yml")
    made = decisions(events_since(story, before))
    assert [e["reason"] for e in made] == ["spec-changed"]
    placement = settle(clusters, story, set())
    assert placement != before.placement
    assert objective_of(story, placement) > objective_of(story, before.placement)


def check_failover(story: Story, clusters: Clusters, before: Before) -> None:
    (failed,) = story.failed
    assert failed == before.placement["productpage"][0]
    assert healthy(story)[failed] is False
    assert clusters.refuses(failed)
    made = decisions(events_since(story, before))
    # hedged failover (issue 36): a standby copy on suspicion, then the confirmed move
    assert [e["reason"] for e in made] == ["hedge", "cluster-down"], [e["message"] for e in made]
    assert failed in made[-1]["ref"]["exclude"]
    placement = settle(clusters, story, {failed})
    assert all(failed not in where for where in placement.values())
    assert set(placement) == set(before.placement)


def check_leader_crash(story: Story, clusters: Clusters, before: Before) -> None:
    assert before.leader is not None
    second = [c for c in story.failed if c not in before.failed]
    assert len(second) == 1 and len(story.failed) == 2
    leader = wait_for(story.stack.leader, 30, "one leader")
    assert leader["status"]["term"] > before.leader["status"]["term"]

    def three_serving_one_leads() -> bool:  # the killed replica is back, as a follower
        statuses = [story.stack.replica_status(r) for r in story.stack.state["replicas"]]
        return all(statuses) and sum(bool(s and s["is_leader"]) for s in statuses) == 1

    wait_for(three_serving_one_leads, 30, "three replicas serving, one leading", interval=0.5)
    made = decisions(events_since(story, before))
    assert [e["reason"] for e in made] == ["hedge", "cluster-down"], [e["message"] for e in made]
    term = made[-1]["ref"]["term"]  # the new leader's (a later election may raise the current one)
    assert before.leader["status"]["term"] < term <= leader["status"]["term"]
    assert set(story.failed) <= set(made[-1]["ref"]["exclude"])
    placement = settle(clusters, story, set(story.failed))
    assert all(not set(story.failed) & set(where) for where in placement.values())
    # what the new leader moved carries its fencing term on the cluster itself
    moved = {s: where for s, where in placement.items() if second[0] in before.placement.get(s, [])}
    assert moved
    for service, where in moved.items():
        for cluster in where:
            for deployment in clusters.running(cluster)[service]:
                stamp = yaml.safe_load(deployment.metadata.annotations[FENCING_ANNOTATION])
                assert stamp["term"] == term, (service, cluster, stamp)


def check_recover(story: Story, clusters: Clusters, before: Before) -> None:
    recovered = before.failed
    assert len(recovered) == 2 and story.failed == []
    assert all(healthy(story).values())
    assert not any(clusters.refuses(c) for c in recovered)
    assert decisions(events_since(story, before)) == []
    assert story.placement() == before.placement
    # the controller removes the copies a recovered cluster still ran before it failed
    settle(clusters, story, set())


CHECKS = dict(
    zip(
        [name for name, _step in STEPS],
        [check_deploy, check_cost_first, check_failover, check_leader_crash, check_recover],
        strict=True,
    )
)


# --------------------------------------------------------------------------- the test


def check_setup(stack: Stack, tmp_path: Path, engine: str) -> None:
    clusters = {c["name"]: c for c in stack.admin.list_clusters()}
    assert len(clusters) == 9
    assert {c["tier"] for c in clusters.values()} == {"cloud", "fog", "edge"}
    assert all(c["status"]["healthy"] for c in clusters.values())
    assert stack.leader() is not None
    for token in (tmp_path / "tokens").iterdir():
        assert stat.S_IMODE(token.stat().st_mode) == 0o600, token
    assert stat.S_IMODE((tmp_path / "raft.secret").stat().st_mode) == 0o600
    assert any(peers for peers in stack.admin.latency().values())  # measured from each cluster
    status = yaml.safe_load(
        run_qonnect("testbed", "status", "--json", "--dir", str(stack.testbed_dir)).stdout
    )
    assert status.get("engine", "emulator") == engine
    check_least_privilege(stack, clusters)
    if engine == "kube":  # real control planes: four live components per cluster
        for cluster in status["clusters"]:
            assert set(cluster["pids"]) == {
                "etcd",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
            }
            assert all(_alive(pid) for pid in cluster["pids"].values())


def check_least_privilege(stack: Stack, registered: dict[str, dict[str, Any]]) -> None:
    """The KB holds the deploy identity's kubeconfig and every agent runs with the agent
    identity's (docs/rbac/), which the cluster refuses a write - no admin credential in use."""
    from kubernetes import client, config

    for entry in stack.federation["clusters"]:
        name = entry["name"]
        assert registered[name]["kubeconfig"] == entry["deploy_kubeconfig"], registered[name]
        argv = Path(f"/proc/{stack.state['pids'][f'agent-{name}']}/cmdline").read_bytes().split(b"\0")
        assert argv[argv.index(b"--kubeconfig") + 1].decode() == entry["agent_kubeconfig"]
    entry = stack.federation["clusters"][0]
    core = client.CoreV1Api(config.new_client_from_config(config_file=entry["agent_kubeconfig"]))
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_config_map("default", {"metadata": {"name": "agent-write"}})
    assert refused.value.status == 403 and "qonnect-agent" in str(refused.value.body)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def secrets_of(stack: Stack) -> list[str]:
    """The KB tokens and every cluster credential of the demo (none may ever be printed)."""
    found = [p.read_text().strip() for p in stack.tokens.iterdir()]
    found.append((stack.root / "raft.secret").read_text().strip())
    for kubeconfig in stack.testbed_dir.glob("kubeconfigs/**/*.yaml"):
        for user in yaml.safe_load(kubeconfig.read_text())["users"]:
            found.append(user["user"]["token"])
    return [s for s in found if s]


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    demo = Stack(tmp_path, request.param)
    demo.reset()
    try:
        yield demo
    finally:
        pids = dict(demo.state["pids"])
        down = run_qonnect("demo", "down", "--dir", str(tmp_path), check=False, timeout=180)
        assert down.returncode == 0, down.stderr
        assert "testbed" in down.stdout
        assert not any(_is_ours(pid) for pid in pids.values())
        assert demo.kube_strays() == []
        assert not (demo.testbed_dir / "testbed.json").exists()


@pytest.mark.parametrize("stack", [_param(e) for e in ENGINES], indirect=True)
def test_the_five_steps(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine, started = stack.engine.name, time.monotonic()
    stack.start_testbed()
    stack.start_kb()
    stack.register_clusters()
    stack.start_agents()
    stack.start_controllers()
    check_setup(stack, tmp_path, engine)

    story, clusters = Story(stack), Clusters(stack.federation)
    timings = [f"set up: {time.monotonic() - started:.0f}s"]
    for name, step in STEPS:
        before, started = snapshot(story), time.monotonic()
        step(story)
        CHECKS[name](story, clusters, before)
        timings.append(f"{name}: {time.monotonic() - started:.0f}s")

    printed = capsys.readouterr()
    for secret in secrets_of(stack):
        assert secret not in printed.out and secret not in printed.err
        assert secret not in stack.state_file.read_text()
    print(f"{engine}: " + "; ".join(timings))


def test_down_kills_a_stray_control_plane_component(tmp_path: Path) -> None:
    """A component of the real engine that outlived its testbed process is stopped by `down`."""
    stack = Stack(tmp_path, "kube")
    stack.reset()
    marker = stack.testbed_dir / "clusters" / "c1" / "etcd"
    stray = subprocess.Popen(
        ["/opt/kube/etcd", "-c", "import time; time.sleep(600)", f"--data-dir={marker}"],
        executable=sys.executable,
    )
    try:
        wait_for(lambda: stray.pid in stack.kube_strays(), 10, "the stray to be seen")
        down = run_qonnect("demo", "down", "--dir", str(tmp_path), timeout=60)
        assert "1 stray control-plane process(es)" in down.stdout
        assert stray.wait(10) == -9
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait()
