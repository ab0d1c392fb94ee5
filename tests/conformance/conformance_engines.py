"""The engines the conformance suite runs against, started with the real `qonnect testbed up`.

One federation per engine and session (profile `tiers`, first cluster only: cloud-1 with a
tainted control-plane node and a worker). The emulator always runs; the real engine
(`--engine kube`: kube-apiserver, controller-manager, scheduler, simulated kubelets) runs when
QONNECT_CONFORMANCE_ENGINES names it (default: both). A requested engine that cannot start
fails every test of that engine loudly - it is never skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kubernetes import client, config
from support import run_qonnect, specs
from support.federation import started_testbed

ENGINES_ENV = "QONNECT_CONFORMANCE_ENGINES"
ALL_ENGINES = ("emulator", "kube")
DEFAULT_ENGINES = "emulator,kube"
CLUSTER = "cloud-1"
WORKER = f"{CLUSTER}-worker"
CONTROL_PLANE = f"{CLUSTER}-control-plane"
# How long the real engine may take for things the emulator does at once (pod start with the
# simulated kubelet, controller resyncs); the emulator uses the same waits, it is just faster.
UP_TIMEOUT = {"emulator": 60.0, "kube": 300.0}


def requested_engines() -> list[str]:
    """Engines named in QONNECT_CONFORMANCE_ENGINES (comma-separated); unknown names are errors."""
    names = [n.strip() for n in os.environ.get(ENGINES_ENV, DEFAULT_ENGINES).split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_ENGINES]
    if unknown:
        raise ValueError(f"{ENGINES_ENV}: unknown engine(s) {unknown}; expected some of {list(ALL_ENGINES)}")
    return names


def qonnect(*args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real `qonnect` command line of this venv."""
    return run_qonnect(*args, timeout=timeout, check=check)


@dataclass
class Engine:
    """One running federation of one engine, with API clients for its cluster."""

    name: str
    directory: Path
    doc: dict[str, Any]
    cluster: str = CLUSTER
    _clients: dict[str, client.ApiClient] = field(default_factory=dict)

    @property
    def is_emulator(self) -> bool:
        return self.name == "emulator"

    def entry(self) -> dict[str, Any]:
        return next(c for c in self.doc["clusters"] if c["name"] == self.cluster)

    def kubeconfig(self, restricted: bool = False, role: str | None = None) -> str:
        """The admin kubeconfig, the restricted one, or a documented role's (agent, deploy)."""
        entry = self.entry()
        if role is not None:
            return str(entry[f"{role}_kubeconfig"])
        if restricted:
            path = entry.get("restricted_kubeconfig") or str(
                self.directory / "kubeconfigs" / "restricted" / f"{self.cluster}.yaml"
            )
            return str(path)
        return str(entry["kubeconfig"])

    def api(self, restricted: bool = False, role: str | None = None) -> client.ApiClient:
        key = role or ("restricted" if restricted else "admin")
        if key not in self._clients:
            cfg = client.Configuration()
            config.load_kube_config(config_file=self.kubeconfig(restricted, role), client_configuration=cfg)
            cfg.retries = 0
            self._clients[key] = client.ApiClient(cfg)
        return self._clients[key]

    def core(self, restricted: bool = False, role: str | None = None) -> client.CoreV1Api:
        return client.CoreV1Api(self.api(restricted, role))

    def apps(self, restricted: bool = False, role: str | None = None) -> client.AppsV1Api:
        return client.AppsV1Api(self.api(restricted, role))

    def testbed(self, *args: str) -> subprocess.CompletedProcess:
        """A testbed verb (node-down, node-up, ...) against this federation."""
        return qonnect("testbed", *args, "--dir", str(self.directory))

    def close(self) -> None:
        for api in self._clients.values():
            api.close()
        self._clients.clear()


def up_args(name: str) -> list[str]:
    """`qonnect testbed up` arguments for an engine (the emulator needs no --engine flag)."""
    args = ["--profile", "tiers", "--clusters", "1", "--start-delay", "0.3"]
    if name != "emulator":
        args += ["--engine", name]
    return args


@contextlib.contextmanager
def running(name: str, directory: Path) -> Iterator[Engine]:
    """Start an engine's federation; always stopped afterwards (support.federation)."""
    args = [*up_args(name), "--timeout", str(int(UP_TIMEOUT[name]))]
    with started_testbed(directory, *args, timeout=UP_TIMEOUT[name] + 60) as doc:
        engine = Engine(name, directory, doc)
        try:
            yield engine
        finally:
            engine.close()


def status_of(exc: client.ApiException) -> dict[str, Any]:
    """The metav1 Status body of a failed call."""
    try:
        return json.loads(exc.body)
    except (TypeError, ValueError):
        return {}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def deployment(
    name: str, replicas: int = 2, image: str = "registry.k8s.io/pause:3.10", **spec: Any
) -> dict[str, Any]:
    """A Deployment manifest whose pods carry app=<name>; ``spec`` adds to its spec."""
    doc = specs.deployment(name, replicas, image)
    doc["spec"].update(spec)
    return doc


def pod(name: str, image: str = "registry.k8s.io/pause:3.10", **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": image, **container}]},
    }


def container_state(p: Any) -> tuple[str, str, int]:
    """(state kind, reason, restartCount) of a pod's first container status, from the client model."""
    statuses = (p.status.container_statuses or []) if p.status else []
    if not statuses:
        return ("", "", 0)
    s = statuses[0]
    if s.state.waiting:
        return ("waiting", s.state.waiting.reason or "", s.restart_count)
    if s.state.running:
        return ("running", "", s.restart_count)
    if s.state.terminated:
        return ("terminated", s.state.terminated.reason or "", s.restart_count)
    return ("", "", s.restart_count)
