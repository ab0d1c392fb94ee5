"""What a real API server fills in: the defaults of every write (SetDefaults_*) and what the
default admission plugins add to a new pod. Only the fields clients look at are defaulted."""

from __future__ import annotations

from typing import Callable, Iterable

TOLERATED_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def apply_defaults(resource: str, obj: dict, allocate_ip: Callable[[], str]) -> None:
    """Default obj in place; allocate_ip hands out a Service's clusterIP."""
    spec = obj.get("spec")
    if resource == "namespaces":
        _default_namespace(obj)
    elif resource == "secrets":
        obj.setdefault("type", "Opaque")
    elif resource == "nodes":
        obj.setdefault("spec", {})
        obj.setdefault("status", {})
    elif resource == "services" and isinstance(spec, dict):
        _default_service(obj, spec, allocate_ip)
    elif resource in _SPEC_DEFAULTS and isinstance(spec, dict):
        _SPEC_DEFAULTS[resource](obj, spec)


def _default_namespace(obj: dict) -> None:
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj["status"] = {"phase": "Active"}
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def _default_pod(obj: dict, spec: dict) -> None:
    _default_pod_spec(spec)
    _requests_from_limits(spec)
    obj.setdefault("status", {}).setdefault("phase", "Pending")
    obj["status"].setdefault("qosClass", qos_class(spec))


def _default_deployment(obj: dict, spec: dict) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy["type"] = "RollingUpdate"
        strategy.setdefault("rollingUpdate", {}).setdefault("maxUnavailable", "25%")
        strategy["rollingUpdate"].setdefault("maxSurge", "25%")
    template_spec = spec.get("template", {}).get("spec")
    if isinstance(template_spec, dict):
        _default_pod_spec(template_spec)
    obj.setdefault("status", {})


def _default_replicaset(obj: dict, spec: dict) -> None:
    spec.setdefault("replicas", 1)
    _default_template(spec)
    obj.setdefault("status", {"replicas": 0})


def _default_statefulset(obj: dict, spec: dict) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if isinstance(strategy, dict) and strategy.setdefault("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    spec.setdefault("revisionHistoryLimit", 10)
    _default_template(spec)
    obj.setdefault("status", {"replicas": 0})


def _default_daemonset(obj: dict, spec: dict) -> None:
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if isinstance(strategy, dict) and strategy.setdefault("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("maxUnavailable", 1)
        strategy["rollingUpdate"].setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    _default_template(spec)
    obj.setdefault(
        "status",
        {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0},
    )


def _default_template(spec: dict) -> None:
    template_spec = (spec.get("template") or {}).get("spec")
    if isinstance(template_spec, dict):
        _default_pod_spec(template_spec)


# What an API server sets only on Services that get a cluster IP (not on ExternalName ones).
IP_FIELDS = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy")


def _default_service(obj: dict, spec: dict, allocate_ip: Callable[[], str]) -> None:
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] == "ExternalName":
        # a DNS alias: no cluster IP, no IP families, no traffic policy (a Service switched to
        # ExternalName gives its IP back), as kube-apiserver's defaulting and allocator do
        for name in IP_FIELDS:
            spec.pop(name, None)
    else:
        if spec.get("clusterIP") != "None":
            spec.setdefault("clusterIP", allocate_ip())
            spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    obj.setdefault("status", {"loadBalancer": {}})


def _default_job_spec(spec: dict) -> None:
    if "completions" not in spec and "parallelism" not in spec:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    _default_template(spec)


def _default_job(obj: dict, spec: dict) -> None:
    _default_job_spec(spec)
    obj.setdefault("status", {})


def job_selector(obj: dict) -> None:
    """What the Job registry adds once the uid is known: the selector on the controller-uid
    label and the labels on its pod template (unless spec.manualSelector)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector"):
        return
    uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
    spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )


def _default_cronjob(obj: dict, spec: dict) -> None:
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    job_spec = (spec.get("jobTemplate") or {}).get("spec")
    if isinstance(job_spec, dict):
        job_spec.setdefault("backoffLimit", 6)
        job_spec.setdefault("completionMode", "NonIndexed")
        job_spec.setdefault("suspend", False)
        job_spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        _default_template(job_spec)
    obj.setdefault("status", {})


def _default_hpa(obj: dict, spec: dict) -> None:
    spec.setdefault("minReplicas", 1)
    if not spec.get("metrics"):
        spec["metrics"] = [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
            }
        ]
    obj.setdefault("status", {"currentReplicas": 0, "desiredReplicas": 0})


def _default_claim(obj: dict, spec: dict) -> None:
    spec.setdefault("volumeMode", "Filesystem")
    obj.setdefault("status", {"phase": "Pending"})


def _default_volume(obj: dict, spec: dict) -> None:
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")
    obj.setdefault("status", {"phase": "Pending"})


_SPEC_DEFAULTS: dict[str, Callable[[dict, dict], None]] = {
    "pods": _default_pod,
    "deployments": _default_deployment,
    "replicasets": _default_replicaset,
    "statefulsets": _default_statefulset,
    "daemonsets": _default_daemonset,
    "jobs": _default_job,
    "cronjobs": _default_cronjob,
    "horizontalpodautoscalers": _default_hpa,
    "persistentvolumeclaims": _default_claim,
    "persistentvolumes": _default_volume,
}


def _default_pod_spec(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for container in spec.get("containers") or []:
        if isinstance(container, dict):
            tag = str(container.get("image", "")).rsplit("/", 1)[-1]
            latest = ":" not in tag or tag.endswith(":latest")
            container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("resources", {})
            for port in container.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def _requests_from_limits(spec: dict) -> None:
    """SetDefaults_Pod: a limit without a request is also the request (pods, not templates)."""
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            limits = resources.get("limits") if isinstance(resources, dict) else None
            if isinstance(limits, dict) and limits:
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for key, value in limits.items():
                        requests.setdefault(key, value)


def admit_pod(obj: dict, toleration_seconds: dict[str, int]) -> None:
    """What the default admission plugins add to a new pod: ServiceAccount, Priority and
    DefaultTolerationSeconds (NoExecute tolerations of not-ready and unreachable nodes)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []
    for key in TOLERATED_TAINTS:
        if any(
            isinstance(t, dict)
            and ((t.get("key") in (key, None, "") and t.get("operator") == "Exists") or t.get("key") == key)
            and t.get("effect") in ("NoExecute", None, "")
            for t in tolerations
        ):
            continue
        tolerations.append(
            {
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": int(toleration_seconds.get(key, 300)),
            }
        )
    spec["tolerations"] = tolerations


def qos_class(spec: dict) -> str:
    """The QoS class the API server records in a new pod's status."""
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k)
        and (r.get("requests") or {}).get(k, (r.get("limits") or {}).get(k)) == r["limits"][k]
        for r in resources
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


# Every emulated cluster has a default StorageClass named "standard", as kind and k3s clusters
# do; its provisioner is the emulator's own volume controller (sim/volumes.py), which binds a
# claim at once (volumeBindingMode Immediate; kind's local-path waits for the first consumer).
DEFAULT_STORAGE_CLASS = {
    "metadata": {
        "name": "standard",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
    },
    "provisioner": "qonnect.test/emulated",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "Immediate",
}


def default_storage_class(claim: dict, classes: Iterable[dict]) -> None:
    """The DefaultStorageClass admission plugin: a claim without a class gets the default one."""
    spec = claim.get("spec")
    if not isinstance(spec, dict) or "storageClassName" in spec:
        return
    defaults = [
        c
        for c in classes
        if (c["metadata"].get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class")
        == "true"
    ]
    if defaults:
        spec["storageClassName"] = sorted(defaults, key=lambda c: c["metadata"]["name"])[-1]["metadata"][
            "name"
        ]


PVC_PROTECTION = "kubernetes.io/pvc-protection"


def protect_claim(claim: dict) -> None:
    """The StorageObjectInUseProtection admission plugin: every new claim carries the
    ``kubernetes.io/pvc-protection`` finalizer, so a claim a pod still uses is only marked for
    deletion (the volume controller removes the finalizer once no pod uses it, sim/volumes.py)."""
    meta = claim.setdefault("metadata", {})
    finalizers = meta.get("finalizers")
    if not isinstance(finalizers, list):
        finalizers = []
    if PVC_PROTECTION not in finalizers:
        meta["finalizers"] = [*finalizers, PVC_PROTECTION]
