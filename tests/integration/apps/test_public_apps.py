"""Public applications as their authors ship them (issue 34), on both engines.

Each application under ``tests/apps`` (unchanged; SOURCE.md names its repository, commit and
licence) is given to qonnect.core by a QoS spec that only points at it, the way a platform team
tries its own software: it plans, deploys (changed, then changed=0), runs Ready, heals when its
busiest cluster fails, and is removed leaving nothing it owns on any cluster.

Real processes throughout: the testbed (emulated clusters, or real control planes with
``engine=kube``), the KB, one agent per cluster, three controller replicas, ansible-playbook.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "controller"))

from _controller_stack import BIN, REPO, Stack, qonnect_cmd, wait_for
from kubernetes import client, config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

APPS = REPO / "tests" / "apps"
OPTIONS = ["--agent-interval", "1", "--max-concurrent-runs", "2", "--batch-size", "10"]
# The cluster grace (default 20 s) is not these tests' subject: a heal starts soon after the
# failure, a little later on real control planes, whose API servers a loaded host slows (issue 35).
GRACE = {"emulator": "4", "kube": "10"}
APP_LABEL = "qonnect.io/application"


def _spec(name: str, manifests: list[dict[str, Any]], **service: Any) -> dict[str, Any]:
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": name},
        "spec": {
            "objective": {"cost": 1.0},
            "services": [{"name": "web", "manifests": manifests, **service}],
        },
    }


CHART = REPO / "tests" / "unit" / "plugins" / "module_utils" / "charts" / "podinfo" / "podinfo-6.14.1.tgz"

# name -> the QoS spec that points at the application
CASES: dict[str, dict[str, Any]] = {
    # the chart as published (kubeVersion >=1.23.0-0), with the values a user sets for an
    # autoscaled, disruption-budgeted release: an HPA instead of a replica count, and a PDB
    "podinfo-helm": _spec(
        "podinfo-chart",
        [
            {
                "helm": str(CHART),
                "values": {
                    "replicaCount": 2,
                    "hpa": {"enabled": True, "cpu": 80},
                    "podDisruptionBudget": {"maxUnavailable": 1},
                },
            }
        ],
    ),
    # a Deployment with probes and minReadySeconds, a Service, an autoscaling/v2 HPA
    "podinfo-kustomize": _spec("podinfo", [{"kustomize": "apps/podinfo-kustomize"}]),
    # two Deployments, a headless and a LoadBalancer Service, two PVCs, a generated Secret
    "wordpress": _spec("wordpress", [{"kustomize": "apps/wordpress"}]),
}


# the chart as published, with the values its README gives for a kept password, storage,
# autoscaling and a disruption budget (a generated password would differ on every render)
CASES["grafana-helm"] = _spec(
    "grafana",
    [
        {
            "helm": str(APPS / "grafana" / "grafana-12.11.1.tgz"),
            "values": {
                "adminPassword": "qonnect-test-only",
                "persistence": {"enabled": True},
                "autoscaling": {"enabled": True},
                "podDisruptionBudget": {"maxUnavailable": 1},
            },
        }
    ],
)

WEBAPP = "apps/podinfo-webapp/bases"
CASES["podinfo-webapp"] = {
    "apiVersion": "qonnect.io/v1",
    "kind": "Application",
    "metadata": {"name": "webapp", "namespace": "webapp"},
    "spec": {
        "objective": {"latency": 1.0},
        "services": [
            {
                "name": "frontend",
                "tier": "edge",
                "dependsOn": ["backend", "cache"],
                "manifests": [{"kustomize": f"{WEBAPP}/frontend"}],
            },
            {
                "name": "backend",
                "tier": "fog",
                "dependsOn": ["cache"],
                "manifests": [{"kustomize": f"{WEBAPP}/backend"}],
            },
            {"name": "cache", "tier": "fog", "manifests": [{"kustomize": f"{WEBAPP}/cache"}]},
            {"name": "database", "tier": "cloud", "manifests": [{"kustomize": f"{WEBAPP}/database"}]},
        ],
    },
}

# the kinds each application must have on its clusters once deployed (read from the clusters)
EXPECTED = {
    "podinfo-helm": {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"},
    "podinfo-kustomize": {"Deployment", "Service", "HorizontalPodAutoscaler"},
    "wordpress": {"Deployment", "Service", "PersistentVolumeClaim", "Secret"},
    "grafana-helm": {
        "Deployment",
        "Service",
        "Secret",
        "ConfigMap",
        "ServiceAccount",
        "PersistentVolumeClaim",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ClusterRole",
        "ClusterRoleBinding",
    },
    "podinfo-webapp": {
        "Deployment",
        "StatefulSet",
        "Service",
        "HorizontalPodAutoscaler",
        "PersistentVolumeClaim",
        "ConfigMap",
        "CronJob",
        "ServiceAccount",
    },
}


@pytest.fixture(scope="module")
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(tmp_path_factory.mktemp(f"apps-{request.param}"))
    unpack(stack.root / "apps")  # the specs name them relative to their own folder, stack.root
    try:
        stack.start_kb()
        stack.start_testbed(5 if request.param == "kube" else 6, engine=request.param)
        stack.start_agents(1.0)
        stack.engine = request.param  # type: ignore[attr-defined]
        yield stack
    finally:
        stack.close()


def unpack(into: Path) -> None:
    """Each application's files as its authors ship them, from tests/apps/NAME/NAME.tar.gz (kept
    packed so the collection's linters do not judge them; SOURCE.md) into ``into``/NAME."""
    for archive in sorted(APPS.glob("*/*.tar.gz")):
        target = into / archive.parent.name
        target.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")


def _playbook(stack: Stack, playbook: str, extra: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    extra_file = stack.root / f"{playbook}.{extra.get('app') or Path(extra['app_file']).stem}.json"
    extra_file.write_text(
        json.dumps({"kb_url": stack.kb_url, "kb_token_file": str(stack.admin_token), **extra})
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / f"{playbook}.yml"), "-e", f"@{extra_file}"],
        capture_output=True,
        text=True,
        timeout=400,
        env=stack.env,
        cwd=stack.root,
        check=False,
    )


def _recap(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    line = next(line for line in result.stdout.splitlines() if line.startswith("localhost"))
    return {k: int(v) for k, v in (part.split("=") for part in line.split(":", 1)[1].split())}


def _api(stack: Stack, cluster: str) -> client.ApiClient:
    kubeconfig = next(c["kubeconfig"] for c in stack.federation["clusters"] if c["name"] == cluster)
    return config.new_client_from_config(config_file=kubeconfig)


def _owned(stack: Stack, cluster: str, app: str) -> list[str]:
    """Everything labelled as the application's on one cluster, read from its own API."""
    api = _api(stack, cluster)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    autoscaling = client.AutoscalingV2Api(api)
    selector = f"{APP_LABEL}={app}"
    found = []
    for kind, lister in (
        ("Deployment", apps.list_deployment_for_all_namespaces),
        ("Service", core.list_service_for_all_namespaces),
        ("PersistentVolumeClaim", core.list_persistent_volume_claim_for_all_namespaces),
        ("Secret", core.list_secret_for_all_namespaces),
        ("ConfigMap", core.list_config_map_for_all_namespaces),
        ("HorizontalPodAutoscaler", autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces),
        ("PodDisruptionBudget", client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces),
        ("StatefulSet", apps.list_stateful_set_for_all_namespaces),
        ("CronJob", client.BatchV1Api(api).list_cron_job_for_all_namespaces),
        ("ServiceAccount", core.list_service_account_for_all_namespaces),
        ("ClusterRole", client.RbacAuthorizationV1Api(api).list_cluster_role),
        ("ClusterRoleBinding", client.RbacAuthorizationV1Api(api).list_cluster_role_binding),
        ("Role", client.RbacAuthorizationV1Api(api).list_role_for_all_namespaces),
        ("RoleBinding", client.RbacAuthorizationV1Api(api).list_role_binding_for_all_namespaces),
    ):
        found += [f"{kind}/{o.metadata.name}" for o in lister(label_selector=selector).items]
    return found


def _placed(stack: Stack, app: str) -> set[str]:
    return {t["cluster"] for targets in stack.placement(app).values() for t in targets}


def _busiest(stack: Stack, app: str) -> str:
    """The cluster that runs most of the application's services (ties: by name)."""
    counts: dict[str, int] = {}
    for targets in stack.placement(app).values():
        for cluster in {t["cluster"] for t in targets}:
            counts[cluster] = counts.get(cluster, 0) + 1
    return min(counts, key=lambda c: (-counts[c], c))


# Every application on the emulator; on real control planes the three that cover every kind and
# behaviour of the five (PVC provisioning and protection, RBAC, CronJobs, a StatefulSet, HPAs under
# the real HPA controller, a PDB, kubeVersion and Capabilities), to keep the suite's time in bounds.
ON_KUBE = ("grafana-helm", "podinfo-webapp", "wordpress")
RUNS = [("emulator", case) for case in sorted(CASES)] + [
    pytest.param("kube", case, marks=pytest.mark.kube) for case in ON_KUBE
]


@pytest.mark.parametrize(("fleet", "case"), RUNS, indirect=["fleet"])
def test_a_public_application_plans_deploys_heals_and_is_removed(fleet: Stack, case: str):
    stack, body = fleet, CASES[case]
    app = body["metadata"]["name"]
    spec = stack.root / f"{app}.yml"
    spec.write_text(yaml.safe_dump(body, sort_keys=False))

    planned = subprocess.run(
        qonnect_cmd(
            "plan",
            "--spec",
            str(spec),
            "--kb",
            stack.kb_url,
            "--token-file",
            str(stack.admin_token),
            "--json",
        ),
        capture_output=True,
        text=True,
        timeout=120,
        env=stack.env,
        check=False,
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = json.loads(planned.stdout)
    services = {s["name"] for s in body["spec"]["services"]}
    assert set(plan["services"]) == services and all(plan["services"].values()), plan

    first = _playbook(stack, "deploy", {"app_file": str(spec), "wait_timeout": 180})
    assert first.returncode == 0 and _recap(first)["changed"] >= 1, (
        first.stdout[-4000:] + first.stderr[-2000:]
    )
    placed = _placed(stack, app)
    home = _busiest(stack, app)
    wait_for(lambda: stack.healthy_elsewhere(app, set()), 120, 0.5, f"{app} Healthy on {placed}")
    kinds = {name.split("/")[0] for cluster in placed for name in _owned(stack, cluster, app)}
    assert EXPECTED[case] <= kinds, (EXPECTED[case] - kinds, kinds)
    for cluster in placed:  # every claim bound, as its pods need
        core = client.CoreV1Api(_api(stack, cluster))
        for claim in core.list_namespaced_persistent_volume_claim(app).items:
            assert claim.status.phase == "Bound", (cluster, claim.metadata.name, claim.status)

    again = _playbook(stack, "deploy", {"app_file": str(spec), "wait_timeout": 180})
    assert again.returncode == 0, again.stdout[-4000:]
    assert _recap(again)["changed"] == 0, again.stdout[-4000:]

    stack.start_replicas(3, [*OPTIONS, "--cluster-grace", GRACE[stack.engine]])  # type: ignore[attr-defined]
    try:
        stack.wait_leader(30)
        wait_for(
            lambda: all(app in ((r.status() or {}).get("versions") or {}) for r in stack.replicas),
            60,
            0.5,
            f"every replica to know {app}",
        )
        stack.testbed("fail", home)
        try:
            wait_for(lambda: stack.healthy_elsewhere(app, {home}), 180, 0.5, f"{app} healed off {home}")
        finally:
            stack.testbed("recover", home)
        # the copies left on the recovered cluster are removed by the controller's reconcile
        try:
            wait_for(lambda: not _owned(stack, home, app), 180, 1.0, f"{app}'s orphans gone from {home}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; still there: {_owned(stack, home, app)}") from None
    finally:
        stack.stop_replicas()

    gone = _playbook(stack, "remove", {"app": app})
    assert gone.returncode == 0, gone.stdout[-4000:] + gone.stderr[-2000:]
    left = {c["name"]: _owned(stack, c["name"], app) for c in stack.federation["clusters"]}
    assert not any(left.values()), left
