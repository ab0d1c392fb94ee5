"""Borda against QONNECT's own Go scorer in one run, and place_many at 1000 clusters (issue 21).

Run through ``python benchmarks/placement.py --vs-go``. QONNECT's scorer is built from
../shared/qonnect-reference/borda-go into a temporary directory: its own main.go (median as
QONNECT's README reports it), and a harness in the temporary directory that imports its
``borda`` package unchanged and prints every run's time (JSON decode included, as QONNECT's API
would), so a p99 can be given. Nothing in the reference directory is copied or written.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ansible_collections.qonnect.core.plugins.module_utils.placement import (
    SCORERS,
    Inventory,
    place,
    place_many,
)
from ansible_collections.qonnect.core.plugins.module_utils.qos import Application, Service

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (
    Path(os.environ.get("QONNECT_REFERENCE") or ROOT.parent / "shared" / "qonnect-reference") / "borda-go"
)
# (clusters, nodes per cluster, Go runs, Python runs)
SIZES = ((9, 1, 400, 100), (100, 5, 150, 50), (1000, 10, 60, 20))
BATCH_APPS, BATCH_CLUSTERS, BATCH_NODES, BATCH_RUNS = 50, 1000, 10, 5
QOS = {"energy": 0.6, "pricing": 0.3, "performance": 0.3}

HARNESS = """package main

import (
    "encoding/json"
    "fmt"
    "os"
    "strconv"
    "time"

    "bordabench/borda"
    "bordabench/domain"
)

type input struct {
    QoS   domain.QoS     `json:"qos"`
    Nodes []*domain.Node `json:"nodes"`
}

func main() {
    raw, _ := os.ReadFile(os.Args[1])
    runs, _ := strconv.Atoi(os.Args[2])
    times := make([]float64, 0, runs)
    var cluster string
    for r := 0; r < runs; r++ {
        t0 := time.Now()
        var in input
        if err := json.Unmarshal(raw, &in); err != nil {
            panic(err)
        }
        s := borda.Borda{}
        cluster, _ = s.ScoreAndFilterNodes(in.Nodes, in.QoS)
        times = append(times, float64(time.Since(t0).Nanoseconds())/1e6)
    }
    out, _ := json.Marshal(map[string]any{"cluster": cluster, "ms": times})
    fmt.Println(string(out))
}
"""


def build(tmp: Path) -> tuple[Path, Path]:
    """(QONNECT's main.go binary, the every-run harness), built into ``tmp``."""
    env = dict(os.environ, GOWORK="off", GOFLAGS="-mod=mod")
    reference_bin, harness_bin = tmp / "qonnect-borda", tmp / "borda-timing"
    subprocess.run(["go", "build", "-o", str(reference_bin), "."], cwd=REFERENCE, env=env, check=True)
    harness = tmp / "harness"
    harness.mkdir()
    (harness / "go.mod").write_text(
        f"module bordatiming\n\ngo 1.22\n\nrequire bordabench v0.0.0\n\nreplace bordabench => {REFERENCE}\n"
    )
    (harness / "main.go").write_text(HARNESS)
    subprocess.run(["go", "build", "-o", str(harness_bin), "."], cwd=harness, env=env, check=True)
    return reference_bin, harness_bin


def go_nodes(inventory: dict) -> dict:
    """The inventory's nodes as QONNECT's scorer reads them (free capacity, as Borda ranks)."""
    nodes = []
    for cluster in inventory["clusters"]:
        for n in cluster["nodes"]:
            free = {r: n["allocatable"][r] - n["requested"][r] for r in n["allocatable"]}
            nodes.append(
                {
                    "cluster_id": cluster["name"],
                    "name": n["name"],
                    "cpu": int(free["cpu"]),
                    "memory": float(free["memory"]),
                    "network_bandwidth": n["bandwidth_gbps"],
                    "ephemeral_storage": float(free["ephemeral_storage"]),
                    "energy": n["energy_kwh"],
                    "pricing": n["price_eur_h"],
                    "is_ready": n["ready"],
                    "is_schedulable": n["schedulable"],
                }
            )
    return {"qos": QOS, "nodes": nodes}


def one_service(name: str, tier: str = "any", replicas: int = 1) -> Application:
    return Application(
        name=name,
        namespace=name,
        objective={"energy": QOS["energy"], "cost": QOS["pricing"], "performance": QOS["performance"]},
        services=[
            Service(
                name="svc",
                tier=tier,
                replicas=replicas,
                requests={"cpu": 0.1, "memory": 64 * 2**20, "ephemeral_storage": 0},
            )
        ],
    )


def stats(values: list[float], digits: int = 3) -> dict:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"median": round(statistics.median(ordered), digits), "p99": round(p99, digits), "n": len(ordered)}


def distinct(inventory: dict) -> dict:
    """The fleet with every attribute Borda ranks made distinct across nodes (whole CPUs, as
    QONNECT's int field holds them): QONNECT sorts with Go's unstable sort.Slice, so with tied
    values its choice is arbitrary, and the two scorers' choices could not be compared."""
    k = 0
    for cluster in inventory["clusters"]:
        for n in cluster["nodes"]:
            k += 1
            n["allocatable"]["cpu"] = 2 + k
            n["allocatable"]["memory"] += k
            n["allocatable"]["ephemeral_storage"] += k * 1_000_000
            n["requested"]["cpu"] = 0
            for attr in ("bandwidth_gbps", "energy_kwh", "price_eur_h"):
                n[attr] *= 1 + k * 1e-9
    return inventory


def borda_row(bins: tuple[Path, Path], tmp: Path, clusters: int, per: int, go_runs: int, py_runs: int):
    """Go and Python in alternation (one Go process of a few runs, then one place() and one
    place_many), so both see the same load on a shared machine."""
    from placement import fleet  # the benchmark's own fleet generator

    inventory = distinct(fleet(clusters, nodes_per_cluster=per))
    nodes_file = tmp / f"nodes-{clusters}x{per}.json"
    nodes_file.write_text(json.dumps(go_nodes(inventory)))
    reference_bin, harness_bin = bins
    app = one_service("one")
    apps = [one_service(f"app-{i}") for i in range(BATCH_APPS)]
    parsed = Inventory.from_dict(inventory)
    plan = place(app, inventory, scorer="borda", explain=False)  # warm-up
    go_ms: list[float] = []
    place_ms: list[float] = []
    per_app: list[float] = []
    go_per_round = max(1, go_runs // py_runs)
    cluster = ""
    for _round in range(py_runs):
        out = subprocess.run(
            [str(harness_bin), str(nodes_file), str(go_per_round)], capture_output=True, text=True, check=True
        )
        go = json.loads(out.stdout)
        go_ms += go["ms"]
        cluster = go["cluster"]
        start = time.perf_counter()
        plan = place(app, inventory, scorer="borda", explain=False)
        place_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        place_many(apps, parsed, scorer="borda")
        per_app.append((time.perf_counter() - start) * 1000 / BATCH_APPS)
    go_main = json.loads(
        subprocess.run(
            [str(reference_bin), str(nodes_file), str(go_runs)], capture_output=True, text=True, check=True
        ).stdout
    )
    go_stats, place_stats, batch_stats = stats(go_ms), stats(place_ms), stats(per_app)
    return {
        "bench": "borda_vs_go",
        "clusters": clusters,
        "nodes_per_cluster": per,
        "go_ms": go_stats,
        "go_main_median_ms": go_main["median_ms"],
        "go_main_decode_ms": go_main["decode_ms"],
        "place_ms": place_stats,
        "batch_per_app_ms": batch_stats,
        "ratio_place_to_go": round(place_stats["median"] / go_stats["median"], 3),
        "ratio_batch_per_app_to_go": round(batch_stats["median"] / go_stats["median"], 3),
        "same_cluster_as_go": plan.clusters("svc") == [cluster],
    }


def batch_rows(clusters: int, per: int, apps: int, runs: int):
    from placement import fleet

    inventory = fleet(clusters, nodes_per_cluster=per)
    tiers = ("cloud", "fog", "edge", "any")
    requests = [one_service(f"app-{i}", tiers[i % 4], 1 + i % 3) for i in range(apps)]
    for scorer in sorted(SCORERS):
        seconds, result = [], None
        for _run in range(runs):
            start = time.perf_counter()
            result = place_many(requests, inventory, scorer=scorer)  # from the dict: parse included
            seconds.append(time.perf_counter() - start)
        yield {
            "bench": "place_many",
            "clusters": clusters,
            "nodes_per_cluster": per,
            "applications": apps,
            "scorer": scorer,
            "seconds": stats(seconds),
            "placed": len(result.plans),
            "failed": len(result.errors),
            "target_seconds": 5.0,
        }


def compare() -> int:
    with tempfile.TemporaryDirectory(prefix="qonnect-borda-") as tmp_name:
        tmp = Path(tmp_name)
        bins = build(tmp)
        print(json.dumps({"bench": "setup", "load_avg_1m": os.getloadavg()[0], "cpus": os.cpu_count()}))
        for clusters, per, go_runs, py_runs in SIZES:
            print(json.dumps(borda_row(bins, tmp, clusters, per, go_runs, py_runs)), flush=True)
    for row in batch_rows(BATCH_CLUSTERS, BATCH_NODES, BATCH_APPS, BATCH_RUNS):
        print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "done", "load_avg_1m": os.getloadavg()[0]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "services"))
    sys.exit(compare())
