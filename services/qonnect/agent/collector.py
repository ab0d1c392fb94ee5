"""Read one cluster's nodes and managed workloads through its kubeconfig.

The agent talks to its cluster only through the official ``kubernetes`` client and the
kubeconfig it is given, so it works the same against K3s, kind or the emulated testbed. Objects
are read as plain JSON (``_preload_content=False``): the summaries below are pure functions of
those dicts, which keeps them cheap and testable without a cluster.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from ansible_collections.qonnect.core.plugins.module_utils.k8s.client import raw_get
from ansible_collections.qonnect.core.plugins.module_utils.k8s.readiness import (
    GRACE_ANNOTATION,
    progress_deadline_seconds,
    readiness,
)
from ansible_collections.qonnect.core.plugins.module_utils.k8s.reasons import why_not_ready
from ansible_collections.qonnect.core.plugins.module_utils.k8s.taints import node_taints
from ansible_collections.qonnect.core.plugins.module_utils.keys import (
    APP_LABEL,
    BANDWIDTH_LABEL,
    ENERGY_LABEL,
    PRICE_LABEL,
    SERVICE_LABEL,
)
from ansible_collections.qonnect.core.plugins.module_utils.labels import labels_match
from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity_decimal

try:
    import urllib3
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
except ImportError:  # pragma: no cover - the kubernetes client is a declared dependency
    k8s_client = k8s_config = urllib3 = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

MANAGED_SELECTOR = "app.kubernetes.io/managed-by=qonnect"
LABEL_APPLICATION = APP_LABEL
LABEL_SERVICE = SERVICE_LABEL
# node label -> report field, all floats
NODE_NUMBER_LABELS = {
    BANDWIDTH_LABEL: "bandwidth_gbps",
    ENERGY_LABEL: "energy_kwh",
    PRICE_LABEL: "price_eur_h",
}
RESOURCES = {"cpu": "cpu", "memory": "memory", "ephemeral-storage": "ephemeral_storage"}
# A pod's trouble (k8s/reasons.py, the deploy waiter's answer too) is on real clusters often
# transient (a flaky registry, a ConfigMap or ServiceAccount not created yet, a crash while a
# dependency starts), so it is the reason of a Progressing workload, which turns Failed only
# after the workload's grace period (see StatusClock); an invalid image name or a pod larger
# than every node is Failed at once.
HEALTHY, PROGRESSING, FAILED = "Healthy", "Progressing", "Failed"
MAX_TEXT = 1024  # reasons and errors are cut here: the KB takes at most 4096 characters
# Per-workload grace before a workload that is not ready is reported Failed: this annotation
# (seconds; deploy sets it from the application's spec.failureGraceSeconds), else a Deployment's
# spec.progressDeadlineSeconds, else the agent's --not-ready-timeout.
DEFAULT_NOT_READY_TIMEOUT = 600.0  # Kubernetes' default progressDeadlineSeconds
# The API server's version and served group-versions change only with an upgrade or a new CRD:
# read on (re)connect and then every few minutes, not every report (charts render for them).
SERVER_INTERVAL = 300.0
MAX_API_VERSIONS = 1000


class CollectError(Exception):
    """The cluster could not be read; the message is safe to report (no credentials)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status the API server answered, 0 when it did not


class ForbiddenError(CollectError):
    """The API server answers but refuses the agent (HTTP 403: it lacks RBAC rights; HTTP 401: its
    credentials are refused): credentials broken, not a cluster failure.

    Not a cluster failure: the runner reports it as ``forbidden: ...`` with the cluster reachable,
    so the controller does not move applications away from a healthy cluster.
    """


# Every read the collector makes: (API group, resource, verb, path). docs/rbac/agent-clusterrole.yml
# grants exactly these; a test keeps the two the same.
AGENT_RIGHTS = (
    ("", "nodes", "list", "/api/v1/nodes"),
    ("", "pods", "list", "/api/v1/pods"),
    ("apps", "deployments", "list", "/apis/apps/v1/deployments"),
    ("apps", "statefulsets", "list", "/apis/apps/v1/statefulsets"),
    ("apps", "daemonsets", "list", "/apis/apps/v1/daemonsets"),
    # read only while a Deployment is not ready: its current ReplicaSet's pods are the ones whose
    # reasons count (k8s/reasons.py); without the right the template's images pick them
    ("apps", "replicasets", "list", "/apis/apps/v1/replicasets"),
)
_PATHS = {resource: path for _group, resource, _verb, path in AGENT_RIGHTS}
# Rights whose absence the agent reports around (a ClusterRole older than the right): without
# replicasets, a Deployment's new pods are those running its template's images.
TOLERATED_MISSING = frozenset({"replicasets"})


def right_text(group: str, resource: str, verb: str) -> str:
    """``list deployments.apps (all namespaces)`` as kubectl auth can-i names a right."""
    return f"{verb} {resource}{'.' + group if group else ''} (all namespaces)"


# ---------------------------------------------------------------- quantities and nodes


def _quantity(value: Any) -> Decimal:
    try:
        return parse_quantity_decimal(value) if value is not None else Decimal(0)
    except (ValueError, InvalidOperation, TypeError):
        log.warning("ignoring malformed resource quantity %r", value)
        return Decimal(0)


def _resources(quantities: Mapping[str, Any] | None) -> dict[str, Decimal]:
    quantities = quantities or {}
    return {field: _quantity(quantities.get(name)) for name, field in RESOURCES.items()}


def _as_report(resources: Mapping[str, Decimal]) -> dict[str, float | int]:
    """CPU in cores (float), memory and storage in bytes (int)."""
    return {
        "cpu": float(resources["cpu"]),
        "memory": int(resources["memory"]),
        "ephemeral_storage": int(resources["ephemeral_storage"]),
    }


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests of a pod as the scheduler counts them.

    max(sum of containers, largest init container) plus the pod overhead.
    """
    spec = pod.get("spec") or {}
    total = {field: Decimal(0) for field in RESOURCES.values()}
    for container in spec.get("containers") or []:
        for field, amount in _resources((container.get("resources") or {}).get("requests")).items():
            total[field] += amount
    for container in spec.get("initContainers") or []:
        for field, amount in _resources((container.get("resources") or {}).get("requests")).items():
            total[field] = max(total[field], amount)
    for field, amount in _resources(spec.get("overhead")).items():
        total[field] += amount
    return total


def _pod_active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def requested_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Decimal]]:
    """Sum of non-terminated pods' requests per node they are bound to."""
    per_node: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or not _pod_active(pod):
            continue
        acc = per_node.setdefault(node, {field: Decimal(0) for field in RESOURCES.values()})
        for field, amount in pod_requests(pod).items():
            acc[field] += amount
    return per_node


def _label_number(labels: Mapping[str, str], key: str, node: str) -> float | None:
    raw = labels.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        log.warning("node %s: label %s=%r is not a number; ignored", node, key, raw)
        return None
    if math.isnan(value) or value < 0 or math.isinf(value):
        log.warning("node %s: label %s=%r must be a finite number >= 0; ignored", node, key, raw)
        return None
    return value


def summarize_node(node: Mapping[str, Any], requested: Mapping[str, Decimal] | None) -> dict:
    """One entry of the report's ``nodes`` list (see docs/architecture.md)."""
    meta = node.get("metadata") or {}
    name = meta.get("name", "")
    labels = dict(meta.get("labels") or {})
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    summary: dict[str, Any] = {
        "name": name,
        "ready": conditions.get("Ready") == "True",
        "schedulable": not (node.get("spec") or {}).get("unschedulable", False),
        "pressure": {
            "memory": conditions.get("MemoryPressure") == "True",
            "disk": conditions.get("DiskPressure") == "True",
            "pid": conditions.get("PIDPressure") == "True",
        },
        "allocatable": _as_report(_resources((node.get("status") or {}).get("allocatable"))),
        "requested": _as_report(requested or _resources(None)),
        "labels": labels,
        "taints": node_taints(dict(node)),
    }
    for label, field in NODE_NUMBER_LABELS.items():
        summary[field] = _label_number(labels, label, name)
    return summary


# ---------------------------------------------------------------- workloads


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A workload's label selector against a pod's labels."""
    if not selector:
        return False  # an empty selector on a workload selects nothing useful
    return labels_match(labels, selector.get("matchLabels"), selector.get("matchExpressions"))


def _never_fits(pod: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> bool:
    """True when the pod's requests exceed the allocatable of every node (and there are nodes)."""
    allocatables = [_resources((n.get("status") or {}).get("allocatable")) for n in nodes]
    if not allocatables:
        return False
    wanted = pod_requests(pod)
    return all(any(wanted[f] > alloc[f] for f in wanted if wanted[f] > 0) for alloc in allocatables)


def workload_grace(kind: str, obj: Mapping[str, Any]) -> float | None:
    """Seconds a not-ready workload is given before it is Failed (None: the agent's default)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(GRACE_ANNOTATION)
    if raw is not None:
        try:
            value = float(raw)
            if value > 0 and math.isfinite(value):
                return value
        except ValueError:
            pass
        log.warning(
            "workload %s: annotation %s=%r is not a number of seconds > 0; ignored",
            (obj.get("metadata") or {}).get("name"),
            GRACE_ANNOTATION,
            raw,
        )
    if kind == "Deployment":
        return progress_deadline_seconds(dict(obj))
    return None


def workload_status(
    kind: str,
    obj: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]] = (),
    replicasets: list[dict] | None = None,
) -> dict:
    """Status, reason, replica counts and grace of one managed workload, without timing.

    Readiness is k8s/readiness.py's and the reason k8s/reasons.py's (both the same as deploy's:
    the current revision's pods' own reasons, then the counts). Failed at once only for what
    will not fix itself: Kubernetes' ProgressDeadlineExceeded, an invalid image, a pod too big
    for every node. Anything else that keeps it from being ready is a Progressing reason; the
    StatusClock fails it after ``grace`` seconds. ``replicasets``: the cluster's managed
    ReplicaSets (None when not read).
    """
    state = readiness(dict(obj), kind)
    result: dict[str, Any] = {
        "status": PROGRESSING,
        "reason": "",
        "replicas": state.desired,
        "ready_replicas": state.ready_replicas,
    }
    if state.failed:
        result.update(status=FAILED, reason=state.failed)
        return result
    if state.ready:
        result["status"] = HEALTHY
        return result
    result["grace"] = workload_grace(kind, obj)
    nodes = list(nodes)
    mine = cast("list[dict]", pods if isinstance(pods, list) else list(pods))  # read, never changed
    why = why_not_ready(dict(obj), mine, replicasets, kind, fits_nowhere=lambda pod: _never_fits(pod, nodes))
    result["reason"] = why.text
    if any(r.permanent for r in why.reasons):
        result["status"] = FAILED
    return result


class StatusClock:
    """Remembers since when each workload has had its status, and fails those not ready too long.

    A workload that stays Progressing longer than its grace (``result["grace"]``, else
    ``not_ready_timeout`` seconds) is reported Failed: a pod that keeps failing to pull, to be
    scheduled or to start, and failures that show no reason (a hung readiness probe). Shorter
    trouble - a surge pod waiting for capacity, a registry hiccup, a pod rescheduled after a node
    loss - stays Progressing, because Kubernetes fixes it by itself.
    """

    def __init__(
        self, not_ready_timeout: float = DEFAULT_NOT_READY_TIMEOUT, now: Callable[[], float] = time.time
    ) -> None:
        self.not_ready_timeout = not_ready_timeout
        self._now = now
        self._since: dict[tuple[str, str, str], tuple[str, float]] = {}

    def stamp(self, key: tuple[str, str, str], result: dict) -> dict:
        result = dict(result)
        grace = result.pop("grace", None) or self.not_ready_timeout
        now = self._now()
        previous = self._since.get(key)
        # a Progressing workload that times out keeps the "since" of its Progressing start
        if previous is None or previous[0] != result["status"]:
            previous = (result["status"], now)
        self._since[key] = previous
        since = previous[1]
        if result["status"] == PROGRESSING and now - since > grace:
            result = dict(
                result,
                status=FAILED,
                reason=f"NotReady: {result['reason']} for more than {grace:g}s",
            )
        return dict(result, reason=result["reason"][:MAX_TEXT], since=since)

    def forget_except(self, keys: set[tuple[str, str, str]]) -> None:
        for key in set(self._since) - keys:
            del self._since[key]


# ---------------------------------------------------------------- talking to the cluster

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")  # all apps/v1, plural = kind + "s"


def load_api_client(kubeconfig: str) -> Any:
    """An ApiClient for the kubeconfig's current context; fails fast instead of retrying."""
    if k8s_client is None:
        raise CollectError("the 'kubernetes' Python package is required: pip install kubernetes")
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(
            config_file=kubeconfig, client_configuration=configuration, persist_config=False
        )
    except Exception as exc:  # the loader raises many types (IO, YAML, ConfigException)
        raise CollectError(f"cannot load kubeconfig {kubeconfig}: {type(exc).__name__}: {exc}")
    configuration.retries = 0  # the agent's own loop is the retry
    return k8s_client.ApiClient(configuration)


class Collector:
    """Reads nodes, pods and managed workloads; one ``collect()`` per agent tick.

    The API client is (re)built from the kubeconfig on demand, and dropped after a failed read,
    so a cluster that comes back (perhaps with a rewritten kubeconfig) is picked up again.
    """

    def __init__(
        self, kubeconfig: str, not_ready_timeout: float = DEFAULT_NOT_READY_TIMEOUT, timeout: float = 5.0
    ):
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.clock = StatusClock(not_ready_timeout)
        self._api: Any = None
        self._refresh: Callable[[Any], None] | None = None
        self._warned_replicasets = False
        self.server_interval = SERVER_INTERVAL
        self._server_at: float | None = None  # monotonic time of the last discovery read

    def _get(self, what: str, path: str, **query: str) -> list[dict]:
        """The ``items`` of one list call, read as raw JSON."""
        try:
            return json.loads(raw_get(self._api, path, query, self.timeout)).get("items") or []
        except k8s_client.exceptions.ApiException as exc:
            raise CollectError(
                f"listing {what}: HTTP {exc.status} {exc.reason}", int(exc.status or 0)
            ) from None
        except ValueError as exc:
            raise CollectError(f"listing {what}: response is not JSON: {exc}") from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # the cluster is unreachable
            exc = getattr(exc, "reason", None) or exc  # MaxRetryError wraps the real cause
            raise CollectError(f"listing {what}: {type(exc).__name__}: {_first_line(exc)}") from None

    def _read(self, resource: str, missing: list[str], **query: str) -> list[dict]:
        """One list call; a 403 is noted in ``missing`` (all are reported together), not raised."""
        try:
            return self._get(resource, _PATHS[resource], **query)
        except CollectError as exc:
            if exc.status == 404 and resource not in ("nodes", "pods"):
                return []  # a minimal API server without this kind
            if exc.status == 401:  # the API server answers but refuses the credentials
                raise ForbiddenError(
                    f"unauthorized: the cluster API refuses the agent's credentials (HTTP 401 listing {resource})",
                    401,
                ) from None
            if exc.status == 403:
                group, _res, verb, _path = next(r for r in AGENT_RIGHTS if r[1] == resource)
                missing.append(right_text(group, resource, verb))
                return []
            raise

    def _replicasets(self, deployments: list[dict]) -> list[dict] | None:
        """The managed ReplicaSets, read only while a Deployment is not ready (their current one
        names the pods whose reasons count); None when not read or not allowed (an agent whose
        ClusterRole predates this right still reports, its reasons from the template's pods)."""
        if all(readiness(d, "Deployment").ready for d in deployments):
            return None
        try:
            return self._get("replicasets", _PATHS["replicasets"], labelSelector=MANAGED_SELECTOR)
        except CollectError as exc:
            if exc.status not in (403, 404):
                raise
            if not self._warned_replicasets:
                log.warning(
                    "cannot list replicasets (HTTP %s): failure reasons are read from the pods running "
                    "each Deployment's template (grant docs/rbac/agent-clusterrole.yml)",
                    exc.status,
                )
                self._warned_replicasets = True
            return None

    def collect(self) -> dict:
        """``{"nodes": [...], "workloads": [...]}``; raises CollectError when unreachable."""
        try:
            return self._collect()
        except CollectError:
            self.close()
            raise

    def _collect(self) -> dict:
        if self._api is None:
            self._api = load_api_client(self.kubeconfig)
            self._refresh = self._api.configuration.refresh_api_key_hook
        if self._refresh is not None:
            # the kubeconfig loader's hook re-applies its whole config (a proxy lookup through the
            # environment included) before every request and re-installs itself; once per tick
            # is enough to renew an expiring token
            self._refresh(self._api.configuration)
            self._api.configuration.refresh_api_key_hook = None
        missing: list[str] = []
        nodes = self._read("nodes", missing)
        pods = self._read("pods", missing)
        objects = {
            kind: self._read(f"{kind.lower()}s", missing, labelSelector=MANAGED_SELECTOR)
            for kind in WORKLOAD_KINDS
        }
        if missing:
            raise ForbiddenError(
                "forbidden: the agent needs these rights: "
                + ", ".join(missing)
                + " (grant the ClusterRole in docs/rbac/agent-clusterrole.yml)",
                403,
            )
        replicasets = self._replicasets(objects["Deployment"])
        requested = requested_by_node(pods)
        node_reports = [summarize_node(n, requested.get(n["metadata"]["name"])) for n in nodes]
        workloads: list[dict] = []
        seen: set[tuple[str, str, str]] = set()
        for kind in WORKLOAD_KINDS:
            for obj in objects[kind]:
                meta = obj.get("metadata") or {}
                labels = meta.get("labels") or {}
                key = (kind, meta.get("namespace", ""), meta.get("name", ""))
                seen.add(key)
                stamped = self.clock.stamp(key, workload_status(kind, obj, pods, nodes, replicasets))
                workloads.append(
                    {
                        "namespace": key[1],
                        "kind": kind,
                        "name": key[2],
                        "application": labels.get(LABEL_APPLICATION, ""),
                        "service": labels.get(LABEL_SERVICE, ""),
                        **stamped,
                    }
                )
        self.clock.forget_except(seen)
        out: dict[str, Any] = {"nodes": node_reports, "workloads": workloads}
        server = self._server()
        if server is not None:
            out["server"] = server
        return out

    def _server(self) -> dict | None:
        """``{"kube_version", "api_versions"}`` (``/version``'s gitVersion; the group-versions of
        ``/api`` and ``/apis``, at most MAX_API_VERSIONS) when due: on (re)connect, then every
        ``server_interval`` s. None when not due or not readable (logged; the KB keeps the last)."""
        now = time.monotonic()
        if self._server_at is not None and now - self._server_at < self.server_interval:
            return None
        self._server_at = now
        try:
            version = json.loads(raw_get(self._api, "/version", {}, self.timeout)).get("gitVersion")
            core = json.loads(raw_get(self._api, "/api", {}, self.timeout)).get("versions") or []
            groups = json.loads(raw_get(self._api, "/apis", {}, self.timeout)).get("groups") or []
        except (
            k8s_client.exceptions.ApiException,
            ValueError,
            AttributeError,
            OSError,
            urllib3.exceptions.HTTPError,
        ) as exc:
            log.warning("cannot read the API server's version and discovery: %s", _first_line(exc))
            return None
        served = {v for v in core if isinstance(v, str)}
        for group in groups if isinstance(groups, list) else []:
            for gv in (group.get("versions") or []) if isinstance(group, dict) else []:
                if isinstance(gv, dict) and isinstance(gv.get("groupVersion"), str):
                    served.add(gv["groupVersion"])
        if not isinstance(version, str) or not version:
            log.warning("the API server's /version names no gitVersion")
            return None
        apis = sorted(v for v in served if 0 < len(v) <= 253)
        if len(apis) > MAX_API_VERSIONS:
            log.warning(
                "the API server serves %d group-versions; reporting the first %d", len(apis), MAX_API_VERSIONS
            )
        return {"kube_version": version[:64], "api_versions": apis[:MAX_API_VERSIONS]}

    def close(self) -> None:
        if self._api is not None:
            try:
                self._api.close()
            except Exception:  # closing a pool on a dead connection may raise; nothing to do
                pass
            self._api = self._refresh = None
        self._server_at = None  # a new connection reads the server again


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
