"""Failover benchmark of the Raft-replicated controller, on real processes.

Measures, over --trials trials each (default 5; --quick: 2):
- detect_seconds: `testbed fail` of the cluster running bookinfo's ratings -> the controller's
  decision recorded in the KB;
- recover_seconds: the same failure -> every bookinfo service Healthy off the failed cluster
  (also split into _plain and _leader_killed trials: the latter wait out the old leader's lease);
- reelection_seconds: SIGKILL of the leader -> another replica is leader;
- duplicate_migrations: decisions with more than one successful migration (every other failover
  trial also SIGKILLs the leader in the middle of the migration);
- lost_decisions: decisions recorded in the KB that never ended, including a trial where every
  replica is killed at once and loses its data right after a decision;
- commit_latency_ms at 3, 5 and 7 replicas: sequential commits through the replicated decision
  log (RaftNode + DecisionLog with the controller's default timing), one process per replica.

    python benchmarks/failover.py --json
    python benchmarks/failover.py --json --quick
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "controller"))
sys.path.insert(0, str(ROOT / "tests" / "integration" / "controller"))  # the real-process harness

import qonnect._collection as _collection_on_path  # noqa: E402, F401  (puts the collection on sys.path)
from _rla_stack import Stack, free_port, wait_for  # noqa: E402
from qonnect.agent.cli import DEFAULT_INTERVAL  # noqa: E402
from qonnect.rla import kbio  # noqa: E402

APP = "bookinfo"
# The product's defaults: agents report every DEFAULT_INTERVAL seconds and the controller
# (no options) declares a cluster down after three of them.
OPTIONS: list[str] = []


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(values), "p50": round(statistics.median(ordered), 3),
            "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
            "max": round(ordered[-1], 3), "values": [round(v, 3) for v in values]}


# -- commit latency ------------------------------------------------------------------------------

def node_main(self_addr: str, peers: str, secret_file: str, count: int, out: str) -> None:
    """One replica of the latency group; the one that becomes leader runs the sequential commits."""
    from qonnect.rla.raft import RaftNode, read_secret

    node = RaftNode(self_addr, peers.split(","), read_secret(secret_file), None)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not Path(out).exists():
        if node.is_leader():
            node.propose({"op": "leader"}, timeout=10)
            samples = []
            for i in range(count):
                t0 = time.perf_counter()
                node.propose({"op": "observe", "app": "bench", "version": i}, timeout=10)
                samples.append((time.perf_counter() - t0) * 1000)
            Path(out + ".tmp").write_text(json.dumps(samples))
            os.replace(out + ".tmp", out)
            break
        time.sleep(0.05)
    while not Path(out).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    node.destroy()


def commit_latency(size: int, count: int, workdir: Path) -> dict[str, Any]:
    secret = workdir / f"secret-{size}"
    secret.write_text(os.urandom(24).hex())
    secret.chmod(0o600)
    out = workdir / f"latency-{size}.json"
    addrs = [f"127.0.0.1:{free_port()}" for _replica in range(size)]
    procs = [subprocess.Popen([sys.executable, __file__, "_node", a, ",".join(addrs), str(secret), str(count),
                               str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for a in addrs]
    try:
        wait_for(out.exists, 120, 0.1, f"{size} replicas to finish {count} commits")
        samples = json.loads(out.read_text())
    finally:
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    ordered = sorted(samples)
    return {"replicas": size, "commits": len(samples), "p50_ms": round(statistics.median(ordered), 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2), "max_ms": round(ordered[-1], 2)}


# -- failover ------------------------------------------------------------------------------------

def ours(stack: Stack, after: int) -> list[dict[str, Any]]:
    return [e for e in stack.events(APP) if e["id"] > after and kbio.trusted(e)]


def last_id(stack: Stack) -> int:
    return max([e["id"] for e in stack.events()] or [0])


def ratings_cluster(stack: Stack) -> str:
    return stack.placement(APP)["ratings"][0]["cluster"]


def failover_trial(stack: Stack, kill_leader: bool, wipe_all: bool) -> dict[str, Any]:
    target = ratings_cluster(stack)
    after = last_id(stack)
    t0 = time.monotonic()
    stack.testbed("fail", target)
    try:
        wait_for(lambda: any(e["type"] == kbio.DECISION for e in ours(stack, after)), 60, 0.05, "a decision")
        detect = time.monotonic() - t0
        if wipe_all:  # every replica dies at once and loses its journal: the KB has the record
            for r in stack.replicas:
                r.kill()
                subprocess.run(["rm", "-rf", str(r.data_dir)], check=True)
            for r in stack.replicas:
                r.start(wait=False)
            for r in stack.replicas:
                r.wait_serving()
        elif kill_leader:
            wait_for(lambda: any(e["type"] == kbio.STARTED for e in ours(stack, after)), 30, 0.05, "a start")
            leader = stack.leader()
            if leader is not None:
                leader.kill()
                stack.wait_leader(10, [r for r in stack.replicas if r is not leader])
                leader.start()
        wait_for(lambda: stack.healthy_elsewhere(APP, {target}), 120, 0.2, "recovery")
        recover = time.monotonic() - t0
        wait_for(lambda: any(e["type"] in (kbio.SUCCEEDED, kbio.GAVE_UP) for e in ours(stack, after)), 120, 0.2,
                 "a decision to end")
    finally:
        stack.testbed("recover", target)
    events = ours(stack, after)
    decisions = {e["ref"]["id"] for e in events if e["type"] == kbio.DECISION}
    ended = {e["ref"]["id"] for e in events if e["type"] in kbio.DONE}
    successes: dict[str, int] = {}
    for e in events:
        if e["type"] == kbio.SUCCEEDED:
            successes[e["ref"]["id"]] = successes.get(e["ref"]["id"], 0) + 1
    wait_for(lambda: all(c["healthy"] for c in stack.admin.inventory()["clusters"]), 60, 0.5, "clusters healthy")
    return {"cluster": target, "detect": detect, "recover": recover, "decisions": len(decisions),
            "duplicates": sum(1 for n in successes.values() if n > 1), "lost": len(decisions - ended)}


def reelection_trial(stack: Stack) -> float:
    leader = stack.wait_leader()
    others = [r for r in stack.replicas if r is not leader]
    leader.kill()
    t0 = time.monotonic()
    stack.wait_leader(10, others)
    elapsed = time.monotonic() - t0
    leader.start()
    wait_for(lambda: all((r.status() or {}).get("leader") for r in stack.replicas), 30, 0.2, "rejoin")
    return elapsed


def run(trials: int, commits: int, workdir: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"trials": trials}
    result["commit_latency_ms"] = {str(n): commit_latency(n, commits, workdir) for n in (3, 5, 7)}
    stack = Stack(workdir)
    try:
        stack.start_kb()
        stack.start_testbed(6)
        stack.start_agents(DEFAULT_INTERVAL)
        stack.deploy(ROOT / "examples" / "bookinfo" / "energy-first.yml")
        stack.start_replicas(3, OPTIONS)
        stack.wait_leader()
        result["reelection_seconds"] = summary([reelection_trial(stack) for _trial in range(trials)])
        runs = [failover_trial(stack, kill_leader=i % 2 == 1, wipe_all=False) for i in range(trials)]
        wiped = failover_trial(stack, kill_leader=False, wipe_all=True)
    finally:
        stack.close()
    result["detect_seconds"] = summary([r["detect"] for r in runs])
    result["recover_seconds"] = summary([r["recover"] for r in runs])
    result["recover_seconds_plain"] = summary([r["recover"] for i, r in enumerate(runs) if i % 2 == 0])
    result["recover_seconds_leader_killed"] = summary([r["recover"] for i, r in enumerate(runs) if i % 2 == 1])
    result["duplicate_migrations"] = sum(r["duplicates"] for r in [*runs, wiped])
    result["lost_decisions"] = sum(r["lost"] for r in [*runs, wiped])
    result["all_replicas_lost_trial"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in wiped.items()}
    result["leader_killed_mid_migration_trials"] = sum(1 for i in range(trials) if i % 2 == 1)
    result["targets"] = {"recover_seconds_max": 15, "reelection_seconds_max": 2, "duplicate_migrations": 0,
                         "lost_decisions": 0}
    result["settings"] = {"agent_interval_s": DEFAULT_INTERVAL, "heartbeat_timeout_s": 3 * DEFAULT_INTERVAL,
                          "detector_tick_s": 1.0,
                          "raft_election_s": [0.7, 1.4], "leader_fallback_s": 1.5, "clusters": 6,
                          "cpu_count": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    return result


def main() -> int:
    if sys.argv[1:2] == ["_node"]:
        node_main(*sys.argv[2:5], int(sys.argv[5]), sys.argv[6])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="2 trials and 30 commits per size")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--commits", type=int, default=100)
    args = parser.parse_args()
    trials, commits = (2, 30) if args.quick else (max(1, args.trials), max(5, args.commits))
    with tempfile.TemporaryDirectory(prefix="qonnect-failover-") as tmp:
        result = run(trials, commits, Path(tmp))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
