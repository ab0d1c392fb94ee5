"""A real testbed federation for the sim/CLI tests: started with `qonnect testbed up`.

The federation runs as the detached background process `up` starts; `down` stops it, and if
that fails the process is killed by the pid it recorded, so no test leaves it behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml
from kubernetes import client, config

CLI_TIMEOUT = 60


def qonnect(*args: str, check: bool = True, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    """Run the real `qonnect` command line."""
    result = subprocess.run(
        [str(Path(sys.executable).with_name("qonnect")), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"qonnect {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


@dataclass
class Federation:
    """A running testbed: its directory, federation document and API clients per cluster."""

    directory: Path
    doc: dict[str, Any]
    _clients: dict[str, client.ApiClient] = field(default_factory=dict)

    def cluster(self, name: str) -> dict[str, Any]:
        return next(c for c in self.doc["clusters"] if c["name"] == name)

    def api(self, name: str) -> client.ApiClient:
        if name not in self._clients:
            cfg = client.Configuration()
            config.load_kube_config(config_file=self.cluster(name)["kubeconfig"], client_configuration=cfg)
            cfg.retries = 0
            self._clients[name] = client.ApiClient(cfg)
        return self._clients[name]

    def core(self, name: str) -> client.CoreV1Api:
        return client.CoreV1Api(self.api(name))

    def apps(self, name: str) -> client.AppsV1Api:
        return client.AppsV1Api(self.api(name))

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return qonnect("testbed", *args, "--dir", str(self.directory), check=check)

    def close(self) -> None:
        for api in self._clients.values():
            api.close()


@contextlib.contextmanager
def running(directory: Path, *args: str) -> Iterator[Federation]:
    """`qonnect testbed up --dir directory *args`, yielded as a Federation, always stopped."""
    fed = None
    try:
        qonnect("testbed", "up", "--dir", str(directory), *args)
        fed = Federation(directory, yaml.safe_load((directory / "federation.yaml").read_text()))
        yield fed
    finally:
        if fed is not None:
            fed.close()
        pid_file = directory / "testbed.pid"
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        with contextlib.suppress(Exception):
            qonnect("testbed", "down", "--dir", str(directory), timeout=30)
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(check: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    """Poll until check() returns something truthy; its last value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value {value!r})")
        time.sleep(interval)


def deployment(
    name: str,
    replicas: int = 2,
    image: str = "nginx:1.25",
    cpu: str | None = None,
    node_selector: dict | None = None,
    affinity: dict | None = None,
) -> dict:
    """A Deployment manifest of the kind qonnect applies."""
    container: dict[str, Any] = {"name": "main", "image": image}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}}
    spec: dict[str, Any] = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }
