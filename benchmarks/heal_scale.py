"""Healing a fleet (issue 21): k applications on the cluster that fails, on real processes.

For each k (default 1, 10, 20) a fresh emulator federation (6 clusters, a KB, one agent per
cluster, 3 controller replicas) gets k applications of one small Deployment (10m CPU), all
placed on the same cluster by a plan; that cluster is failed (`testbed fail`) and the benchmark
waits until every application is Healthy elsewhere, read from the KB's placements and the
workloads its agents report (not from the controller's own events). Reported per k:

- ready_elsewhere_seconds p50/p99/max: failure -> each application has a Healthy instance of
  every service on a cluster of its placement other than the failed one (a standby copy of the
  hedged failover, issue 36, counts: it is what callers use);
- heal_seconds p50/p99/max: failure -> each application placed off the failed cluster (the
  committed move) with every workload there Healthy;
- hedges / hedges_discarded: the controller's hedge decisions (standby copies made) and discards;
- playbook_starts (and per application): migration runs the replicas started (their logs);
- leader_changes: elections after the failure (term before/after, "became leader" lines);
- max_attempt: the highest attempt number of any migration start (KB events), against
  --max-attempts;
- children_peak_rss_mib / children_cpu_seconds: everything the controller replicas started
  (sampled from /proc every 0.25 s; CPU of reaped children from the replicas' cutime/cstime),
  and the replicas' own CPU;
- bystanders_moved: of ``--bystanders`` applications placed off the failing cluster (healthy
  all along), how many the controller decided to move or the KB shows elsewhere, during the heal
  and the failback (should be 0);
- after the failed cluster recovers (``--after-recovery`` seconds watched): failback_moves
  (controller decisions in that window) and their peak per sliding minute, and orphans: the
  Deployments qonnect applied (``qonnect.io/application`` label) that the recovered cluster
  still runs for an application the KB no longer places there, read from the cluster's own API.

Measure older code from a worktree (the benchmark runs whatever checkout it sits in):

    git worktree add /tmp/old 94360af && cp benchmarks/heal_scale.py /tmp/old/benchmarks/
    python /tmp/old/benchmarks/heal_scale.py --json --ks 1,10,20
    python benchmarks/heal_scale.py --json --ks 1,10,20
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))
sys.path.insert(0, str(ROOT / "tests" / "integration" / "controller"))  # the real-process harness
sys.path.insert(0, str(ROOT / "tests"))  # its shared helpers (support)

from _controller_stack import BIN, Stack, small_app, wait_for  # noqa: E402
from ansible_collections.qonnect.core.plugins.module_utils.keys import APP_LABEL  # noqa: E402
from failover import kube_profile, summary  # noqa: E402  (the same percentiles and kube profile as failover)
from qonnect.controller import journal  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

PLAY = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/qonnect.core.kb:
      kb_url: "{{ kb_url }}"
      kb_token: "{{ lookup('ansible.builtin.file', kb_token_file) }}"
  tasks:
    - name: Deploy every application onto one cluster
      qonnect.core.deploy:
        spec: "{{ item }}"
        plan: "{{ omit if bystander else {'services': {'web': [{'cluster': target, 'replicas': 1}]}} }}"
        exclude: "{{ [target] if bystander else omit }}"
        wait_timeout: 60
        min_ready_seconds: 0  # set-up, not measured: no minimum-ready window per application
      loop: "{{ apps }}"
      loop_control: {label: "{{ item.metadata.name }}"}
"""


# -- /proc sampling ----------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 'state' on (index 0 = field 3)


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields:
                kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def _descendants(root: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


class Sampler(threading.Thread):
    """Peak RSS of all descendants of the replicas, and the CPU they used."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.stop = threading.Event()
        self.peak_rss = 0
        self.peak_children = 0
        self.live_cpu: dict[int, float] = {}  # descendant pid -> last seen utime+stime (s)
        self.start_cpu = {p: self._cpu(p) for p in pids}

    @staticmethod
    def _cpu(pid: int) -> tuple[float, float]:
        """(own, reaped children's) CPU seconds of a process."""
        f = _stat(pid)
        if not f:
            return 0.0, 0.0
        return (int(f[11]) + int(f[12])) / CLK, (int(f[13]) + int(f[14])) / CLK

    def run(self) -> None:
        while not self.stop.is_set():
            kids = _children_map()
            rss, n = 0, 0
            for root in self.pids:
                for pid in _descendants(root, kids):
                    f = _stat(pid)
                    if f:
                        rss += int(f[21]) * PAGE
                        n += 1
                        self.live_cpu[pid] = (int(f[11]) + int(f[12])) / CLK
            self.peak_rss, self.peak_children = max(self.peak_rss, rss), max(self.peak_children, n)
            self.stop.wait(0.25)

    def result(self) -> dict[str, Any]:
        self.stop.set()
        self.join(timeout=5)
        own = reaped = 0.0
        for pid in self.pids:
            o, r = self._cpu(pid)
            own += o - self.start_cpu[pid][0]
            reaped += r - self.start_cpu[pid][1]
        alive = sum(self.live_cpu[p] for p in self.live_cpu if _stat(p))  # not reaped yet
        return {
            "children_peak_rss_mib": round(self.peak_rss / 2**20, 1),
            "children_peak_processes": self.peak_children,
            "children_cpu_seconds": round(reaped + alive, 1),
            "replicas_cpu_seconds": round(own, 1),
        }


# -- one k ---------------------------------------------------------------------------------------


def deploy_all(stack: Stack, names: list[str], target: str, workdir: Path, bystander: bool = False) -> None:
    """The applications placed on ``target`` by a plan; bystanders placed by the engine anywhere
    but ``target`` (their stored exclusion also keeps QoS-drift moves off them: any decision
    about one is a move of a healthy workload the failure caused)."""
    play = workdir / "deploy-all.yml"
    play.write_text(PLAY)
    extra = workdir / "apps.json"
    extra.write_text(
        json.dumps(
            {
                "apps": [small_app(n) for n in names],
                "target": target,
                "bystander": bystander,
                "kb_url": stack.kb_url,
                "kb_token_file": str(stack.admin_token),
            }
        )
    )
    res = subprocess.run(
        [str(BIN / "ansible-playbook"), str(play), "-e", f"@{extra}"],
        capture_output=True,
        text=True,
        timeout=1800,
        env=stack.env,
        cwd=workdir,
        check=False,
    )
    if res.returncode != 0:
        raise SystemExit(f"deploying the applications failed:\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}")


def placed_on(stack: Stack, names: list[str]) -> dict[str, set[str]]:
    """Application -> the clusters its KB placement names (current, else desired)."""
    placements = {p["application"]: p for p in stack.admin.request("GET", "/api/v1/placements")["placements"]}
    out: dict[str, set[str]] = {}
    for name in names:
        rec = placements.get(name) or {}
        placement = rec.get("current") or rec.get("desired") or {}
        out[name] = {t["cluster"] for targets in placement.values() for t in targets}
    return out


def orphans_on(stack: Stack, cluster: str, names: list[str]) -> list[str]:
    """Deployments of ``names`` live on ``cluster`` (its own API) that the KB places elsewhere."""
    from kubernetes import client, config

    entry = next(c for c in stack.federation["clusters"] if c["name"] == cluster)
    api = client.AppsV1Api(config.new_client_from_config(config_file=entry["kubeconfig"]))
    placed = placed_on(stack, names)
    live = api.list_deployment_for_all_namespaces(label_selector=APP_LABEL, _request_timeout=10).items
    return sorted(
        f"{d.metadata.namespace}/{d.metadata.name} ({d.metadata.labels[APP_LABEL]})"
        for d in live
        if d.metadata.labels[APP_LABEL] in placed and cluster not in placed[d.metadata.labels[APP_LABEL]]
    )


def peak_per_minute(times: list[float]) -> int:
    ordered = sorted(times)
    return max((sum(1 for u in ordered if t <= u < t + 60.0) for t in ordered), default=0)


def healed_now(stack: Stack, names: set[str], failed: str) -> tuple[set[str], set[str]]:
    """(applications placed off the failed cluster with every workload there Healthy: the
    committed move, applications with a Healthy instance of every service on a cluster of their
    placement other than the failed one: Ready elsewhere, a standby copy too), from the KB."""
    placements = {p["application"]: p for p in stack.admin.request("GET", "/api/v1/placements")["placements"]}
    workloads = stack.admin.request("GET", "/api/v1/workloads")["workloads"]
    healthy: dict[tuple[str, str], list[str]] = {}
    for w in workloads:
        healthy.setdefault((w.get("application") or "", w.get("service") or ""), []).append(
            f"{w['cluster']}={w['status']}"
        )
    done, ready = set(), set()
    for name in names:
        rec = placements.get(name) or {}
        placement = rec.get("current") or rec.get("desired") or {}
        ok = live = bool(placement)
        for service, targets in placement.items():
            clusters = {t["cluster"] for t in targets}
            states = [s for s in healthy.get((name, service), []) if s.split("=")[0] in clusters]
            if failed in clusters or not states or any(not s.endswith("=Healthy") for s in states):
                ok = False
            if not any(s.endswith("=Healthy") and s.split("=")[0] != failed for s in states):
                live = False
        if ok:
            done.add(name)
        if live:
            ready.add(name)
    return done, ready


def terms(stack: Stack) -> list[int]:
    return [st["term"] for r in stack.replicas if (st := r.status(timeout=2.0))]


def log_counts(stack: Stack, offsets: dict[str, int]) -> dict[str, int]:
    """Playbook starts, elections and pysyncobj divergence warnings in the replicas' logs
    written after the failure."""
    starts = elections = diverged = 0
    for r in stack.replicas:
        text = r.log_path.read_bytes()[offsets.get(r.name, 0) :].decode(errors="replace")
        starts += len(re.findall(r"attempt \d+: running \S+ for", text))
        starts += len(re.findall(r"batch \S+: running \S+ for", text))
        elections += text.count("became leader of term")
        diverged += text.count("state machine may have diverged")
    return {"playbook_starts": starts, "elections": elections, "divergence_warnings": diverged}


def controller_story(stack: Stack, after: int, failed_at: float) -> dict[str, Any]:
    """From the KB's controller events: the highest attempt number started, and when the first
    decision was taken (detection, which other rules than the executor's decide)."""
    events = [e for e in stack.admin.list_events(limit=1000, after_id=after) if e.get("role") == "controller"]
    attempts = [int((e.get("ref") or {}).get("attempt") or 0) for e in events if e["type"] == journal.STARTED]
    decided = [e["ts"] for e in events if e["type"] == journal.DECISION]
    kinds = [e.get("reason") or "" for e in events if e["type"] == journal.DECISION]
    return {
        "max_attempt": max(attempts or [0]),
        "decisions": len(decided),
        "hedges": kinds.count("hedge"),
        "hedges_discarded": kinds.count("hedge-discard"),
        "first_decision_seconds": round(min(decided) - failed_at, 2) if decided else None,
    }


def one_k(
    k: int,
    workdir: Path,
    options: list[str],
    timeout: float,
    bystanders: int = 3,
    after_recovery: float = 90.0,
    engine: str = "emulator",
) -> dict[str, Any]:
    stack = Stack(workdir)
    try:
        stack.start_kb()
        if engine == "kube":  # real control planes: cloud, fog and two edge clusters
            stack.start_testbed(None, 1.0, "kube", str(kube_profile(workdir)), 2.0)
        else:
            stack.start_testbed(6)
        stack.start_agents(1.0)
        target = stack.federation["clusters"][0]["name"]
        names = [f"app{i:03d}" for i in range(k)]
        t_dep = time.monotonic()
        deploy_all(stack, names, target, workdir)
        deploy_seconds = time.monotonic() - t_dep
        calm = [f"calm{i:02d}" for i in range(bystanders)]
        if calm:
            (workdir / "calm").mkdir(exist_ok=True)
            deploy_all(stack, calm, target, workdir / "calm", bystander=True)
        calm_home = placed_on(stack, calm)
        stack.start_replicas(3, options)
        stack.wait_leader(30)
        # let the new leader settle (heartbeat grace) and observe every application once
        wait_for(
            lambda: all(st.get("versions") for r in stack.replicas if (st := r.status())), 60, 0.5, "observe"
        )
        time.sleep(2)
        term0 = max(terms(stack))
        after = max([e["id"] for e in stack.admin.list_events(limit=1, after_id=None)] or [0])
        offsets = {r.name: r.log_path.stat().st_size for r in stack.replicas}
        sampler = Sampler([r.proc.pid for r in stack.replicas if r.proc])
        sampler.start()
        t0 = time.monotonic()
        failed_at = time.time()
        stack.testbed("fail", target)
        healed: dict[str, float] = {}
        ready: dict[str, float] = {}
        pending = set(names)
        deadline = t0 + timeout
        while pending and time.monotonic() < deadline:
            try:
                done, live = healed_now(stack, pending, target)
            except Exception:  # a KB hiccup under load: poll again
                done, live = set(), set()
            now = time.monotonic() - t0
            for name in done:
                healed[name] = now
            for name in live | done:
                ready.setdefault(name, now)
            pending -= done
            time.sleep(0.25)
        resources = sampler.result()
        story = controller_story(stack, after, failed_at)
        counts = log_counts(stack, offsets)
        term1 = max(terms(stack) or [term0])
        heal = list(healed.values())
        back = recovery(stack, target, names, after_recovery)
        touched = {  # every controller decision about a bystander, heal and failback
            e["application"]
            for e in stack.admin.list_events(limit=1000, after_id=after)
            if e.get("role") == "controller"
            and e["type"] == journal.DECISION
            and e.get("application") in calm
        }
        moved = sorted(touched | {n for n, where in placed_on(stack, calm).items() if where != calm_home[n]})
        return {
            "k": k,
            "engine": engine,
            "failed_cluster": target,
            "failed_at": failed_at,
            "deploy_seconds": round(deploy_seconds, 1),
            "healed": len(healed),
            "not_healed": sorted(pending),
            "ready_elsewhere_seconds": summary(list(ready.values())),
            "heal_seconds": summary(heal),
            "heal_all_seconds": round(max(heal), 2) if heal and not pending else None,
            **counts,
            "playbook_starts_per_app": round(counts["playbook_starts"] / k, 2),
            "term_before": term0,
            "term_after": term1,
            "leader_changes": term1 - term0,
            **story,
            "heal_after_decision_seconds": round(max(heal) - story["first_decision_seconds"], 2)
            if heal and not pending and story["first_decision_seconds"] is not None
            else None,
            **resources,
            "bystanders": len(calm),
            "bystanders_moved": len(moved),
            "bystanders_moved_names": moved,
            **back,
        }
    finally:
        stack.close()


def recovery(stack: Stack, cluster: str, names: list[str], watch: float) -> dict[str, Any]:
    """Recover the failed cluster and watch the failback for ``watch`` seconds: the decisions
    the controller takes, their peak per minute, and the orphans left on that cluster."""
    if watch <= 0:
        return {}
    after = max([e["id"] for e in stack.admin.list_events(limit=1, after_id=None)] or [0])
    stack.testbed("recover", cluster)
    time.sleep(watch)
    events = [e for e in stack.admin.list_events(limit=1000, after_id=after) if e.get("role") == "controller"]
    decisions = [e for e in events if e["type"] == journal.DECISION]
    decided = [e["ts"] for e in decisions]
    left = orphans_on(stack, cluster, names)
    return {
        "after_recovery_seconds": watch,
        "failback_moves": len(decided),
        "failback_peak_per_minute": peak_per_minute(decided),
        "failback_decisions": [f"{e.get('application')}: {e.get('reason')}" for e in decisions[:20]],
        "orphans": len(left),
        "orphan_names": left[:20],
    }


# Heal seconds (failure -> every application Healthy elsewhere) against k, as measured before:
# issue 21's report (one playbook per decision, unbounded) and the batched executor of 2026-12-03.
EARLIER = {
    "issue 21 report (one run per decision)": [(1, 13.4), (5, 57.8), (20, 607.0)],
    "2026-12-03 (batched runs)": [(1, 23.9), (10, 31.8), (20, 45.4)],
    "2026-12-04 (committed plan, batches of 10)": [(1, 23.8), (10, 28.9), (50, 74.5)],
    "2026-12-05 (one deploy process per batch)": [(1, 23.8), (10, 25.8), (50, 44.6)],
    "2026-12-05 (one Raft entry per detection pass)": [(1, 23.8), (10, 26.3), (50, 33.0), (100, 47.8)],
}


def chart(results: list[dict[str, Any]], path: Path, label: str) -> None:
    """Heal seconds against k: this run's all-healed and p50, beside the earlier measurements."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, points in EARLIER.items():
        ax.plot([k for k, _s in points], [s for _k, s in points], marker="o", linestyle="--", label=name)
    done = [r for r in results if r.get("heal_all_seconds") is not None]
    ax.plot(
        [r["k"] for r in done],
        [r["heal_all_seconds"] for r in done],
        marker="o",
        label=f"{label}: all healed",
    )
    ax.plot(
        [r["k"] for r in done], [r["heal_seconds"]["p50"] for r in done], marker="x", label=f"{label}: p50"
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("applications on the failed cluster (k)")
    ax.set_ylabel("seconds from the failure")
    ax.set_title("Healing a fleet: heal time against k")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="1,10,20", help="comma-separated application counts")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for a heal")
    parser.add_argument(
        "--controller-option", action="append", default=[], help="extra option for every replica"
    )
    parser.add_argument("--bystanders", type=int, default=3, help="healthy applications on another cluster")
    parser.add_argument(
        "--after-recovery", type=float, default=90.0, help="seconds to watch the failback (0: do not recover)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--keep", help="keep each k's processes' logs and run artifacts under this directory")
    parser.add_argument("--chart", help="also draw heal seconds against k (PNG) beside the earlier figures")
    parser.add_argument("--label", default="this run", help="this run's name in the chart")
    parser.add_argument(
        "--engine", choices=("emulator", "kube"), default="emulator", help="the testbed's clusters"
    )
    args = parser.parse_args()
    results = []
    for k in [int(x) for x in args.ks.split(",") if x.strip()]:
        if args.keep:
            workdir = Path(args.keep) / f"k{k}"
            workdir.mkdir(parents=True, exist_ok=False)
            res = one_k(
                k,
                workdir,
                args.controller_option,
                args.timeout,
                args.bystanders,
                args.after_recovery,
                args.engine,
            )
        else:
            with tempfile.TemporaryDirectory(prefix=f"heal-k{k}-") as tmp:
                res = one_k(
                    k,
                    Path(tmp),
                    args.controller_option,
                    args.timeout,
                    args.bystanders,
                    args.after_recovery,
                    args.engine,
                )
        results.append(res)
        if not args.json:
            print(json.dumps(res), file=sys.stderr, flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps({"checkout": str(ROOT), "results": results}, indent=2))
    if args.chart:
        chart(results, Path(args.chart), args.label)
    print(json.dumps({"checkout": str(ROOT), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
