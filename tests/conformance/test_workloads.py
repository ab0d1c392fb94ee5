"""Workload controllers: Deployment/ReplicaSet, StatefulSet, DaemonSet status; Endpoints."""

from __future__ import annotations

import pytest
from conformance_engines import CONTROL_PLANE, WORKER, deployment
from kubernetes import client
from support import wait_for

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(180)]
PAUSE = "registry.k8s.io/pause:3.10"


def _conditions(obj) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in obj.status.conditions or []}


def test_deployment_status_and_its_replicaset(engine, ns):
    apps = engine.apps()
    apps.create_namespaced_deployment(ns, deployment("web", replicas=2))

    def done():
        d = apps.read_namespaced_deployment("web", ns)
        s = d.status
        return (
            d
            if s.observed_generation == d.metadata.generation
            and s.available_replicas == 2
            and s.updated_replicas == 2
            and s.replicas == 2
            and _conditions(d).get("Progressing", ("",) * 3)[1] == "NewReplicaSetAvailable"
            else None
        )

    d = wait_for(done, timeout=60, what="Deployment web available")
    assert (d.status.ready_replicas, d.status.unavailable_replicas) == (2, None)
    rss = apps.list_namespaced_replica_set(ns, label_selector="app=web").items
    assert len(rss) == 1
    rs = rss[0]
    assert rs.metadata.name == f"web-{rs.metadata.labels['pod-template-hash']}"
    owner = rs.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "Deployment",
        "web",
        d.metadata.uid,
        True,
    )
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    rs_done = wait_for(
        lambda: (
            (r := apps.read_namespaced_replica_set(rs.metadata.name, ns)).status.available_replicas == 2 and r
        ),
        what="ReplicaSet status",
    )
    assert (
        rs_done.spec.replicas,
        rs_done.status.replicas,
        rs_done.status.ready_replicas,
        rs_done.status.fully_labeled_replicas,
    ) == (2, 2, 2, 2)
    conds = _conditions(d)
    assert conds["Available"] == ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    assert conds["Progressing"] == (
        "True",
        "NewReplicaSetAvailable",
        f'ReplicaSet "{rs.metadata.name}" has successfully progressed.',
    )
    pods = engine.core().list_namespaced_pod(ns, label_selector="app=web").items
    assert {(p.metadata.owner_references[0].kind, p.metadata.owner_references[0].name) for p in pods} == {
        ("ReplicaSet", rs.metadata.name)
    }


def test_min_ready_seconds_holds_availability_back(engine, ns):
    """Issue 22: a pod counts as available only after it has been Ready for minReadySeconds, so
    a rollout (and qonnect's waiter, which reads availableReplicas) does not succeed on a pod that
    is Ready for a moment; both engines count it the same way."""
    apps = engine.apps()
    apps.create_namespaced_deployment(ns, deployment("slow", replicas=1, minReadySeconds=6))

    def ready_only():
        d = apps.read_namespaced_deployment("slow", ns)
        return d if (d.status.ready_replicas or 0) == 1 else None

    d = wait_for(ready_only, timeout=60, what="slow's pod Ready")
    assert not d.status.available_replicas and d.status.unavailable_replicas == 1
    assert _conditions(d)["Available"][:2] == ("False", "MinimumReplicasUnavailable")
    assert _conditions(d)["Progressing"][1] != "NewReplicaSetAvailable"
    rs = apps.list_namespaced_replica_set(ns, label_selector="app=slow").items[0]
    assert rs.spec.min_ready_seconds == 6 and not rs.status.available_replicas

    def available():
        d = apps.read_namespaced_deployment("slow", ns)
        return d if d.status.available_replicas == 1 else None

    d = wait_for(available, timeout=30, what="slow available after minReadySeconds")
    assert _conditions(d)["Available"][0] == "True"
    wait_for(
        lambda: (
            _conditions(apps.read_namespaced_deployment("slow", ns)).get("Progressing", ("",) * 3)[1]
            == "NewReplicaSetAvailable"
        ),
        timeout=30,
        what="rollout complete",
    )
    wait_for(
        lambda: (
            apps.list_namespaced_replica_set(ns, label_selector="app=slow").items[0].status.available_replicas
            == 1
        ),
        timeout=30,
        what="its ReplicaSet available",
    )


def test_rollout_creates_a_second_replicaset_and_scales_the_first_to_zero(engine, ns):
    apps = engine.apps()
    apps.create_namespaced_deployment(ns, deployment("web", replicas=2))
    wait_for(lambda: apps.read_namespaced_deployment("web", ns).status.available_replicas == 2, timeout=60)
    apps.patch_namespaced_deployment(
        "web", ns, {"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}}
    )

    def rolled():
        d = apps.read_namespaced_deployment("web", ns)
        s = d.status
        return (
            d
            if (
                s.observed_generation == d.metadata.generation == 2
                and s.updated_replicas == 2
                and s.available_replicas == 2
                and s.replicas == 2
            )
            else None
        )

    d = wait_for(rolled, timeout=90, what="rollout of revision 2")
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    rss = {
        r.metadata.annotations["deployment.kubernetes.io/revision"]: r.spec.replicas
        for r in apps.list_namespaced_replica_set(ns, label_selector="app=web").items
    }
    assert rss == {"1": 0, "2": 2}


def test_progress_deadline_exceeded(engine, ns):
    apps = engine.apps()
    body = deployment("stuck", replicas=1, progressDeadlineSeconds=3)
    body["spec"]["template"]["spec"]["nodeSelector"] = {"qonnect.io/none": "nowhere"}
    apps.create_namespaced_deployment(ns, body)

    def exceeded():
        d = apps.read_namespaced_deployment("stuck", ns)
        return (
            d
            if _conditions(d).get("Progressing", ("",) * 3)[:2] == ("False", "ProgressDeadlineExceeded")
            else None
        )

    d = wait_for(exceeded, timeout=60, what="ProgressDeadlineExceeded")
    rs = apps.list_namespaced_replica_set(ns, label_selector="app=stuck").items[0].metadata.name
    assert _conditions(d)["Progressing"][2] == f'ReplicaSet "{rs}" has timed out progressing.'
    assert _conditions(d)["Available"][:2] == ("False", "MinimumReplicasUnavailable")
    assert d.status.unavailable_replicas == 1 and not d.status.available_replicas
    pending = engine.core().list_namespaced_pod(ns, label_selector="app=stuck").items[0]
    scheduled = {c.type: c for c in pending.status.conditions}["PodScheduled"]
    assert (pending.status.phase, scheduled.status, scheduled.reason) == ("Pending", "False", "Unschedulable")


def _statefulset(name: str, replicas: int = 3) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": PAUSE}]},
            },
        },
    }


def _sts_ready(apps: client.AppsV1Api, ns: str, name: str, replicas: int):
    def check():
        s = apps.read_namespaced_stateful_set(name, ns)
        st = s.status
        return (
            s
            if (
                st.observed_generation == s.metadata.generation
                and st.ready_replicas == replicas
                and st.current_replicas == replicas
                and st.updated_replicas == replicas
                and st.current_revision == st.update_revision
            )
            else None
        )

    return wait_for(check, timeout=90, what=f"StatefulSet {name} ready")


def test_statefulset_status_pods_and_revisions(engine, ns):
    apps = engine.apps()
    created = apps.create_namespaced_stateful_set(ns, _statefulset("db"))
    spec = created.spec
    assert (
        spec.pod_management_policy,
        spec.update_strategy.type,
        spec.update_strategy.rolling_update.partition,
        spec.revision_history_limit,
    ) == ("OrderedReady", "RollingUpdate", 0, 10)
    s = _sts_ready(apps, ns, "db", 3)
    assert s.status.replicas == 3 and s.status.available_replicas == 3
    assert s.status.update_revision.startswith("db-") and s.status.collision_count == 0
    pods = sorted(
        engine.core().list_namespaced_pod(ns, label_selector="app=db").items, key=lambda p: p.metadata.name
    )
    assert [p.metadata.name for p in pods] == ["db-0", "db-1", "db-2"]
    for i, p in enumerate(pods):
        labels = p.metadata.labels
        assert labels["controller-revision-hash"] == s.status.update_revision
        assert labels["statefulset.kubernetes.io/pod-name"] == p.metadata.name
        assert labels["apps.kubernetes.io/pod-index"] == str(i)
        assert (p.metadata.owner_references[0].kind, p.metadata.owner_references[0].name) == (
            "StatefulSet",
            "db",
        )
        assert p.spec.hostname == p.metadata.name and p.spec.subdomain == "db"


def test_statefulset_partition_holds_the_update_back(engine, ns):
    """0 of 3 updated while all 3 are ready: what a readiness check must not call done."""
    apps = engine.apps()
    apps.create_namespaced_stateful_set(ns, _statefulset("db"))
    before = _sts_ready(apps, ns, "db", 3).status.current_revision
    apps.patch_namespaced_stateful_set(
        "db",
        ns,
        {
            "spec": {
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 3}},
                "template": {"metadata": {"annotations": {"v": "2"}}},
            }
        },
    )

    def held():
        s = apps.read_namespaced_stateful_set("db", ns)
        st = s.status
        return s if st.observed_generation == s.metadata.generation and st.update_revision != before else None

    s = wait_for(held, timeout=60, what="new update revision observed")
    assert s.status.current_revision == before and s.status.ready_replicas == 3
    assert not s.status.updated_replicas
    apps.patch_namespaced_stateful_set(
        "db", ns, {"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}
    )
    done = _sts_ready(apps, ns, "db", 3)
    assert done.status.current_revision == s.status.update_revision != before


def _daemonset(name: str, tolerations: list | None = None) -> dict:
    spec = {"containers": [{"name": "main", "image": PAUSE}]}
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def _ds_done(apps: client.AppsV1Api, ns: str, name: str, desired: int):
    def check():
        d = apps.read_namespaced_daemon_set(name, ns)
        st = d.status
        return (
            d
            if (
                st.observed_generation == d.metadata.generation
                and st.desired_number_scheduled == desired
                and st.number_ready == desired
                and st.updated_number_scheduled == desired
                and st.number_available == desired
            )
            else None
        )

    return wait_for(check, timeout=90, what=f"DaemonSet {name} on {desired} node(s)")


def test_daemonset_runs_on_untainted_nodes_only(engine, ns):
    apps = engine.apps()
    created = apps.create_namespaced_daemon_set(ns, _daemonset("agent"))
    assert created.spec.update_strategy.type == "RollingUpdate"
    d = _ds_done(apps, ns, "agent", 1)
    assert (d.status.current_number_scheduled, d.status.number_misscheduled, d.status.number_unavailable) == (
        1,
        0,
        None,
    )
    pods = engine.core().list_namespaced_pod(ns, label_selector="app=agent").items
    assert [p.spec.node_name for p in pods] == [WORKER]
    keys = {(t.key, t.effect) for t in pods[0].spec.tolerations}
    assert {
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    } <= keys
    term = pods[
        0
    ].spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
    assert (term.match_fields[0].key, term.match_fields[0].values) == ("metadata.name", [WORKER])


def test_daemonset_tolerating_the_control_plane_taint_runs_there_too(engine, ns):
    apps = engine.apps()
    apps.create_namespaced_daemon_set(
        ns,
        _daemonset(
            "agent",
            [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
        ),
    )
    _ds_done(apps, ns, "agent", 2)
    nodes = {
        p.spec.node_name for p in engine.core().list_namespaced_pod(ns, label_selector="app=agent").items
    }
    assert nodes == {WORKER, CONTROL_PLANE}


def test_endpoints_follow_ready_pods(engine, ns):
    core, apps = engine.core(), engine.apps()
    apps.create_namespaced_deployment(ns, deployment("web", replicas=2))
    core.create_namespaced_service(
        ns,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        },
    )

    def ready_addresses():
        try:
            ep = core.read_namespaced_endpoints("web", ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        subsets = ep.subsets or []
        return ep if subsets and len(subsets[0].addresses or []) == 2 else None

    ep = wait_for(ready_addresses, timeout=60, what="2 ready endpoint addresses")
    pods = {
        p.status.pod_ip: p.metadata.name for p in core.list_namespaced_pod(ns, label_selector="app=web").items
    }
    got = {a.ip: (a.target_ref.kind, a.target_ref.name) for a in ep.subsets[0].addresses}
    assert got == {ip: ("Pod", name) for ip, name in pods.items()}
    assert [(p.name, p.port, p.protocol) for p in ep.subsets[0].ports] == [("http", 8080, "TCP")]


def test_replica_failure_until_the_service_account_exists(engine, ns):
    """A pod the API refuses (here: its ServiceAccount is missing) is ReplicaFailure, retried."""
    apps, core = engine.apps(), engine.core()
    body = deployment("sa", replicas=1)
    body["spec"]["template"]["spec"]["serviceAccountName"] = "late"
    apps.create_namespaced_deployment(ns, body)

    def failing():
        d = apps.read_namespaced_deployment("sa", ns)
        return d if _conditions(d).get("ReplicaFailure", ("",) * 3)[:2] == ("True", "FailedCreate") else None

    d = wait_for(failing, timeout=60, what="ReplicaFailure")
    message = _conditions(d)["ReplicaFailure"][2]
    assert message.startswith('pods "sa-') and message.endswith(
        f'" is forbidden: error looking up service account {ns}/late: serviceaccount "late" not found'
    )
    rs = apps.list_namespaced_replica_set(ns, label_selector="app=sa").items[0]
    assert _conditions(rs)["ReplicaFailure"] == ("True", "FailedCreate", message)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "late"}})

    def recovered():
        d = apps.read_namespaced_deployment("sa", ns)
        return d if d.status.available_replicas == 1 and "ReplicaFailure" not in _conditions(d) else None

    wait_for(recovered, timeout=120, what="available once the ServiceAccount exists")
