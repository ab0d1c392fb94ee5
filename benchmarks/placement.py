"""Placement benchmark: time and quality of each scorer on synthetic fleets.

Prints one JSON object per line (with --json) per fleet size and scorer:
clusters, services, scorer, seconds (median wall time of --runs runs of place()), cpu_seconds
(median CPU time of the same runs), objective (the default
objective of that scorer's plan, so scorers compare on one scale), optimal_objective (the
MILP's, where it finishes within 60 s, else null), capacity_violations (nodes overcommitted by
the plan). Fleets and applications are generated from a fixed seed, so runs are comparable.

    python benchmarks/placement.py --json            # 9x6, 100x100, 1000x1000, 1000x10000
    python benchmarks/placement.py --json --quick    # 9x6 and 100x100 only (CI smoke)
    python benchmarks/placement.py --vs-go           # Borda against QONNECT's Go scorer, place_many
    python benchmarks/placement.py --survivability   # N-1 report, 1000 clusters x 500 applications

``--vs-go`` (issue 21) builds QONNECT's own Go Borda scorer from
../shared/qonnect-reference/borda-go into a temporary directory (read from there, never copied)
and times it in the same run as ``place(scorer="borda")`` for one one-service application at
9 clusters x 1 node, 100 x 5 and 1000 x 10: "go" is QONNECT's algo/borda unchanged with the JSON
decode of its node list included (a harness in the temporary directory imports the package and
keeps every run's time, for the p99), "place" one place() call from the inventory dict (parse,
arrays, rank: a module run's cost), "batch" the per-application time inside
place_many (the fleet built once). Then place_many of 50 applications at 1000 x 10 with each
scorer. One JSON object per line with medians and p99 in milliseconds or seconds.

``--survivability`` (issue 37) times placement/whatif.py on 1000 clusters x 10 nodes with 500
multi-service applications (2-6 services, 1-3 replicas, some spread over 2 clusters, dependency
chains, tiers; other workloads already take 30-75 % of every node; 10 % deployed with borda, a
third with their own hysteresis; fixed seed) running where a seeded draw put them: the full
report (every single-cluster failure), then one cluster lost (the one hosting most
applications; its applications moved where that scenario planned them, the cluster unhealthy)
and the report recomputed incrementally, checked against a full recompute of the same fleet.
One JSON object: median and p99 over --runs runs (``full_w1``: in one process, ``full_w2``: in
two forked ones with ``--workers 2``), scenarios planned, peak RSS.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from ansible_collections.qonnect.core.plugins.module_utils.placement import (
    SCORERS,
    Inventory,
    capacity_violations,
    place,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.batch import (
    place_many,
    policy_item,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.optimal import (
    SolverTimeout,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.whatif import (
    Tenant,
    WhatIf,
    survivability,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import (
    Application,
    Service,
)

SIZES = ((9, 6), (100, 100), (1000, 1000), (1000, 10000))
QUICK_SIZES = ((9, 6), (100, 100))
TIERS = ("cloud", "fog", "edge")
# tier -> (cpu, memory GB, bandwidth Gbps, energy kWh, price EUR/h) around DESIGN.md's profiles
PROFILES = {
    "energy": (6.0, 7.16, 52.5, 0.0024042, 16.3884),
    "cost": (6.0, 7.16, 5.0, 0.0025689, 0.0042),
    "performance": (10.0, 12.5, 100.0, 0.0027335, 32.7726),
}
RADIUS = {"cloud": 40.0, "fog": 15.0, "edge": 3.0}
# Larger fleets give MILPs of ~1e6 integer columns and ~1e8 nonzeros (dependency latency rows):
# they neither fit in memory here nor finish within the 60 s limit, so they report null.
MILP_MAX_PAIRS = 100 * 100


def fleet(num_clusters: int, seed: int = 7, nodes_per_cluster: int | None = None) -> dict:
    """Clusters on three tiers with 1-3 nodes (or ``nodes_per_cluster``) of jittered QONNECT
    profiles; latency grows with the distance between sites on a plane (edge sites near users,
    cloud far away)."""
    rng = random.Random(seed)
    clusters, coords = [], {}
    for i in range(num_clusters):
        tier = TIERS[i % 3]
        name = f"{tier}-{i // 3 + 1}"
        angle = rng.uniform(0, 6.283)
        r = RADIUS[tier] * rng.uniform(0.8, 1.2)
        coords[name] = (r * math.cos(angle), r * math.sin(angle))
        nodes = []
        count = nodes_per_cluster or (1 if num_clusters <= 9 else rng.randint(1, 3))
        for n in range(count):
            prof = (
                PROFILES[rng.choice(sorted(PROFILES))]
                if num_clusters > 9
                else PROFILES[sorted(PROFILES)[(i // 3) % 3]]
            )
            jitter = 1.0 if num_clusters <= 9 else rng.uniform(0.9, 1.1)
            nodes.append(
                {
                    "name": f"{name}-w{n}",
                    "ready": True,
                    "schedulable": True,
                    "pressure": {"memory": False, "disk": False, "pid": False},
                    "allocatable": {
                        "cpu": prof[0],
                        "memory": int(prof[1] * 1e9),
                        "ephemeral_storage": 100_000_000_000,
                    },
                    "requested": {"cpu": 0.25, "memory": 268_435_456, "ephemeral_storage": 0},
                    "bandwidth_gbps": prof[2] * jitter,
                    "energy_kwh": prof[3] * jitter,
                    "price_eur_h": prof[4] * jitter,
                    "heartbeat_age": 1.0,
                    "labels": {},
                }
            )
        clusters.append(
            {
                "name": name,
                "tier": tier,
                "location": name,
                "labels": {"zone": f"z{i % 4}"},
                "healthy": True,
                "heartbeat_age": 1.0,
                "nodes": nodes,
            }
        )
    names = sorted(coords)
    latency = {
        a: {
            b: round(
                0.1 + ((coords[a][0] - coords[b][0]) ** 2 + (coords[a][1] - coords[b][1]) ** 2) ** 0.5, 2
            )
            for b in names
        }
        for a in names
    }
    return {"clusters": clusters, "latency_ms": latency, "placements": {}}


def application(num_services: int, num_clusters: int, seed: int = 11) -> Application:
    """Services with mixed tiers, 1-3 replicas, some spread, and dependency chains, sized so
    about a third of the fleet's capacity is requested."""
    rng = random.Random(seed)
    scale = min(1.0, 0.35 * num_clusters * 2 * 7.0 / (num_services * 2 * 0.3))
    services = []
    for i in range(num_services):
        replicas = rng.choice((1, 1, 2, 3))
        spread = 2 if replicas >= 2 and rng.random() < 0.3 and num_clusters >= 6 else 1
        deps = [f"svc-{rng.randrange(i)}"] if i and rng.random() < 0.3 else []
        cpu = round(rng.uniform(0.05, 0.5) * scale, 4)
        services.append(
            Service(
                name=f"svc-{i}",
                tier=rng.choice(("cloud", "fog", "edge", "any")),
                replicas=replicas,
                spread=spread,
                depends_on=deps,
                requests={
                    "cpu": cpu,
                    "memory": int(rng.uniform(64, 512) * scale * 2**20),
                    "ephemeral_storage": 0,
                },
            )
        )
    return Application(
        name="bench",
        namespace="bench",
        objective={"energy": 0.6, "cost": 0.3, "performance": 0.3, "latency": 0.5},
        services=services,
    )


def survivability_fleet(
    num_clusters: int = 1000, nodes: int = 10, num_apps: int = 500, seed: int = 37
) -> tuple[dict, list[Tenant]]:
    """(inventory, tenants): ``num_apps`` multi-service applications running on a fleet of
    ``num_clusters`` x ``nodes`` whose nodes other workloads already fill to 30-75 %, each where
    the engine placed it with its own policy (one place_many pass, as deployed one after the
    other), its replicas' requests added to their nodes."""
    rng = random.Random(seed)
    inv = fleet(num_clusters, seed=seed, nodes_per_cluster=nodes)
    for c in inv["clusters"]:
        for n in c["nodes"]:
            share = rng.uniform(0.3, 0.75)
            n["requested"] = {
                "cpu": round(n["allocatable"]["cpu"] * share, 3),
                "memory": int(n["allocatable"]["memory"] * share),
                "ephemeral_storage": 0,
            }
    tenants = []
    for a in range(num_apps):
        services = []
        for i in range(rng.randint(2, 6)):
            replicas = rng.choice((1, 2, 2, 3))
            services.append(
                Service(
                    name=f"s{i}",
                    tier=rng.choice(("cloud", "fog", "edge", "any", "any")),
                    replicas=replicas,
                    spread=2 if replicas >= 2 and rng.random() < 0.4 else 1,
                    depends_on=[f"s{rng.randrange(i)}"] if i and rng.random() < 0.6 else [],
                    requests={
                        "cpu": round(rng.uniform(0.1, 1.0), 3),
                        "memory": int(rng.uniform(128, 1024)) * 2**20,
                        "ephemeral_storage": 0,
                    },
                )
            )
        objective = {k: rng.random() for k in ("energy", "cost", "performance", "latency")}
        name = f"app-{a:03d}"
        app = Application(name=name, namespace=name, objective=objective, services=services)
        draw = rng.random()
        scorer = "borda" if draw < 0.1 else (None if draw < 0.8 else "weighted")
        hysteresis = None if rng.random() < 0.7 else rng.choice((0.0, 0.2, 0.5))
        tenants.append(Tenant(app, scorer, hysteresis))
    deployed = place_many(
        [policy_item(t.app, t.scorer, t.hysteresis, (), ("weighted", 0.1)) for t in tenants], inv
    )
    nodes_by_name = {n["name"]: n for c in inv["clusters"] for n in c["nodes"]}
    for t in tenants:
        plan = deployed.plans.get(t.name)
        if plan is None:
            continue
        for svc in t.app.services:
            for e in plan.services[svc.name]:
                for node in e["nodes"]:
                    for r in ("cpu", "memory"):
                        nodes_by_name[node]["requested"][r] += svc.requests[r]
        inv["placements"][t.name] = plan.services
    return inv, [t for t in tenants if t.name in deployed.plans]


def after_loss(inv: dict, tenants: list[Tenant], scenario) -> tuple[dict, set[str]]:
    """The inventory once ``scenario``'s cluster failed and the controller healed it as planned:
    the cluster unhealthy (its nodes' heartbeats stale), each service the plan moves to other
    clusters moved (requests taken off the nodes it leaves, put on the planned ones); a service
    kept on its clusters stays as it runs. Returns it and the clusters that changed (failed,
    left or joined)."""
    out = copy.deepcopy(inv)
    nodes = {n["name"]: n for c in out["clusters"] for n in c["nodes"]}
    apps = {t.name: t.app for t in tenants}
    changed = set(scenario.failed)
    for c in out["clusters"]:
        if c["name"] in scenario.failed:
            c["healthy"], c["heartbeat_age"] = False, 600.0
            for n in c["nodes"]:
                n["heartbeat_age"] = 600.0
    for name, outcome in scenario.outcomes.items():
        if not outcome.placed:
            continue
        for svc in apps[name].services:
            old = out["placements"][name].get(svc.name) or []
            new = outcome.services[svc.name]
            if {e["cluster"]: e["replicas"] for e in old} == {e["cluster"]: e["replicas"] for e in new}:
                continue  # kept where it runs (the plan may name other nodes: the scheduler's say)
            for entries, sign in ((old, -1), (new, 1)):
                for e in entries:
                    changed.add(e["cluster"])
                    for node in e["nodes"]:
                        for r in ("cpu", "memory"):
                            nodes[node]["requested"][r] += sign * svc.requests[r]
            out["placements"][name][svc.name] = new
    return out, changed


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def survivability_bench(runs: int, clusters: int, nodes: int, apps: int, workers: int = 1) -> dict:
    """The N-1 report and its incremental recomputation after one cluster loss (issue 37), in
    one process and, with ``workers`` > 1, in that many forked ones too."""
    began = time.perf_counter()
    inv, tenants = survivability_fleet(clusters, nodes, apps)
    generated = time.perf_counter() - began
    rss_generated = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    counts = sorted({1, max(1, workers)})
    times: dict[str, list[float]] = {}
    report = incremental = None

    def timed(key: str, call):
        t, c = time.perf_counter(), time.process_time()
        out = call()
        times.setdefault(key, []).append(time.perf_counter() - t)
        times.setdefault(f"{key}_cpu", []).append(time.process_time() - c)
        return out

    for _run in range(runs):
        for n in counts:
            whatif = timed("build", lambda: WhatIf(inv, tenants))
            report = timed(f"full_w{n}", lambda w=whatif, n=n: survivability(w, workers=n))
    # one cluster lost: the one hosting most applications, healed as its scenario planned
    lost = max(report.scenarios, key=lambda s: (len(s.outcomes), s.name))
    inv_after, changed = after_loss(inv, tenants, lost)
    for _run in range(runs):
        for n in counts:
            whatif_after = timed("build_after_loss", lambda: WhatIf(inv_after, tenants))
            incremental = timed(
                f"incremental_w{n}",
                lambda w=whatif_after, n=n: survivability(w, previous=report, changed=changed, workers=n),
            )
    recomputed = survivability(WhatIf(inv_after, tenants), workers=counts[-1])
    # what one full report allocates beyond the fleet it plans on (Python's allocator, traced)
    whatif = WhatIf(inv, tenants)
    tracemalloc.start()
    survivability(whatif)
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    same = incremental.applications == recomputed.applications and [
        (s.name, s.survivable) for s in incremental.scenarios
    ] == [(s.name, s.survivable) for s in recomputed.scenarios]
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux (this process)
    kib_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss

    def stats(values: list[float]) -> dict:
        return {"median": round(statistics.median(values), 3), "p99": round(p99(values), 3)}

    return {
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "applications": apps,
        "services": sum(len(t.app.services) for t in tenants),
        "replicas": sum(s.replicas for t in tenants for s in t.app.services),
        "runs": runs,
        "generate_seconds": round(generated, 3),
        "seconds": {key: stats(values) for key, values in sorted(times.items())},
        "scenarios": len(report.scenarios),
        "scenarios_planned": report.evaluated,
        "applications_replanned": sum(len(s.outcomes) for s in report.scenarios),
        "survivable_scenarios": sum(s.survivable for s in report.scenarios),
        "applications_in_violation": sum(bool(a["violations"]) for a in report.applications.values()),
        "lost_cluster": lost.failed[0],
        "lost_cluster_applications": len(lost.outcomes),
        "changed_clusters": len(changed),
        "incremental_scenarios_planned": incremental.evaluated,
        "full_recompute_scenarios_planned": recomputed.evaluated,
        "incremental_verdicts_equal_full": same,
        "rss_after_generation_mb": round(rss_generated / 1024, 1),
        "rss_peak_mb": round(kib / 1024, 1),
        "rss_peak_worker_mb": round(kib_children / 1024, 1) if workers > 1 else None,
        "report_traced_peak_mb": round(traced_peak / 2**20, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


def measure(app, inv, scorer: str, runs: int):
    """Median wall and CPU seconds of place() (CPU time shows the cost on a shared machine)."""
    times, cpu, plan = [], [], None
    for _run in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        plan = place(app, inv, scorer=scorer, explain=False)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(times), statistics.median(cpu), plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--quick", action="store_true", help="only 9x6 and 100x100")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument(
        "--vs-go", action="store_true", help="Borda against QONNECT's Go scorer, and place_many"
    )
    parser.add_argument(
        "--survivability",
        action="store_true",
        help="the N-1 survivability report and its incremental recomputation (issue 37)",
    )
    parser.add_argument("--clusters", type=int, default=1000, help="--survivability: clusters")
    parser.add_argument("--nodes", type=int, default=10, help="--survivability: nodes per cluster")
    parser.add_argument("--apps", type=int, default=500, help="--survivability: applications")
    parser.add_argument(
        "--workers", type=int, default=1, help="--survivability: also time the report in N forked processes"
    )
    args = parser.parse_args(argv)
    if args.survivability:
        load = round(os.getloadavg()[0], 2)
        row = survivability_bench(args.runs, args.clusters, args.nodes, args.apps, args.workers)
        print(json.dumps({"load_avg_1m_before": load, **row}), flush=True)
        return 0
    if args.vs_go:
        from placement_go import compare

        return compare()
    for clusters, services in QUICK_SIZES if args.quick else SIZES:
        inv = Inventory.from_dict(fleet(clusters))
        app = application(services, clusters)
        results = {}
        for scorer in SCORERS:
            if scorer == "optimal" and clusters * services > MILP_MAX_PAIRS:
                continue
            try:
                results[scorer] = measure(app, inv, scorer, args.runs)
            except SolverTimeout:
                continue
        optimal = results.get("optimal")
        for scorer, (seconds, cpu, plan) in results.items():
            row = {
                "clusters": clusters,
                "services": services,
                "scorer": scorer,
                "seconds": round(seconds, 4),
                "cpu_seconds": round(cpu, 4),
                "objective": round(plan.objective, 6),
                "optimal_objective": round(optimal[2].objective, 6) if optimal else None,
                "capacity_violations": capacity_violations(app, inv, plan),
            }
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
