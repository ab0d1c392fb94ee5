"""The controller replicas' CPU on an unchanging fleet, with 0, 100 and 1,000 applications, and
the work one cluster's capacity change makes (issue 38, "Measure it"), as JSON.

``leader_idle.py`` measures the detector alone, in this process. This one measures what a
platform team's `top` shows: whole replica processes (`qonnect controller run`, three of them,
Raft between them) with everything they run when nothing fails - the detector each tick and its
KB read, status, the survivability report, reconcile, Raft heartbeats - on a real stack (a KB, the
paper's nine emulated clusters with one agent each, their nodes allowing ``--pods-per-node`` pods) holding N one-Deployment applications
deployed with `qonnect.core.deploy` (the list form, one run).

Per N, after the replicas have observed every application and the leader's drift judge has
judged each once (its count, ``qonnect_controller_drift_judgements_total``, has stood still for
``--settle`` seconds):

- ``idle``: per replica (leader first) CPU cores over ``--window`` seconds of an idle fleet, from
  /proc (utime+stime, reaped children included), and the drift judgements made in the window
  (0 expected: heartbeats alone change nothing the placement reads); the KB's own CPU beside;
- ``label_change``: first, a label another team puts on that cluster's nodes (through its
  API): no capacity, health or economics moves, so only the applications placed on or eligible
  for the cluster should be judged again; the same fields as ``change``;
- ``change``: one cluster's capacity changes as a user's other workload would change it (a
  Deployment requesting ``--load-cpu`` applied to its API with the official client, not through
  qonnect): seconds until the leader judged again or kept a verdict through it, the judgements that change caused against
  the applications placed on or eligible for the cluster (``--tiers`` makes some of them
  ineligible), the verdicts the leader kept through it (``carried``), the leader's CPU over the
  ``--window`` after it, and the placement decisions it led to;
- ``elections``: "became leader" lines in the replicas' logs over the whole run (1: the first).

    python benchmarks/replica_idle.py --json                    # N = 0, 100, 1000
    python benchmarks/replica_idle.py --json --ns 0,100 --window 30
    python benchmarks/replica_idle.py --json --ns 1000 --tiers any,fog,edge
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))
sys.path.insert(0, str(ROOT / "tests" / "integration" / "controller"))  # the real-process harness
sys.path.insert(0, str(ROOT / "tests"))  # its shared helpers (support)

from _controller_stack import BIN, Replica, Stack, small_app, wait_for  # noqa: E402
from qonnect.controller import journal  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """A process's CPU seconds so far, its reaped children's included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK


def paper_profile(workdir: Path, pods: int) -> Path:
    """The paper's nine one-node clusters with ``pods`` allocatable pods per node (110 in the
    profile: 1,000 applications would not fit in nine nodes' pods, and the placement engine does
    not count pods - see docs/benchmarks.md)."""
    import yaml

    profile = yaml.safe_load((ROOT / "testbed" / "qonnect_testbed" / "profiles" / "paper.yml").read_text())
    for node in profile["node_profiles"].values():
        node["pods"] = pods
    path = workdir / "paper-pods.yml"
    path.write_text(yaml.safe_dump(profile))
    return path


def deploy(stack: Stack, names: list[str], workdir: Path, tiers: list[str]) -> float:
    """The applications through the deploy playbook's list form (one run); its seconds. The
    i-th one's service must run on a cluster of tier ``tiers[i % len(tiers)]`` ("any": none)."""
    import yaml

    folder = workdir / "apps"
    folder.mkdir(exist_ok=True)
    files = []
    for i, name in enumerate(names):
        spec = small_app(name)
        tier = tiers[i % len(tiers)]
        if tier != "any":
            spec["spec"]["services"][0]["tier"] = tier
        path = folder / f"{name}.yml"
        path.write_text(yaml.safe_dump(spec))
        files.append(str(path))
    t0 = time.monotonic()
    res = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "qonnect.core.deploy",
            "-e",
            json.dumps(
                {
                    "app_files": files,
                    "kb_url": stack.kb_url,
                    "kb_token_file": str(stack.admin_token),
                    "wait_timeout": 600,
                }
            ),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        env=stack.env,
        cwd=workdir,
        check=False,
    )
    if res.returncode != 0:
        raise SystemExit(
            f"deploying {len(names)} applications failed:\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}"
        )
    return time.monotonic() - t0


def judgements(replica: Replica) -> int:
    status = replica.status(timeout=10) or {}
    return int(status.get("drift_judgements") or 0)


def carried(replica: Replica) -> int:
    """Verdicts the leader kept through a fleet change its engine showed cannot move them."""
    status = replica.status(timeout=10) or {}
    return int(status.get("drift_carried") or 0)


def placed_on_or_eligible(stack: Stack, names: list[str], tiers: list[str], cluster: str) -> int:
    """How many applications run on ``cluster`` or may run there (their tier allows it): those
    a change on it must re-judge, at the least."""
    inventory = stack.admin.inventory()
    tier = next(c.get("tier") for c in inventory["clusters"] if c["name"] == cluster)
    placements = inventory.get("placements") or {}
    count = 0
    for i, name in enumerate(names):
        placed = {e.get("cluster") for es in (placements.get(name) or {}).values() for e in es}
        count += cluster in placed or tiers[i % len(tiers)] in ("any", tier)
    return count


def rejudged_for(replica: Replica) -> dict[str, int]:
    """The leader's count of re-judgements by the part of an application's key that changed,
    and of fleet changes by cluster (``fleet:NAME``)."""
    status = replica.status(timeout=10) or {}
    found = dict(status.get("drift_rejudged_for") or {})
    found.update({f"fleet:{k}": v for k, v in (status.get("drift_fleet_changes") or {}).items()})
    return found


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def settle(leader: Replica, quiet: float, timeout: float) -> float:
    """Wait until the leader's drift judgements stood still for ``quiet`` seconds; the count."""
    deadline = time.monotonic() + timeout
    last, since = judgements(leader), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = judgements(leader)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return last
    raise SystemExit(f"the leader's drift judgements did not settle within {timeout:.0f} s (at {last})")


def window(stack: Stack, seconds: float) -> dict[str, float]:
    """CPU cores of every replica and the KB over ``seconds``."""
    pids = {r.name: r.proc.pid for r in stack.replicas if r.proc}
    pids["kb"] = stack.kb_proc.pid
    before = {n: cpu_seconds(p) for n, p in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    span = time.monotonic() - t0
    return {n: round((cpu_seconds(p) - before[n]) / span, 4) for n, p in pids.items()}


def profile(leader: Replica, seconds: float, folder: str | None, n: int) -> subprocess.Popen | None:
    """With ``--profile DIR``: py-spy's collapsed stacks of the leader over the idle window
    (DIR/leader-N.txt; py-spy must be on PATH), to see where an idle leader's CPU goes."""
    if not folder or leader.proc is None:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    out = Path(folder) / f"leader-{n}.txt"
    return subprocess.Popen(
        [
            "py-spy",
            "record",
            "-p",
            str(leader.proc.pid),
            "-d",
            str(int(seconds)),
            "-r",
            "50",
            "-f",
            "raw",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def load_cluster(stack: Stack, cluster: str, args: argparse.Namespace) -> None:
    """Another team's Deployment on ``cluster``, applied to its own API (not through qonnect)."""
    from kubernetes import client, config

    entry = next(c for c in stack.federation["clusters"] if c["name"] == cluster)
    api = client.AppsV1Api(config.new_client_from_config(config_file=entry["kubeconfig"]))
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "other-team", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "other-team"}},
            "template": {
                "metadata": {"labels": {"app": "other-team"}},
                "spec": {
                    "containers": [
                        {"name": "job", "image": "busybox", "resources": {"requests": {"cpu": args.load_cpu}}}
                    ]
                },
            },
        },
    }
    api.create_namespaced_deployment("default", body, _request_timeout=10)


def label_node(stack: Stack, cluster: str, _args: argparse.Namespace) -> None:
    """A label another team puts on the cluster's nodes, through its own API (no capacity,
    health or economics changes: the applications that cannot use the cluster keep their
    verdicts)."""
    from kubernetes import client, config

    entry = next(c for c in stack.federation["clusters"] if c["name"] == cluster)
    api = client.CoreV1Api(config.new_client_from_config(config_file=entry["kubeconfig"]))
    for node in api.list_node(_request_timeout=10).items:
        body = {"metadata": {"labels": {"example.com/team": "other"}}}
        api.patch_node(node.metadata.name, body, _request_timeout=10)


def one_change(
    stack: Stack,
    leader: Replica,
    names: list[str],
    tiers: list[str],
    cluster: str,
    act: Callable[[Stack, str, argparse.Namespace], None],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """``act`` on ``cluster``; what the leader judged again and kept, and its CPU after."""
    after = last_event(stack)
    j1, why1, kept1 = judgements(leader), rejudged_for(leader), carried(leader)
    must = placed_on_or_eligible(stack, names, tiers, cluster)
    t0 = time.monotonic()
    act(stack, cluster, args)
    seen: float | None = None
    while names and time.monotonic() - t0 < args.change_timeout:
        if judgements(leader) > j1 or carried(leader) > kept1:
            seen = time.monotonic() - t0
            break
        time.sleep(0.2)
    cores = window(stack, args.window)
    return {
        "cluster": cluster,
        "seen_after_s": round(seen, 2) if seen is not None else None,
        "drift_judgements": judgements(leader) - j1,
        "placed_on_or_eligible": must,
        "carried": carried(leader) - kept1,
        "rejudged_for": delta(rejudged_for(leader), why1),
        "leader_cores": cores.pop(leader.name),
        "follower_cores": sorted(v for k, v in cores.items() if k != "kb"),
        "decisions": decisions(stack, after),
        "leader_after": stack.wait_leader(60).name,
    }


def decisions(stack: Stack, after: int) -> list[str]:
    """The controller's decisions the KB recorded since event ``after`` (reason: application)."""
    events = stack.admin.list_events(limit=1000, after_id=after)
    return [
        f"{e.get('reason')}:{e.get('application')}"
        for e in events
        if e.get("role") == "controller" and e["type"] == journal.DECISION
    ]


def last_event(stack: Stack) -> int:
    return max([e["id"] for e in stack.admin.list_events(limit=1, after_id=None)] or [0])


def one_n(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    stack = Stack(workdir)
    tiers = [t.strip() for t in args.tiers.split(",") if t.strip()]
    row: dict[str, Any] = {"applications": n, "tiers": tiers}
    try:
        stack.start_kb()
        stack.start_testbed(None, profile=str(paper_profile(workdir, args.pods_per_node)))
        stack.start_agents(1.0)
        names = [f"app{i:04d}" for i in range(n)]
        if names:
            row["deploy_s"] = round(deploy(stack, names, workdir, tiers), 1)
        stack.start_replicas(3, [])
        leader = stack.wait_leader(60)
        wait_for(
            lambda: all(len((r.status(timeout=10) or {}).get("versions") or {}) >= n for r in stack.replicas),
            300,
            1.0,
            "every replica to observe every application",
        )
        for _try in range(5):  # settled on the replica that leads when it is over
            row["judged_at_start"] = settle(leader, args.settle, 600)
            now_leading = stack.wait_leader(60)
            if now_leading is leader:
                break
            leader = now_leading
        else:
            raise SystemExit("the leadership did not settle")
        j0, why0 = judgements(leader), rejudged_for(leader)
        spy = profile(leader, args.window, args.profile, n)
        cores = window(stack, args.window)
        if spy is not None:
            spy.wait(timeout=60)
        row["idle"] = {
            "leader_cores": cores.pop(leader.name),
            "follower_cores": sorted(v for k, v in cores.items() if k != "kb"),
            "kb_cores": cores.get("kb"),
            "drift_judgements": judgements(leader) - j0,
            "rejudged_for": delta(rejudged_for(leader), why0),
        }
        cluster = stack.federation["clusters"][0]["name"]
        # first a label on the cluster's node (no capacity or economics moves), then a load
        row["label_change"] = one_change(stack, leader, names, tiers, cluster, label_node, args)
        row["change"] = one_change(stack, leader, names, tiers, cluster, load_cluster, args)
        row["leader"] = leader.name
        row["elections"] = sum(
            r.log_path.read_text(errors="replace").count("became leader of term") for r in stack.replicas
        )
        return row
    finally:
        if args.keep_logs:  # the replicas' and the KB's logs, for a look after the run
            import shutil

            kept = Path(args.keep_logs) / f"n{n}"
            kept.mkdir(parents=True, exist_ok=True)
            for log in [*workdir.glob("controller-*.log"), workdir / "kb.log"]:
                if log.exists():
                    shutil.copy(log, kept / log.name)
        stack.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ns", default="0,100,1000", help="applications per run, comma separated")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of each CPU window")
    parser.add_argument(
        "--settle",
        type=float,
        default=35.0,
        help="seconds the judgements must stand still (longer than the leader's 30 s stabilisation "
        "window, whose end after a takeover re-judges every application once)",
    )
    parser.add_argument("--pods-per-node", type=int, default=1500, help="allocatable pods of each node")
    parser.add_argument("--load-cpu", default="500m", help="the other team's Deployment's CPU request")
    parser.add_argument(
        "--tiers",
        default="any",
        help="the tiers the applications' services must run on, in turn (any: none), e.g. any,fog,edge",
    )
    parser.add_argument("--profile", metavar="DIR", help="py-spy the leader over the idle window into DIR")
    parser.add_argument(
        "--change-timeout", type=float, default=120.0, help="seconds to wait for the judge after the change"
    )
    parser.add_argument("--keep-logs", metavar="DIR", help="copy the replicas' and the KB's logs into DIR")
    parser.add_argument("--json", action="store_true", help="print JSON (the default prints it too)")
    args = parser.parse_args()
    out: dict[str, Any] = {"benchmark": "replica_idle", "window_s": args.window, "runs": []}
    with tempfile.TemporaryDirectory(prefix="qonnect-idle-") as tmp:
        for n in (int(x) for x in args.ns.split(",") if x.strip()):
            workdir = Path(tmp) / f"n{n}"
            workdir.mkdir()
            out["runs"].append(one_n(n, workdir, args))
            print(json.dumps(out["runs"][-1]), file=sys.stderr, flush=True)
    out["load_average"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
