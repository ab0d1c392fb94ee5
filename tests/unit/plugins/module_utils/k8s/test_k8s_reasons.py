"""Issue 34.3: a failed rollout names the pods' own reasons, from the current revision's pods.

The scene of the issue: version 2 of a Deployment with an image that cannot be pulled. The old
ReplicaSet's pod still serves (1/1 ready); the new ReplicaSet's pod is in ImagePullBackOff. The
deploy's waiter said ``1 old replica(s) pending termination``; it must name ImagePullBackOff and
the image, as the agent does - both through the one function of k8s/reasons.py. Shapes are the
API server's (zeros omitted, list items as the client returns them).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.k8s import waiter
from ansible_collections.qonnect.core.plugins.module_utils.k8s.reasons import (
    current_pods,
    current_replicaset,
    pod_reason,
    why_not_ready,
)
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL, MANAGED_BY
from qonnect.agent.collector import FAILED, PROGRESSING, workload_status

LABELS = {MANAGED_BY: "qonnect", APP_LABEL: "guestbook", "app": "web"}
BAD_IMAGE = "qonnect.test/pull-fail/nginx:1.28"


def deployment(image: str = BAD_IMAGE, revision: str = "2", **status: Any) -> dict:
    counts = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1}
    counts.update(availableReplicas=1, **status)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "guestbook",
            "uid": "dep-uid",
            "generation": 2,
            "labels": LABELS,
            "annotations": {"deployment.kubernetes.io/revision": revision},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
        "status": counts,
    }


def replicaset(hash_: str, revision: str, conditions: list | None = None) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"web-{hash_}",
            "namespace": "guestbook",
            "uid": f"rs-{hash_}",
            "labels": {**LABELS, "pod-template-hash": hash_},
            "annotations": {"deployment.kubernetes.io/revision": revision},
            "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "dep-uid", "controller": True}],
        },
        "status": {"conditions": conditions} if conditions else {},
    }


def pod(hash_: str, name: str, image: str, **status: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "guestbook",
            "labels": {**LABELS, "pod-template-hash": hash_},
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"web-{hash_}", "uid": f"rs-{hash_}"}],
        },
        "spec": {"containers": [{"name": "web", "image": image}]},
        "status": {"phase": "Pending", **status},
    }


def waiting(reason: str, message: str, image: str, **extra: Any) -> dict:
    return {
        "containerStatuses": [
            {
                "name": "web",
                "image": image,
                "ready": False,
                "state": {"waiting": {"reason": reason, "message": message}},
                **extra,
            }
        ]
    }


OLD = pod("old", "web-old-aaaaa", "nginx:1.27", phase="Running")
NEW = pod(
    "new",
    "web-new-bbbbb",
    BAD_IMAGE,
    **waiting("ImagePullBackOff", f'Back-off pulling image "{BAD_IMAGE}"', BAD_IMAGE),
)
RS = [replicaset("old", "1"), replicaset("new", "2")]


def test_the_current_replicaset_and_its_pods_are_the_new_revision_s():
    assert current_replicaset(deployment(), RS)["metadata"]["name"] == "web-new"
    assert [p["metadata"]["name"] for p in current_pods(deployment(), [OLD, NEW], RS)] == ["web-new-bbbbb"]
    # the ReplicaSets not read: the pods running the template's images
    assert [p["metadata"]["name"] for p in current_pods(deployment(), [OLD, NEW])] == ["web-new-bbbbb"]


def test_an_unpullable_new_image_is_named_not_the_old_replica_pending_termination():
    why = why_not_ready(deployment(), [OLD, NEW], RS)
    assert why.text.startswith(
        f'ImagePullBackOff: Back-off pulling image "{BAD_IMAGE}" (pod web-new-bbbbb, container web)'
    )
    assert why.text.endswith("; 1 old replica(s) pending termination")
    assert [r.to_dict() for r in why.reasons] == [
        {
            "reason": "ImagePullBackOff",
            "message": f'Back-off pulling image "{BAD_IMAGE}"',
            "pod": "web-new-bbbbb",
            "container": "web",
            "image": BAD_IMAGE,
        }
    ]


def test_an_old_revision_s_trouble_is_not_the_new_one_s_reason():
    crashing_old = pod(
        "old", "web-old-aaaaa", "nginx:1.27", **waiting("CrashLoopBackOff", "back-off", "nginx:1.27")
    )
    pulling = pod("new", "web-new-bbbbb", BAD_IMAGE, phase="Pending")
    why = why_not_ready(deployment(), [crashing_old, pulling], RS)
    assert not why.reasons and "CrashLoopBackOff" not in why.text


def test_a_crash_loop_names_its_last_exit_code():
    crashing = pod(
        "new",
        "web-new-bbbbb",
        "qonnect.test/crash/nginx",
        **waiting(
            "CrashLoopBackOff",
            "back-off 20s restarting failed container=web",
            "qonnect.test/crash/nginx",
            restartCount=3,
            lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
        ),
    )
    reason = pod_reason(crashing)
    assert reason is not None and (reason.exit_code, reason.restarts) == (137, 3)
    assert reason.text() == (
        "CrashLoopBackOff: last exit code 137, restarted 3 times: back-off 20s restarting failed "
        "container=web (pod web-new-bbbbb, container web)"
    )


def test_an_unschedulable_pod_names_the_scheduler_s_message():
    message = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available"
    pending = pod(
        "new",
        "web-new-bbbbb",
        "nginx:1.28",
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ],
    )
    why = why_not_ready(deployment(image="nginx:1.28"), [OLD, pending], RS)
    assert why.text.startswith(f"Unschedulable: {message} (pod web-new-bbbbb)")


def test_exceeded_quota_comes_from_the_current_replicaset_once():
    quota = (
        'pods "web-new-ccccc" is forbidden: exceeded quota: small, requested: requests.cpu=2, '
        "used: requests.cpu=0, limited: requests.cpu=1"
    )
    cond = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": quota}
    dep = deployment(image="nginx:1.28", replicas=1, updatedReplicas=0)
    dep["status"]["conditions"] = [dict(cond)]  # the deployment controller's copy
    why = why_not_ready(dep, [OLD], [replicaset("old", "1"), replicaset("new", "2", [cond])])
    assert why.text.startswith(f"ReplicaFailure: FailedCreate: {quota} (ReplicaSet web-new)")
    assert why.text.count("exceeded quota") == 1, why.text
    assert why.reasons[0].to_dict()["replicaset"] == "web-new"


class Lister:
    """A fake client over fixed objects (list by kind)."""

    def __init__(self, objects: dict[str, list[dict]]) -> None:
        self.objects = objects

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ):
        return [dict(o) for o in self.objects.get(kind, [])]


def test_the_waiter_and_the_agent_give_the_same_reason():
    cluster = Lister({"Deployment": [deployment()], "ReplicaSet": RS, "Pod": [OLD, NEW]})
    started = time.monotonic()
    (pending,) = waiter.wait_workloads(cluster, "guestbook", "guestbook", [("Deployment", "web")], 0.5)
    assert time.monotonic() - started < 5
    agent = workload_status("Deployment", deployment(), [OLD, NEW], [], RS)
    assert agent["status"] == PROGRESSING
    assert pending.reason == agent["reason"]
    assert pending.line().startswith("Deployment/web: ImagePullBackOff: ")
    assert pending.to_dict()["pods"][0]["image"] == BAD_IMAGE


@pytest.mark.parametrize("reason", ["InvalidImageName", "ErrImageNeverPull"])
def test_a_reason_no_retry_fixes_fails_the_agent_s_workload(reason: str):
    bad = pod("new", "web-new-bbbbb", BAD_IMAGE, **waiting(reason, "nope", BAD_IMAGE))
    assert workload_status("Deployment", deployment(), [OLD, bad], [], RS)["status"] == FAILED


def test_a_cluster_s_error_stays_within_an_event_s_message():
    from ansible_collections.qonnect.core.plugins.module_utils.k8s.deployer import MAX_ERROR, _joined

    lines = [f"Deployment/web-{i}: " + "ImagePullBackOff: x" * 30 for i in range(40)]
    text = _joined(lines)
    assert len(text) < MAX_ERROR + 200 and text.startswith(lines[0])
    assert text.endswith("more workload(s) not ready (see reasons)")
    assert _joined(lines[:2]) == "; ".join(lines[:2])


def test_a_statefulset_s_and_a_daemonset_s_current_pods():
    def labelled(name: str, **labels: str) -> dict:
        p = pod("x", name, "db:2", **waiting("ErrImagePull", "no", "db:2"))
        p["metadata"]["labels"] = {"app": "web", **labels}
        del p["metadata"]["ownerReferences"]
        return p

    sts = {
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "guestbook", "generation": 2},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
        "status": {
            "observedGeneration": 2,
            "readyReplicas": 1,
            "updateRevision": "web-2",
            "currentRevision": "web-1",
        },
    }
    old, new = (
        labelled("web-0", **{"controller-revision-hash": "web-1"}),
        labelled("web-1", **{"controller-revision-hash": "web-2"}),
    )
    assert [p["metadata"]["name"] for p in current_pods(sts, [old, new])] == ["web-1"]
    assert "(pod web-1, container web, image db:2)" in why_not_ready(sts, [old, new]).text
    ds = {
        "kind": "DaemonSet",
        "metadata": {"name": "web", "namespace": "guestbook", "generation": 3},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"observedGeneration": 3, "desiredNumberScheduled": 2, "numberReady": 1},
    }
    old, new = (
        labelled("web-a", **{"pod-template-generation": "2"}),
        labelled("web-b", **{"pod-template-generation": "3"}),
    )
    assert [p["metadata"]["name"] for p in current_pods(ds, [old, new])] == ["web-b"]


def test_a_cluster_lost_when_the_wait_ends_keeps_what_the_waiter_saw():
    from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import K8sError

    class Gone(Lister):
        def list(self, api_version, kind, namespace=None, label_selector=None):
            if kind != "Deployment":
                raise K8sError("cloud-1", "connection refused", 0)
            return super().list(api_version, kind, namespace, label_selector)

    cluster = Gone({"Deployment": [deployment()]})
    (pending,) = waiter.wait_workloads(cluster, "guestbook", "guestbook", [("Deployment", "web")], 0.3)
    assert pending.line() == "Deployment/web: 1 old replica(s) pending termination" and not pending.pods
