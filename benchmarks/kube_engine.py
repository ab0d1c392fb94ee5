"""The testbed's real engine (`qonnect testbed up --engine kube`): what one real cluster costs.

Per trial (one cluster of the tiers profile, started with `start_federation`, the CLI's code):
- start_seconds: `up` until the API server is ready, the nodes registered and the default
  ServiceAccount exists;
- rss_mib: resident memory of etcd + kube-apiserver + controller-manager + scheduler, idle and
  with the Deployment below running;
- deployment_ready_seconds: a 10-replica Deployment created -> 10 ready (real controllers and
  scheduler, simulated kubelet with --start-delay 0.5);
- recover_seconds: `recover` after `fail` (kube-apiserver SIGKILLed, restarted) until /readyz;
- not_ready_seconds: `node-down` -> the node's Ready condition Unknown, with
  --node-monitor-grace-period 8 (detection lag = this minus 8).
Then once: the three clusters of `tiers` together (start_seconds and the summed RSS).

    python benchmarks/kube_engine.py --json [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))

from kubernetes import client, config  # noqa: E402
from qonnect_testbed.kube import KUBE_VERSION, KubeFederation, ensure_binaries, start_federation  # noqa: E402

GRACE = 8
MIB = 1 << 20


def summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 2),
        "p99": round(ordered[-1], 2),
        "min": round(ordered[0], 2),
        "n": len(ordered),
    }


def wait(check: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if check():
                return time.monotonic() - started
        except client.ApiException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def rss(fed: KubeFederation) -> float:
    return sum(sum(c["rss_bytes"].values()) for c in fed.status()["clusters"]) / MIB


def trial(directory: Path) -> dict[str, float]:
    started = time.monotonic()
    fed = start_federation(directory, "tiers", clusters=1, start_delay=0.5, node_monitor_grace_period=GRACE)
    out = {"start_seconds": time.monotonic() - started}
    try:
        out["rss_idle_mib"] = rss(fed)
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(fed.kubeconfig("cloud-1")), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
            labels = {"app": "bench"}
            apps.create_namespaced_deployment(
                "default",
                {
                    "metadata": {"name": "bench"},
                    "spec": {
                        "replicas": 10,
                        "selector": {"matchLabels": labels},
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                        },
                    },
                },
            )
            out["deployment_ready_seconds"] = wait(
                lambda: (
                    apps.read_namespaced_deployment_status("bench", "default").status.ready_replicas == 10
                ),
                120,
                "10 ready replicas",
            )
            out["rss_busy_mib"] = rss(fed)
            fed.fail("cloud-1")
            t = time.monotonic()
            fed.recover("cloud-1")
            out["recover_seconds"] = time.monotonic() - t
            fed.node_down("cloud-1", "cloud-1-worker")

            def unknown() -> bool:
                node = core.read_node("cloud-1-worker")
                return any(c.type == "Ready" and c.status == "Unknown" for c in node.status.conditions)

            out["not_ready_seconds"] = wait(unknown, GRACE + 60, "NotReady")
    finally:
        fed.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    ensure_binaries()
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="kube-bench-") as tmp:
        for i in range(args.trials):
            results.append(trial(Path(tmp) / f"t{i}"))
        started = time.monotonic()
        fed = start_federation(Path(tmp) / "tiers", "tiers")
        try:
            three = {
                "start_seconds": round(time.monotonic() - started, 2),
                "rss_mib": round(rss(fed), 1),
                "testbed_process_rss_mib": round(_process_rss(fed.status()["pid"]) / MIB, 1),
            }
        finally:
            fed.stop()
    report = {
        "kubernetes_version": KUBE_VERSION,
        "one_cluster": {key: summary([r[key] for r in results]) for key in results[0]},
        "three_clusters": three,
        "node_monitor_grace_period": GRACE,
    }
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


def _process_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    sys.exit(main())
