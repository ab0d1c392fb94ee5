"""Helpers of the Ansible integration tests around a real federation (started by
``support.federation.reporting_federation``): the paper testbed, a KB, one agent per cluster.

Everything runs as real processes (`qonnect testbed up`, `qonnect kb serve`, `qonnect agent`);
the tests drive it with real `ansible-playbook`, `ansible-inventory` and ansible-runner and
read the clusters back through the Kubernetes API.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from support import run_qonnect
from support.federation import reporting_federation

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
COLLECTIONS = str(ROOT / ".venv" / "collections")
T = TypeVar("T")
CLUSTERS = [f"{tier}-{i}" for tier in ("cloud", "fog", "edge") for i in (1, 2, 3)]


@dataclass
class Federation:
    dir: Path
    kb_url: str
    admin_token_file: Path
    clusters: dict[str, dict]

    @property
    def env(self) -> dict[str, str]:
        """Environment for ansible commands: collection path and KB URL; the token stays in a file."""
        env = dict(os.environ)
        env.update(
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
            QONNECT_KB_URL=self.kb_url,
            ANSIBLE_HOST_KEY_CHECKING="False",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_LOCALHOST_WARNING="False",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        )
        env.pop("QONNECT_KB_TOKEN", None)
        return env

    def kb(self):
        from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

        return KBClient(self.kb_url, self.admin_token_file.read_text().strip())

    def playbook(self, name: str, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
        cmd = [str(BIN / "ansible-playbook"), name, "-e", f"kb_token_file={self.admin_token_file}", *args]
        return subprocess.run(
            cmd, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )

    def qonnect(self, *args: str) -> subprocess.CompletedProcess:
        return run_qonnect(*args)


def paper_federation(base: Path) -> Iterator[Federation]:
    """Body of a federation fixture: the nine-cluster paper testbed with its clusters registered
    and reporting to a KB (support.federation)."""
    args = ("--profile", "paper", "--start-delay", "0.2")
    with reporting_federation(base, *args, kb_args=("--heartbeat-timeout", "30")) as fed:
        yield Federation(fed.base, fed.url, fed.admin_token_file, fed.clusters)


def cluster_clients(federation: Federation, make: Callable[[Any], T]) -> Callable[[str], T]:
    """clients(cluster) -> ``make(ApiClient)`` for that cluster's kubeconfig, made once."""
    from kubernetes import config

    cache: dict[str, T] = {}

    def get(cluster: str) -> T:
        if cluster not in cache:
            api = config.new_client_from_config(config_file=federation.clusters[cluster]["kubeconfig"])
            cache[cluster] = make(api)
        return cache[cluster]

    return get


def recap(result: subprocess.CompletedProcess) -> dict[str, int]:
    """The PLAY RECAP counters of localhost, failing with the output when the run failed."""
    found = re.search(r"localhost\s+:\s+(.*)", result.stdout)
    assert found, result.stdout + result.stderr
    counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}
    return counts


def snapshot(k8s, namespace: str = "bookinfo") -> dict[str, dict]:
    """Per cluster: kind/name -> (labels, annotations, spec) of each object qonnect manages there.

    Status and resourceVersion are left out: the clusters' controllers update them on their own.
    """
    out: dict[str, dict] = {}
    for cluster in CLUSTERS:
        core, apps = k8s(cluster)
        objs: dict[str, str] = {}
        api = core.api_client
        for kind, items in (
            ("Namespace", [n for n in core.list_namespace().items if n.metadata.name == namespace]),
            ("Deployment", apps.list_namespaced_deployment(namespace).items),
            ("Service", core.list_namespaced_service(namespace).items),
        ):
            for obj in items:
                body = api.sanitize_for_serialization(obj)
                objs[f"{kind}/{obj.metadata.name}"] = json.dumps(
                    [body["metadata"].get("labels"), body["metadata"].get("annotations"), body.get("spec")],
                    sort_keys=True,
                )
        out[cluster] = objs
    return out


def json_out(result: subprocess.CompletedProcess) -> dict:
    """JSON output of an ansible command; strings ansible marks untrusted ({"__ansible_unsafe": s},
    as ansible-core 2.19 prints values that came from outside) become plain strings."""
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout, object_hook=lambda d: d.get("__ansible_unsafe", d) if len(d) == 1 else d)
