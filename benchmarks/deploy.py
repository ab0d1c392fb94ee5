"""Deploy benchmark: Bookinfo, or a 14-service shop from one file, onto the nine-cluster paper testbed.

``--case bookinfo`` (the default) compares the playbook with a plain script:

Starts the paper testbed, a KB and one Resource Agent per cluster (as in production; they report
every 5 s while timing), then measures:

* ``playbook_s``: ``ansible-playbook qonnect.core.deploy -e app_file=examples/bookinfo/energy-first.yml``
  from a cold start (store spec, plan, apply on three clusters in parallel, wait ready, record);
* ``playbook_rerun_s``: the same command again (nothing to change);
* ``script_s``: a plain Python script (run as its own process, like the playbook) making the same
  API calls with the ``kubernetes`` client - namespace, server-side apply of every object and the
  ExternalName address stubs, wait until ready - for the same plan, into another namespace;
* ``ratio``: playbook_s / script_s.

``--case shop`` deploys a 14-service application (the Sock Shop's services: front-end, the
catalogue, carts, orders, user and session stores, payment, shipping, a queue and its master)
from ONE multi-document file written the way upstream ships a release (a Namespace, then per
service a Deployment listed before its Service, every object with ``metadata.namespace``), split
over the three tiers with ``{file: ..., select: [...]}`` entries without changing the file. Per
repetition (``--reps``, default 3) it measures ``plan_s`` (``qonnect plan`` against the KB),
``deploy_s`` (the deploy playbook until every workload is Ready), ``rerun_s`` (the same playbook
again, which must report ``changed=0``) and ``remove_s`` (the remove playbook), and prints the
median and p99 (nearest rank) of each.

``--case many`` (issue 38.6) deploys N new one-Deployment applications (``--counts``, default
10 and 50) through the list form (``-e '{"app_files": [...]}'``: one module run, planned
together) and runs it again unchanged, then N others through an Ansible ``loop`` of the deploy
module (one run each; on the controller the action plugin runs them in the task's process) and
again unchanged, once so and once with ``qonnect_in_process=false`` (a module process per item,
``loop_unchanged_module_process_s``), and N more in a loop with ``min_ready_seconds: 0``; each set
is removed after. Seconds of the whole playbook each; and ``module_unchanged_s``: the deploy module
alone (its own process, as Ansible starts it off the controller) on up to 20 of the list's
applications unchanged, p50/p99/max, and ``in_process_unchanged_s``: the same on the controller
(the action plugin's call, one process, its imports once: ``imports_s``). ``--loop-counts``
limits the loops to some of the counts (a loop of 50 takes minutes).

    python benchmarks/deploy.py --json
    python benchmarks/deploy.py --case shop --reps 5 --json
    python benchmarks/deploy.py --case many --counts 10,50 --json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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
def timed(cmd: list[str], env: dict, output: list[str] | None = None) -> float:
    """Seconds the command took; its stdout is appended to ``output`` when given."""
    started = time.monotonic()
    result = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    elapsed = time.monotonic() - started
    if output is not None:
        output.append(result.stdout)
    if result.returncode != 0:
        raise SystemExit(
            f"deploy benchmark: {' '.join(cmd[:2])} failed:\n{result.stdout[-3000:]}{result.stderr[-2000:]}"
        )
    return elapsed


@contextlib.contextmanager
def federation() -> Iterator[tuple[dict, str, Any, Path, dict, Path]]:
    """The paper testbed, a KB with every cluster registered and one agent per cluster:
    yields (federation, KB URL, KB client, admin token file, environment, scratch folder)."""
    import yaml
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

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
        yield fed, url, kb, admin, env, base
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


def run() -> dict:
    from ansible_collections.qonnect.core.plugins.module_utils.qos import load_application_file

    with federation() as (fed, _url, kb, admin, env, base):
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


# -- the 14-service shop from one multi-document file --------------------------------------------
SHOP = "sock-shop"
# service: (tier, image, port, dependsOn); the Sock Shop's fourteen services
SHOP_SERVICES: dict[str, tuple[str, str, int, list[str]]] = {
    "front-end": ("edge", "weaveworksdemos/front-end:0.3.12", 8079, ["catalogue", "carts", "orders", "user"]),
    "catalogue": ("fog", "weaveworksdemos/catalogue:0.3.5", 80, ["catalogue-db"]),
    "catalogue-db": ("fog", "weaveworksdemos/catalogue-db:0.3.0", 3306, []),
    "carts": ("fog", "weaveworksdemos/carts:0.4.8", 80, ["carts-db"]),
    "carts-db": ("fog", "mongo:3.4", 27017, []),
    "orders": ("cloud", "weaveworksdemos/orders:0.4.7", 80, ["orders-db", "payment", "shipping", "user"]),
    "orders-db": ("cloud", "mongo:3.4", 27017, []),
    "payment": ("cloud", "weaveworksdemos/payment:0.4.3", 80, []),
    "shipping": ("cloud", "weaveworksdemos/shipping:0.4.8", 80, ["rabbitmq"]),
    "queue-master": ("cloud", "weaveworksdemos/queue-master:0.3.1", 80, ["rabbitmq"]),
    "rabbitmq": ("cloud", "rabbitmq:3.6.8-management", 5672, []),
    "session-db": ("edge", "redis:alpine", 6379, []),
    "user": ("fog", "weaveworksdemos/user:0.4.7", 80, ["user-db"]),
    "user-db": ("fog", "weaveworksdemos/user-db:0.3.0", 27017, []),
}


def shop_documents(namespace: str = SHOP) -> list[dict]:
    """The shop's release as upstream ships one: a Namespace, then per service its Deployment
    before its Service, every object naming the namespace."""
    docs: list[dict] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    for name, (_tier, image, port, _deps) in SHOP_SERVICES.items():
        labels = {"name": name}
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": dict(labels)},
                    "template": {
                        "metadata": {"labels": dict(labels)},
                        "spec": {
                            "containers": [
                                {
                                    "name": name,
                                    "image": image,
                                    "ports": [{"containerPort": port}],
                                    "resources": {
                                        "requests": {"cpu": "100m", "memory": "100Mi"},
                                        "limits": {"cpu": "300m", "memory": "500Mi"},
                                    },
                                }
                            ],
                            "nodeSelector": {"kubernetes.io/os": "linux"},
                        },
                    },
                },
            }
        )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
                "spec": {"ports": [{"port": port, "targetPort": port}], "selector": dict(labels)},
            }
        )
    return docs


def write_shop(folder: Path, namespace: str = SHOP) -> Path:
    """The release file (shop.manifests) and an application spec (app.yml) beside it that splits
    it over the tiers with select entries; returns the spec's path."""
    import yaml

    (folder / "shop.manifests").write_text(yaml.safe_dump_all(shop_documents(namespace), sort_keys=False))
    services = []
    for i, (name, (tier, _image, _port, deps)) in enumerate(SHOP_SERVICES.items()):
        select = [{"kind": "Deployment", "name": name}, {"kind": "Service", "name": name}]
        if i == 0:
            select.insert(0, {"kind": "Namespace", "name": namespace})
        service: dict[str, Any] = {
            "name": name,
            "tier": tier,
            "manifests": [{"file": "shop.manifests", "select": select}],
        }
        if deps:
            service["dependsOn"] = deps
        services.append(service)
    spec = {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": SHOP, "namespace": namespace},
        "spec": {
            "objective": {"energy": 0.2, "cost": 1.0, "performance": 0.2, "latency": 0.2},
            "services": services,
        },
    }
    path = folder / "app.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 3),
        "p99": round(percentile(values, 99), 3),
        "runs": [round(v, 3) for v in values],
    }


def not_ready(fed: dict, namespace: str) -> list[str]:
    """Deployments of the namespace, on any cluster, with fewer ready replicas than wanted."""
    from kubernetes import config
    from kubernetes.dynamic import DynamicClient

    out = []
    for cluster in fed["clusters"]:
        dyn = DynamicClient(config.new_client_from_config(config_file=cluster["kubeconfig"]))
        res = dyn.resources.get(api_version="apps/v1", kind="Deployment")
        for d in dyn.get(res, namespace=namespace).to_dict()["items"]:
            if (d.get("status") or {}).get("readyReplicas", 0) < d["spec"].get("replicas", 1):
                out.append(f"{cluster['name']}/{d['metadata']['name']}")
    return out


def run_shop(reps: int) -> dict:
    times: dict[str, list[float]] = {"plan_s": [], "deploy_s": [], "rerun_s": [], "remove_s": []}
    with federation() as (fed, url, kb, admin, env, base):
        spec = write_shop(base)
        deploy = [
            str(BIN / "ansible-playbook"),
            "qonnect.core.deploy",
            "-e",
            f"app_file={spec}",
            "-e",
            f"kb_token_file={admin}",
        ]
        remove = [
            str(BIN / "ansible-playbook"),
            "qonnect.core.remove",
            "-e",
            f"app={SHOP}",
            "-e",
            f"kb_token_file={admin}",
        ]
        plan_cmd = [
            str(BIN / "qonnect"),
            "plan",
            "--spec",
            str(spec),
            "--kb",
            url,
            "--token-file",
            str(admin),
            "--json",
        ]
        clusters_used = 0
        for _rep in range(reps):
            times["plan_s"].append(timed(plan_cmd, env))
            times["deploy_s"].append(timed(deploy, env))
            late = not_ready(fed, SHOP)
            if late:
                raise SystemExit(f"deploy benchmark: the deploy returned before these were Ready: {late}")
            plan = kb.get_placement(SHOP)["current"]
            if len(plan) != len(SHOP_SERVICES):
                raise SystemExit(f"deploy benchmark: {len(plan)} services placed, not {len(SHOP_SERVICES)}")
            clusters_used = len({e["cluster"] for entries in plan.values() for e in entries})
            rerun: list[str] = []
            times["rerun_s"].append(timed(deploy, env, rerun))
            if not re.search(r"localhost\s*:\s*ok=\d+\s+changed=0\b", rerun[0]):
                raise SystemExit(
                    f"deploy benchmark: the second deploy changed something:\n{rerun[0][-3000:]}"
                )
            times["remove_s"].append(timed(remove, env))
        return {
            "benchmark": "deploy",
            "application": SHOP,
            "services": len(SHOP_SERVICES),
            "objects": len(shop_documents()),
            "source": "one multi-document file, {file, select} entries over cloud, fog and edge",
            "clusters": len(fed["clusters"]),
            "clusters_used": clusters_used,
            "reps": reps,
            **{key: summary(values) for key, values in times.items()},
            "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],  # the machine is shared
        }


def many_app(name: str) -> dict:
    """A one-Deployment application (nginx, 50m CPU) any tier may run."""
    labels = {"app": name}
    container = {
        "name": "web",
        "image": "nginx:1.27",
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }
    return {
        "apiVersion": "qonnect.io/v1",
        "kind": "Application",
        "metadata": {"name": name},
        "spec": {
            "objective": {"energy": 1, "cost": 1},
            "services": [{"name": "web", "manifests": [deployment]}],
        },
    }


def write_apps(folder: Path, prefix: str, count: int) -> list[str]:
    import yaml

    files = []
    for i in range(count):
        path = folder / f"{prefix}-{i:03d}.yml"
        path.write_text(yaml.safe_dump(many_app(f"{prefix}-{i:03d}")))
        files.append(str(path))
    return files


def loop_playbook(folder: Path, files: list[str], min_ready: float | None, state: str = "present") -> Path:
    """A playbook deploying (or removing) ``files`` one module run each, with an Ansible loop."""
    import yaml

    task: dict[str, Any] = (
        {"src": "{{ item }}"}
        if state == "present"
        else {"name": "{{ item | basename | splitext | first }}", "state": "absent"}
    )
    if min_ready is not None and state == "present":
        task["min_ready_seconds"] = min_ready
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [{"name": f"deploy {state}", "qonnect.core.deploy": task, "loop": files}],
        }
    ]
    path = folder / f"loop-{state}-{len(files)}-{min_ready}.yml"
    path.write_text(yaml.safe_dump(play))
    return path


def module_seconds(files: list[str], env: dict, folder: Path) -> dict[str, Any]:
    """The deploy module's own time for each application unchanged: the module run as Ansible
    runs it (its own Python process, arguments from a file), without the playbook around it."""
    seconds = []
    for i, path in enumerate(files):
        args = folder / f"module-args-{i}.json"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"src": path}}))
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "ansible_collections.qonnect.core.plugins.modules.deploy", str(args)],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        seconds.append(time.monotonic() - started)
        answer = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else {}
        if result.returncode != 0 or answer.get("failed") or answer.get("changed") is not False:
            raise SystemExit(
                f"deploy benchmark: the module on unchanged {path} did not answer changed=false:\n"
                f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
            )
    ordered = sorted(seconds)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 3),
        "p99": round(ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)], 3),
        "max": round(ordered[-1], 3),
    }


IN_PROCESS_PROBE = """
import json, sys, time
started = time.monotonic()
from ansible_collections.qonnect.core.plugins.module_utils.deploy_args import DEPLOY_ARGSPEC, DEPLOY_RULES
from ansible_collections.qonnect.core.plugins.module_utils.runners.deploy import run
from ansible_collections.qonnect.core.plugins.plugin_utils.in_process import run_in_controller
imports = time.monotonic() - started
seconds = []
for path in sys.argv[1:]:
    t = time.monotonic()
    result = run_in_controller("qonnect.core.deploy", run, DEPLOY_ARGSPEC, {"src": path}, False, False, **DEPLOY_RULES)
    seconds.append(time.monotonic() - t)
    if result.get("failed") or result.get("changed") is not False:
        raise SystemExit(f"{path}: not changed=false: {result.get('msg')}")
print(json.dumps({"imports": imports, "seconds": seconds}))
"""


def in_process_seconds(files: list[str], env: dict) -> dict[str, Any]:
    """What the deploy action does per item on the controller: ``run_in_controller`` (the
    function plugins/action/deploy.py calls) on each application unchanged, in one Python
    process whose imports happen once (``imports_s``, as for a loop's first item)."""
    result = subprocess.run(
        [sys.executable, "-c", IN_PROCESS_PROBE, *files],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(
            f"deploy benchmark: in-process probe failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    ordered = sorted(probe["seconds"])
    return {
        "n": len(ordered),
        "imports_s": round(probe["imports"], 3),
        "p50": round(statistics.median(ordered), 3),
        "p99": round(ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)], 3),
        "max": round(ordered[-1], 3),
    }


def run_many(counts: list[int], loop_counts: list[int] | None = None) -> dict:
    """N new one-Deployment applications through the list form (``app_files``, one module run,
    planned together) and through an Ansible ``loop`` (one module run each), then again unchanged;
    the minimum-ready window as it is (3 s) unless said."""
    out: dict[str, Any] = {"benchmark": "deploy", "case": "many", "runs": []}
    with federation() as (fed, _url, kb, admin, env, base):
        env = dict(env, QONNECT_KB_TOKEN=admin.read_text().strip())
        token = ["-e", f"kb_token_file={admin}"]
        for n in counts:
            row: dict[str, Any] = {"applications": n}
            files = write_apps(base, f"list{n}", n)
            deploy = [
                str(BIN / "ansible-playbook"),
                "qonnect.core.deploy",
                "-e",
                json.dumps({"app_files": files}),
                *token,
            ]
            row["list_new_s"] = round(timed(deploy, env), 2)
            placed = [a for a in (kb.get_placement(Path(f).stem)["current"] for f in files) if a]
            if len(placed) != n:
                raise SystemExit(
                    f"deploy benchmark: {len(placed)} of {n} applications placed by the list form"
                )
            rerun: list[str] = []
            row["list_unchanged_s"] = round(timed(deploy, env, rerun), 2)
            if not re.search(r"localhost\s*:\s*ok=\d+\s+changed=0\b", rerun[0]):
                raise SystemExit(
                    f"deploy benchmark: the list form's second run changed something:\n{rerun[0][-2000:]}"
                )
            row["module_unchanged_s"] = module_seconds(files[:20], env, base)
            row["in_process_unchanged_s"] = in_process_seconds(files[:20], env)
            timed(
                [str(BIN / "ansible-playbook"), str(loop_playbook(base, files, None, "absent")), *token], env
            )
            if loop_counts is not None and n not in loop_counts:
                out["runs"].append(row)
                continue
            for label, min_ready in (("loop_new_s", None), ("loop_new_min_ready_0_s", 0.0)):
                files = write_apps(base, f"loop{n}{'z' if min_ready == 0.0 else ''}", n)
                book = [str(BIN / "ansible-playbook"), str(loop_playbook(base, files, min_ready)), *token]
                row[label] = round(timed(book, env), 2)
                if min_ready is None:
                    # on the controller the action runs the deploy in the task's process (one
                    # import for the loop); the module in a process per item, as elsewhere
                    row["loop_unchanged_s"] = round(timed(book, env), 2)
                    row["loop_unchanged_module_process_s"] = round(
                        timed([*book, "-e", "qonnect_in_process=false"], env), 2
                    )
                timed(
                    [str(BIN / "ansible-playbook"), str(loop_playbook(base, files, None, "absent")), *token],
                    env,
                )
            out["runs"].append(row)
        out["clusters"] = len(fed["clusters"])
    out["cpus"] = os.cpu_count()
    out["loadavg"] = [round(x, 2) for x in os.getloadavg()]  # the machine is shared
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--case", choices=("bookinfo", "shop", "many"), default="bookinfo", help="what to deploy"
    )
    parser.add_argument("--counts", default="10,50", help="applications per run of the many case")
    parser.add_argument(
        "--loop-counts", help="of those counts, the ones also deployed through a loop (default: all)"
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions of the shop case (default 3)")
    parser.add_argument("--baseline", nargs=2, metavar=("JOB", "NAMESPACE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline:
        baseline(*args.baseline)
        return 0
    if args.case == "many":
        loops = (
            None if args.loop_counts is None else [int(c) for c in args.loop_counts.split(",") if c.strip()]
        )
        result = run_many([int(c) for c in args.counts.split(",") if c.strip()], loops)
    else:
        result = run_shop(max(1, args.reps)) if args.case == "shop" else run()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:18} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
