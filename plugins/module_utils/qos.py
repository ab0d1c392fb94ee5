"""The QoS specification: load, validate and normalise an application's placement goals.

Two input formats map to one internal model (:class:`Application`):

* ``qonnect.io/v1`` (documented in docs/qos-spec.md), with objective weights, hard constraints,
  services, their manifests, replicas, spread and dependencies;
* QONNECT's original ``swarmchestrate.tu-berlin.de/v1`` format (``metadata.qos`` weights and one
  manifest bundle per tier), accepted unchanged so existing specs keep working.

Validation collects every error with its path (``QosSpecError.errors``) so a user fixes a spec in
one pass; nothing here raises anything else for bad input.
"""

from __future__ import annotations

import copy
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ansible_collections.qonnect.core.plugins.module_utils import spec_yaml
from ansible_collections.qonnect.core.plugins.module_utils.errors import QonnectError
from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity
from ansible_collections.qonnect.core.plugins.module_utils.spec_yaml import (
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    SpecYamlError,
)

try:
    import jmespath
except ImportError:  # pragma: no cover - exercised only without jmespath
    jmespath = None  # type: ignore[assignment]  # optional dependency

API_VERSION = "qonnect.io/v1"
QONNECT_API_VERSION = "swarmchestrate.tu-berlin.de/v1"
KIND = "Application"
TIERS = ("cloud", "fog", "edge", "any")
CRITERIA = ("energy", "cost", "performance", "latency")
QONNECT_BUNDLES = (("cloud_svc", "cloud"), ("fog_svc", "fog"), ("edge_svc", "edge"))
# QONNECT's address placeholders in its bundles, replaced by the address of the cluster chosen
# for that tier (QONNECT's agents do it; qonnect's deployer does it here).
QONNECT_PLACEHOLDERS = {"cloud": "[CLOUD_CLUSTER_IP]", "fog": "[FOG_CLUSTER_IP]", "edge": "[EDGE_CLUSTER_IP]"}
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
RESOURCES = ("cpu", "memory", "ephemeral_storage")

# Documented limits (docs/qos-spec.md), checked before the work they protect.
MAX_SERVICES = 100
MAX_OBJECTS_PER_SERVICE = 250
MAX_REPLICAS = 1000
MAX_OBJECT_DATA_BYTES = 2**20  # a ConfigMap's or Secret's data, as Kubernetes limits it
MAX_QUANTITY = 2.0**63  # beyond what a Kubernetes quantity can hold
MAX_GRACE_SECONDS = 7 * 86400  # spec.failureGraceSeconds: a week at most
LIMITS = {
    **spec_yaml.LIMITS,
    "services": MAX_SERVICES,
    "objects_per_service": MAX_OBJECTS_PER_SERVICE,
    "replicas": MAX_REPLICAS,
    "configmap_bytes": MAX_OBJECT_DATA_BYTES,
}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Kinds whose pod template's requests count towards a service's footprint.
_POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController")


class QosSpecError(QonnectError, ValueError):
    """A spec that cannot be used; ``errors`` lists every problem as 'path: what is wrong'."""

    summary = "invalid QoS spec"

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("invalid QoS spec:\n  " + "\n  ".join(self.errors))


@dataclass
class Service:
    """One placeable unit: its manifests go together to the clusters the engine picks."""

    name: str
    tier: str = "any"
    replicas: int = 1
    spread: int = 1
    depends_on: list[str] = field(default_factory=list)
    cluster_selector: dict = field(default_factory=dict)
    filter: str | None = None
    max_latency: list[dict] = field(default_factory=list)
    min_free: dict = field(default_factory=dict)
    manifests: list[dict] = field(default_factory=list)
    requests: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "tier": self.tier,
            "replicas": self.replicas,
            "spread": self.spread,
            "depends_on": list(self.depends_on),
            "constraints": {
                "cluster_selector": copy.deepcopy(self.cluster_selector),
                "filter": self.filter,
                "max_latency": copy.deepcopy(self.max_latency),
                "min_free": dict(self.min_free),
            },
            "manifests": copy.deepcopy(self.manifests),
            "requests": dict(self.requests),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Service:
        cons = data.get("constraints") or {}
        return cls(
            name=data["name"],
            tier=data.get("tier", "any"),
            replicas=int(data.get("replicas", 1)),
            spread=int(data.get("spread", 1)),
            depends_on=list(data.get("depends_on") or []),
            cluster_selector=copy.deepcopy(cons.get("cluster_selector") or {}),
            filter=cons.get("filter"),
            max_latency=copy.deepcopy(cons.get("max_latency") or []),
            min_free=dict(cons.get("min_free") or {}),
            manifests=copy.deepcopy(data.get("manifests") or []),
            requests=dict(data.get("requests") or _sum_requests(data.get("manifests") or [])),
        )


@dataclass
class Application:
    """The normalised application: what the placement engine, the KB and the deployer use."""

    name: str
    namespace: str
    objective: dict
    services: list[Service]
    labels: dict = field(default_factory=dict)
    source_format: str = API_VERSION
    # spec.failureGraceSeconds: how long a workload may stay not ready before it counts as
    # Failed and moves (None: the Deployment's progressDeadlineSeconds, 600 s by default)
    failure_grace_seconds: float | None = None

    def service(self, name: str) -> Service:
        for svc in self.services:
            if svc.name == name:
                return svc
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "labels": dict(self.labels),
            "source_format": self.source_format,
            "objective": dict(self.objective),
            "services": [s.to_dict() for s in self.services],
            # only when set: a stored spec without it keeps its version on a re-put
            **(
                {"failure_grace_seconds": self.failure_grace_seconds}
                if self.failure_grace_seconds is not None
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Application:
        return cls(
            name=data["name"],
            namespace=data.get("namespace") or data["name"],
            labels=dict(data.get("labels") or {}),
            source_format=data.get("source_format", API_VERSION),
            objective={k: float(data.get("objective", {}).get(k, 0.0)) for k in CRITERIA},
            services=[Service.from_dict(s) for s in data["services"]],
            failure_grace_seconds=data.get("failure_grace_seconds"),
        )


def load_application_file(path: str, bundles: dict[str, str] | None = None) -> Application:
    """Load a spec file; manifests given by file are resolved relative to the spec's folder.

    ``bundles`` maps QONNECT's tier keys (cloud_svc, fog_svc, edge_svc) to manifest files, as
    QONNECT's API receives them beside the Application file.
    """
    try:
        text = spec_yaml.read_bounded(path, what="spec")
    except SpecYamlError as exc:
        raise QosSpecError(exc.errors) from None
    return load_application(
        text, base_dir=os.path.dirname(os.path.abspath(path)), source=path, bundles=bundles
    )


def read_spec(data: Any, source: str) -> tuple[Any, list[str]]:
    """A spec as data plus the duplicate-key errors of its YAML; QosSpecError when unreadable."""
    try:
        if isinstance(data, (bytes, bytearray)):
            if len(data) > MAX_FILE_BYTES:
                raise SpecYamlError([f"{source}: larger than the limit of {MAX_FILE_BYTES} bytes"])
            data = spec_yaml.decode(bytes(data), source)
        if isinstance(data, str):
            docs, duplicates = spec_yaml.load(data, source)
            return (docs[0] if docs else None), duplicates
        spec_yaml.check_tree(data)
    except SpecYamlError as exc:
        raise QosSpecError(exc.errors) from None
    return data, []


def load_application(
    data: dict | str,
    base_dir: str | None = None,
    source: str | None = None,
    bundles: dict[str, str] | None = None,
) -> Application:
    """Validate a spec (dict or YAML text) and return the normalised :class:`Application`."""
    base_dir = base_dir or os.getcwd()
    data, duplicates = read_spec(data, source or "<spec>")
    if not isinstance(data, dict):
        raise QosSpecError(
            [
                *duplicates,
                f"{source or '<spec>'}: expected a mapping (the Application), got {_typename(data)}",
            ]
        )
    api = data.get("apiVersion")
    loader = _Loader(base_dir)
    loader.errors.extend(duplicates)
    try:
        if api == QONNECT_API_VERSION:
            return loader.qonnect(data, bundles or {})
        if bundles:
            loader.err(
                "bundles", f"tier bundles are only for QONNECT's format (apiVersion {QONNECT_API_VERSION})"
            )
        if api == API_VERSION:
            return loader.native(data)
    except SpecYamlError as exc:  # a limit hit while reading a manifest: stop, with the rest
        raise QosSpecError(loader.errors + exc.errors) from None
    except RecursionError:  # pragma: no cover - depth is bounded before; a last guard
        raise QosSpecError([*loader.errors, "spec: nested too deeply"]) from None
    raise QosSpecError(
        [*loader.errors, f"apiVersion: {api!r} is not one of {API_VERSION}, {QONNECT_API_VERSION}"]
    )


def finite_quantity(value: Any) -> float:
    """A quantity that a cluster can hold: ValueError also for .inf, NaN and '1e400'."""
    number = parse_quantity(value)
    if not math.isfinite(number) or abs(number) >= MAX_QUANTITY:
        raise ValueError(value)
    return number


_SHAPES: dict[type, str] = {dict: "a mapping", list: "a list"}


def _typename(value: Any) -> str:
    names = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "nothing",
    }
    return names.get(type(value), type(value).__name__)


def _sum_requests(manifests: list[dict]) -> dict:
    """Per-replica requests of a service: one pod of every workload in its manifests.

    Follows Kubernetes' effective request: max(sum of containers, largest init container),
    and a container's limits stand in for missing requests (as the API server defaults them).
    Malformed parts count as nothing here: validation reports them.
    """
    total = dict.fromkeys(RESOURCES, 0.0)
    for manifest in manifests:
        pod = _pod_spec(manifest)
        if not pod:
            continue
        app = dict.fromkeys(RESOURCES, 0.0)
        init = dict.fromkeys(RESOURCES, 0.0)
        for key, acc, combine in (("containers", app, _add), ("initContainers", init, max)):
            for container in _as_list(pod.get(key)):
                res = _as_dict(_as_dict(container).get("resources"))
                req = {**_as_dict(res.get("limits")), **_as_dict(res.get("requests"))}
                for name in RESOURCES:
                    raw = req.get(name.replace("_", "-"))
                    if raw is not None:
                        try:
                            acc[name] = combine(acc[name], finite_quantity(raw))
                        except ValueError:
                            pass  # reported by validation
        for name in RESOURCES:
            total[name] += max(app[name], init[name])
    total["cpu"] = round(total["cpu"], 6)
    total["memory"] = round(total["memory"]) if math.isfinite(total["memory"]) else 0
    total["ephemeral_storage"] = (
        round(total["ephemeral_storage"]) if math.isfinite(total["ephemeral_storage"]) else 0
    )
    return total


def _add(a: float, b: float) -> float:
    return a + b


def _as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _pod_spec(manifest: Any) -> dict | None:
    """The pod spec inside a manifest, None when it has none or a part of the way is not a mapping."""
    if not isinstance(manifest, dict):
        return None
    kind = manifest.get("kind")
    spec = _as_dict(manifest.get("spec"))
    if kind == "Pod":
        return spec
    if kind in _POD_TEMPLATE_KINDS:
        return _as_dict(_as_dict(spec.get("template")).get("spec")) or None
    if kind == "CronJob":
        job = _as_dict(_as_dict(spec.get("jobTemplate")).get("spec"))
        return _as_dict(_as_dict(job.get("template")).get("spec")) or None
    return None


def _pod_path(kind: str | None) -> str:
    """Where a manifest of this kind keeps its pod spec (for error paths)."""
    if kind == "Pod":
        return "spec"
    if kind == "CronJob":
        return "spec.jobTemplate.spec.template.spec"
    return "spec.template.spec"


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def label_key_problem(key: Any) -> str | None:
    """Why `key` is not a Kubernetes label key ([prefix/]name), None when it is one."""
    if not isinstance(key, str) or not key:
        return f"{key!r} is not a label key (a non-empty string)"
    prefix, _slash, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"{key!r} is not a label key: the prefix must be a DNS subdomain"
    if not _LABEL_NAME.match(name):
        return (
            f"{key!r} is not a label key: the name part must be at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: Any) -> str | None:
    """Why `value` is not a Kubernetes label value, None when it is one."""
    if not isinstance(value, str):
        return f"{value!r} is {_typename(value)}, not a string (quote it)"
    if not _LABEL_VALUE.match(value):
        return (
            f"{value!r} is not a label value: at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def substitute(value: Any, replacements: dict[str, str]) -> Any:
    """A copy of `value` with every placeholder in its strings replaced (QONNECT's addresses)."""
    if isinstance(value, dict):
        return {k: substitute(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, replacements) for v in value]
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
    return value


class _Loader:
    """Walks one spec, collecting every error instead of stopping at the first."""

    def __init__(self, base_dir: str):
        self.base_dir = base_dir
        self.errors: list[str] = []
        self.bytes_read = 0

    def err(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def finish(
        self, name: str, namespace: str, labels: dict, objective: dict, services: list, **extra: Any
    ) -> Application:
        """The application the spec describes, or QosSpecError listing every problem found."""
        if self.errors:
            raise QosSpecError(self.errors)
        return Application(
            name=name, namespace=namespace, labels=labels, objective=objective, services=services, **extra
        )

    # -- generic checks -------------------------------------------------------------------
    def shaped(self, value: Any, kind: type, path: str, what: str = "") -> bool:
        """``value`` is absent (None) or a ``kind``; otherwise records "expected <what>, got <type>"."""
        if value is None or isinstance(value, kind):
            return True
        self.err(path, f"expected {what or _SHAPES[kind]}, got {_typename(value)}")
        return False

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...] | None = None) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.err(path or "spec", f"expected a mapping, got {_typename(value)}")
            return {}
        if allowed is not None:
            for key in sorted(set(value) - set(allowed), key=str):
                self.err(
                    f"{path}.{key}" if path else str(key),
                    f"unknown field; expected one of {', '.join(allowed)}",
                )
        return value

    def weight(self, value: Any, path: str) -> float:
        if value is None:
            return 0.0
        if not _finite(value) or not 0 <= value <= 1:
            self.err(path, f"{value!r} is not a number between 0 and 1")
            return 0.0
        return float(value)

    def grace(self, value: Any, path: str) -> float | None:
        if value is None:
            return None
        if not _finite(value) or not 0 < value <= MAX_GRACE_SECONDS:
            self.err(path, f"{value!r} is not a number of seconds in (0, {MAX_GRACE_SECONDS}]")
            return None
        return float(value)

    def integer(self, value: Any, path: str, default: int, minimum: int, maximum: int | None = None) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.err(path, f"{value!r} is not an integer >= {minimum}")
            return default
        if maximum is not None and value > maximum:
            self.err(path, f"{value} is more than the limit of {maximum}")
            return default
        return value

    def name(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not _DNS_LABEL.match(value):
            self.err(
                path,
                f"{value!r} is not a DNS label (lower-case letters, digits and '-', at most 63 characters)",
            )
            return str(value)
        return value

    def labels(self, value: Any, path: str) -> dict:
        out = {}
        for key, val in self.mapping(value, path).items():
            problem = label_key_problem(key)
            if problem:
                self.err(f"{path}.{key}", problem)
                continue
            problem = label_value_problem(val)
            if problem:
                self.err(f"{path}.{key}", problem)
                continue
            out[key] = val
        return out

    # -- manifests ------------------------------------------------------------------------
    def read_manifest_file(self, rel: Any, path: str) -> list[dict]:
        if not isinstance(rel, str) or not rel:
            self.err(path, f"{rel!r} is not a file path")
            return []
        full = rel if os.path.isabs(rel) else os.path.join(self.base_dir, rel)
        budget = min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - self.bytes_read)
        try:
            text = spec_yaml.read_bounded(full, budget, what="manifest file")
        except SpecYamlError as exc:
            if exc.detail.startswith("cannot read"):
                self.err(path, f"cannot read manifest file {rel!r}: {exc.detail.split(': ', 1)[-1]}")
            elif budget < MAX_FILE_BYTES and "larger than the limit" in exc.detail:
                self.err(
                    path,
                    f"{rel!r}: the files of this spec together are larger than the "
                    f"limit of {MAX_TOTAL_BYTES // 2**20} MiB",
                )
            else:
                self.err(path, f"{rel!r}: {exc.detail}")
            return []
        self.bytes_read += len(text)
        return self.parse_manifest_text(text, path, source=full)

    def parse_manifest_text(self, text: str, path: str, source: str) -> list[dict]:
        try:
            docs, duplicates = spec_yaml.load(text, source, path=path, multi=True)
        except SpecYamlError as exc:
            self.errors.extend(f"{path}: {e}" for e in exc.errors)
            return []
        self.errors.extend(duplicates)
        out: list[dict] = []
        for i, doc in enumerate(d for d in docs if d is not None):
            out.extend(self.expand_list(doc, f"{path}[document {i + 1}]"))
        return out

    def expand_list(self, doc: Any, path: str) -> list[dict]:
        """A manifest, or a Kubernetes ``List`` of them, becomes a flat list."""
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            return [
                m for i, item in enumerate(doc["items"]) for m in self.expand_list(item, f"{path}.items[{i}]")
            ]
        return [doc] if self.check_manifest(doc, path) else []

    def check_manifest(self, doc: Any, path: str) -> bool:
        if not isinstance(doc, dict):
            self.err(path, f"expected a Kubernetes manifest (a mapping), got {_typename(doc)}")
            return False
        ok = True
        for key in ("apiVersion", "kind"):
            if not isinstance(doc.get(key), str) or not doc.get(key):
                self.err(f"{path}.{key}", "is required (a non-empty string)")
                ok = False
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            self.err(f"{path}.metadata.name", "is required (a non-empty string)")
            ok = False
        elif meta.get("labels") is not None:
            before = len(self.errors)
            self.labels(meta.get("labels"), f"{path}.metadata.labels")
            ok = ok and len(self.errors) == before
        if not self.shaped(doc.get("spec"), dict, f"{path}.spec"):
            return False
        if doc.get("kind") in ("ConfigMap", "Secret"):
            ok = self.check_data(doc, path) and ok
        return self.check_pod(doc, path) and ok

    def check_data(self, doc: dict, path: str) -> bool:
        """A ConfigMap's or Secret's data stays under Kubernetes' 1 MiB."""
        size = 0
        for key in ("data", "binaryData", "stringData"):
            data = doc.get(key)
            if not self.shaped(data, dict, f"{path}.{key}"):
                return False
            for name, value in (data or {}).items():
                if not isinstance(value, str):
                    self.err(f"{path}.{key}.{name}", f"{_typename(value)} is not a string (quote it)")
                    return False
                size += len(str(name)) + len(value)
        if size > MAX_OBJECT_DATA_BYTES:
            self.err(
                f"{path}.data",
                f"{doc['kind']} data of {size} bytes is more than the "
                f"limit of {MAX_OBJECT_DATA_BYTES} bytes (1 MiB)",
            )
            return False
        return True

    def check_pod(self, doc: dict, path: str) -> bool:
        """Each step towards the pod's containers is the right type; quantities are valid."""
        kind = doc.get("kind")
        if kind not in _POD_TEMPLATE_KINDS and kind not in ("Pod", "CronJob"):
            return True
        node: Any = doc
        where = path
        for step in _pod_path(kind).split("."):
            node = node.get(step) if isinstance(node, dict) else None
            where = f"{where}.{step}"
            if node is None:
                return True
            if not self.shaped(node, dict, where):
                return False
        ok = True
        for key in ("containers", "initContainers"):
            containers = node.get(key)
            if not self.shaped(containers, list, f"{where}.{key}"):
                ok = False
                continue
            for ci, container in enumerate(containers or []):
                ok = self.check_container(container, f"{where}.{key}[{ci}]") and ok
        return ok

    def check_container(self, container: Any, path: str) -> bool:
        """A container is a mapping; its resources' requests and limits are quantities."""
        if not isinstance(container, dict):  # null too: a container is required here
            self.err(path, f"expected a container (a mapping), got {_typename(container)}")
            return False
        res = container.get("resources")
        if not self.shaped(res, dict, f"{path}.resources"):
            return False
        ok = True
        for rkind in ("requests", "limits"):
            values = (res or {}).get(rkind)
            if not self.shaped(values, dict, f"{path}.resources.{rkind}"):
                ok = False
                continue
            for rname, raw in (values or {}).items():
                try:
                    finite_quantity(raw)
                except ValueError:
                    self.err(
                        f"{path}.resources.{rkind}.{rname}",
                        f"{raw!r} is not a Kubernetes quantity (e.g. 250m, 128Mi)",
                    )
                    ok = False
        return ok

    def manifests(self, value: Any, path: str) -> list[dict]:
        if value is None:
            self.err(path, "is required (a list of manifests or {file: PATH} entries)")
            return []
        if not isinstance(value, list) or not value:
            self.err(path, "expected a non-empty list of manifests or {file: PATH} entries")
            return []
        out: list[dict] = []
        for i, entry in enumerate(value):
            p = f"{path}[{i}]"
            if isinstance(entry, dict) and set(entry) == {"file"}:
                out.extend(self.read_manifest_file(entry["file"], f"{p}.file"))
            else:
                out.extend(self.expand_list(entry, p))
            if len(out) > MAX_OBJECTS_PER_SERVICE:
                break
        return self.bounded(out, path)

    def bounded(self, objects: list[dict], path: str) -> list[dict]:
        if len(objects) > MAX_OBJECTS_PER_SERVICE:
            self.err(path, f"more than the limit of {MAX_OBJECTS_PER_SERVICE} objects in one service")
            return objects[:MAX_OBJECTS_PER_SERVICE]
        return objects

    # -- constraints ----------------------------------------------------------------------
    def selector(self, value: Any, path: str) -> dict:
        sel = self.mapping(value, path, ("matchLabels", "matchExpressions"))
        labels = self.labels(sel.get("matchLabels"), f"{path}.matchLabels")
        exprs = sel.get("matchExpressions")
        out_exprs: list[dict] = []
        if not self.shaped(exprs, list, f"{path}.matchExpressions"):
            exprs = []
        for i, expr in enumerate(exprs or []):
            p = f"{path}.matchExpressions[{i}]"
            expr = self.mapping(expr, p, ("key", "operator", "values"))
            key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
            problem = label_key_problem(key)
            if problem:
                self.err(f"{p}.key", problem)
            if op not in SELECTOR_OPERATORS:
                self.err(f"{p}.operator", f"{op!r} is not one of {', '.join(SELECTOR_OPERATORS)}")
            if not self.shaped(values, list, f"{p}.values", "a list of strings"):
                values = []
            values = values or []
            if op in ("In", "NotIn"):
                if not values:
                    self.err(f"{p}.values", f"operator {op} needs a non-empty list of strings")
                for vi, val in enumerate(values):
                    problem = label_value_problem(val)
                    if problem:
                        self.err(f"{p}.values[{vi}]", problem)
            if op in ("Exists", "DoesNotExist") and values:
                self.err(f"{p}.values", f"must be empty for operator {op}")
            out_exprs.append(
                {"key": key, "operator": op, "values": [v for v in values if isinstance(v, str)]}
            )
        out: dict = {}
        if labels:
            out["match_labels"] = labels
        if out_exprs:
            out["match_expressions"] = out_exprs
        return out

    def jmes_filter(self, value: Any, path: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            self.err(path, f"{value!r} is not a JMESPath expression (a non-empty string)")
            return None
        if jmespath is None:
            self.err(path, "the jmespath package is required for filters: pip install jmespath")
            return value
        try:
            jmespath.compile(value)
        except jmespath.exceptions.JMESPathError as exc:
            self.err(path, f"{value!r} is not a valid JMESPath expression: {exc}")
        except (RecursionError, ValueError, TypeError) as exc:
            self.err(path, f"{value!r} is not a valid JMESPath expression ({type(exc).__name__})")
        return value

    def max_latency(self, value: Any, path: str) -> list[dict]:
        if value is None:
            return []
        items = value if isinstance(value, list) else [value]
        out = []
        for i, item in enumerate(items):
            p = f"{path}[{i}]" if isinstance(value, list) else path
            item = self.mapping(item, p, ("from", "ms"))
            loc, ms = item.get("from"), item.get("ms")
            if not isinstance(loc, str) or not loc:
                self.err(f"{p}.from", "is required (the name of a location)")
            if not _finite(ms) or ms <= 0:
                self.err(f"{p}.ms", f"{ms!r} is not a positive number of milliseconds")
                continue
            out.append({"from": loc, "ms": float(ms)})
        return out

    def min_free(self, value: Any, path: str) -> dict:
        value = self.mapping(value, path, ("cpu", "memory"))
        out = {}
        for key, raw in value.items():
            try:
                qty = finite_quantity(raw)
                if qty < 0:
                    raise ValueError(raw)
            except ValueError:
                self.err(
                    f"{path}.{key}", f"{raw!r} is not a non-negative Kubernetes quantity (e.g. 500m, 1Gi)"
                )
                continue
            if key in ("cpu", "memory"):
                out[key] = qty if key == "cpu" else int(qty)
        return out

    # -- formats --------------------------------------------------------------------------
    def metadata(self, data: dict, allowed: tuple[str, ...]) -> tuple[str, str, dict, dict]:
        meta = data.get("metadata")
        if not isinstance(meta, dict):
            self.err("metadata", f"expected a mapping with at least 'name', got {_typename(meta)}")
            meta = {}
        self.mapping(meta, "metadata", allowed)
        name = self.name(meta.get("name"), "metadata.name")
        ns = meta.get("namespace")
        namespace = self.name(ns, "metadata.namespace") if ns is not None else name
        labels = self.labels(meta.get("labels"), "metadata.labels")
        return name, namespace, labels, meta

    def native(self, data: dict) -> Application:
        self.mapping(data, "", ("apiVersion", "kind", "metadata", "spec"))
        if data.get("kind") != KIND:
            self.err("kind", f"{data.get('kind')!r} is not {KIND}")
        name, namespace, labels = self.metadata(data, ("name", "namespace", "labels"))[:3]
        spec = self.mapping(data.get("spec"), "spec", ("objective", "services", "failureGraceSeconds"))
        grace = self.grace(spec.get("failureGraceSeconds"), "spec.failureGraceSeconds")
        obj = self.mapping(spec.get("objective"), "spec.objective", CRITERIA)
        objective = {k: self.weight(obj.get(k), f"spec.objective.{k}") for k in CRITERIA}
        raw_services = spec.get("services")
        if not isinstance(raw_services, list) or not raw_services:
            self.err("spec.services", "expected a non-empty list of services")
            raw_services = []
        if len(raw_services) > MAX_SERVICES:
            self.err(
                "spec.services", f"{len(raw_services)} services are more than the limit of {MAX_SERVICES}"
            )
            raw_services = raw_services[:MAX_SERVICES]
        services = [self.service(s, f"spec.services[{i}]") for i, s in enumerate(raw_services)]
        self.check_graph(services)
        return self.finish(name, namespace, labels, objective, services, failure_grace_seconds=grace)

    def service(self, raw: Any, path: str) -> Service:
        allowed = ("name", "tier", "replicas", "spread", "dependsOn", "constraints", "manifests")
        raw = self.mapping(raw, path, allowed)
        name = self.name(raw.get("name"), f"{path}.name")
        tier = raw.get("tier", "any")
        if not isinstance(tier, str) or tier not in TIERS:
            self.err(f"{path}.tier", f"{tier!r} is not one of {', '.join(TIERS)}")
            tier = "any"
        replicas = self.integer(raw.get("replicas"), f"{path}.replicas", 1, 1, MAX_REPLICAS)
        spread = self.integer(raw.get("spread"), f"{path}.spread", 1, 1, MAX_REPLICAS)
        if spread > replicas:
            self.err(
                f"{path}.spread",
                f"{spread} is more than replicas ({replicas}): each cluster needs at least one replica",
            )
        deps = raw.get("dependsOn") or []
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            self.err(f"{path}.dependsOn", "expected a list of service names")
            deps = []
        cons = self.mapping(
            raw.get("constraints"),
            f"{path}.constraints",
            ("clusterSelector", "filter", "maxLatency", "minFree"),
        )
        cp = f"{path}.constraints"
        manifests = self.manifests(raw.get("manifests"), f"{path}.manifests")
        return Service(
            name=name,
            tier=tier,
            replicas=replicas,
            spread=spread,
            depends_on=sorted(set(deps)),
            cluster_selector=self.selector(cons.get("clusterSelector"), f"{cp}.clusterSelector"),
            filter=self.jmes_filter(cons.get("filter"), f"{cp}.filter"),
            max_latency=self.max_latency(cons.get("maxLatency"), f"{cp}.maxLatency"),
            min_free=self.min_free(cons.get("minFree"), f"{cp}.minFree"),
            manifests=manifests,
            requests=_sum_requests(manifests),
        )

    def check_graph(self, services: list[Service]) -> None:
        index: dict[str, int] = {}
        for i, svc in enumerate(services):
            if svc.name in index:
                self.err(
                    f"spec.services[{i}].name",
                    f"{svc.name!r} is already used by spec.services[{index[svc.name]}]",
                )
            index.setdefault(svc.name, i)
        for i, svc in enumerate(services):
            for dep in svc.depends_on:
                if dep == svc.name:
                    self.err(f"spec.services[{i}].dependsOn", "a service cannot depend on itself")
                elif dep not in index:
                    self.err(f"spec.services[{i}].dependsOn", f"{dep!r} is not a service of this application")

    def qonnect(self, data: dict, bundles: dict[str, str]) -> Application:
        """QONNECT's format: one service per tier bundle, each placed on one cluster of it.

        The bundles sit in ``spec`` or at the top level, or come beside the file (``bundles``:
        tier key -> manifest file, as QONNECT's API takes them as multipart fields).
        """
        keys = tuple(k for k, _tier in QONNECT_BUNDLES)
        self.mapping(data, "", ("apiVersion", "kind", "metadata", "spec", *keys))
        if data.get("kind") != KIND:
            self.err("kind", f"{data.get('kind')!r} is not {KIND}")
        name, namespace, labels, meta = self.metadata(data, ("name", "namespace", "labels", "qos"))
        qos = self.mapping(meta.get("qos"), "metadata.qos", ("energy", "pricing", "performance"))
        if not qos:
            self.err("metadata.qos", "is required (energy, pricing, performance weights)")
        objective = {
            "energy": self.weight(qos.get("energy"), "metadata.qos.energy"),
            "cost": self.weight(qos.get("pricing"), "metadata.qos.pricing"),
            "performance": self.weight(qos.get("performance"), "metadata.qos.performance"),
            "latency": 0.0,
        }
        spec = self.mapping(data.get("spec"), "spec", keys)
        if not isinstance(bundles, dict):
            self.err("bundles", f"expected a mapping of {', '.join(keys)} to files")
            bundles = {}
        for key in sorted(set(bundles) - set(keys), key=str):
            self.err(f"bundles.{key}", f"unknown tier bundle; expected one of {', '.join(keys)}")
        services = []
        for key, tier in QONNECT_BUNDLES:
            where = "spec" if key in spec else ""
            raw = spec.get(key, data.get(key))
            path = f"{where}.{key}" if where else key
            if key in bundles:
                if raw is not None:
                    self.err(f"bundles.{key}", f"given twice: also in the spec at {path}")
                manifests = self.bounded(
                    self.read_manifest_file(bundles[key], f"bundles.{key}"), f"bundles.{key}"
                )
                if not manifests and not any(e.startswith(f"bundles.{key}") for e in self.errors):
                    self.err(f"bundles.{key}", "holds no manifests")
            elif raw is None:
                continue
            else:
                manifests = self.bundle(raw, path)
            services.append(
                Service(name=f"{tier}-svc", tier=tier, manifests=manifests, requests=_sum_requests(manifests))
            )
        if not services:
            self.err(
                "spec",
                "expected at least one of cloud_svc, fog_svc, edge_svc "
                "(a manifest file, YAML text or a list of manifests; or give the "
                "bundle files beside the Application, e.g. --bundle cloud_svc=FILE)",
            )
        return self.finish(name, namespace, labels, objective, services, source_format=QONNECT_API_VERSION)

    def bundle(self, raw: Any, path: str) -> list[dict]:
        """A tier bundle: a file path, multi-document YAML text, {file: PATH} or a list."""
        if isinstance(raw, str):
            if "\n" not in raw.strip() and raw.strip().endswith((".yaml", ".yml", ".json")):
                found = self.read_manifest_file(raw.strip(), path)
            else:
                found = self.parse_manifest_text(raw, path, source=path)
        elif isinstance(raw, dict) and set(raw) == {"file"}:
            found = self.read_manifest_file(raw["file"], f"{path}.file")
        elif isinstance(raw, list):
            found = self.manifests(raw, path)
        else:
            self.err(
                path, f"expected a manifest file path, YAML text or a list of manifests, got {_typename(raw)}"
            )
            return []
        if not found and not any(e.startswith(path) for e in self.errors):
            self.err(path, "holds no manifests")
        return self.bounded(found, path)
