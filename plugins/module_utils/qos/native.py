# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The native ``qonnect.io/v1`` format (docs/qos-spec.md): objective, services, constraints."""

from __future__ import annotations

from typing import Any

from ansible_collections.qonnect.core.plugins.module_utils import kube_versions
from ansible_collections.qonnect.core.plugins.module_utils.qos.checks import (
    finite,
    label_key_problem,
    label_value_problem,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.limits import MAX_REPLICAS, MAX_SERVICES
from ansible_collections.qonnect.core.plugins.module_utils.qos.manifests import ManifestReader
from ansible_collections.qonnect.core.plugins.module_utils.qos.model import (
    CRITERIA,
    KIND,
    TIERS,
    Application,
    Service,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos.resources import finite_quantity, sum_requests

try:
    import jmespath
except ImportError:  # pragma: no cover - exercised only without jmespath
    jmespath = None  # type: ignore[assignment]  # optional dependency

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class NativeReader(ManifestReader):
    """Reads a ``qonnect.io/v1`` Application, collecting every error with its path."""

    def read(self, data: dict) -> Application:
        self.mapping(data, "", ("apiVersion", "kind", "metadata", "spec"))
        if data.get("kind") != KIND:
            self.err("kind", f"{data.get('kind')!r} is not {KIND}")
        name, namespace, labels = self.metadata(data, ("name", "namespace", "labels"))[:3]
        spec = self.mapping(
            data.get("spec"),
            "spec",
            (
                "objective",
                "services",
                "failureGraceSeconds",
                "clusterGraceSeconds",
                "adopt",
                "survive",
                "failover",
            ),
        )
        failover = self.mapping(spec.get("failover"), "spec.failover", ("hedge",))
        hedge = failover.get("hedge")
        if hedge is not None and not isinstance(hedge, bool):
            self.err("spec.failover.hedge", f"{hedge!r} is not a boolean (true or false)")
        survive = self.survive(spec.get("survive"), "spec.survive")
        grace = self.grace(spec.get("failureGraceSeconds"), "spec.failureGraceSeconds")
        cluster_grace = self.grace(spec.get("clusterGraceSeconds"), "spec.clusterGraceSeconds", zero=True)
        adopt = self.flag(spec.get("adopt"), "spec.adopt")
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
        return self.finish(  # checks every service's manifests' namespaces
            name,
            namespace,
            labels,
            objective,
            services,
            failure_grace_seconds=grace,
            cluster_grace_seconds=cluster_grace,
            adopt=adopt,
            survive=survive,
            hedge=hedge is not False,
        )

    def survive(self, value: Any, path: str) -> list[dict] | None:
        """spec.survive: a list of {cluster: any} and {label: KEY} (one failure scenario each)."""
        if value is None:
            return None
        if not isinstance(value, list):
            self.err(path, "expected a list such as [{cluster: any}, {label: site}]")
            return None
        out: list[dict] = []
        for i, raw in enumerate(value):
            where = f"{path}[{i}]"
            if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in ("cluster", "label"):
                self.err(where, f"{raw!r} is not {{cluster: any}} nor {{label: KEY}}")
                continue
            kind, arg = next(iter(raw.items()))
            if kind == "cluster" and arg != "any":
                self.err(f"{where}.cluster", f"{arg!r} is not 'any' (any one cluster's failure)")
                continue
            if kind == "label":
                problem = label_key_problem(arg)
                if problem:
                    self.err(f"{where}.label", problem)
                    continue
            if {kind: arg} not in out:
                out.append({kind: arg})
        return out

    def flag(self, value: Any, path: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            self.err(path, f"{value!r} is not a boolean (true or false)")
            return False
        return value

    def service(self, raw: Any, path: str) -> Service:
        allowed = ("name", "tier", "replicas", "spread", "dependsOn", "constraints", "manifests", "adopt")
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
            ("clusterSelector", "filter", "maxLatency", "minFree", "kubeVersion"),
        )
        cp = f"{path}.constraints"
        # the service's own kubeVersion first; its charts' are added while they render
        self.kube_constraints = self.kube_version(cons.get("kubeVersion"), f"{cp}.kubeVersion")
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
            kube_version=list(self.kube_constraints),
            manifests=manifests,
            requests=sum_requests(manifests),
            adopt=self.flag(raw.get("adopt"), f"{path}.adopt"),
        )

    def kube_version(self, value: Any, path: str) -> list[str]:
        """A kubeVersion constraint, or a list of them (all must hold), in Helm's syntax."""
        if value is None:
            return []
        items = value if isinstance(value, list) else [value]
        out: list[str] = []
        for i, item in enumerate(items):
            where = f"{path}[{i}]" if isinstance(value, list) else path
            try:
                kube_versions.parse_constraint(item)
            except kube_versions.ConstraintError as exc:
                self.err(where, str(exc))
                continue
            if item not in out:
                out.append(item)
        return out

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
            if not finite(ms) or ms <= 0:
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
