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
node's requests grow, and the tick after it (every application judged again: the engine
normalises over the whole fleet). After the rules, each tick runs the hedged-failover pass
(``hedging.triggers``, hedging on as the CLI's default): ``hedge_pass_cpu_s_p50``/``_p99``.

    python benchmarks/leader_idle.py --json                 # N = 0, 100, 1000
    python benchmarks/leader_idle.py --json --ns 100 --ticks 30

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


def one_deployment(name: str) -> dict[str, Any]:
    """A one-service application as the KB stores it (``Application.to_dict``)."""
    from ansible_collections.qonnect.core.plugins.module_utils.qos import Application, Service

    service = Service(
        name="web",
        tier="any",
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


def fleet(n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The paper inventory with ``n`` applications placed by the heal's planner in one pass."""
    inventory = json.loads((ROOT / "examples" / "inventories" / "paper.json").read_text())
    inventory["placements"] = {}
    records = [
        {
            "name": f"app{i:04d}",
            "version": 1,
            "updated": 1.0,
            "application": one_deployment(f"app{i:04d}"),
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


def ticks(inventory: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """``count`` inventories as the view hands them out on a quiet fleet: new objects, ages moving."""
    out = []
    for t in range(count):
        inv = copy.deepcopy(inventory)
        for c in inv["clusters"]:
            c["heartbeat_age"] = 1.0 + t % 3
            for node in c["nodes"]:
                node["heartbeat_age"] = 1.0 + t % 3
        out.append(inv)
    return out


def run(n: int, count: int, gated: bool) -> dict[str, Any]:
    inventory, records = fleet(n)
    planner = engine_planner("weighted", 0.1)
    judge = drift_judge(planner)
    replan = ChangeGate(judge) if gated else judge
    log = DecisionLog()
    for r in records:
        log.apply({"op": "observe", "app": r["name"], "version": 1, "term": 1, "node": "n"})
    memory = Memory(healthy_since={c["name"]: 0.0 for c in inventory["clusters"]})
    settings = Settings(hedge=True)  # as the CLI runs it (--hedge is the default)
    quiet = ticks(inventory, count)
    changed = copy.deepcopy(quiet[-1])
    changed["clusters"][4]["nodes"][0]["requested"]["cpu"] += 0.5  # another workload started there
    cpu, hedge_cpu, triggers = [], [], 0
    for t, inv in enumerate([*quiet, changed]):
        snapshot = Snapshot(inv, [], records, 1000.0 + t)
        began = time.thread_time()
        found, _observe = detect(snapshot, log, memory, settings, replan)
        cpu.append(time.thread_time() - began)
        triggers += len(found)
        began = time.thread_time()  # the leader's hedge pass after the rules (detection.py)
        triggers += len(hedging.triggers(snapshot, log, memory, settings, {f.app for f in found}))
        hedge_cpu.append(time.thread_time() - began)
    steady = cpu[1:-1]
    out: dict[str, Any] = {
        "applications": n,
        "gated": gated,
        "ticks": count,
        "triggers": triggers,
        "first_tick_cpu_s": round(cpu[0], 4),
        "tick_cpu_s_p50": round(statistics.median(steady), 5) if steady else None,
        "tick_cpu_s_p99": round(sorted(steady)[math.ceil(0.99 * len(steady)) - 1], 5) if steady else None,
        "after_one_change_cpu_s": round(cpu[-1], 4),
        "hedge_pass_cpu_s_p50": round(statistics.median(hedge_cpu), 6),
        "hedge_pass_cpu_s_p99": round(sorted(hedge_cpu)[math.ceil(0.99 * len(hedge_cpu)) - 1], 6),
    }
    if gated:
        out["judged"] = replan.judged
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--ns", default="0,100,1000", help="applications, comma-separated")
    parser.add_argument("--ticks", type=int, default=60, help="quiet ticks per N (gated)")
    parser.add_argument("--ungated-ticks", type=int, default=5, help="quiet ticks per N without the gate")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    results = []
    for n in (int(x) for x in args.ns.split(",") if x.strip()):
        gated = run(n, args.ticks, gated=True)
        ungated = run(n, args.ungated_ticks, gated=False)
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
