"""The leader's detection cost on an unchanging fleet, against the number of applications
(issue 38, item 8), as JSON.

The leader runs the detector once per tick (1 s by default). Its QoS-drift rule judged every
steady application on every tick by re-placing it, so an idle leader's CPU grew with the number
of applications (about 2 ms per application per second). The drift judge is now gated
(``replan.ChangeGate``): an application is judged again only when its spec, policy, placement or
exclusions, or the fleet as the engine reads it, changed.

Here the detector runs in this process exactly as the loop calls it (``triggers.detect`` with the
controller's judge: ``drift_judge`` on ``engine_planner`` with each application's stored policy),
on the paper's nine clusters with N one-Deployment applications placed by that planner, for
``--ticks`` ticks whose inventories differ only in heartbeat ages (as the controller's view hands
them out when nothing changed). Per N: the CPU of one tick (``time.thread_time``: median and p99
of the ticks after the first, which judges everything), with the gate and without it (``--ungated``
runs only the ticks needed for the median), the judgements made, and one cluster's change: one
node's requests grow (another workload of 0.5 CPU), and the tick after it. ``--changes K`` makes
K such changes one tick after another on clusters chosen at random; ``changes`` then gives per
change the tick's CPU, the applications judged again, the verdicts kept (``carried``: the
engine showed the change cannot move them) and the applications placed on or eligible for the
changed cluster (by tier: ``--tiers`` binds the applications to tiers in turn), and how many
changes re-judged beyond those (``rescaled``: a changed node held or passed an extreme of the
scale every score is normalised by). ``--clusters K`` runs on K synthetic clusters
(benchmarks/placement.py's fleet) instead of the paper's nine. After the rules, each tick runs
the hedged-failover pass (``hedging.triggers``, hedging on as the CLI's default):
``hedge_pass_cpu_s_p50``/``_p99``.

    python benchmarks/leader_idle.py --json                 # N = 0, 100, 1000
    python benchmarks/leader_idle.py --json --ns 100 --ticks 30
    python benchmarks/leader_idle.py --json --ns 1000 --clusters 1000 --tiers any,fog,edge --changes 20

Not included: the tick's read of the KB (``journal.read_snapshot``, measured by detect_scale.py)
and the status, survivability and reconcile work beside the detector.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))

from qonnect.controller import hedging  # noqa: E402
from qonnect.controller.detector import Memory, Settings, Snapshot  # noqa: E402
from qonnect.controller.replan import ChangeGate, PlanRequest, drift_judge, engine_planner  # noqa: E402
from qonnect.controller.statemachine import DecisionLog  # noqa: E402
from qonnect.controller.triggers import detect  # noqa: E402


def one_deployment(name: str, tier: str = "any") -> dict[str, Any]:
    """A one-service application as the KB stores it (``Application.to_dict``)."""
    from ansible_collections.qonnect.core.plugins.module_utils.qos import Application, Service

    service = Service(
        name="web",
        tier=tier,
        replicas=1,
        requests={"cpu": 0.002, "memory": 4 * 2**20, "ephemeral_storage": 0},
    )
    app = Application(
        name=name,
        namespace=name,
        objective={"energy": 0.6, "cost": 0.3, "performance": 0.3, "latency": 0.5},
        services=[service],
    )
    return app.to_dict()


def fleet(
    n: int, clusters: int = 0, tiers: tuple[str, ...] = ("any",)
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The paper inventory (or ``clusters`` synthetic ones: benchmarks/placement.py's fleet) with
    ``n`` applications placed by the heal's planner in one pass, the i-th one's service bound to
    the tier ``tiers[i % len(tiers)]``."""
    if clusters:
        inventory = synthetic_fleet(clusters)
    else:
        inventory = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())
    inventory["placements"] = {}
    records = [
        {
            "name": f"app{i:04d}",
            "version": 1,
            "updated": 1.0,
            "application": one_deployment(f"app{i:04d}", tiers[i % len(tiers)]),
            "policy": {},
        }
        for i in range(n)
    ]
    if records:
        planner = engine_planner("weighted", 0.1)
        found = planner([PlanRequest(r, ()) for r in records], inventory)
        inventory["placements"] = found.services
        for services in found.services.values():  # their requests now taken on their nodes
            for entries in services.values():
                for entry in entries:
                    cluster = next(c for c in inventory["clusters"] if c["name"] == entry["cluster"])
                    node = next(nd for nd in cluster["nodes"] if nd["name"] == entry["nodes"][0])
                    node["requested"]["cpu"] += 0.002 * entry["replicas"]
                    node["requested"]["memory"] += 4 * 2**20 * entry["replicas"]
    return inventory, records


def synthetic_fleet(clusters: int) -> dict[str, Any]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("placement_benchmark", ROOT / "benchmarks" / "placement.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fleet(clusters)


def placed_on_or_eligible(records: list[dict[str, Any]], inventory: dict[str, Any], cluster: str) -> int:
    """The applications running on ``cluster`` or whose service may run there (its tier)."""
    tier = next(c["tier"] for c in inventory["clusters"] if c["name"] == cluster)
    count = 0
    for r in records:
        placed = {e["cluster"] for es in inventory["placements"].get(r["name"], {}).values() for e in es}
        count += cluster in placed or r["application"]["services"][0]["tier"] in ("any", tier)
    return count


def changes(inventory: dict[str, Any], count: int, seed: int = 38) -> list[tuple[dict[str, Any], str]]:
    """``count`` successive inventories, each with one more cluster's change: another
    workload of 0.5 CPU started on one node of a cluster chosen at random."""
    import random

    rng = random.Random(seed)
    out, inv = [], inventory
    for t in range(count):
        inv = aged_copy(inv)
        for c in inv["clusters"]:
            c["heartbeat_age"] = 1.0 + t % 3
        cluster = rng.choice(inv["clusters"])
        rng.choice(cluster["nodes"])["requested"]["cpu"] += 0.5
        out.append((inv, cluster["name"]))
    return out


def aged_copy(inventory: dict[str, Any]) -> dict[str, Any]:
    """A copy of the clusters; the latency table and the placements are the same objects, as
    the view keeps them until one of theirs changes (controller/view.py)."""
    return {**inventory, "clusters": copy.deepcopy(inventory["clusters"])}


def ticks(inventory: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """``count`` inventories as the view hands them out on a quiet fleet: new objects, ages moving
    (:func:`aged_copy`)."""
    out = []
    for t in range(count):
        inv = aged_copy(inventory)
        for c in inv["clusters"]:
            c["heartbeat_age"] = 1.0 + t % 3
            for node in c["nodes"]:
                node["heartbeat_age"] = 1.0 + t % 3
        out.append(inv)
    return out


def run(n: int, count: int, gated: bool, args: argparse.Namespace) -> dict[str, Any]:
    inventory, records = fleet(n, args.clusters, tuple(args.tiers.split(",")))
    planner = engine_planner("weighted", 0.1)
    judge = drift_judge(planner)
    replan = ChangeGate(judge) if gated else judge
    log = DecisionLog()
    for r in records:
        log.apply({"op": "observe", "app": r["name"], "version": 1, "term": 1, "node": "n"})
    memory = Memory(healthy_since={c["name"]: 0.0 for c in inventory["clusters"]})
    settings = Settings(hedge=True)  # as the CLI runs it (--hedge is the default)
    quiet = ticks(inventory, count)
    changed = changes(quiet[-1], max(1, args.changes if gated else 1))
    cpu, hedge_cpu, triggers, per_change = [], [], 0, []
    for t, inv in enumerate([*quiet, *(inv for inv, _name in changed)]):
        snapshot = Snapshot(inv, [], records, 1000.0 + t)
        judged, kept = getattr(replan, "judged", 0), getattr(replan, "carried", 0)
        began = time.thread_time()
        found, _observe = detect(snapshot, log, memory, settings, replan)
        cpu.append(time.thread_time() - began)
        if t >= len(quiet):
            cluster = changed[t - len(quiet)][1]
            per_change.append(
                {
                    "cluster": cluster,
                    "cpu_s": cpu[-1],
                    "judged": getattr(replan, "judged", 0) - judged,
                    "carried": getattr(replan, "carried", 0) - kept,
                    "placed_on_or_eligible": placed_on_or_eligible(records, inventory, cluster),
                }
            )
        triggers += len(found)
        began = time.thread_time()  # the leader's hedge pass after the rules (detection.py)
        triggers += len(hedging.triggers(snapshot, log, memory, settings, {f.app for f in found}))
        hedge_cpu.append(time.thread_time() - began)
    steady = cpu[1 : len(quiet)]
    out: dict[str, Any] = {
        "applications": n,
        "clusters": len(inventory["clusters"]),
        "tiers": args.tiers,
        "gated": gated,
        "ticks": count,
        "triggers": triggers,
        "first_tick_cpu_s": round(cpu[0], 4),
        "tick_cpu_s_p50": round(statistics.median(steady), 5) if steady else None,
        "tick_cpu_s_p99": round(sorted(steady)[math.ceil(0.99 * len(steady)) - 1], 5) if steady else None,
        "after_one_change_cpu_s": round(cpu[len(quiet)], 4),
        "hedge_pass_cpu_s_p50": round(statistics.median(hedge_cpu), 6),
        "hedge_pass_cpu_s_p99": round(sorted(hedge_cpu)[math.ceil(0.99 * len(hedge_cpu)) - 1], 6),
    }
    if gated:
        out["judged"] = replan.judged
        out["changes"] = change_summary(per_change)
    return out


def change_summary(per_change: list[dict[str, Any]]) -> dict[str, Any]:
    """One cluster's change after another: what each judged, against what it had to."""

    def stats(key: str) -> dict[str, float]:
        values = sorted(c[key] for c in per_change)
        return {
            "p50": round(statistics.median(values), 4),
            "p99": round(values[math.ceil(0.99 * len(values)) - 1], 4),
            "max": round(values[-1], 4),
        }

    return {
        "count": len(per_change),
        "cpu_s": stats("cpu_s"),
        "judged": stats("judged"),
        "carried": stats("carried"),
        "placed_on_or_eligible": stats("placed_on_or_eligible"),
        # changes that also re-judged applications neither placed on nor eligible for the
        # cluster: its nodes held or passed an extreme of the scale every score is normalised by
        "rescaled": sum(c["judged"] > c["placed_on_or_eligible"] for c in per_change),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--ns", default="0,100,1000", help="applications, comma-separated")
    parser.add_argument("--ticks", type=int, default=60, help="quiet ticks per N (gated)")
    parser.add_argument("--ungated-ticks", type=int, default=5, help="quiet ticks per N without the gate")
    parser.add_argument("--clusters", type=int, default=0, help="synthetic clusters (0: the paper's nine)")
    parser.add_argument("--tiers", default="any", help="the applications' tiers in turn, e.g. any,fog,edge")
    parser.add_argument("--changes", type=int, default=1, help="successive one-cluster changes (gated)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    results = []
    for n in (int(x) for x in args.ns.split(",") if x.strip()):
        gated = run(n, args.ticks, gated=True, args=args)
        ungated = run(n, args.ungated_ticks, gated=False, args=args)
        p50 = ungated["tick_cpu_s_p50"] or 0.0
        gated["cores_at_1s_tick"] = gated["tick_cpu_s_p50"]
        gated["ungated_cores_at_1s_tick"] = p50
        results.append({"gated": gated, "ungated": ungated})
        if not args.json:
            print(f"N={n}: gated {gated['tick_cpu_s_p50']} s/tick, ungated {p50} s/tick", file=sys.stderr)
    print(json.dumps({"benchmark": "leader_idle", "results": results}, indent=None if args.json else 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
