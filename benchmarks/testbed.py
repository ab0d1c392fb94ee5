"""Testbed scale benchmark: 100 clusters of 10 nodes in one process, a 1000-pod list.

Starts a federation with ``qonnect testbed up`` (the real background process), deploys
``--pods`` replicas into one cluster, waits until they all run, then times listing them over
HTTPS: the raw API answer (what any client waits for) and the official Python client with
``_preload_content=False`` plus ``json.loads``. Also reports start-up time, the process's
resident memory and its idle CPU use (heartbeats of every node). Target: list < 50 ms.

    python benchmarks/testbed.py --json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client, config

TARGET_MS = 50.0


def qonnect(*args: str) -> None:
    exe = Path(sys.executable).with_name("qonnect")
    cmd = (
        [str(exe)]
        if exe.exists()
        else [sys.executable, "-c", "import sys; from qonnect.cli import main; sys.exit(main())"]
    )
    subprocess.run([*cmd, *args], check=True, capture_output=True, text=True, timeout=600)


def proc_stat(pid: int) -> tuple[float, int]:
    """CPU seconds used and resident memory in bytes of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = next(
        int(line.split()[1]) * 1024
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return cpu, rss


def wait(check, timeout: float) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise TimeoutError("benchmark condition not reached in time")
        time.sleep(0.2)
    return time.monotonic() - started


def run(clusters: int, nodes: int, pods: int, runs: int, directory: Path) -> dict:
    started = time.monotonic()
    qonnect(
        "testbed",
        "up",
        "--dir",
        str(directory),
        "--profile",
        "scale",
        "--clusters",
        str(clusters),
        "--nodes",
        str(nodes),
        "--start-delay",
        "0.5",
        "--timeout",
        "300",
    )
    up_seconds = time.monotonic() - started
    pid = int((directory / "testbed.pid").read_text())
    try:
        fed = yaml.safe_load((directory / "federation.yaml").read_text())
        target = fed["clusters"][0]
        cfg = client.Configuration()
        config.load_kube_config(config_file=target["kubeconfig"], client_configuration=cfg)
        cpu0, rss_idle = proc_stat(pid)
        time.sleep(10)
        cpu1, _rss = proc_stat(pid)
        idle_cpu_percent = (cpu1 - cpu0) / 10 * 100
        with client.ApiClient(cfg) as api:
            core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
            core.create_namespace({"metadata": {"name": "bench"}})
            apps.create_namespaced_deployment(
                "bench",
                {
                    "metadata": {"name": "load"},
                    "spec": {
                        "replicas": pods,
                        "selector": {"matchLabels": {"app": "load"}},
                        "template": {
                            "metadata": {"labels": {"app": "load"}},
                            "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]},
                        },
                    },
                },
            )
            deploy_seconds = wait(
                lambda: (apps.read_namespaced_deployment("load", "bench").status.ready_replicas or 0) == pods,
                timeout=300,
            )
            listed = len(json.loads(core.list_namespaced_pod("bench", _preload_content=False).data)["items"])
            client_ms = []
            for _run in range(runs):
                t = time.perf_counter()
                json.loads(core.list_namespaced_pod("bench", _preload_content=False).data)
                client_ms.append((time.perf_counter() - t) * 1000)
        token = yaml.safe_load(Path(target["kubeconfig"]).read_text())["users"][0]["user"]["token"]
        conn = http.client.HTTPSConnection(
            target["address"], target["port"], context=ssl.create_default_context(cafile=fed["ca_file"])
        )
        raw_ms, size = [], 0
        for _run in range(runs + 1):
            t = time.perf_counter()
            conn.request("GET", "/api/v1/namespaces/bench/pods", headers={"Authorization": f"Bearer {token}"})
            body = conn.getresponse().read()
            raw_ms.append((time.perf_counter() - t) * 1000)
            size = len(body)
        conn.close()
        raw_ms = raw_ms[1:]  # the first request pays the TLS handshake
        _cpu, rss_loaded = proc_stat(pid)
    finally:
        qonnect("testbed", "down", "--dir", str(directory))
    median = statistics.median(raw_ms)
    return {
        "benchmark": "testbed",
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "pods_listed": listed,
        "runs": runs,
        "up_seconds": round(up_seconds, 2),
        "deploy_pods_running_seconds": round(deploy_seconds, 2),
        "list_pods_ms_median": round(median, 2),
        "list_pods_ms_p90": round(sorted(raw_ms)[int(0.9 * runs) - 1], 2),
        "list_pods_client_ms_median": round(statistics.median(client_ms), 2),
        "list_bytes": size,
        "rss_mb_idle": round(rss_idle / 2**20, 1),
        "rss_mb_with_pods": round(rss_loaded / 2**20, 1),
        "idle_cpu_percent": round(idle_cpu_percent, 1),
        "target_list_ms": TARGET_MS,
        "target_met": median < TARGET_MS,
        "cpus": os.cpu_count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="qonnect-testbed-bench-"))
    try:
        result = run(args.clusters, args.nodes, args.pods, args.runs, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:32} {value}")
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
