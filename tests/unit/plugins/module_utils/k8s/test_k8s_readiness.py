"""Workload readiness from real-shaped status objects (as `kubectl get -o yaml` prints them).

Deploy's waiter and the agent use the one definition in k8s/readiness.py; the shapes below are
those the API server writes (zero counts omitted), copied from Kubernetes 1.33 clusters and the
Kubernetes documentation's examples.
"""

from __future__ import annotations

import time

import yaml
from ansible_collections.qonnect.core.plugins.module_utils.k8s import waiter
from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import (
    GRACE_ANNOTATION,
    progress_deadline_seconds,
    readiness,
    with_grace,
    workload_ready,
)


def load(text: str) -> dict:
    return yaml.safe_load(text)


DAEMONSET_READY = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: fluentd-elasticsearch, namespace: kube-system, generation: 1}
spec:
  selector: {matchLabels: {name: fluentd-elasticsearch}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}
  template:
    metadata: {labels: {name: fluentd-elasticsearch}}
    spec: {containers: [{name: fluentd-elasticsearch, image: quay.io/fluentd_elasticsearch/fluentd:v2.5.2}]}
status:
  currentNumberScheduled: 3
  desiredNumberScheduled: 3
  numberAvailable: 3
  numberMisscheduled: 0
  numberReady: 3
  observedGeneration: 1
  updatedNumberScheduled: 3
"""

DAEMONSET_ROLLING = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: fluentd-elasticsearch, namespace: kube-system, generation: 2}
spec:
  selector: {matchLabels: {name: fluentd-elasticsearch}}
status:
  currentNumberScheduled: 3
  desiredNumberScheduled: 3
  numberAvailable: 3
  numberMisscheduled: 0
  numberReady: 3
  numberUnavailable: 0
  observedGeneration: 2
  updatedNumberScheduled: 1
"""

# kubectl rollout restart statefulset web, right after the controller saw the new revision:
# all 3 old pods still ready, none updated yet.
STATEFULSET_NONE_UPDATED = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: default, generation: 2}
spec:
  replicas: 3
  serviceName: nginx
  selector: {matchLabels: {app: nginx}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 0}}
  template:
    metadata: {labels: {app: nginx}}
    spec: {containers: [{name: nginx, image: registry.k8s.io/nginx-slim:0.24}]}
status:
  availableReplicas: 3
  collisionCount: 0
  currentReplicas: 3
  currentRevision: web-7b6b8d4f65
  observedGeneration: 2
  readyReplicas: 3
  replicas: 3
  updateRevision: web-5c9c6bd7d4
"""

STATEFULSET_DONE = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: default, generation: 2}
spec:
  replicas: 3
  serviceName: nginx
  selector: {matchLabels: {app: nginx}}
status:
  availableReplicas: 3
  collisionCount: 0
  currentReplicas: 3
  currentRevision: web-5c9c6bd7d4
  observedGeneration: 2
  readyReplicas: 3
  replicas: 3
  updateRevision: web-5c9c6bd7d4
  updatedReplicas: 3
"""

DEPLOYMENT_DONE = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: nginx-deployment, namespace: default, generation: 1}
spec:
  replicas: 3
  progressDeadlineSeconds: 600
  selector: {matchLabels: {app: nginx}}
status:
  availableReplicas: 3
  conditions:
  - {type: Available, status: "True", reason: MinimumReplicasAvailable,
     message: Deployment has minimum availability.}
  - {type: Progressing, status: "True", reason: NewReplicaSetAvailable,
     message: ReplicaSet "nginx-deployment-75675f5897" has successfully progressed.}
  observedGeneration: 1
  readyReplicas: 3
  replicas: 3
  updatedReplicas: 3
"""

# mid-rollout with maxSurge 1: one new pod up, three old ones still serving
DEPLOYMENT_ROLLING = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: nginx-deployment, namespace: default, generation: 2}
spec:
  replicas: 3
  selector: {matchLabels: {app: nginx}}
status:
  availableReplicas: 3
  conditions:
  - {type: Available, status: "True", reason: MinimumReplicasAvailable}
  - {type: Progressing, status: "True", reason: ReplicaSetUpdated,
     message: ReplicaSet "nginx-deployment-1564180365" is progressing.}
  observedGeneration: 2
  readyReplicas: 3
  replicas: 4
  unavailableReplicas: 1
  updatedReplicas: 1
"""

DEPLOYMENT_DEADLINE = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: nginx-deployment, namespace: default, generation: 3}
spec:
  replicas: 3
  progressDeadlineSeconds: 30
  selector: {matchLabels: {app: nginx}}
status:
  availableReplicas: 2
  conditions:
  - {type: Available, status: "True", reason: MinimumReplicasAvailable}
  - {type: Progressing, status: "False", reason: ProgressDeadlineExceeded,
     message: ReplicaSet "nginx-deployment-3066724191" has timed out progressing.}
  - {type: ReplicaFailure, status: "True", reason: FailedCreate,
     message: 'pods "nginx-deployment-3066724191-" is forbidden: exceeded quota: object-counts'}
  observedGeneration: 3
  readyReplicas: 2
  replicas: 3
  unavailableReplicas: 1
  updatedReplicas: 1
"""


def test_fully_ready_daemonset_is_ready():
    ds = load(DAEMONSET_READY)
    assert workload_ready(ds)
    state = readiness(ds)
    assert (state.desired, state.ready_replicas, state.reason) == (3, 3, "")


def test_daemonset_rolling_out_is_not_ready():
    state = readiness(load(DAEMONSET_ROLLING))
    assert not state.ready and "1 of 3 pods updated" in state.reason


def test_statefulset_with_none_of_three_updated_is_not_ready():
    sts = load(STATEFULSET_NONE_UPDATED)
    assert not workload_ready(sts)
    reason = readiness(sts).reason
    assert "0 of 3 replicas updated" in reason and "web-5c9c6bd7d4 not yet current" in reason


def test_statefulset_rolled_out_is_ready():
    assert workload_ready(load(STATEFULSET_DONE))


def test_statefulset_partitioned_rollout_is_ready_when_the_partition_is_updated():
    sts = load(STATEFULSET_DONE)
    sts["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}
    sts["status"].update(updatedReplicas=1, currentRevision="web-old")
    assert workload_ready(sts)
    sts["status"]["updatedReplicas"] = 0
    assert "0 of 1 replicas updated (partition 2)" in readiness(sts).reason


def test_deployment_done_rolling_and_not_yet_observed():
    assert workload_ready(load(DEPLOYMENT_DONE))
    rolling = readiness(load(DEPLOYMENT_ROLLING))
    assert not rolling.ready
    assert "1 of 3 replicas updated" in rolling.reason and "3 old replica(s)" in rolling.reason
    stale = load(DEPLOYMENT_DONE)
    stale["metadata"]["generation"] = 2
    assert readiness(stale).reason.startswith("generation 2 not yet observed (observed 1)")


def test_deployment_ready_but_not_available_is_not_ready():
    dep = load(DEPLOYMENT_DONE)  # minReadySeconds not yet elapsed: ready, not available
    dep["status"]["availableReplicas"] = 1
    assert readiness(dep).reason == "1 of 3 replicas available"


def test_progress_deadline_exceeded_is_kubernetes_saying_failed():
    state = readiness(load(DEPLOYMENT_DEADLINE))
    assert not state.ready
    assert state.failed.startswith("Progressing: ProgressDeadlineExceeded")
    assert progress_deadline_seconds(load(DEPLOYMENT_DEADLINE)) == 30
    assert progress_deadline_seconds(load(DEPLOYMENT_ROLLING)) == 600  # Kubernetes' default


def test_replica_failure_is_a_reason_not_a_failure():
    dep = load(DEPLOYMENT_ROLLING)
    dep["status"]["conditions"].append(
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": 'serviceaccount "web" not found',
        }
    )
    state = readiness(dep)
    assert not state.ready and not state.failed
    assert state.reason.startswith('ReplicaFailure: FailedCreate serviceaccount "web" not found')


def test_counts_the_api_server_omits_are_zero():
    dep = {
        "kind": "Deployment",
        "metadata": {"generation": 1},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": 1},
    }
    assert readiness(dep).reason.startswith("0 of 2 replicas updated")
    scaled_to_zero = {
        "kind": "Deployment",
        "metadata": {"generation": 4},
        "spec": {"replicas": 0},
        "status": {"observedGeneration": 4},
    }
    assert workload_ready(scaled_to_zero)


class _Lister:
    def __init__(self, objects):
        self.objects = objects
        self.calls = 0

    def list(self, api_version, kind, namespace=None, label_selector=None):
        self.calls += 1
        return [o for o in self.objects if o["kind"] == kind]


def test_deploy_waiter_accepts_a_ready_daemonset_and_waits_for_a_statefulset():
    ds, sts = load(DAEMONSET_READY), load(STATEFULSET_NONE_UPDATED)
    client = _Lister([ds, sts])
    pending = waiter.wait_ready(
        client, "default", "app", [("DaemonSet", "fluentd-elasticsearch"), ("StatefulSet", "web")], 0.3, 0.05
    )
    assert pending == [
        "StatefulSet/web: 0 of 3 replicas updated; revision web-5c9c6bd7d4 not yet current "
        "(current web-7b6b8d4f65)"
    ]
    client.objects = [ds, load(STATEFULSET_DONE)]
    assert (
        waiter.wait_ready(
            client, "default", "app", [("DaemonSet", "fluentd-elasticsearch"), ("StatefulSet", "web")], 0.3
        )
        == []
    )


def test_deploy_waiter_stops_early_when_kubernetes_declared_the_rollout_failed():
    client = _Lister([load(DEPLOYMENT_DEADLINE)])
    started = time.monotonic()
    pending = waiter.wait_ready(client, "default", "app", [("Deployment", "nginx-deployment")], 30.0)
    assert time.monotonic() - started < 5
    # the ReplicaSet's own reason first (the quota of Kubernetes' example), then the condition
    assert pending[0].startswith("Deployment/nginx-deployment: ReplicaFailure: FailedCreate: "), pending
    assert "exceeded quota" in pending[0] and "; Progressing: ProgressDeadlineExceeded" in pending[0]


def test_with_grace_annotates_workloads_only_and_keeps_a_manifests_own_value():
    dep = load(DEPLOYMENT_DONE)
    got = with_grace(dep, 900.0)
    assert got["metadata"]["annotations"] == {GRACE_ANNOTATION: "900"}
    assert "annotations" not in dep["metadata"]  # the input is not changed
    assert with_grace(got, 30.0)["metadata"]["annotations"][GRACE_ANNOTATION] == "900"
    config = {"kind": "ConfigMap", "metadata": {"name": "c"}}
    assert with_grace(config, 900.0) is config and with_grace(dep, None) is dep
