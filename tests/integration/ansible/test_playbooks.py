"""The Ansible surface end to end: real ansible-playbook / ansible-inventory / ansible-runner
against the paper testbed and a KB, with the result read back through the Kubernetes API.

The tests share one federation but not their order: each one that needs Bookinfo running asks
for the ``deployed`` fixture, which deploys it energy-first (a no-op when it already runs), so
any test passes alone, after removal, or in any order: deploy, idempotence, check mode,
make-before-break migration, partial failure, the AWX path (ansible-runner), removal.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import support
import yaml
from ansible_federation import BIN, CLUSTERS, COLLECTIONS, ROOT, json_out, recap, snapshot

pytestmark = pytest.mark.timeout(300)

ENERGY = "examples/bookinfo/energy-first.yml"
COST = str(ROOT / "examples" / "bookinfo" / "cost-first.yml")
SERVICE_DEPLOYMENTS = {
    "productpage": ["productpage-v1"],
    "details": ["details-v1"],
    "reviews": ["reviews-v1", "reviews-v2", "reviews-v3"],
    "ratings": ["ratings-v1"],
}


def placement(federation) -> dict[str, list[dict]]:
    return federation.kb().get_placement("bookinfo")["current"]


def ready_copies(k8s) -> dict[str, set[str]]:
    """Service -> clusters where all of its Deployments have a ready replica."""
    found: dict[str, set[str]] = {s: set() for s in SERVICE_DEPLOYMENTS}
    for cluster in CLUSTERS:
        apps = k8s(cluster)[1]
        ready = {
            d.metadata.name
            for d in apps.list_namespaced_deployment("bookinfo").items
            if (d.status.ready_replicas or 0) >= 1
        }
        for service, names in SERVICE_DEPLOYMENTS.items():
            if all(n in ready for n in names):
                found[service].add(cluster)
    return found


def assert_matches_plan(federation, k8s) -> dict[str, list[dict]]:
    """Deployments run exactly where the KB's placement says, pinned to the planned nodes, and
    every other cluster of the application resolves the service to the cluster that runs it."""
    plan = placement(federation)
    app_clusters = {e["cluster"] for entries in plan.values() for e in entries}
    for service, entries in plan.items():
        hosts = {e["cluster"]: e for e in entries}
        for cluster in CLUSTERS:
            core, apps = k8s(cluster)
            deps = {
                d.metadata.name: d
                for d in apps.list_namespaced_deployment(
                    "bookinfo", label_selector=f"qonnect.io/service={service}"
                ).items
            }
            if cluster in hosts:
                assert sorted(deps) == SERVICE_DEPLOYMENTS[service], (cluster, service)
                for dep in deps.values():
                    assert dep.metadata.labels["app.kubernetes.io/managed-by"] == "qonnect"
                    assert dep.spec.replicas == hosts[cluster]["replicas"]
                    if hosts[cluster].get("nodes"):
                        term = dep.spec.template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[
                            0
                        ]
                        assert term.match_expressions[-1].values == sorted(hosts[cluster]["nodes"])
                        pods = core.list_namespaced_pod("bookinfo", label_selector=f"app={service}").items
                        assert pods and {p.spec.node_name for p in pods} <= set(hosts[cluster]["nodes"])
                svc = core.read_namespaced_service(service, "bookinfo")
                assert svc.spec.type != "ExternalName"
            else:
                assert not deps, (cluster, service)
                if cluster in app_clusters:
                    svc = core.read_namespaced_service(service, "bookinfo")
                    assert svc.spec.type == "ExternalName"
                    assert (
                        svc.spec.external_name
                        == f"{service}.bookinfo.svc.{entries[0]['cluster']}.qonnect.local"
                    )
    return plan


@pytest.fixture
def deployed(federation, k8s) -> dict[str, list[dict]]:
    """Bookinfo running where the KB places it, whatever ran before this test."""
    result = federation.playbook("qonnect.core.deploy", "-e", f"app_file={ENERGY}")
    assert recap(result)["failed"] == 0, result.stdout + result.stderr
    return assert_matches_plan(federation, k8s)


def test_register_clusters_playbook(federation, tmp_path):
    """Registering already-registered clusters from a federation file changes nothing."""
    fed = yaml.safe_load((federation.dir / "testbed" / "federation.yaml").read_text())
    fed["clusters"] = fed["clusters"][:2]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(fed))
    result = federation.playbook("qonnect.core.register_clusters", "-e", f"federation_file={path}")
    assert recap(result) | {"failed": 0} == recap(result) and recap(result)["changed"] == 0, result.stdout
    assert federation.kb().get_cluster("cloud-1")["kubeconfig"] == fed["clusters"][0]["kubeconfig"]


def test_inventory_plugin(federation, tmp_path):
    source = tmp_path / "fed.qonnect.yml"
    source.write_text("plugin: qonnect.core.kb\nkeyed_groups:\n  - key: tier\n    prefix: t\n")
    token = federation.admin_token_file.read_text().strip()
    env = dict(federation.env, QONNECT_KB_TOKEN=token)
    listed = json_out(
        support.run(
            [str(BIN / "ansible-inventory"), "-i", str(source), "--list"], env=env, timeout=120, check=False
        )
    )
    assert sorted(listed["cloud"]["hosts"]) == ["cloud-1", "cloud-2", "cloud-3"]
    assert sorted(listed["healthy"]["hosts"]) == sorted(CLUSTERS)
    assert sorted(listed["t_edge"]["hosts"]) == ["edge-1", "edge-2", "edge-3"]
    hv = listed["_meta"]["hostvars"]["fog-2"]
    assert hv["kubeconfig"] == federation.clusters["fog-2"]["kubeconfig"]
    assert hv["server"] == federation.clusters["fog-2"]["server"]
    assert hv["capacity"]["cpu"] == 6.0 and hv["price_eur_h"] == pytest.approx(0.0042)
    assert hv["healthy"] is True and hv["heartbeat_age"] < 30
    graph = support.run(
        [str(BIN / "ansible-inventory"), "-i", str(source), "--graph"], env=env, timeout=120, check=False
    )
    assert "@fog:" in graph.stdout and "--edge-3" in graph.stdout
    assert token not in json.dumps(listed) + graph.stdout + graph.stderr


def test_inventory_cache(federation, tmp_path):
    """With the cache on, a second run is answered from the cache (a cluster registered since
    does not show) until --flush-cache; the cache is per KB URL, so another KB never gets this
    one's hosts."""
    source = tmp_path / "cached.qonnect.yml"
    source.write_text(
        f"plugin: qonnect.core.kb\ncache: true\ncache_plugin: ansible.builtin.jsonfile\n"
        f"cache_connection: {tmp_path / 'cache'}\ncache_timeout: 600\n"
    )
    env = dict(federation.env, QONNECT_KB_TOKEN=federation.admin_token_file.read_text().strip())
    cmd = [str(BIN / "ansible-inventory"), "-i", str(source), "--list"]

    def inventory(environment: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
        return support.run([*cmd, *extra], env=environment, timeout=120, check=False)

    first = json_out(inventory(env))
    assert sorted(first["_meta"]["hostvars"]) == sorted(CLUSTERS)
    kb = federation.kb()
    kb.register_cluster({"name": "cache-probe", "tier": "edge"})
    try:
        cached = json_out(inventory(env))
        assert sorted(cached["_meta"]["hostvars"]) == sorted(CLUSTERS)  # from the cache
        other = inventory(dict(env, QONNECT_KB_URL="http://127.0.0.1:9"))  # nothing listens there
        assert "KB unreachable" in other.stdout + other.stderr
        flushed = json_out(inventory(env, "--flush-cache"))
        assert "cache-probe" in flushed["_meta"]["hostvars"]
    finally:
        kb.delete_cluster("cache-probe")


def test_deploy_playbook_places_by_plan(federation, k8s):
    result = federation.playbook("qonnect.core.deploy", "-e", f"app_file={ENERGY}")
    counts = recap(result)
    assert counts["failed"] == 0 and counts["changed"] >= 1, result.stdout + result.stderr
    plan = assert_matches_plan(federation, k8s)
    assert {s: e[0]["cluster"].split("-")[0] for s, e in plan.items()} == {
        "productpage": "cloud",
        "details": "fog",
        "reviews": "fog",
        "ratings": "edge",
    }
    assert all(len(c) == 1 for c in ready_copies(k8s).values())
    events = federation.kb().list_events(application="bookinfo")
    assert any(e["reason"] == "Deployed" for e in events)


def test_second_run_changes_nothing(federation, k8s, deployed):
    before = snapshot(k8s)
    result = federation.playbook("qonnect.core.deploy", "-e", f"app_file={ENERGY}")
    assert recap(result)["changed"] == 0 and recap(result)["failed"] == 0, result.stdout
    assert snapshot(k8s) == before


def test_check_mode_touches_nothing(federation, k8s, deployed):
    before, stored = snapshot(k8s), placement(federation)
    ratings = stored["ratings"][0]["cluster"]
    result = federation.playbook(
        "qonnect.core.migrate",
        "-e",
        "app=bookinfo",
        "-e",
        json.dumps({"exclude": [ratings]}),
        "--check",
        "--diff",
    )
    counts = recap(result)
    assert counts["failed"] == 0 and counts["changed"] == 1, result.stdout + result.stderr
    assert "ratings-v1" in result.stdout  # the diff shows the Deployment that would move
    assert snapshot(k8s) == before
    assert placement(federation) == stored


def test_migration_is_make_before_break(federation, k8s, deployed):
    """While ratings and reviews move, every service keeps at least one ready copy."""
    stored = placement(federation)
    moving = [stored["ratings"][0]["cluster"], stored["reviews"][0]["cluster"]]
    seen: list[dict[str, set[str]]] = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            seen.append(ready_copies(k8s))
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        result = federation.playbook(
            "qonnect.core.migrate",
            "-e",
            "app=bookinfo",
            "-e",
            json.dumps({"exclude": moving, "reason": "test migration", "fencing": {"term": 1, "seq": 1}}),
        )
    finally:
        stop.set()
        poller.join(timeout=30)
    assert recap(result)["failed"] == 0, result.stdout + result.stderr
    seen.append(ready_copies(k8s))
    assert len(seen) > 5
    for sample in seen:
        assert all(sample[s] for s in SERVICE_DEPLOYMENTS), sample
    plan = assert_matches_plan(federation, k8s)
    assert plan["ratings"][0]["cluster"] not in moving and plan["reviews"][0]["cluster"] not in moving
    app_clusters = {e["cluster"] for entries in plan.values() for e in entries}
    for cluster in set(moving) - app_clusters:  # clusters that left the plan are cleaned up
        assert not [
            n
            for n in k8s(cluster)[0].list_namespace().items  # gone or Terminating, as on real clusters
            if n.metadata.name == "bookinfo" and not n.metadata.deletion_timestamp
        ]
    assert federation.kb().get_placement("bookinfo")["fencing"] == {"term": 1, "seq": 1}


def test_partial_failure_keeps_previous_placement(federation, k8s, deployed):
    stored = placement(federation)
    old = stored["ratings"][0]["cluster"]
    target = next(c for c in ("edge-1", "edge-2", "edge-3") if c != old)
    plan = dict(stored)
    plan["ratings"] = [{"cluster": target, "replicas": 1}]
    federation.qonnect("testbed", "fail", target, "--dir", str(federation.dir / "testbed"))
    try:
        result = support.run(
            [
                str(BIN / "ansible"),
                "localhost",
                "-m",
                "qonnect.core.deploy",
                "-a",
                json.dumps(
                    {
                        "name": "bookinfo",
                        "plan": {"services": plan},
                        "wait_timeout": 10,
                        "kb_token": f"{{{{ lookup('file', '{federation.admin_token_file}') }}}}",
                    }
                ),
            ],
            env=federation.env,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
    finally:
        federation.qonnect("testbed", "recover", target, "--dir", str(federation.dir / "testbed"))
    assert result.returncode != 0
    assert (
        f"deploy failed on {target}" in result.stdout and "previous placement keeps serving" in result.stdout
    )
    assert ready_copies(k8s)["ratings"] == {old}
    assert placement(federation) == stored
    assert federation.admin_token_file.read_text().strip() not in result.stdout


def test_deploy_through_ansible_runner(federation, k8s, tmp_path):
    """The engine AWX uses: a new spec (cost-first) through ansible_runner.run."""
    import ansible_runner

    token = federation.admin_token_file.read_text().strip()
    env = federation.env
    (tmp_path / "runner").mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        playbook="qonnect.core.deploy",
        extravars={"app_file": COST, "kb_token_file": str(federation.admin_token_file)},
        envvars={
            "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
            "QONNECT_KB_URL": federation.kb_url,
            "PATH": env["PATH"],
            "ANSIBLE_NOCOLOR": "1",
        },
        quiet=True,
        timeout=240,
    )
    assert runner.status == "successful" and runner.rc == 0, runner.stdout.read()
    assert any(e.get("event") == "playbook_on_stats" for e in runner.events)
    plan = assert_matches_plan(federation, k8s)
    stored = federation.kb().get_application("bookinfo")
    assert stored["application"]["objective"]["cost"] > stored["application"]["objective"]["energy"]
    assert plan
    artifacts = "".join(
        p.read_text(errors="replace") for p in Path(tmp_path / "runner").rglob("*") if p.is_file()
    )
    assert token not in artifacts


def test_remove_playbook(federation, k8s, deployed):
    result = federation.playbook("qonnect.core.remove", "-e", "app=bookinfo")
    assert recap(result)["failed"] == 0 and recap(result)["changed"] >= 1, result.stdout
    for cluster in CLUSTERS:
        assert not [
            n
            for n in k8s(cluster)[0].list_namespace().items  # gone or Terminating, as on real clusters
            if n.metadata.name == "bookinfo" and not n.metadata.deletion_timestamp
        ]
    with pytest.raises(Exception, match="404"):
        federation.kb().get_application("bookinfo")


def small_app(name: str, tier: str) -> dict:
    """A one-Deployment application on ``tier`` (nginx, the emulator's kind of image)."""
    labels = {"app": name}
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "objective": {"energy": 1, "cost": 1},
            "services": [
                {
                    "name": "web",
                    "tier": tier,
                    "manifests": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "metadata": {"name": name},
                            "spec": {
                                "selector": {"matchLabels": labels},
                                "template": {
                                    "metadata": {"labels": labels},
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "web",
                                                "image": "nginx:1.27",
                                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                            }
                                        ]
                                    },
                                },
                            },
                        }
                    ],
                }
            ],
        },
    }


def test_the_deploy_playbook_deploys_a_list_of_applications_in_one_run(federation, k8s, tmp_path):
    """Issue 38.6: ``-e '{"app_files": [...]}'`` stores, plans together and deploys several
    applications in one module run; a second run changes nothing."""
    files = []
    for name, tier in (("list-edge", "edge"), ("list-fog", "fog")):
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(small_app(name, tier)))
        files.append(str(path))
    try:
        result = federation.playbook("qonnect.core.deploy", "-e", json.dumps({"app_files": files}))
        counts = recap(result)
        assert counts["failed"] == 0 and counts["changed"] >= 1, result.stdout + result.stderr
        assert "list-edge: web -> edge-" in result.stdout and "list-fog: web -> fog-" in result.stdout
        kb = federation.kb()
        for name in ("list-edge", "list-fog"):
            (entry,) = kb.get_placement(name)["current"]["web"]
            apps = k8s(entry["cluster"])[1]
            support.wait_for(
                lambda n=name, a=apps: (a.read_namespaced_deployment(n, n).status.ready_replicas or 0) >= 1,
                60,
                f"{name} Ready on {entry['cluster']}",
                interval=0.5,
            )
            assert any(e["reason"] == "Deployed" for e in kb.list_events(application=name))
        again = federation.playbook("qonnect.core.deploy", "-e", json.dumps({"app_files": files}))
        assert recap(again)["changed"] == 0 and recap(again)["failed"] == 0, again.stdout + again.stderr
    finally:
        for name in ("list-edge", "list-fog"):
            federation.playbook("qonnect.core.remove", "-e", f"app={name}")
