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
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils.quantity import parse_quantity

try:
    import yaml
except ImportError:  # pragma: no cover - exercised only without PyYAML
    yaml = None

try:
    import jmespath
except ImportError:  # pragma: no cover - exercised only without jmespath
    jmespath = None

API_VERSION = "qonnect.io/v1"
QONNECT_API_VERSION = "swarmchestrate.tu-berlin.de/v1"
KIND = "Application"
TIERS = ("cloud", "fog", "edge", "any")
CRITERIA = ("energy", "cost", "performance", "latency")
QONNECT_BUNDLES = (("cloud_svc", "cloud"), ("fog_svc", "fog"), ("edge_svc", "edge"))
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
RESOURCES = ("cpu", "memory", "ephemeral_storage")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Kinds whose pod template's requests count towards a service's footprint.
_POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
                       "ReplicationController")


class QosSpecError(ValueError):
    """A spec that cannot be used; ``errors`` lists every problem as 'path: what is wrong'."""

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
        )


def load_application_file(path: str) -> Application:
    """Load a spec file; manifests given by file are resolved relative to the spec's folder."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise QosSpecError([f"{path}: cannot read the spec: {exc.strerror or exc}"]) from None
    return load_application(text, base_dir=os.path.dirname(os.path.abspath(path)), source=path)


def load_application(data: dict | str, base_dir: str | None = None,
                     source: str | None = None) -> Application:
    """Validate a spec (dict or YAML text) and return the normalised :class:`Application`."""
    base_dir = base_dir or os.getcwd()
    if isinstance(data, str):
        data = _parse_yaml_single(data, source or "<spec>")
    if not isinstance(data, dict):
        raise QosSpecError([f"{source or '<spec>'}: expected a mapping (the Application), "
                            f"got {_typename(data)}"])
    api = data.get("apiVersion")
    if api == QONNECT_API_VERSION:
        return _Loader(base_dir).qonnect(data)
    if api == API_VERSION:
        return _Loader(base_dir).native(data)
    raise QosSpecError([f"apiVersion: {api!r} is not one of {API_VERSION}, {QONNECT_API_VERSION}"])


def _typename(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "nothing"}
    return names.get(type(value), type(value).__name__)


def _require_yaml() -> None:
    if yaml is None:
        raise QosSpecError(["PyYAML is required to read YAML: install it with 'pip install PyYAML'"])


def _yaml_error(exc: Exception, source: str) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"{source}:{mark.line + 1}:{mark.column + 1}: YAML syntax error: {problem}"
    return f"{source}: YAML syntax error: {problem}"


def _parse_yaml_single(text: str, source: str) -> Any:
    _require_yaml()
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise QosSpecError([_yaml_error(exc, source)]) from None


def _sum_requests(manifests: list[dict]) -> dict:
    """Per-replica requests of a service: one pod of every workload in its manifests.

    Follows Kubernetes' effective request: max(sum of containers, largest init container),
    and a container's limits stand in for missing requests (as the API server defaults them).
    """
    total = dict.fromkeys(RESOURCES, 0.0)
    for manifest in manifests:
        pod = _pod_spec(manifest)
        if not pod:
            continue
        app = dict.fromkeys(RESOURCES, 0.0)
        init = dict.fromkeys(RESOURCES, 0.0)
        for key, acc, combine in (("containers", app, _add), ("initContainers", init, max)):
            for container in pod.get(key) or []:
                res = (container or {}).get("resources") or {}
                req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
                for name in RESOURCES:
                    raw = req.get(name.replace("_", "-"))
                    if raw is not None:
                        try:
                            acc[name] = combine(acc[name], parse_quantity(raw))
                        except ValueError:
                            pass  # reported by validation
        for name in RESOURCES:
            total[name] += max(app[name], init[name])
    total["cpu"] = round(total["cpu"], 6)
    total["memory"] = round(total["memory"])
    total["ephemeral_storage"] = round(total["ephemeral_storage"])
    return total


def _add(a: float, b: float) -> float:
    return a + b


def _pod_spec(manifest: dict) -> dict | None:
    if not isinstance(manifest, dict):
        return None
    kind = manifest.get("kind")
    spec = manifest.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in _POD_TEMPLATE_KINDS:
        return ((spec.get("template") or {}).get("spec")) or None
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return ((job.get("template") or {}).get("spec")) or None
    return None


def _pod_path(kind: str | None) -> str:
    """Where a manifest of this kind keeps its pod spec (for error paths)."""
    if kind == "Pod":
        return "spec"
    if kind == "CronJob":
        return "spec.jobTemplate.spec.template.spec"
    return "spec.template.spec"


class _Loader:
    """Walks one spec, collecting every error instead of stopping at the first."""

    def __init__(self, base_dir: str):
        self.base_dir = base_dir
        self.errors: list[str] = []

    def err(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def finish(self, app: Application) -> Application:
        if self.errors:
            raise QosSpecError(self.errors)
        return app

    # -- generic checks -------------------------------------------------------------------
    def mapping(self, value: Any, path: str, allowed: tuple[str, ...] | None = None) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.err(path, f"expected a mapping, got {_typename(value)}")
            return {}
        if allowed is not None:
            for key in sorted(set(value) - set(allowed), key=str):
                self.err(f"{path}.{key}" if path else str(key),
                         f"unknown field; expected one of {', '.join(allowed)}")
        return value

    def weight(self, value: Any, path: str) -> float:
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            self.err(path, f"{value!r} is not a number between 0 and 1")
            return 0.0
        return float(value)

    def integer(self, value: Any, path: str, default: int, minimum: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.err(path, f"{value!r} is not an integer >= {minimum}")
            return default
        return value

    def name(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not _DNS_LABEL.match(value):
            self.err(path, f"{value!r} is not a DNS label (lower-case letters, digits and '-', "
                           "at most 63 characters)")
            return str(value)
        return value

    # -- manifests ------------------------------------------------------------------------
    def read_manifest_file(self, rel: Any, path: str) -> list[dict]:
        if not isinstance(rel, str) or not rel:
            self.err(path, f"{rel!r} is not a file path")
            return []
        full = rel if os.path.isabs(rel) else os.path.join(self.base_dir, rel)
        try:
            with open(full, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            self.err(path, f"cannot read manifest file {rel!r}: {exc.strerror or exc}")
            return []
        return self.parse_manifest_text(text, path, source=full)

    def parse_manifest_text(self, text: str, path: str, source: str) -> list[dict]:
        if yaml is None:
            self.err(path, "PyYAML is required to read manifests: install it with "
                           "'pip install PyYAML'")
            return []
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            self.errors.append(_yaml_error(exc, source))
            return []
        out: list[dict] = []
        for i, doc in enumerate(docs):
            out.extend(self.expand_list(doc, f"{path}[document {i + 1}]"))
        return out

    def expand_list(self, doc: Any, path: str) -> list[dict]:
        """A manifest, or a Kubernetes ``List`` of them, becomes a flat list."""
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            return [m for i, item in enumerate(doc["items"])
                    for m in self.expand_list(item, f"{path}.items[{i}]")]
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
        pod = _pod_spec(doc)
        for key in ("containers", "initContainers"):
            for ci, container in enumerate((pod or {}).get(key) or []):
                res = (container or {}).get("resources") or {}
                for kind in ("requests", "limits"):
                    for rname, raw in ((res.get(kind) or {}) if isinstance(res, dict) else {}).items():
                        try:
                            parse_quantity(raw)
                        except ValueError:
                            self.err(f"{path}.{_pod_path(doc.get('kind'))}.{key}[{ci}]"
                                     f".resources.{kind}.{rname}",
                                     f"{raw!r} is not a Kubernetes quantity (e.g. 250m, 128Mi)")
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
        return out

    # -- constraints ----------------------------------------------------------------------
    def selector(self, value: Any, path: str) -> dict:
        sel = self.mapping(value, path, ("matchLabels", "matchExpressions"))
        labels = self.mapping(sel.get("matchLabels"), f"{path}.matchLabels")
        for key, val in labels.items():
            if not isinstance(val, str):
                self.err(f"{path}.matchLabels.{key}", f"{val!r} is not a string")
        exprs = sel.get("matchExpressions")
        out_exprs: list[dict] = []
        if exprs is not None and not isinstance(exprs, list):
            self.err(f"{path}.matchExpressions", f"expected a list, got {_typename(exprs)}")
            exprs = []
        for i, expr in enumerate(exprs or []):
            p = f"{path}.matchExpressions[{i}]"
            expr = self.mapping(expr, p, ("key", "operator", "values"))
            key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
            if not isinstance(key, str) or not key:
                self.err(f"{p}.key", "is required (a label key)")
            if op not in SELECTOR_OPERATORS:
                self.err(f"{p}.operator", f"{op!r} is not one of {', '.join(SELECTOR_OPERATORS)}")
            if op in ("In", "NotIn") and (not isinstance(values, list) or not values
                                          or not all(isinstance(v, str) for v in values)):
                self.err(f"{p}.values", f"operator {op} needs a non-empty list of strings")
            if op in ("Exists", "DoesNotExist") and values:
                self.err(f"{p}.values", f"must be empty for operator {op}")
            out_exprs.append({"key": key, "operator": op, "values": list(values or [])})
        out: dict = {}
        if labels:
            out["match_labels"] = {str(k): str(v) for k, v in labels.items()}
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
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms <= 0:
                self.err(f"{p}.ms", f"{ms!r} is not a positive number of milliseconds")
                continue
            out.append({"from": loc, "ms": float(ms)})
        return out

    def min_free(self, value: Any, path: str) -> dict:
        value = self.mapping(value, path, ("cpu", "memory"))
        out = {}
        for key, raw in value.items():
            try:
                qty = parse_quantity(raw)
                if qty < 0:
                    raise ValueError(raw)
            except ValueError:
                self.err(f"{path}.{key}", f"{raw!r} is not a non-negative Kubernetes quantity "
                                          "(e.g. 500m, 1Gi)")
                continue
            out[key] = qty if key == "cpu" else int(qty)
        return out

    # -- formats --------------------------------------------------------------------------
    def metadata(self, data: dict) -> tuple[str, str, dict, dict]:
        meta = data.get("metadata")
        if not isinstance(meta, dict):
            self.err("metadata", f"expected a mapping with at least 'name', got {_typename(meta)}")
            meta = {}
        name = self.name(meta.get("name"), "metadata.name")
        ns = meta.get("namespace")
        namespace = self.name(ns, "metadata.namespace") if ns is not None else name
        labels = self.mapping(meta.get("labels"), "metadata.labels")
        return name, namespace, {str(k): str(v) for k, v in labels.items()}, meta

    def native(self, data: dict) -> Application:
        self.mapping(data, "", ("apiVersion", "kind", "metadata", "spec"))
        if data.get("kind") != KIND:
            self.err("kind", f"{data.get('kind')!r} is not {KIND}")
        name, namespace, labels = self.metadata(data)[:3]
        spec = self.mapping(data.get("spec"), "spec", ("objective", "services"))
        obj = self.mapping(spec.get("objective"), "spec.objective", CRITERIA)
        objective = {k: self.weight(obj.get(k), f"spec.objective.{k}") for k in CRITERIA}
        raw_services = spec.get("services")
        if not isinstance(raw_services, list) or not raw_services:
            self.err("spec.services", "expected a non-empty list of services")
            raw_services = []
        services = [self.service(s, f"spec.services[{i}]") for i, s in enumerate(raw_services)]
        self.check_graph(services)
        return self.finish(Application(name=name, namespace=namespace, labels=labels,
                                       objective=objective, services=services))

    def service(self, raw: Any, path: str) -> Service:
        allowed = ("name", "tier", "replicas", "spread", "dependsOn", "constraints", "manifests")
        raw = self.mapping(raw, path, allowed)
        name = self.name(raw.get("name"), f"{path}.name")
        tier = raw.get("tier", "any")
        if tier not in TIERS:
            self.err(f"{path}.tier", f"{tier!r} is not one of {', '.join(TIERS)}")
        replicas = self.integer(raw.get("replicas"), f"{path}.replicas", 1, 1)
        spread = self.integer(raw.get("spread"), f"{path}.spread", 1, 1)
        if spread > replicas:
            self.err(f"{path}.spread", f"{spread} is more than replicas ({replicas}): each "
                                       "cluster needs at least one replica")
        deps = raw.get("dependsOn") or []
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            self.err(f"{path}.dependsOn", "expected a list of service names")
            deps = []
        cons = self.mapping(raw.get("constraints"), f"{path}.constraints",
                            ("clusterSelector", "filter", "maxLatency", "minFree"))
        cp = f"{path}.constraints"
        manifests = self.manifests(raw.get("manifests"), f"{path}.manifests")
        return Service(
            name=name, tier=tier if tier in TIERS else "any", replicas=replicas, spread=spread,
            depends_on=sorted(set(deps)),
            cluster_selector=self.selector(cons.get("clusterSelector"), f"{cp}.clusterSelector"),
            filter=self.jmes_filter(cons.get("filter"), f"{cp}.filter"),
            max_latency=self.max_latency(cons.get("maxLatency"), f"{cp}.maxLatency"),
            min_free=self.min_free(cons.get("minFree"), f"{cp}.minFree"),
            manifests=manifests, requests=_sum_requests(manifests),
        )

    def check_graph(self, services: list[Service]) -> None:
        index: dict[str, int] = {}
        for i, svc in enumerate(services):
            if svc.name in index:
                self.err(f"spec.services[{i}].name", f"{svc.name!r} is already used by "
                                                     f"spec.services[{index[svc.name]}]")
            index.setdefault(svc.name, i)
        for i, svc in enumerate(services):
            for dep in svc.depends_on:
                if dep == svc.name:
                    self.err(f"spec.services[{i}].dependsOn", "a service cannot depend on itself")
                elif dep not in index:
                    self.err(f"spec.services[{i}].dependsOn",
                             f"{dep!r} is not a service of this application")

    def qonnect(self, data: dict) -> Application:
        """QONNECT's format: one service per tier bundle, each placed on one cluster of it."""
        if data.get("kind") != KIND:
            self.err("kind", f"{data.get('kind')!r} is not {KIND}")
        name, namespace, labels, meta = self.metadata(data)
        qos = self.mapping(meta.get("qos"), "metadata.qos", ("energy", "pricing", "performance"))
        if not qos:
            self.err("metadata.qos", "is required (energy, pricing, performance weights)")
        objective = {
            "energy": self.weight(qos.get("energy"), "metadata.qos.energy"),
            "cost": self.weight(qos.get("pricing"), "metadata.qos.pricing"),
            "performance": self.weight(qos.get("performance"), "metadata.qos.performance"),
            "latency": 0.0,
        }
        spec = self.mapping(data.get("spec"), "spec")
        services = []
        for key, tier in QONNECT_BUNDLES:
            where = "spec" if key in spec else ""
            raw = spec.get(key, data.get(key))
            if raw is None:
                continue
            path = f"{where}.{key}" if where else key
            manifests = self.bundle(raw, path)
            services.append(Service(name=f"{tier}-svc", tier=tier, manifests=manifests,
                                    requests=_sum_requests(manifests)))
        if not services:
            self.err("spec", "expected at least one of cloud_svc, fog_svc, edge_svc "
                             "(a manifest file, YAML text or a list of manifests)")
        return self.finish(Application(name=name, namespace=namespace, labels=labels,
                                       objective=objective, services=services,
                                       source_format=QONNECT_API_VERSION))

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
            self.err(path, f"expected a manifest file path, YAML text or a list of manifests, "
                           f"got {_typename(raw)}")
            return []
        if not found and not any(e.startswith(path) for e in self.errors):
            self.err(path, "holds no manifests")
        return found
