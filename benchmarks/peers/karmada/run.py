"""Side by side with Karmada (the release pinned in go.mod): the same member clusters, the same failures, one run.

Four real member clusters (the failover benchmark's: tiers profile + edge-2, real etcd,
kube-apiserver, controller-manager and scheduler each, simulated kubelets with bookinfo's start
delays) are joined to a Karmada control plane (plane.py) in push mode and registered with
qonnect.core (KB, one agent per member, three controller replicas), both at once. Bookinfo runs
twice on them: in namespace ``bookinfo-k`` propagated by Karmada (one PropagationPolicy per
service: cluster affinity by the member's tier label, spread over exactly one cluster,
Duplicated replicas), and in ``bookinfo`` deployed by qonnect.core from
examples/bookinfo/energy-first.yml (the same tiers). Every judgement reads the members' own
Deployments (members.py), never either system's belief.

Trials, in two phases (Karmada's defaults, then Karmada tuned for failover; qonnect.core
unchanged), each phase ``--reps`` repetitions of: (1) both removed and deployed again -> every
Deployment Ready (the two systems one after the other, the order alternating per repetition);
(2) the API server of each member running either system's ratings is SIGKILLed -> every
Deployment that was there Ready on another member (both systems watch the same failure); (3) the
member comes back -> the copies each system left there, how long until none is left, what moved
back; (4) one 15 s API-server blip -> which Deployments moved. Then (5, each phase) k one-service
applications per system (ratings clones, tier edge) and their member fails. CPU-seconds and peak
RSS per control plane are read from /proc (Karmada: host etcd, kube-apiserver,
kube-controller-manager and the three Karmada components; qonnect: KB, agents, controller
replicas; CPU includes reaped children, so the replicas' playbook runs; the summed per-process
peak RSS does not, the sampled simultaneous RSS does). Bounded everywhere; every process is stopped in ``finally``;
the result so far is written after each trial (``--out``).

    python benchmarks/peers/karmada/run.py --json            # after benchmarks/peers/karmada/build.sh
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
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "services"))
sys.path.insert(0, str(ROOT / "tests" / "integration" / "controller"))  # the real-process harness
sys.path.insert(0, str(ROOT / "tests"))  # its shared helpers (support)

from _controller_stack import BIN, REPO, Stack, wait_for  # noqa: E402
from failover import KUBE_START_DELAYS, kube_profile, summary  # noqa: E402
from members import Member, RssSampler, cost, nodes_not_ready, snapshot, where  # noqa: E402
from plane import TAINT_POLICY, Karmada  # noqa: E402
from qonnect.agent.cli import DEFAULT_INTERVAL  # noqa: E402
from qonnect.controller import journal  # noqa: E402
from qonnect_testbed.kube.binaries import bin_dir as kube_bin_dir  # noqa: E402


def pinned_version() -> str:
    """The Karmada release go.mod pins (build.sh builds it; one place names the version)."""
    for line in (HERE / "go.mod").read_text().splitlines():
        words = line.replace("require", " ").split()
        if len(words) == 2 and words[0] == "github.com/karmada-io/karmada":
            return words[1]
    raise SystemExit("benchmarks/peers/karmada/go.mod: github.com/karmada-io/karmada is not pinned")


VERSION = pinned_version()
HEDGE_KINDS = ("hedge", "hedge-discard")  # qonnect's standby copies made and removed: no move
K_NS, Q_NS = "bookinfo-k", "bookinfo"
SPEC = ROOT / "examples" / "bookinfo" / "energy-first.yml"
MANIFESTS = ROOT / "examples" / "bookinfo" / "manifests"
TIERS = {"productpage": "cloud", "details": "fog", "reviews": "fog", "ratings": "edge"}
# Karmada's documented failover settings, tuned for speed (its defaults in comments).
TUNED_CM_FLAGS = [
    "--feature-gates=Failover=true",  # false: no cluster failover at all
    "--enable-no-execute-taint-eviction=true",  # false: NoExecute taints evict nothing
    "--no-execute-taint-eviction-purge-mode=Gracefully",  # the default: old copy kept until new Ready
    "--cluster-status-update-frequency=2s",  # 10s; qonnect's agents report every 2 s
    "--cluster-failure-threshold=6s",  # 30s; qonnect's heartbeat timeout is 6 s
    "--cluster-success-threshold=6s",  # 30s
    "--cluster-monitor-period=1s",  # 5s
    "--cluster-monitor-grace-period=6s",  # 40s
    "--resource-eviction-rate=1000",  # 0.5: each eviction waits 1/rate = 2 s (left at 0.5 in the v1.16.0 runs)
]
TUNED_SCHEDULER_FLAGS = ["--feature-gates=Failover=true"]


# -- workloads -------------------------------------------------------------------------------------


def karmada_templates(
    namespace: str, services: dict[str, str], manifests: dict[str, list[dict]]
) -> list[dict]:
    """The resource templates and two PropagationPolicies per service (the QoS spec's tier).

    Karmada schedules every resource template on its own: a Deployment, its ServiceAccount and
    its Service each "spread over exactly one cluster" of a two-member tier may land on three
    different members (seen: ratings-v1 on edge-2, its ServiceAccount on edge-1, so no pod).
    So the Deployment's policy has ``propagateDeps`` (its ServiceAccount follows it, on failover
    too) and the Service goes to every member of the tier (a Service without endpoints is inert).
    """
    objs: list[dict] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    for service, tier in services.items():
        for item in manifests[service]:
            obj = json.loads(json.dumps(item))
            obj["metadata"]["namespace"] = namespace
            objs.append(obj)
        affinity = {"labelSelector": {"matchLabels": {"tier": tier}}}
        objs.append(
            policy(
                service,
                namespace,
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "labelSelector": {"matchLabels": {"app": service}},
                },
                {
                    "clusterAffinity": affinity,
                    "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}],
                    "replicaScheduling": {"replicaSchedulingType": "Duplicated"},
                },
                propagate_deps=True,
            )
        )
        objs.append(
            policy(
                f"{service}-service",
                namespace,
                {"apiVersion": "v1", "kind": "Service", "labelSelector": {"matchLabels": {"app": service}}},
                {"clusterAffinity": affinity},
            )
        )
    return objs


def policy(name: str, namespace: str, selector: dict, placement: dict, propagate_deps: bool = False) -> dict:
    spec: dict[str, Any] = {"resourceSelectors": [selector], "placement": placement}
    if propagate_deps:
        spec["propagateDeps"] = True
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def brief(obj: dict) -> dict[str, Any]:
    """A Karmada object's name, whether it is being deleted, and its conditions that are not True."""
    meta = obj["metadata"]
    return {
        "name": f"{meta['namespace']}/{meta['name']}",
        "deleting": bool(meta.get("deletionTimestamp")),
        "conditions": [
            f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')[:160]}"
            for c in obj.get("status", {}).get("conditions", [])
            if c["status"] != "True"
        ],
    }


def bookinfo_manifests() -> dict[str, list[dict]]:
    import yaml

    return {s: yaml.safe_load((MANIFESTS / f"{s}.yaml").read_text())["items"] for s in TIERS}


def deployment_names(manifests: dict[str, list[dict]], services: list[str]) -> list[str]:
    return [i["metadata"]["name"] for s in services for i in manifests[s] if i["kind"] == "Deployment"]


def small_app_spec(workdir: Path, name: str) -> Path:
    """A one-service qonnect application (a ratings clone, tier edge) in namespace NAME."""
    import yaml

    (workdir / "apps").mkdir(exist_ok=True)
    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": name},
        "spec": {
            "objective": {"energy": 1.0, "cost": 0.2, "performance": 0.2, "latency": 0.2},
            "services": [
                {"name": "ratings", "tier": "edge", "manifests": [{"file": str(MANIFESTS / "ratings.yaml")}]}
            ],
        },
    }
    path = workdir / "apps" / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# -- the run ----------------------------------------------------------------------------------------


class Bench:
    def __init__(self, workdir: Path, karmada_bin: Path, crd_dir: Path, bound: float) -> None:
        self.workdir = workdir
        self.stack = Stack(workdir)
        self.karmada = Karmada(workdir / "karmada", kube_bin_dir(), karmada_bin, crd_dir)
        self.manifests = bookinfo_manifests()
        self.members: list[Member] = []
        self.bound = bound
        self.hold = 0.0  # seconds a failed member stays down at least (--hold)
        self.keys: dict[str, set[tuple[str, str]]] = {}  # system -> (namespace, deployment)
        self.log: list[str] = []
        self.recover_retries = 0

    def say(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        self.log.append(line)
        print(line, file=sys.stderr, flush=True)

    # -- set-up ---------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self.stack.start_kb()
        t = time.monotonic()
        self.stack.start_testbed(None, 1.0, "kube", str(kube_profile(self.workdir)), 2.0)
        out["members_up_seconds"] = round(time.monotonic() - t, 1)
        self.members = [
            Member.from_kubeconfig(c["name"], c["tier"], Path(c["kubeconfig"]))
            for c in self.stack.federation["clusters"]
        ]
        self.stack.start_agents(DEFAULT_INTERVAL)
        t = time.monotonic()
        self.karmada.start()
        self.karmada.start_controller_manager([])
        for m in self.members:
            self.karmada.join(m, {"tier": m.tier})
        wait_for(
            lambda: all(self.karmada.clusters_ready().values()) and len(self.karmada.clusters_ready()) == 4,
            180,
            1,
            "Karmada clusters Ready",
        )
        out["karmada_up_seconds"] = round(time.monotonic() - t, 1)
        self.stack.start_replicas(3, [])
        self.stack.wait_leader()
        self.say(f"up: {out}")
        return out

    def qonnect_pids(self) -> dict[str, int]:
        pids = {}
        for i, proc in enumerate(self.stack.procs):
            if proc.poll() is None:
                pids[f"proc{i}"] = proc.pid
        for r in self.stack.replicas:
            if r.proc is not None and r.proc.poll() is None:
                pids[r.name] = r.proc.pid
        # A replica's process may be in stack.procs too: count each pid once.
        return {
            name: pid
            for name, pid in pids.items()
            if name.startswith("g")
            or pid not in {r.proc.pid for r in self.stack.replicas if r.proc is not None}
        }

    def configure(self, phase: str) -> None:
        if phase == "tuned":
            self.karmada.start_controller_manager(TUNED_CM_FLAGS)
            self.karmada.start_scheduler(TUNED_SCHEDULER_FLAGS)
            self.karmada.apply(TAINT_POLICY)
        wait_for(lambda: all(self.karmada.clusters_ready().values()), 120, 1, "Karmada clusters Ready")

    # -- observing ------------------------------------------------------------------------------

    def seen(self, skip: frozenset[str] | set[str] = frozenset()) -> dict[str, dict]:
        namespaces = {ns for keys in self.keys.values() for ns, _name in keys}
        return snapshot(self.members, namespaces, skip)

    def ready(
        self, system: str, skip: frozenset[str] | set[str] = frozenset(), only: set | None = None
    ) -> bool:
        seen = self.seen(skip)
        return all(where(seen, k) for k in (only if only is not None else self.keys[system]))

    def stable(self, timeout: float = 150) -> bool | str:
        """Every member back with its nodes Ready, both systems with one Ready copy of each Deployment.

        True, or what was still not so at the timeout (the next trial runs anyway, and says so).
        """
        why = ""

        def check() -> bool:
            nonlocal why
            down = [c for c, ok in self.karmada.clusters_ready().items() if not ok]
            unhealthy = [c["name"] for c in self.stack.admin.inventory()["clusters"] if not c["healthy"]]
            nodes = {m.name: bad for m in self.members if (bad := nodes_not_ready(m))}
            seen = self.seen()
            odd = sorted(
                f"{s}:{k[0]}/{k[1]}@{','.join(sorted(where(seen, k, ready_only=False)))}"
                for s, ks in self.keys.items()
                for k in ks
                if len(where(seen, k, ready_only=False)) != 1 or not where(seen, k)
            )
            why = (
                f"karmada not Ready: {down}; qonnect unhealthy: {unhealthy}; nodes not Ready: {nodes}; "
                f"not one Ready copy: {odd[:6]}"
            )
            return not down and not unhealthy and not nodes and not odd

        try:
            wait_for(check, timeout, 2, "both systems stable")
            return True
        except Exception:
            self.say(f"not stable after {timeout:g} s: {why}")
            return why

    def karmada_state(self) -> dict[str, Any]:
        """What Karmada held when something failed: bindings, works, taints, its errors (small)."""
        out: dict[str, Any] = {}
        try:
            out["taints"] = self.karmada.taints()
            api = self.karmada.api
            out["bindings"] = [
                {
                    **brief(b),
                    "clusters": [c["name"] for c in b["spec"].get("clusters") or []],
                    "evicting": [t.get("fromCluster") for t in b["spec"].get("gracefulEvictionTasks") or []],
                }
                for b in api.get("/apis/work.karmada.io/v1alpha2/resourcebindings")["items"]
            ][:40]
            out["works"] = [brief(w) for w in api.get("/apis/work.karmada.io/v1alpha1/works")["items"]][:60]
        except Exception as exc:  # the report of a failure must not fail
            out["state_error"] = f"{type(exc).__name__}: {exc}"
        errors = {}
        for log in sorted((self.karmada.directory / "logs").glob("karmada-*.log")):
            lines = [x[:300] for x in log.read_text(errors="replace").splitlines() if x.startswith("E")]
            errors[log.stem] = lines[-6:]
        out["errors"] = errors
        return out

    # -- trial 1 ----------------------------------------------------------------------------------

    def deploy_karmada(
        self, namespace: str, services: dict[str, str], manifests: dict[str, list[dict]]
    ) -> float:
        keys = {(namespace, n) for n in deployment_names(manifests, list(services))}
        self.keys.setdefault("karmada", set()).update(keys)
        t0 = time.monotonic()
        self.karmada.apply(*karmada_templates(namespace, services, manifests))
        wait_for(
            lambda: self.ready("karmada", only=keys), self.bound * 2, 0.5, f"Karmada's {namespace} Ready"
        )
        return time.monotonic() - t0

    def deploy_qonnect(
        self, spec: Path, namespace: str, services: list[str], manifests: dict[str, list[dict]]
    ) -> float:
        keys = {(namespace, n) for n in deployment_names(manifests, services)}
        self.keys.setdefault("qonnect", set()).update(keys)
        t0 = time.monotonic()
        self.stack.deploy(spec, timeout=self.bound * 3)
        wait_for(
            lambda: self.ready("qonnect", only=keys), self.bound * 2, 0.5, f"qonnect's {namespace} Ready"
        )
        return time.monotonic() - t0

    def deploy_qonnect_many(self, specs: list[Path], keys: set[tuple[str, str]]) -> None:
        """Many applications in one ``deploy.yml`` run (its list form, ``app_files``), then Ready."""
        self.keys.setdefault("qonnect", set()).update(keys)
        extra = {
            "app_files": [str(p) for p in specs],
            "kb_url": self.stack.kb_url,
            "kb_token_file": str(self.stack.admin_token),
            "wait_timeout": 60,
        }
        result = subprocess.run(
            [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "deploy.yml"), "-e", json.dumps(extra)],
            capture_output=True, text=True, timeout=self.bound * 3, env=self.stack.env, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise AssertionError(
                f"deploy of {len(specs)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
            )
        wait_for(lambda: self.ready("qonnect", only=keys), self.bound * 2, 0.5, "qonnect's k apps Ready")

    def remove_both(self) -> None:
        """Remove every application of both systems: bookinfo, and the k apps of an earlier
        phase's trial 5 (a qonnect application's name is its namespace)."""
        k_namespaces = sorted({ns for ns, _name in self.keys.get("karmada", set())} | {K_NS})
        q_apps = sorted({ns for ns, _name in self.keys.get("qonnect", set())} | {Q_NS})
        for namespace in k_namespaces:
            self.karmada.delete_namespace_objects(namespace)
        for app in q_apps:
            subprocess.run(
                [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "remove.yml"), "-e", f"app={app}",
                 "-e", f"kb_url={self.stack.kb_url}", "-e", f"kb_token_file={self.stack.admin_token}"],
                capture_output=True, timeout=300, env=self.stack.env, check=False,
            )  # fmt: skip
        keys = self.keys.pop("karmada", set()) | self.keys.pop("qonnect", set())
        wait_for(
            lambda: not any(k in d for d in self.seen_all(keys).values() for k in keys),
            180,
            2,
            "bookinfo removed",
        )
        # Karmada's bindings (and their works) go after the members' copies: a template applied
        # again under the same name while its old binding is still deleting must not meet it.
        wait_for(
            lambda: not any(self.karmada.bindings(ns) for ns in k_namespaces),
            120,
            1,
            "Karmada's bindings removed",
        )

    def seen_all(self, keys: set[tuple[str, str]]) -> dict[str, dict]:
        return snapshot(self.members, {ns for ns, _name in keys})

    def trial_deploy(self, karmada_first: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        order = ("karmada", "qonnect") if karmada_first else ("qonnect", "karmada")
        for system in order:
            if system == "karmada":
                out["karmada"] = round(self.deploy_karmada(K_NS, TIERS, self.manifests), 2)
            else:
                out["qonnect"] = round(self.deploy_qonnect(SPEC, Q_NS, list(TIERS), self.manifests), 2)
            self.say(f"deploy {system}: {out[system]} s")
        out["order"] = list(order)
        return out

    # -- trials 2-4 -------------------------------------------------------------------------------

    def on(self, cluster: str) -> dict[str, set]:
        seen = self.seen()
        return {
            s: {k for k in ks if cluster in where(seen, k, ready_only=False)} for s, ks in self.keys.items()
        }

    def targets(self) -> list[str]:
        """The members running ratings for either system (one failure each when they differ)."""
        seen = self.seen()
        found: set[str] = set()
        for keys in self.keys.values():
            for k in keys:
                if k[0] in (Q_NS, K_NS) and k[1].startswith("ratings"):
                    found |= where(seen, k, ready_only=False)
        return sorted(found)

    def blip_target(self, rep: int) -> str | None:
        """The member running ratings of qonnect.core in even repetitions, of Karmada in odd ones
        (the other's when one system runs it nowhere): each system meets a blip of its own
        member, also when the two chose different members."""
        seen = self.seen()
        on: dict[str, list[str]] = {}
        for system, keys in self.keys.items():
            for k in keys:
                if k[0] in (Q_NS, K_NS) and k[1].startswith("ratings"):
                    on.setdefault(system, []).extend(sorted(where(seen, k, ready_only=False)))
        order = ("qonnect", "karmada") if rep % 2 == 0 else ("karmada", "qonnect")
        return next((on[s][0] for s in order if on.get(s)), None)

    def recover(self, target: str, attempts: int = 3) -> None:
        """Restart the member's API server; again when it was not ready in the testbed's 60 s.

        Seen once at load 13: ``testbed recover`` gave up, the member stayed down and the run
        ended. The restarted server keeps starting, so a second wait usually finds it ready.
        """
        for attempt in range(1, attempts + 1):
            try:
                self.stack.testbed("recover", target)
                if attempt > 1:
                    self.say(f"{target} recovered at attempt {attempt}")
                    self.recover_retries += 1
                return
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:  # 60 s each
                err = (exc.stderr or b"").decode(errors="replace").strip()[-300:]
                self.say(f"recover {target} attempt {attempt} failed: {err}")
                if attempt == attempts:
                    raise RuntimeError(f"recover {target} failed {attempts} times: {err}") from None

    def trial_fail(self, bound: float, label: str, target: str) -> dict[str, Any]:
        """Kill the target's API server; time until what was there is Ready elsewhere; recover.

        The member stays down at least ``self.hold`` seconds (a failure, not a blip: past
        qonnect.core's 20 s grace, so its move is committed, not its standby discarded), and
        until both systems healed or the bound ran out."""
        victims = self.on(target)
        after = max([e["id"] for e in self.stack.events()] or [0])
        out: dict[str, Any] = {
            "trial": label,
            "cluster": target,
            "there": {s: len(v) for s, v in victims.items()},
        }
        healed: dict[str, float | None] = {s: (0.0 if not v else None) for s, v in victims.items()}
        each: dict[str, dict[str, float]] = {s: {} for s in victims}  # workload -> when Ready elsewhere
        karmada_not_ready = karmada_no_execute = None
        t0, wall0 = time.monotonic(), time.time()
        self.stack.testbed("fail", target)
        try:
            while time.monotonic() - t0 < bound and (
                any(v is None for v in healed.values()) or time.monotonic() - t0 < self.hold
            ):
                seen = self.seen(skip={target})
                for s, v in victims.items():
                    for k in v:
                        if f"{k[0]}/{k[1]}" not in each[s] and where(seen, k):
                            each[s][f"{k[0]}/{k[1]}"] = round(time.monotonic() - t0, 2)
                    if healed[s] is None and all(where(seen, k) for k in v):
                        healed[s] = round(time.monotonic() - t0, 2)
                if karmada_not_ready is None and not self.karmada.clusters_ready().get(target, True):
                    karmada_not_ready = round(time.monotonic() - t0, 2)
                if karmada_no_execute is None and any(
                    t.endswith(":NoExecute") for t in self.karmada.taints().get(target, [])
                ):
                    karmada_no_execute = round(time.monotonic() - t0, 2)
                time.sleep(0.5)
        finally:
            out["healed_seconds"] = healed
            # per workload: when each was Ready elsewhere, and which were not within the bound
            out["healed_each_seconds"] = {
                s: dict(sorted(e.items(), key=lambda i: i[1])) for s, e in each.items()
            }
            out["not_healed_in_bound"] = {
                s: sorted(f"{k[0]}/{k[1]}" for k in v if f"{k[0]}/{k[1]}" not in each[s])
                for s, v in victims.items()
            }
            out["karmada_cluster_not_ready_seconds"] = karmada_not_ready
            out["karmada_no_execute_taint_seconds"] = karmada_no_execute
            out["member_down_seconds"] = round(time.monotonic() - t0, 2)
            out["karmada_taints"] = self.karmada.taints().get(target)
            out["karmada_bindings_evicting"] = [b for b in self.karmada.bindings(K_NS) if b["evicting"]]
            self.recover(target)
        out["after_recovery"] = self.left_behind(target, victims)
        # read after the watch: a decision's KB event can lag its commit by a run's start
        decided = self.decided(after, wall0)
        out["qonnect_decisions"] = sum(d["kind"] not in HEDGE_KINDS for d in decided)
        out["qonnect_decided"] = decided
        out["qonnect_move_committed_seconds"] = next(
            (
                d["after_seconds"]
                for d in decided
                if d["kind"] not in HEDGE_KINDS and d["after_seconds"] <= out["member_down_seconds"]
            ),
            None,
        )
        self.say(f"{label}: {json.dumps(out)}")
        return out

    def left_behind(self, target: str, victims: dict[str, set], watch: float = 60) -> dict[str, Any]:
        """Trial 3, the member is back: the copies left there of Deployments that run elsewhere too.

        ``left_at_first_contact``: such copies at the first successful read of the member (what
        the failure left behind); ``no_duplicates_after_seconds``: when none is left (each system
        purges its own); ``moved_back``: victims that run only on the member again at the end.
        """
        t0 = time.monotonic()
        cleared: dict[str, float | None] = {s: None for s in self.keys}
        first: dict[str, list[str]] | None = None
        dupes: dict[str, list[str]] = {}
        seen: dict[str, dict] = {}
        while time.monotonic() - t0 < watch:
            seen = self.seen()
            if target in seen:
                for s, keys in self.keys.items():
                    dupes[s] = sorted(
                        f"{k[0]}/{k[1]}" for k in keys
                        if target in where(seen, k, ready_only=False) and where(seen, k) - {target}
                    )  # fmt: skip
                    if not dupes[s] and cleared[s] is None:
                        cleared[s] = round(time.monotonic() - t0, 2)
                    elif dupes[s]:
                        cleared[s] = None  # a duplicate (re)appeared
                if first is None:
                    first = {s: list(v) for s, v in dupes.items()}
                if all(v is not None for v in cleared.values()) and time.monotonic() - t0 > 20:
                    break
            time.sleep(1)
        moved_back = {
            s: sorted(f"{k[0]}/{k[1]}" for k in v if where(seen, k, ready_only=False) == {target})
            for s, v in victims.items()
        }
        return {
            "left_at_first_contact": {s: len(v) for s, v in (first or {}).items()},
            "left_on_member_at_end": dupes,
            "no_duplicates_after_seconds": cleared,
            "moved_back": moved_back,
            "watched_seconds": round(time.monotonic() - t0, 1),
        }

    def decided(self, after: int, wall0: float) -> list[dict[str, Any]]:
        """qonnect's decisions since event ``after``: kind and seconds since ``wall0`` (KB time)."""
        return [
            {"kind": e.get("reason"), "after_seconds": round(e["ts"] - wall0, 2)}
            for e in self.stack.events()
            if e["id"] > after and journal.trusted(e) and e["type"] == journal.DECISION
        ]

    def trial_blip(self, target: str, seconds: float = 15, watch: float = 75) -> dict[str, Any]:
        """A 15 s outage of the target's API server, then ``watch`` s from its start.

        ``moved``: Deployments whose members at the end differ from before (a placement change);
        ``started_elsewhere``: those that had a copy on another member at some time (a hedge's
        standby, or a move); ``extra_gone_after_return_seconds``: from the member's return until
        every such copy was gone again (None: one was still there at the end).
        """
        seen0 = self.seen()
        before = {s: {k: where(seen0, k, ready_only=False) for k in ks} for s, ks in self.keys.items()}
        after_id = max([e["id"] for e in self.stack.events()] or [0])
        t0, wall0 = time.monotonic(), time.time()
        self.stack.testbed("fail", target)
        try:
            time.sleep(seconds)
        finally:
            self.recover(target)
        back = time.monotonic()
        started: dict[str, set] = {s: set() for s in self.keys}
        moved: dict[str, set] = {s: set() for s in self.keys}
        gone: dict[str, float | None] = {s: None for s in self.keys}
        while time.monotonic() - t0 < watch:
            seen = self.seen()
            for s, ks in self.keys.items():
                extra = {k for k in ks if where(seen, k, ready_only=False) - before[s][k]}
                started[s] |= {f"{k[0]}/{k[1]}" for k in extra}
                moved[s] = {f"{k[0]}/{k[1]}" for k in ks if where(seen, k, ready_only=False) != before[s][k]}
                if extra:
                    gone[s] = None
                elif gone[s] is None and started[s]:
                    gone[s] = round(max(0.0, time.monotonic() - back), 2)
            time.sleep(1)
        decided = self.decided(after_id, wall0)
        out = {
            "trial": f"{seconds:g} s API-server blip",
            "cluster": target,
            "moved": {s: sorted(v) for s, v in moved.items()},
            "started_elsewhere": {s: sorted(v) for s, v in started.items()},
            "extra_gone_after_return_seconds": {s: gone[s] for s in self.keys if started[s]},
            "qonnect_decisions": sum(d["kind"] not in HEDGE_KINDS for d in decided),
            "qonnect_decided": decided,
            "after": self.left_behind(target, {}, watch=20),
        }
        self.say(f"blip: {json.dumps(out)}")
        return out

    def trial_k_apps(self, k: int, bound: float) -> list[dict[str, Any]]:
        """Trial 5: k one-service applications per system (ratings clones, tier edge), then their
        member fails (each system's busiest member; two failures when the systems chose two)."""
        ratings = {"ratings": self.manifests["ratings"]}
        t = time.monotonic()
        keys: set[tuple[str, str]] = set()
        objs: list[dict] = []
        for i in range(k):
            ns = f"k-app-{i}"
            keys |= {(ns, n) for n in deployment_names(ratings, ["ratings"])}
            objs += karmada_templates(ns, {"ratings": "edge"}, ratings)
        self.keys["karmada"].update(keys)
        self.karmada.apply(*objs)
        wait_for(lambda: self.ready("karmada", only=keys), self.bound * 3, 1, "Karmada's k apps Ready")
        k_deploy = time.monotonic() - t
        t = time.monotonic()
        specs = [small_app_spec(self.workdir, f"q-app-{i}") for i in range(k)]
        q_keys = {(f"q-app-{i}", n) for i in range(k) for n in deployment_names(ratings, ["ratings"])}
        self.deploy_qonnect_many(specs, q_keys)
        q_deploy = time.monotonic() - t
        self.say(
            f"k apps deployed: karmada {k_deploy:.1f} s (all at once), qonnect {q_deploy:.1f} s "
            "(deploy.yml's list form, one run)"
        )
        self.stable(120)
        seen = self.seen()
        busiest: set[str] = set()
        for system, prefix in (("karmada", "k-app-"), ("qonnect", "q-app-")):
            counts: dict[str, int] = {}
            for key in self.keys[system]:
                if key[0].startswith(prefix):
                    for c in where(seen, key, ready_only=False):
                        counts[c] = counts.get(c, 0) + 1
            if counts:
                busiest.add(max(sorted(counts), key=lambda c: counts[c]))
        out = []
        for target in sorted(busiest):
            self.stable(120)
            trial = self.trial_fail(bound, f"k = {k} applications, their member's API server stopped", target)
            trial["deploy_seconds"] = {"karmada": round(k_deploy, 1), "qonnect": round(q_deploy, 1)}
            out.append(trial)
        return out


def run(args: argparse.Namespace, workdir: Path, karmada_bin: Path, crd_dir: Path) -> dict[str, Any]:
    """Every phase's repetitions; the result so far is written to ``args.out`` after each trial."""
    bench = Bench(workdir, karmada_bin, crd_dir, args.bound)
    bench.hold = args.hold
    result: dict[str, Any] = {
        "karmada": VERSION,
        "repetitions": args.reps,
        "k_repetitions": {p: args.k_reps for p in args.k_phases} if args.k else {},
        "phases": {},
    }

    def save() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")

    sampler = RssSampler({"karmada": bench.karmada.pids, "qonnect": bench.qonnect_pids})
    try:
        result["start"] = bench.start()
        sampler.start()
        for n, phase in enumerate(args.phases):
            # Per pid: configure() restarts Karmada's controller-manager and scheduler in the
            # tuned phase, and the new processes count from 0 (cost()), not from the old ones'.
            k0 = cost(bench.karmada.pids())
            q0 = cost(bench.qonnect_pids())
            sampler.reset()
            t_phase = time.monotonic()
            trials: dict[str, Any] = {"deploy": [], "fail": [], "blip": []}
            result["phases"][phase] = {"trials": trials}
            try:
                bench.configure(phase)
                result["phases"][phase]["karmada_flags"] = bench.karmada.flags
                run_phase(bench, args, phase, n, trials, save)
            finally:  # a phase cut short still has its cost
                k1 = cost(bench.karmada.pids(), k0["_reading"])
                q1 = cost(bench.qonnect_pids(), q0["_reading"])
                sampled = sampler.read()
                for system, c in (("karmada", k1), ("qonnect", q1)):
                    c.pop("_reading")
                    c["sampled_rss"] = {
                        "samples": sampled["samples"],
                        "interval_s": sampled["interval_s"],
                        **sampled.get(system, {}),
                    }
                result["phases"][phase].update(
                    seconds=round(time.monotonic() - t_phase, 1),
                    cost={"karmada": k1, "qonnect": q1},
                    summary=summarize(trials),
                    recover_retries=bench.recover_retries,
                )
                save()
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["karmada_state_at_error"] = bench.karmada_state()
    finally:
        sampler.stop()
        try:
            bench.stack.close()
        finally:
            bench.karmada.stop()
    result["settings"] = {
        "members": [m.name for m in bench.members],
        "start_delays": KUBE_START_DELAYS,
        "agent_interval_s": DEFAULT_INTERVAL,
        "bound_s": args.bound,
        "hold_s": args.hold,
        "cpu_count": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "tuned_controller_manager_flags": TUNED_CM_FLAGS,
        "tuned_scheduler_flags": TUNED_SCHEDULER_FLAGS,
        "tuned_cluster_taint_policy": TAINT_POLICY,
    }
    save()
    return result


def run_phase(
    bench: Bench, args: argparse.Namespace, phase: str, n: int, trials: dict[str, Any], save: Any
) -> None:
    """The phase's repetitions (deploy, each target's failure and return, one blip), then k apps."""
    for rep in range(args.reps.get(phase, args.reps.get("*", 0))):
        if bench.keys:
            bench.remove_both()
        # Alternating: Karmada first in even repetitions of the first phase, and so on.
        trials["deploy"].append(bench.trial_deploy(karmada_first=(rep + n) % 2 == 0))
        save()
        if "fail" in args.trials:
            for target in bench.targets():
                trials.setdefault("stable_before_fail", []).append(bench.stable())
                trials["fail"].append(bench.trial_fail(args.bound, "member API server stopped", target))
                save()
        if "blip" in args.trials:
            trials.setdefault("stable_before_blip", []).append(bench.stable())
            target = bench.blip_target(rep)  # one blip per repetition, the systems' members alternating
            if target:
                trials["blip"].append(bench.trial_blip(target))
                save()
    if phase in args.k_phases and args.k:
        for rep in range(args.k_reps):
            # Each repetition starts as the first did: bookinfo alone, then the k apps beside it.
            if rep or not bench.keys:
                if bench.keys:
                    bench.remove_both()
                trials["deploy"].append(bench.trial_deploy(karmada_first=(rep + n) % 2 == 0))
            trials.setdefault("stable_before_k", []).append(bench.stable())
            trials.setdefault("k_apps", []).extend(bench.trial_k_apps(args.k, args.bound))
            save()


def summarize(trials: dict[str, Any]) -> dict[str, Any]:
    """p50/max per system of each timed trial, and counts of what did not happen in the bound."""
    out: dict[str, Any] = {}
    k_fails = trials.get("k_apps") or []
    for system in ("karmada", "qonnect"):
        out[f"deploy_{system}"] = summary([t[system] for t in trials["deploy"]])
        for name, fails in (("failover", trials["fail"]), ("k_apps_failover", k_fails)):
            healed = [t["healed_seconds"].get(system) for t in fails if t["there"].get(system)]
            out[f"{name}_{system}"] = summary([h for h in healed if h is not None])
            out[f"{name}_{system}_not_healed"] = sum(1 for h in healed if h is None)
        back = [t["after_recovery"] for t in trials["fail"] + k_fails if t["there"].get(system)]
        out[f"back_{system}"] = {
            "left_at_first_contact": [b["left_at_first_contact"].get(system) for b in back],
            "no_duplicates_after_seconds": [b["no_duplicates_after_seconds"].get(system) for b in back],
            "moved_back": sum(len(b["moved_back"].get(system, [])) for b in back),
        }
        out[f"blip_moves_{system}"] = [len(t["moved"].get(system, [])) for t in trials["blip"]]
        out[f"blip_started_elsewhere_{system}"] = [
            len(t.get("started_elsewhere", {}).get(system, [])) for t in trials["blip"]
        ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--reps", default="5", help="repetitions per phase (deploy, fails, one blip): N or PHASE=N,..."
    )
    parser.add_argument(
        "--bound", type=float, default=90, help="seconds a failover may take before it counts as none"
    )
    parser.add_argument(
        "--k", type=int, default=10, help="applications per system in the k-apps trial (0: skip)"
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=40,
        help="seconds a failed member stays down at least (default 40: past qonnect's 20 s grace)",
    )
    parser.add_argument("--phases", default="default,tuned", help="default,tuned")
    parser.add_argument("--k-phases", default="default,tuned", help="phases that run the k-apps trial")
    parser.add_argument(
        "--k-reps", type=int, default=1, help="repetitions of the k-apps trial per phase (each redeploys)"
    )
    parser.add_argument("--trials", default="fail,blip", help="besides deploy: fail,blip")
    parser.add_argument("--out", help="write the result so far to this file after each trial")
    args = parser.parse_args()
    args.phases = [p for p in args.phases.split(",") if p]
    args.k_phases = [p for p in args.k_phases.split(",") if p]
    args.trials = [p for p in args.trials.split(",") if p]
    try:
        args.reps = {
            (x.split("=")[0] if "=" in x else "*"): int(x.split("=")[-1]) for x in args.reps.split(",") if x
        }
    except ValueError:
        parser.error(f"--reps: not N or PHASE=N,...: {args.reps!r}")
    built = subprocess.run([str(HERE / "build.sh")], capture_output=True, text=True, check=True)
    karmada_bin = Path(built.stdout.strip().splitlines()[-1])
    modcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    crd_dir = (
        Path(modcache) / f"github.com/karmada-io/karmada@{VERSION}" / "charts" / "karmada" / "_crds" / "bases"
    )
    if not crd_dir.is_dir():
        subprocess.run(
            ["go", "mod", "download", f"github.com/karmada-io/karmada@{VERSION}"], cwd=HERE, check=True
        )
    with tempfile.TemporaryDirectory(prefix="qonnect-karmada-") as tmp:
        result = run(args, Path(tmp), karmada_bin, crd_dir)
        if os.environ.get("KEEP_LOGS"):
            subprocess.run(["cp", "-r", tmp, os.environ["KEEP_LOGS"]], check=False)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
