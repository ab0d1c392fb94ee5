"""Helpers of the adversarial suite: runners for the CLI and for a module run directly
(``python -m`` with an args file, as AnsiballZ runs it) that measure each child's own peak RSS
and CPU time with os.wait4, and snapshots of every cluster and of the KB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from support import qonnect_cmd, qonnect_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ansible"))

from ansible_federation import BIN, CLUSTERS, COLLECTIONS, ROOT, Federation, cluster_clients, paper_federation

REFERENCE = qonnect_reference()
SAMPLE = REFERENCE / "sample-application"


@dataclass
class Run:
    """A finished child process: its exit code, output, peak RSS (MB), CPU and wall seconds."""

    rc: int
    stdout: str
    stderr: str
    rss_mb: float
    cpu_s: float
    wall_s: float

    def json(self) -> dict:
        return json.loads(self.stdout)


# The measured command runs under a small Python launcher: Linux counts the pre-exec memory of
# a forked process in its ru_maxrss, so a child forked straight from pytest (200+ MB) would
# report pytest's size. The launcher's own children are forked from a small process; their
# peak RSS and CPU time come from getrusage(RUSAGE_CHILDREN) in the launcher.
_LAUNCHER = """
import json, resource, subprocess, sys
with open(sys.argv[1], "wb") as out, open(sys.argv[2], "wb") as err:
    rc = subprocess.call(sys.argv[4:], stdout=out, stderr=err, stdin=subprocess.DEVNULL)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[3], "w") as res:
    json.dump({"rc": rc, "maxrss_kb": usage.ru_maxrss, "cpu": usage.ru_utime + usage.ru_stime}, res)
"""


def run_measured(
    cmd: list[str], env: dict | None = None, cwd: str | None = None, timeout: float = 120
) -> Run:
    """Run a command; its own peak RSS and CPU time (see _LAUNCHER), its output and exit code."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="qonnect-adv-") as tmp:
        out, err, res = (str(Path(tmp) / n) for n in ("out", "err", "res.json"))
        try:
            subprocess.run(
                [sys.executable, "-c", _LAUNCHER, out, err, res, *cmd],
                env=env,
                cwd=cwd,
                timeout=timeout,
                check=True,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{cmd} ran longer than {timeout}s") from None
        usage = json.loads(Path(res).read_text())
        return Run(
            usage["rc"],
            Path(out).read_text(errors="replace"),
            Path(err).read_text(errors="replace"),
            usage["maxrss_kb"] / 1024,
            usage["cpu"],
            time.monotonic() - start,
        )


def module_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = COLLECTIONS
    env.pop("QONNECT_KB_TOKEN", None)
    return env


def run_module(name: str, args: dict, folder: Path, timeout: float = 120) -> Run:
    """A module of the collection run directly, as AnsiballZ would: python -m with an args file."""
    folder.mkdir(parents=True, exist_ok=True)
    args_file = folder / f"{name}-args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    args_file.chmod(0o600)
    cmd = [sys.executable, "-m", f"ansible_collections.qonnect.core.plugins.modules.{name}", str(args_file)]
    return run_measured(cmd, env=module_env(), cwd=str(folder), timeout=timeout)


def run_cli(*args: str, cwd: str | None = None, timeout: float = 60) -> Run:
    return run_measured(qonnect_cmd(*args), cwd=cwd, timeout=timeout)


KINDS = (
    ("v1", "Namespace"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("networking.k8s.io/v1", "Ingress"),
)


def _cluster_objects(dyn, cluster: str, selector: str, namespaces: bool) -> set[str]:
    found: set[str] = set()
    for api_version, kind in KINDS:
        res = dyn(cluster).resources.get(api_version=api_version, kind=kind)
        for obj in dyn(cluster).get(res, label_selector=selector).items:
            found.add(f"{kind} {obj.metadata.namespace or ''}/{obj.metadata.name}")
    if namespaces:
        res = dyn(cluster).resources.get(api_version="v1", kind="Namespace")
        found.update(f"ns {n.metadata.name}" for n in dyn(cluster).get(res).items)
    return found


def labelled(dyn, application: str | None = None, namespaces: bool = False) -> dict[str, set[str]]:
    """Per cluster: 'Kind ns/name' of every object qonnect manages (of one application, or all),
    read from all clusters at once."""
    selector = "app.kubernetes.io/managed-by=qonnect"
    if application:
        selector += f",qonnect.io/application={application}"
    for cluster in CLUSTERS:
        dyn(cluster)  # create the clients (and their discovery) before the threads share them
    with ThreadPoolExecutor(max_workers=len(CLUSTERS)) as pool:
        found = pool.map(lambda c: _cluster_objects(dyn, c, selector, namespaces), CLUSTERS)
        return dict(zip(CLUSTERS, found, strict=True))


def cluster_state(dyn) -> dict[str, list[str]]:
    """Every namespace and every managed object on every cluster (what a bad spec must not touch)."""
    return {c: sorted(objs) for c, objs in labelled(dyn, namespaces=True).items()}


def kb_state(kb) -> dict:
    """Applications with their versions, placements and the number of events."""
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError

    apps = kb.list_applications()
    placements = {}
    for app in apps:
        try:
            placements[app["name"]] = kb.get_placement(app["name"])
        except KBError as exc:  # 404: no placement yet
            placements[app["name"]] = exc.status
    return {
        "applications": sorted(json.dumps(a, sort_keys=True) for a in apps),
        "placements": placements,
        "events": len(kb.list_events(limit=1000)),
    }


__all__ = [  # Federation and the federation's constants are re-exported for conftest.py and the tests
    "BIN",
    "CLUSTERS",
    "ROOT",
    "SAMPLE",
    "Federation",
    "Run",
    "cluster_clients",
    "cluster_state",
    "kb_state",
    "labelled",
    "paper_federation",
    "run_cli",
    "run_measured",
    "run_module",
]
