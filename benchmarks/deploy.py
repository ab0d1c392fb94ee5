"""Deploy benchmark: Bookinfo onto the nine-cluster paper testbed, playbook vs plain script.

Starts the paper testbed, a KB and one Resource Agent per cluster (as in production; they report
every 5 s while timing), then measures:

* ``playbook_s``: ``ansible-playbook qonnect.core.deploy -e app_file=examples/bookinfo/energy-first.yml``
  from a cold start (store spec, plan, apply on three clusters in parallel, wait ready, record);
* ``playbook_rerun_s``: the same command again (nothing to change);
* ``script_s``: a plain Python script (run as its own process, like the playbook) making the same
  API calls with the ``kubernetes`` client - namespace, server-side apply of every object and the
  ExternalName address stubs, wait until ready - for the same plan, into another namespace;
* ``ratio``: playbook_s / script_s.

    python benchmarks/deploy.py --json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services"))
BIN = Path(sys.executable).parent
TARGET_PLAYBOOK_S = 15.0
SPEC = "examples/bookinfo/energy-first.yml"


def _wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"deploy benchmark: timed out waiting for {what}")


def _token(db: str, role: str, path: Path) -> Path:
    out = subprocess.run(
        [str(BIN / "qonnect"), "kb", "token", "create", "--db", db, "--role", role],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    path.write_text(out + "\n")
    path.chmod(0o600)
    return path


def start_agents(base: Path, db: str, url: str, fed: dict, procs: list) -> None:
    """One Resource Agent per cluster, as in production (nodes count only while fresh)."""
    for cluster in fed["clusters"]:
        name = cluster["name"]
        token = base / f"agent-{name}.token"
        out = subprocess.run(
            [str(BIN / "qonnect"), "kb", "token", "create", "--db", db, "--role", "agent", "--cluster", name],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        token.write_text(out.stdout.strip() + "\n")
        token.chmod(0o600)
        with open(base / f"agent-{name}.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "qonnect"),
                        "agent",
                        "--cluster",
                        name,
                        "--kubeconfig",
                        cluster["kubeconfig"],
                        "--kb",
                        url,
                        "--token-file",
                        str(token),
                        "--interval",
                        "5",
                        "--state-dir",
                        str(base / f"agent-{name}"),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )


# -- the plain-script baseline ----------------------------------------------------------------
def baseline(plan_file: str, namespace: str) -> None:
    """The same API calls as the deploy module, written directly against the kubernetes client."""
    from kubernetes import config
    from kubernetes.dynamic import DynamicClient

    job = json.loads(Path(plan_file).read_text())
    plan, manifests, kubeconfigs = job["plan"], job["manifests"], job["kubeconfigs"]
    clusters = sorted({e["cluster"] for entries in plan.values() for e in entries})
    labels = {"app.kubernetes.io/managed-by": "qonnect", "qonnect.io/application": "bookinfo"}

    def objects_for(cluster: str) -> list[dict]:
        objs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}]
        for service, entries in plan.items():
            host = entries[0]["cluster"]
            for m in manifests[service]:
                obj = copy.deepcopy(m)
                meta = obj["metadata"]
                meta["namespace"] = namespace
                meta.setdefault("labels", {}).update(labels, **{"qonnect.io/service": service})
                if cluster == host:
                    if obj["kind"] == "Deployment":
                        obj["spec"]["replicas"] = entries[0].get("replicas", 1)
                    objs.append(obj)
                elif obj["kind"] == "Service":
                    objs.append(
                        {
                            "apiVersion": "v1",
                            "kind": "Service",
                            "metadata": {
                                "name": meta["name"],
                                "namespace": namespace,
                                "labels": meta["labels"],
                            },
                            "spec": {
                                "type": "ExternalName",
                                "externalName": f"{meta['name']}.{namespace}.svc.{host}.qonnect.local",
                            },
                        }
                    )
        return objs

    def deploy(cluster: str) -> None:
        dyn = DynamicClient(config.new_client_from_config(config_file=kubeconfigs[cluster]))
        deployments = []
        for obj in objects_for(cluster):
            res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            dyn.server_side_apply(
                res,
                body=obj,
                name=obj["metadata"]["name"],
                namespace=obj["metadata"].get("namespace") if res.namespaced else None,
                field_manager="qonnect",
                force_conflicts=True,
            )
            if obj["kind"] == "Deployment":
                deployments.append(obj["metadata"]["name"])
        res = dyn.resources.get(api_version="apps/v1", kind="Deployment")
        deadline = time.monotonic() + 60
        while deployments and time.monotonic() < deadline:
            items = dyn.get(res, namespace=namespace).to_dict()["items"]
            ready = {
                d["metadata"]["name"]
                for d in items
                if (d.get("status") or {}).get("readyReplicas", 0) >= d["spec"].get("replicas", 1)
            }
            deployments = [d for d in deployments if d not in ready]
            time.sleep(0.1)
        if deployments:
            raise SystemExit(f"{cluster}: not ready: {deployments}")

    with ThreadPoolExecutor(len(clusters)) as pool:
        list(pool.map(deploy, clusters))


# -- the benchmark ----------------------------------------------------------------------------
def timed(cmd: list[str], env: dict) -> float:
    started = time.monotonic()
    result = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(
            f"deploy benchmark: {' '.join(cmd[:2])} failed:\n{result.stdout[-3000:]}{result.stderr[-2000:]}"
        )
    return elapsed


def run() -> dict:
    import yaml
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient
    from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application_file

    base = Path(tempfile.mkdtemp(prefix="qonnect-bench-deploy-"))
    tb, procs = base / "testbed", []
    try:
        subprocess.run(
            [
                str(BIN / "qonnect"),
                "testbed",
                "up",
                "--profile",
                "paper",
                "--dir",
                str(tb),
                "--start-delay",
                "0.2",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        fed = yaml.safe_load((tb / "federation.yaml").read_text())
        db = f"sqlite:///{base / 'kb.sqlite'}"
        admin = _token(db, "admin", base / "admin.token")
        port_file = base / "kb.port"
        with open(base / "kb.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "qonnect"),
                        "kb",
                        "serve",
                        "--db",
                        db,
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "0",
                        "--port-file",
                        str(port_file),
                        "--heartbeat-timeout",
                        "30",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        port = _wait(lambda: port_file.exists() and port_file.read_text().strip(), 60, "the KB")
        url = f"http://127.0.0.1:{port}"
        kb = KBClient(url, admin.read_text().strip())
        for c in fed["clusters"]:
            kb.register_cluster(
                {k: c[k] for k in ("name", "tier", "location", "server", "kubeconfig", "context")}
            )
        start_agents(base, db, url, fed, procs)
        _wait(lambda: all(c["healthy"] and c["nodes"] for c in kb.inventory()["clusters"]), 90, "the agents")
        env = dict(
            os.environ,
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".venv" / "collections"),
            QONNECT_KB_URL=url,
        )
        cmd = [
            str(BIN / "ansible-playbook"),
            "qonnect.core.deploy",
            "-e",
            f"app_file={SPEC}",
            "-e",
            f"kb_token_file={admin}",
        ]
        playbook_s = timed(cmd, env)
        rerun_s = timed(cmd, env)
        plan = kb.get_placement("bookinfo")["current"]
        app = load_application_file(str(ROOT / SPEC))
        job = base / "job.json"
        job.write_text(
            json.dumps(
                {
                    "plan": plan,
                    "manifests": {s.name: s.manifests for s in app.services},
                    "kubeconfigs": {c["name"]: c["kubeconfig"] for c in fed["clusters"]},
                }
            )
        )
        script_s = timed([sys.executable, __file__, "--baseline", str(job), "bookinfo-script"], env)
        return {
            "benchmark": "deploy",
            "application": "bookinfo",
            "clusters": len(fed["clusters"]),
            "clusters_used": len({e["cluster"] for entries in plan.values() for e in entries}),
            "playbook_s": round(playbook_s, 3),
            "playbook_rerun_s": round(rerun_s, 3),
            "script_s": round(script_s, 3),
            "ratio": round(playbook_s / script_s, 2),
            "target_playbook_s": TARGET_PLAYBOOK_S,
            "meets_target": playbook_s < TARGET_PLAYBOOK_S,
            "cpus": os.cpu_count(),
        }
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
        subprocess.run(
            [str(BIN / "qonnect"), "testbed", "down", "--dir", str(tb)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--baseline", nargs=2, metavar=("JOB", "NAMESPACE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline:
        baseline(*args.baseline)
        return 0
    result = run()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:18} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
