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

``--vs-go`` (issue 21) builds QONNECT's own Go Borda scorer from
../shared/qonnect-reference/borda-go into a temporary directory (read from there, never copied)
and times it in the same run as ``place(scorer="borda")`` for one one-service application at
9 clusters x 1 node, 100 x 5 and 1000 x 10: "go" is QONNECT's algo/borda unchanged with the JSON
decode of its node list included (a harness in the temporary directory imports the package and
keeps every run's time, for the p99), "place" one place() call from the inventory dict (parse,
arrays, rank: a module run's cost), "batch" the per-application time inside
place_many (the fleet built once). Then place_many of 50 applications at 1000 x 10 with each
scorer. One JSON object per line with medians and p99 in milliseconds or seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services"))

from ansible_collections.qonnect.core.plugins.module_utils.placement import (
    SCORERS,
    Inventory,
    capacity_violations,
    place,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.optimal import (
    SolverTimeout,
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
    args = parser.parse_args(argv)
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
