"""Hard constraints: each one small filter over clusters behind one interface.

A filter returns a boolean mask over the fleet's clusters (vectorised, cached where it does not
depend on capacity) and, for a rejected cluster, the reason shown in the plan's explanation.
The chain's order is the order reasons are reported in; the first filter that leaves no cluster
is the constraint named when a service cannot be placed.
"""

from __future__ import annotations

import json

from ansible_collections.qonnect.core.plugins.module_utils import kube_versions
from ansible_collections.qonnect.core.plugins.module_utils.labels import labels_match
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import (
    TIER_CODES,
    np,
    request_vector,
)
from ansible_collections.qonnect.core.plugins.module_utils.quantity import (
    format_bytes,
    format_cpu,
    format_quantity,
)

try:
    import jmespath
except ImportError:  # pragma: no cover - exercised only without jmespath
    jmespath = None  # type: ignore[assignment]  # optional dependency


# A cluster a service runs on keeps meeting its maxLatency bound up to this much above it: a
# measured latency (already the median of the agent's last probes) must exceed the bound by
# more than the band before the placement loses it, so a bound near the measured value does
# not flap (issue 22.6). New clusters must meet the bound itself.
LATENCY_HOLD = 0.25


class ServiceContext:
    """What the filters need to judge one service against the current capacity state
    (``current``: mask of the clusters the service runs on now, for the latency hold)."""

    def __init__(self, fleet, service, exclude: frozenset, current=None):
        self.fleet = fleet
        self.service = service
        self.exclude = exclude
        self.current = current
        self.req = request_vector(service)
        self._fits: np.ndarray | None = None
        self._ok: np.ndarray | None = None

    def ok_nodes(self) -> np.ndarray:
        """Nodes this service may run on: eligible, with every blocking taint tolerated."""
        if self._ok is None:
            self._ok = self.fleet.node_ok_for(self.service)
        return self._ok

    def fits(self) -> np.ndarray:
        """Nodes that are eligible and have room for one more replica right now.

        Computed once per context (the capacity filter and the assignment share it); callers
        get a copy they may update as they place replicas.
        """
        if self._fits is None:
            f = self.fleet
            ok = self.ok_nodes().copy()
            for j in np.nonzero(self.req > 0)[0]:  # a zero request fits anywhere (Kubernetes)
                ok &= f.free[:, j] >= self.req[j] - 1e-9
            self._fits = ok
        return self._fits.copy()

    def node_fits(self, v: int) -> bool:
        """:meth:`fits` for one node (after its free capacity changed)."""
        free = self.fleet.free[v]
        return bool(self.ok_nodes()[v]) and all(
            free[j] >= self.req[j] - 1e-9 for j in range(3) if self.req[j] > 0
        )


class Filter:
    """One hard constraint."""

    def applies(self, ctx: ServiceContext) -> bool:
        return True

    def constraint(self, ctx: ServiceContext) -> str:
        raise NotImplementedError

    def mask(self, ctx: ServiceContext):
        raise NotImplementedError

    def reason(self, ctx: ServiceContext, c: int) -> str:
        raise NotImplementedError


class Healthy(Filter):
    def constraint(self, ctx):
        return (
            "health (a healthy cluster with a Ready, schedulable node without pressure or untolerated taints)"
        )

    def mask(self, ctx):
        if ctx.ok_nodes() is ctx.fleet.node_ok:
            return ctx.fleet.healthy & ctx.fleet.has_ok_node
        return ctx.fleet.healthy & ctx.fleet.cluster_any(ctx.ok_nodes())

    def reason(self, ctx, c):
        f = ctx.fleet
        if not f.healthy[c]:
            return "cluster is not healthy (no recent heartbeat)"
        first, count = f.node_start[c], f.node_count[c]
        if not count:
            return "cluster has no nodes"
        why = "; ".join(
            f"{f.node_names[i]} {f.node_reason[i] or 'taints not tolerated'}"
            for i in range(first, first + count)
            if not ctx.ok_nodes()[i]
        )
        return f"no eligible node: {why}"


class Excluded(Filter):
    def applies(self, ctx):
        return bool(ctx.exclude)

    def constraint(self, ctx):
        return "the exclusion list (" + ", ".join(sorted(ctx.exclude)) + ")"

    def mask(self, ctx):
        key = ("exclude", ctx.exclude)
        if key not in ctx.fleet.cache:
            ctx.fleet.cache[key] = np.array(
                [n not in ctx.exclude for n in ctx.fleet.cluster_names], dtype=bool
            )
        return ctx.fleet.cache[key]

    def reason(self, ctx, c):
        return "excluded by the caller"


class Tier(Filter):
    def applies(self, ctx):
        return ctx.service.tier != "any"

    def constraint(self, ctx):
        return f"tier {ctx.service.tier}"

    def mask(self, ctx):
        return ctx.fleet.tier == TIER_CODES[ctx.service.tier]

    def reason(self, ctx, c):
        tier = ctx.fleet.inventory.clusters[c].tier
        return f"tier is {tier}, the service needs {ctx.service.tier}"


class KubeVersion(Filter):
    """The service's kubeVersion constraints (its own and its Helm charts'): a cluster whose
    reported Kubernetes version one of them refuses is ineligible, as ``helm install`` would
    refuse it; a cluster that reported no version is not judged (rendered with Helm's default)."""

    def applies(self, ctx):
        return bool(ctx.service.kube_version)

    def constraint(self, ctx):
        return "kubeVersion " + " and ".join(repr(c) for c in ctx.service.kube_version)

    def mask(self, ctx):
        key = ("kube_version", tuple(ctx.service.kube_version))
        if key not in ctx.fleet.cache:
            ctx.fleet.cache[key] = np.array(
                [
                    kube_versions.admits(ctx.service.kube_version, kube_versions.kube_version(c.kube_version))
                    for c in ctx.fleet.inventory.clusters
                ],
                dtype=bool,
            )
        return ctx.fleet.cache[key]

    def reason(self, ctx, c):
        cluster = ctx.fleet.inventory.clusters[c]
        version = kube_versions.kube_version(cluster.kube_version)
        refused = [k for k in ctx.service.kube_version if version and not kube_versions.satisfies(k, version)]
        return (
            f"Kubernetes {cluster.kube_version} is outside the chart's kubeVersion {' and '.join(refused)!s}"
        )


def selector_matches(selector: dict, labels: dict) -> bool:
    """A QoS spec's cluster selector (snake_case keys) against a cluster's labels."""
    return labels_match(labels, selector.get("match_labels"), selector.get("match_expressions"))


class Selector(Filter):
    def applies(self, ctx):
        return bool(ctx.service.cluster_selector)

    def constraint(self, ctx):
        return "clusterSelector " + json.dumps(spec_selector(ctx.service.cluster_selector), sort_keys=True)

    def mask(self, ctx):
        sel = ctx.service.cluster_selector
        key = ("selector", json.dumps(sel, sort_keys=True))
        if key not in ctx.fleet.cache:
            ctx.fleet.cache[key] = np.array(
                [selector_matches(sel, c.labels) for c in ctx.fleet.inventory.clusters], dtype=bool
            )
        return ctx.fleet.cache[key]

    def reason(self, ctx, c):
        return "labels do not match the clusterSelector"


class JmesFilter(Filter):
    def applies(self, ctx):
        return bool(ctx.service.filter)

    def constraint(self, ctx):
        errors = [e for e in ctx.fleet.cache.get(("jmespath-errors", ctx.service.filter)) or [] if e]
        cause = f" (it raised {errors[0]})" if errors else ""
        return f"filter {ctx.service.filter!r}{cause}"

    def mask(self, ctx):
        expr = ctx.service.filter
        key = ("jmespath", expr)
        if key not in ctx.fleet.cache:
            if jmespath is None:
                raise ImportError("spec filters need the jmespath package: pip install jmespath")
            compiled = jmespath.compile(expr)
            facts = ctx.fleet.facts()
            outcomes = [_truthy(compiled, f) for f in facts]
            ctx.fleet.cache[key] = np.array([outcome[0] for outcome in outcomes], dtype=bool)
            ctx.fleet.cache[("jmespath-errors", expr)] = [outcome[1] for outcome in outcomes]
        return ctx.fleet.cache[key]

    def reason(self, ctx, c):
        errors = ctx.fleet.cache.get(("jmespath-errors", ctx.service.filter)) or []
        if c < len(errors) and errors[c]:
            return f"filter {ctx.service.filter!r} failed on this cluster's facts: {errors[c]}"
        return f"filter {ctx.service.filter!r} is false for this cluster"


def _truthy(compiled, facts: dict) -> tuple[bool, str]:
    """Whether the filter holds, and why evaluating it failed (a cluster that raises does not
    qualify, and the cause is kept for the explanation)."""
    try:
        return bool(compiled.search(facts)), ""
    except jmespath.exceptions.JMESPathError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    except (TypeError, ValueError, ArithmeticError, RecursionError) as exc:
        return False, f"{type(exc).__name__}: {exc}"


class MaxLatency(Filter):
    def applies(self, ctx):
        return bool(ctx.service.max_latency)

    def constraint(self, ctx):
        return "maxLatency " + ", ".join(f"{m['ms']:g} ms from {m['from']}" for m in ctx.service.max_latency)

    @staticmethod
    def bounds(ctx, ms: float):
        """The bound per cluster: ``ms``, and ``ms`` plus the hold where the service runs now."""
        if ctx.current is None or not ctx.current.any():
            return np.full(ctx.fleet.num_clusters, float(ms))
        return np.where(ctx.current, ms * (1.0 + LATENCY_HOLD), float(ms))

    def mask(self, ctx):
        ok = np.ones(ctx.fleet.num_clusters, dtype=bool)
        for m in ctx.service.max_latency:
            lat = ctx.fleet.latency_from(m["from"])
            ok &= ~np.isnan(lat) & (np.nan_to_num(lat, nan=np.inf) <= self.bounds(ctx, m["ms"]))
        return ok

    def reason(self, ctx, c):
        for m in ctx.service.max_latency:
            lat = ctx.fleet.latency_from(m["from"])[c]
            bound = self.bounds(ctx, m["ms"])[c]
            if np.isnan(lat):
                return f"no latency measured from {m['from']}"
            if lat > bound:
                held = f" (+{LATENCY_HOLD:.0%} where it runs now)" if bound > m["ms"] else ""
                return f"latency from {m['from']} is {lat:g} ms > {m['ms']:g} ms{held}"
        return ""


class MinFree(Filter):
    def applies(self, ctx):
        return bool(ctx.service.min_free)

    def constraint(self, ctx):
        return "minFree " + ", ".join(
            f"{k} {format_quantity(k, v)}" for k, v in sorted(ctx.service.min_free.items())
        )

    def _free(self, ctx):
        f = ctx.fleet
        weights = np.where(ctx.ok_nodes()[:, None], f.free, 0.0)
        return [np.bincount(f.node_cluster, weights=weights[:, i], minlength=f.num_clusters) for i in (0, 1)]

    def mask(self, ctx):
        cpu, mem = self._free(ctx)
        mf = ctx.service.min_free
        return (cpu >= mf.get("cpu", 0.0) - 1e-9) & (mem >= mf.get("memory", 0))

    def reason(self, ctx, c):
        cpu, mem = self._free(ctx)
        return (
            f"free cpu {format_cpu(cpu[c])}, memory {format_bytes(mem[c])} below minFree "
            f"cpu {format_cpu(ctx.service.min_free.get('cpu', 0))}, "
            f"memory {format_bytes(ctx.service.min_free.get('memory', 0))}"
        )


class Capacity(Filter):
    def constraint(self, ctx):
        return "capacity (a node with room for one replica: " + _req_text(ctx.req) + ")"

    def mask(self, ctx):
        return ctx.fleet.cluster_any(ctx.fits())

    def reason(self, ctx, c):
        return "no eligible node has room for one replica (" + _req_text(ctx.req) + ")"


def _req_text(req) -> str:
    return (
        f"cpu {format_cpu(req[0])}, memory {format_bytes(req[1])}, ephemeral-storage {format_bytes(req[2])}"
    )


def spec_selector(selector: dict) -> dict:
    """A cluster selector as the spec writes it (matchLabels, matchExpressions), for messages."""
    names = {"match_labels": "matchLabels", "match_expressions": "matchExpressions"}
    return {names.get(k, k): v for k, v in selector.items()}


# The chain every scorer uses; borda (faithful to QONNECT) leaves out Capacity. The spec's
# static constraints come first, so a failure names e.g. "health" when every fog cluster is
# down rather than "tier fog".
CONSTRAINT_FILTERS = (
    Tier(),
    Selector(),
    KubeVersion(),
    JmesFilter(),
    MaxLatency(),
    Healthy(),
    Excluded(),
    MinFree(),
)
ALL_FILTERS = (*CONSTRAINT_FILTERS, Capacity())


def run_filters(ctx: ServiceContext, filters, explain: bool):
    """Combined mask, the constraint that emptied it (or None) and per-cluster reasons."""
    ok = np.ones(ctx.fleet.num_clusters, dtype=bool)
    culprit = None
    reasons: dict[int, str] = {}
    for flt in filters:
        if not flt.applies(ctx):
            continue
        m = flt.mask(ctx)
        if explain:
            for c in np.nonzero(ok & ~m)[0]:
                reasons[int(c)] = flt.reason(ctx, int(c))
        ok = ok & m
        if culprit is None and not ok.any():
            culprit = flt.constraint(ctx)
    return ok, culprit, reasons
