"""A real testbed federation for the sim/CLI tests: started with `qonnect testbed up`.

The federation runs as the detached background process `up` starts; support.federation's
``started_testbed`` takes it down again (by its recorded pid if `down` fails), so no test leaves it
behind. Polling, the CLI and manifests come from ``support``.
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kubernetes import client, config
from support import run_qonnect
from support.federation import started_testbed


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
        return run_qonnect("testbed", *args, "--dir", str(self.directory), check=check)

    def close(self) -> None:
        for api in self._clients.values():
            api.close()


@contextlib.contextmanager
def running(directory: Path, *args: str) -> Iterator[Federation]:
    """`qonnect testbed up --dir directory *args`, yielded as a Federation, always stopped."""
    with started_testbed(directory, *args) as doc:
        fed = Federation(directory, doc)
        try:
            yield fed
        finally:
            fed.close()
