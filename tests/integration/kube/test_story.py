"""The product on three real control planes: deploy Bookinfo, kill an API server, see it heal.

Real processes all the way: `qonnect testbed up --engine kube --profile tiers`, the KB, one
Resource Agent per cluster with the least-privilege ClusterRole of docs/rbac/ (deploy and the
controller use qonnect-deploy's), Bookinfo through playbooks/deploy.yml (qonnect.core.deploy),
three controller replicas. Killing the kube-apiserver of the cluster that runs ratings must make the
controller move it, until every service is Healthy on a live cluster. An image pull that fails for
a while is waited out; one that keeps failing moves ratings once, after the workload's grace.
(ratings is not pinned to a tier here: with one cluster per tier there would be nowhere to go.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "controller"))

from _controller_stack import REPO, Stack, spread_app, wait_for
from ansible_collections.qonnect.core.plugins.module_utils.keys import SELF_HEAL_LABEL
from support import run_qonnect
from support.federation import registration

pytestmark = [pytest.mark.timeout(600)]
APP = "bookinfo"


KUBECTL = Path(sys.executable).with_name("kubectl")  # linked by scripts/build-kube.sh


class KubeStack(Stack):
    """The controller tests' stack on the real engine's `tiers` profile, least privilege.

    The testbed applies the documented ClusterRoles (docs/rbac/) on each cluster and writes a
    kubeconfig per identity; the KB registers the cluster with the qonnect-deploy one (what
    deploy and the controller's migrations use), and the agents run with qonnect-agent's.
    (tests/integration/agent/test_rbac_kube.py applies the same files with kubectl, as a user.)
    """

    def start_testbed(self, clusters: int = 3, heartbeat: float = 1.0) -> dict:
        up = ("testbed", "up", "--dir", str(self.testbed_dir), "--profile", "tiers", "--engine", "kube")
        run_qonnect(*up, "--start-delay", "0.5", timeout=300, env=self.env)
        self.federation = yaml.safe_load((self.testbed_dir / "federation.yaml").read_text())
        for c in self.federation["clusters"]:
            deploy = c["deploy_kubeconfig"]
            c["kubeconfig"] = c["agent_kubeconfig"]  # start_agents reads it
            record = {k: v for k, v in registration(c).items() if k != "name"}  # economics too
            self.admin.request(
                "PUT",
                f"/api/v1/clusters/{c['name']}",
                record | {"kubeconfig": str(deploy), "labels": c.get("labels") or {}},
            )
        return self.federation


def movable_bookinfo(directory: Path, self_heal: bool = True) -> Path:
    """energy-first Bookinfo with absolute manifest paths and ratings free to change tier;
    ``self_heal=False`` labels it so the controller only reports out-of-band changes."""
    source = REPO / "examples" / "bookinfo" / "energy-first.yml"
    spec = yaml.safe_load(source.read_text())
    if not self_heal:
        spec["metadata"].setdefault("labels", {})[SELF_HEAL_LABEL] = "false"
    for service in spec["spec"]["services"]:
        for manifest in service["manifests"]:
            manifest["file"] = str(source.parent / manifest["file"])
        if service["name"] == "ratings":
            service.pop("tier", None)
    path = directory / "bookinfo.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture()
def story(kube_bin: Path, tmp_path: Path) -> Iterator[KubeStack]:
    stack = KubeStack(tmp_path)
    try:
        yield stack
    finally:
        stack.close()


def test_an_api_server_killed_under_bookinfo_is_healed_on_real_clusters(story: KubeStack, tmp_path: Path):
    story.start_kb()
    story.start_testbed()
    for c in story.federation["clusters"]:  # the agents really run with too few rights to write
        can = subprocess.run(
            [str(KUBECTL), "--kubeconfig", c["kubeconfig"], "auth", "can-i", "create", "pods", "-A"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert can.stdout.strip() == "no"
    story.start_agents(1.0)
    placement = story.deploy(movable_bookinfo(tmp_path), timeout=400)
    assert {t["cluster"] for targets in placement.values() for t in targets} <= {"cloud-1", "fog-1", "edge-1"}
    wait_for(lambda: story.healthy_elsewhere(APP, set()), 120, 0.5, "bookinfo Healthy on the real clusters")
    target = placement["ratings"][0]["cluster"]
    story.start_replicas(3, ["--agent-interval", "1"])
    story.wait_leader(timeout=30)
    story.testbed("fail", target)
    wait_for(
        lambda: story.healthy_elsewhere(APP, {target}),
        240,
        1.0,
        f"bookinfo Healthy off {target} (its kube-apiserver killed)",
    )
    moved = story.placement(APP)["ratings"][0]["cluster"]
    assert moved != target


def test_a_transient_pull_failure_moves_nothing_a_permanent_one_moves_once_after_the_grace(
    story: KubeStack, tmp_path: Path
):
    story.start_kb()
    story.start_testbed()
    story.start_agents(1.0)
    # The rollouts below are made with kubectl, out of band: self-heal would put the deployed
    # image back (tests/integration/controller/test_restore_drift*.py); here they stand for a
    # version that fails to pull, so the application only reports drift.
    placement = story.deploy(movable_bookinfo(tmp_path, self_heal=False), timeout=400)
    wait_for(lambda: story.healthy_elsewhere(APP, set()), 120, 0.5, "bookinfo Healthy on the real clusters")
    target = placement["ratings"][0]["cluster"]
    story.start_replicas(3, ["--agent-interval", "1"])
    story.wait_leader(timeout=30)
    before = max([e["id"] for e in story.events()] or [0])
    admin = ["--kubeconfig", str(story.testbed_dir / "kubeconfigs" / f"{target}.yaml"), "-n", "bookinfo"]
    # A rollout whose pulls fail for 40 s (ErrImagePull, ImagePullBackOff), then succeed: the
    # kubelet's back-off retries at about 11, 32 and 73 s, so the new pod is ready after ~74 s -
    # far inside the Deployment's progress deadline (600 s).
    subprocess.run(
        [
            str(KUBECTL),
            *admin,
            "set",
            "image",
            "deployment/ratings-v1",
            "*=qonnect.test/pull-flaky-40s/examples-bookinfo-ratings-v1:1.20.2",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )

    def pulled_again() -> bool:
        pods = subprocess.run(
            [str(KUBECTL), *admin, "get", "pods", "-o", "json"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )
        new = [
            p
            for p in yaml.safe_load(pods.stdout)["items"]
            if "pull-flaky" in p["spec"]["containers"][0]["image"]
        ]
        statuses = [p["status"].get("containerStatuses") or [] for p in new]
        # a pod just created has no container status yet: it is not ready either
        return bool(new) and all(s and all(c.get("ready") for c in s) for s in statuses)

    def decisions() -> list:  # moves: a hedge's standby copy (a suspect cluster under load) is none
        return [
            e
            for e in story.events(APP)
            if e["id"] > before
            and e["type"] == "controller.decision"
            and e.get("reason") not in ("hedge", "hedge-discard")
        ]

    wait_for(
        lambda: decisions() or pulled_again(), 150, 1.0, "the rollout's pod ready once the pulls succeed"
    )
    assert decisions() == []
    wait_for(lambda: story.healthy_elsewhere(APP, set()), 60, 1.0, "bookinfo Healthy again")
    assert decisions() == []
    assert story.placement(APP)["ratings"][0]["cluster"] == target

    # Now a permanent failure (every pull fails) with a 20 s grace on the workload: nothing
    # before the grace has passed, then one migration, and ratings Healthy on another cluster.
    grace = 20
    subprocess.run(
        [
            str(KUBECTL),
            *admin,
            "annotate",
            "--overwrite",
            "deployment/ratings-v1",
            f"qonnect.io/failure-grace-seconds={grace}",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    broken_at = time.time()
    subprocess.run(
        [
            str(KUBECTL),
            *admin,
            "set",
            "image",
            "deployment/ratings-v1",
            "*=qonnect.test/pull-fail/examples-bookinfo-ratings-v1:1.20.2",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    first = wait_for(decisions, grace + 90, 1.0, "a decision about the permanently failing ratings")[0]
    assert first["ts"] - broken_at >= grace - 1  # the grace was waited out
    wait_for(lambda: story.healthy_elsewhere(APP, {target}), 180, 1.0, f"ratings Healthy off {target}")
    time.sleep(5)
    assert len(decisions()) == 1  # one migration, not a loop


def _playbook(story: KubeStack, name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            str(REPO / "playbooks" / f"{name}.yml"),
            "-e",
            f"kb_url={story.kb_url}",
            "-e",
            f"kb_token_file={story.admin_token}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=story.env,
        cwd=story.root,
        check=False,
    )


def _web_manifest(name: str) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": "nginx"}]},
            },
        },
    }


def _web_spec(directory: Path, app: str, namespace: str, name: str) -> Path:
    manifests = [_web_manifest(name)]
    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": app, "namespace": namespace},
        "spec": {
            "objective": {"energy": 1.0},
            "services": [{"name": name, "tier": "fog", "manifests": manifests}],
        },
    }
    path = directory / f"{app}.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_ownership_on_real_clusters_with_least_privilege(story: KubeStack, tmp_path: Path):
    """Issue 23 on real API servers and real RBAC (qonnect-deploy's ClusterRole): a Deployment a
    team made with kubectl is refused before any write (server-side apply would otherwise take its
    fields), a second application in that namespace deploys beside it, and removing that one leaves
    the team's Deployment and namespace."""
    story.start_kb()
    story.start_testbed()
    story.start_agents(1.0)
    admin = ["--kubeconfig", str(story.testbed_dir / "kubeconfigs" / "fog-1.yaml")]

    def kubectl(*args: str) -> str:
        return subprocess.run(
            [str(KUBECTL), *admin, *args], check=True, capture_output=True, text=True, timeout=60
        ).stdout

    kubectl("create", "namespace", "team")
    kubectl("-n", "team", "create", "deployment", "web", "--image=nginx")
    before = yaml.safe_load(kubectl("-n", "team", "get", "deployment", "web", "-o", "yaml"))
    refused = _playbook(story, "deploy", "-e", f"app_file={_web_spec(tmp_path, 'team-web', 'team', 'web')}")
    assert refused.returncode != 0 and "refusing to deploy team-web" in refused.stdout, refused.stdout[-3000:]
    assert "Deployment team/web (field manager " in refused.stdout and "kubectl-create" in refused.stdout
    after = yaml.safe_load(kubectl("-n", "team", "get", "deployment", "web", "-o", "yaml"))
    # not written (its status moves on by itself): the same spec, labels and field managers
    assert after["spec"] == before["spec"] and after["metadata"].get("labels") == before["metadata"].get(
        "labels"
    )
    fields = yaml.safe_load(
        kubectl("-n", "team", "get", "deployment", "web", "-o", "yaml", "--show-managed-fields")
    )
    managers = {m["manager"] for m in fields["metadata"]["managedFields"]}
    assert managers <= {"kubectl-create", "kube-controller-manager"}, managers
    assert "qonnect.io/application" not in (after["metadata"].get("labels") or {})

    beside = _playbook(story, "deploy", "-e", f"app_file={_web_spec(tmp_path, 'team-api', 'team', 'api')}")
    assert beside.returncode == 0, beside.stdout[-3000:]
    assert story.placement("team-api")["api"][0]["cluster"] == "fog-1"
    live = yaml.safe_load(kubectl("-n", "team", "get", "deployment", "api", "-o", "yaml"))
    assert live["metadata"]["labels"]["qonnect.io/application"] == "team-api"
    removed = _playbook(story, "remove", "-e", "app=team-api")
    assert removed.returncode == 0, removed.stdout[-3000:]
    names = kubectl("-n", "team", "get", "deployments", "-o", "jsonpath={.items[*].metadata.name}").split()
    assert names == ["web"]  # the team's own stays, the application's went
    namespace = yaml.safe_load(kubectl("get", "namespace", "team", "-o", "yaml"))
    assert not namespace["metadata"].get("deletionTimestamp")  # kubectl made it: it stays


def _changed(result: subprocess.CompletedProcess) -> int:
    """The PLAY RECAP's changed count of localhost (the run must have succeeded)."""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    found = re.search(r"localhost\s+:.*?changed=(\d+)", result.stdout)
    assert found, result.stdout[-3000:]
    return int(found.group(1))


def test_two_applications_upstream_manifests_and_adoption_on_real_clusters(story: KubeStack, tmp_path: Path):
    """Issue 23's cases on real API servers: `shop` from a selected subset of Istio's upstream
    release file (fog, with a Namespace object of its own) and a Kustomize directory (edge), run
    twice (the second run changes nothing); `shop-aio` beside it in the same namespace, removed
    again with `shop` intact and Ready; a kubectl-made Deployment adopted with `adopt: true`."""
    release = REPO / "examples" / "bookinfo-release"
    story.start_kb()
    story.start_testbed()
    story.start_agents(1.0)
    kubeconfig = {c: str(story.testbed_dir / "kubeconfigs" / f"{c}.yaml") for c in ("fog-1", "edge-1")}

    def kubectl(cluster: str, *args: str) -> str:
        return subprocess.run(
            [str(KUBECTL), "--kubeconfig", kubeconfig[cluster], *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout

    def spec(app: str, services: list[dict], **extra: object) -> str:
        body = {
            "apiVersion": "qonnect.io/v1",
            "kind": "Application",
            "metadata": {"name": app, "namespace": "shop"},
            "spec": {"objective": {"energy": 1.0}, "services": services, **extra},
        }
        path = tmp_path / f"{app}.yml"
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        return f"app_file={path}"

    shop = spec(
        "shop",
        [
            {
                "name": "details",
                "tier": "fog",
                "manifests": [
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": "shop", "labels": {"team": "books"}},
                    },
                    {
                        "file": str(release / "bookinfo.manifests"),
                        "select": [
                            {"kind": "Service", "name": "details"},
                            {"kind": "ServiceAccount", "name": "bookinfo-details"},
                            {"kind": "Deployment", "name": "details-v1"},
                        ],
                    },
                ],
            },
            {
                "name": "ratings",
                "tier": "edge",
                "manifests": [{"kustomize": str(release / "ratings-overlay")}],
            },
        ],
    )
    assert _changed(_playbook(story, "deploy", "-e", shop)) > 0
    assert _changed(_playbook(story, "deploy", "-e", shop)) == 0  # idempotent, Namespace object included
    namespace = yaml.safe_load(kubectl("fog-1", "get", "namespace", "shop", "-o", "yaml"))["metadata"][
        "labels"
    ]
    assert namespace["team"] == "books" and namespace["qonnect.io/application"] == "shop"
    assert "ratings-v1" in kubectl("edge-1", "-n", "shop", "get", "deployments", "-o", "name")

    aio = spec("shop-aio", [{"name": "cart", "tier": "fog", "manifests": [_web_manifest("cart")]}])
    assert _changed(_playbook(story, "deploy", "-e", aio)) > 0
    labels = json.loads(kubectl("fog-1", "-n", "shop", "get", "deployments", "-o", "json"))["items"]
    owners = {d["metadata"]["name"]: d["metadata"]["labels"]["qonnect.io/application"] for d in labels}
    assert owners == {"details-v1": "shop", "cart": "shop-aio"}
    assert _playbook(story, "remove", "-e", "app=shop-aio").returncode == 0
    left = json.loads(kubectl("fog-1", "-n", "shop", "get", "deployments", "-o", "json"))["items"]
    assert [d["metadata"]["name"] for d in left] == ["details-v1"]
    wait_for(
        lambda: json.loads(kubectl("fog-1", "-n", "shop", "get", "deployment", "details-v1", "-o", "json"))[
            "status"
        ].get("readyReplicas"),
        60,
        1.0,
        "shop's details Ready after shop-aio's removal",
    )
    assert _changed(_playbook(story, "deploy", "-e", shop)) == 0  # shop is still whole

    kubectl("fog-1", "create", "namespace", "team")
    kubectl("fog-1", "-n", "team", "create", "deployment", "web", "--image=nginx")
    adopt = _web_spec(tmp_path, "team-web", "team", "web")
    body = yaml.safe_load(adopt.read_text())
    body["spec"]["adopt"] = True
    adopt.write_text(yaml.safe_dump(body))
    adopted = _playbook(story, "deploy", "-e", f"app_file={adopt}", "--diff")
    assert _changed(adopted) > 0
    web = yaml.safe_load(kubectl("fog-1", "-n", "team", "get", "deployment", "web", "-o", "yaml"))
    assert web["metadata"]["labels"]["qonnect.io/application"] == "team-web"


def test_callers_of_a_spread_service_follow_its_live_instance_on_real_clusters(
    story: KubeStack, tmp_path: Path
):
    """Issue 23.6 on real API servers: the caller's address stub (an ExternalName Service on a
    real cluster) names one instance of a spread service; when that instance's API server is
    stopped, the stub is pointed at the live instance while the placement still lists the failed
    cluster (no migration waited for), and points back into the list once it recovers."""
    from kubernetes import client, config

    app = "spread-calls"
    story.start_kb()
    story.start_testbed()
    story.start_agents(1.0)
    spec = tmp_path / f"{app}.yml"
    # a long clusterGraceSeconds: no migration within the test, what changes is the self-heal's doing
    body = spread_app(app, {"constraints": {"filter": "tier != 'cloud'"}}, clusterGraceSeconds=600)
    spec.write_text(yaml.safe_dump(body))
    placement = story.deploy(spec, timeout=300)
    assert placement["front"][0]["cluster"] == "cloud-1", placement
    backs = sorted({e["cluster"] for e in placement["back"]})
    assert backs == ["edge-1", "fog-1"], placement
    deploy_kubeconfig = story.admin.get_cluster("cloud-1")["kubeconfig"]  # qonnect-deploy's rights
    core = client.CoreV1Api(config.new_client_from_config(config_file=deploy_kubeconfig))

    def stub() -> tuple[str, str]:
        svc = core.read_namespaced_service("back", app)
        assert svc.spec.type == "ExternalName" and not svc.spec.cluster_ip, (
            svc.spec
        )  # as a real server keeps it
        return svc.spec.external_name or "", (svc.metadata.annotations or {}).get("qonnect.io/addresses", "")

    named, listed = stub()
    target = next(b for b in backs if f".{b}." in named)
    survivor = next(b for b in backs if b != target)
    assert all(f".{b}." in listed for b in backs), listed
    story.start_replicas(3, ["--agent-interval", "1"])
    try:
        story.wait_leader(60)
        story.testbed("fail", target)
        try:
            wait_for(lambda: f".{survivor}." in stub()[0], 90, 0.5, "the caller's stub on the live instance")
            still = sorted({e["cluster"] for e in story.placement(app)["back"]})
            assert still == backs, f"the stub switched with the placement unchanged: {still}"
            assert not [
                e
                for e in story.events(app)
                if e["type"] == "controller.decision"
                and e.get("role") == "controller"
                and e.get("reason") not in ("hedge", "hedge-discard")  # a standby is no migration
            ], "no migration was decided within the application's grace"
        finally:
            story.testbed("recover", target)
        wait_for(
            lambda: all(c["healthy"] for c in story.admin.inventory()["clusters"]), 120, 1.0, "recovered"
        )
        named, listed = stub()
        assert all(f".{b}." in listed for b in backs), listed
    finally:
        story.stop_replicas()
