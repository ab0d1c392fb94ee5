"""Resource Agent benchmark: CPU and wall time one agent spends per tick.

Starts a real emulated federation (`qonnect testbed up`, profile ``scale``: N clusters of M
nodes), a real KB (`qonnect kb serve`, SQLite) with the clusters registered, deploys a managed
Deployment with a few pods on the measured cluster, then runs one `qonnect agent` for that
cluster with every other cluster as a latency peer and lets it report for ``--ticks`` ticks.

Measured, for the agent process only:
- ``startup_cpu_s``: CPU seconds (user + system, /proc/<pid>/stat) from exec to its first
  report reaching the KB;
- ``cpu_ms_per_tick_median`` / ``wall_ms_per_tick_median``: what the agent logs for each tick
  (``time.process_time`` / ``perf_counter`` around collect + probes + delivery);
- ``cpu_ms_per_tick_mean_proc``: CPU seconds from /proc over the measured ticks divided by
  their count, which also counts everything the agent does between ticks.

    python benchmarks/agent.py --json
    python benchmarks/agent.py --clusters 9 --nodes 3 --pods 6 --ticks 30 --interval 0.5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

# `python -m qonnect.cli` would load cli.py twice (as __main__ too); run main() instead
MAIN = "import sys; from qonnect.cli import main; sys.exit(main())"
TICK_LINE = re.compile(rb"tick: ([0-9.]+) ms wall, ([0-9.]+) ms CPU")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def qonnect(*args: str) -> list[str]:
    return [sys.executable, "-c", MAIN, *args]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def testbed(root: Path, clusters: int, nodes: int) -> Iterator[dict]:
    """`qonnect testbed up` with the scale profile; always brought down again."""
    try:
        subprocess.run(
            qonnect(
                "testbed",
                "up",
                "--dir",
                str(root),
                "--profile",
                "scale",
                "--clusters",
                str(clusters),
                "--nodes",
                str(nodes),
                "--start-delay",
                "0.2",
                "--timeout",
                "120",
            ),
            check=True,
            capture_output=True,
            timeout=180,
        )
        yield yaml.safe_load((root / "federation.yaml").read_text())
    finally:
        subprocess.run(
            qonnect("testbed", "down", "--dir", str(root)), capture_output=True, timeout=60, check=False
        )
        pid_file = root / "testbed.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def token(db: str, role: str, cluster: str | None = None) -> str:
    argv = qonnect("kb", "token", "create", "--db", db, "--role", role)
    argv += ["--cluster", cluster] if cluster else []
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


@contextlib.contextmanager
def knowledge_base(root: Path) -> Iterator[tuple[str, str]]:
    """A `qonnect kb serve` on a free port: (url, database URL)."""
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError

    db = f"sqlite:///{root / 'kb.sqlite'}"
    port_file = root / "kb.port"
    with open(root / "kb.log", "ab") as log:
        proc = subprocess.Popen(
            qonnect("kb", "serve", "--db", db, "--port", "0", "--port-file", str(port_file)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"KB exited with {proc.returncode}; see {root / 'kb.log'}")
            if port_file.exists():
                url = f"http://127.0.0.1:{port_file.read_text().strip()}"
                with contextlib.suppress(KBError):
                    KBClient(url, None, timeout=2).healthz()
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError("KB did not answer within 60 s")
        yield url, db
    finally:
        stop(proc)


def deploy_pods(kubeconfig: str, pods: int) -> None:
    """A managed Deployment of ``pods`` replicas on the measured cluster, waited for."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        labels = {
            "app.kubernetes.io/managed-by": "qonnect",
            "qonnect.io/application": "bench",
            "qonnect.io/service": "web",
        }
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})
        apps = client.AppsV1Api(api)
        apps.create_namespaced_deployment(
            "bench",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "labels": labels},
                "spec": {
                    "replicas": pods,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web", **labels}},
                        "spec": {
                            "containers": [
                                {
                                    "name": "web",
                                    "image": "nginx:1.25",
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                }
                            ]
                        },
                    },
                },
            },
        )
        deadline = time.monotonic() + 60
        while (apps.read_namespaced_deployment("web", "bench").status.ready_replicas or 0) < pods:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bench Deployment did not get {pods} ready pods in 60 s")
            time.sleep(0.2)


def bench(args: argparse.Namespace) -> dict:
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

    with tempfile.TemporaryDirectory(prefix="qonnect-bench-agent-") as tmp:
        root = Path(tmp)
        (root / "fed").mkdir()
        with testbed(root / "fed", args.clusters, args.nodes) as fed, knowledge_base(root) as (url, db):
            admin = KBClient(url, token(db, "admin"), timeout=10)
            for c in fed["clusters"]:
                admin.register_cluster({"name": c["name"], "tier": c["tier"], "location": c["location"]})
            me = fed["clusters"][0]
            deploy_pods(me["kubeconfig"], args.pods)
            token_file = root / "agent.token"
            token_file.write_text(token(db, "agent", me["name"]) + "\n")
            token_file.chmod(0o600)
            peers = list(fed["clusters"][1:])
            argv = qonnect(
                "-vv",
                "agent",
                "--cluster",
                me["name"],
                "--kubeconfig",
                me["kubeconfig"],
                "--kb",
                url,
                "--token-file",
                str(token_file),
                "--interval",
                str(args.interval),
                "--source-address",
                me["address"],
                "--peers",
                ",".join(f"{c['name']}={c['server']}" for c in peers),
                "--state-dir",
                str(root / "agent"),
            )
            log_path = root / "agent.log"
            with open(log_path, "ab") as log:
                agent = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            try:
                return measure(args, agent, admin, me, log_path, len(peers))
            finally:
                stop(agent)


def measure(
    args: argparse.Namespace, agent: subprocess.Popen, admin, me: dict, log_path: Path, peers: int
) -> dict:
    def seq() -> int | None:
        return (admin.get_cluster(me["name"]).get("status") or {}).get("seq")

    deadline = time.monotonic() + 120
    while seq() is None:
        if agent.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the agent sent no report: {log_path.read_text()[-2000:]}")
        time.sleep(0.02)
    startup = cpu_seconds(agent.pid)

    def logged() -> list[tuple[float, float]]:
        return [(float(w), float(c)) for w, c in TICK_LINE.findall(log_path.read_bytes())]

    def wait_ticks(count: int) -> float:
        """Wait until ``count`` ticks are logged; the agent's CPU seconds at that moment."""
        deadline = time.monotonic() + 120 + count * args.interval * 10
        while len(logged()) < count:
            if agent.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agent stopped ticking: {log_path.read_text()[-2000:]}")
            time.sleep(0.01)
        return cpu_seconds(agent.pid)

    cpu0 = wait_ticks(args.warmup)
    cpu1 = wait_ticks(args.warmup + args.ticks)
    ticks = logged()[args.warmup : args.warmup + args.ticks]
    status = admin.get_cluster(me["name"])["status"]
    nodes = admin.list_nodes(me["name"])
    return {
        "clusters": args.clusters,
        "nodes_per_cluster": args.nodes,
        "pods": args.pods,
        "peers": peers,
        "interval_s": args.interval,
        "ticks": len(ticks),
        "startup_cpu_s": round(startup, 3),
        "cpu_ms_per_tick_median": round(statistics.median(c for _wall, c in ticks), 2),
        "cpu_ms_per_tick_p90": round(sorted(c for _wall, c in ticks)[int(0.9 * (len(ticks) - 1))], 2),
        "cpu_ms_per_tick_mean_proc": round((cpu1 - cpu0) * 1000.0 / len(ticks), 2),
        "wall_ms_per_tick_median": round(statistics.median(w for w, _cpu in ticks), 2),
        "agent_healthy": bool(status.get("healthy")),
        "nodes_reported": len(nodes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--clusters", type=int, default=9, help="clusters (the agent's + peers)")
    parser.add_argument("--nodes", type=int, default=3, help="nodes per cluster")
    parser.add_argument("--pods", type=int, default=6, help="managed pods on the agent's cluster")
    parser.add_argument("--ticks", type=int, default=20, help="measured ticks")
    parser.add_argument("--warmup", type=int, default=3, help="ticks before measuring")
    parser.add_argument("--interval", type=float, default=0.5, help="agent --interval in seconds")
    args = parser.parse_args(argv)
    if args.clusters < 1 or args.nodes < 1 or args.pods < 0 or args.ticks < 1 or args.interval <= 0:
        parser.error("--clusters, --nodes, --ticks must be >= 1, --pods >= 0, --interval > 0")
    result = bench(args)
    result.update(python=platform.python_version(), cpus=os.cpu_count(), load=os.getloadavg()[0])
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
