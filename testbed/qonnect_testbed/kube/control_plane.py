"""One real cluster's control plane: etcd, kube-apiserver, kube-controller-manager, scheduler.

All four listen on the cluster's loopback address (127.0.0.x). The API server serves TLS with a
certificate from the testbed CA (pki.py), authenticates a static admin token (system:masters,
from a token file) and service-account tokens, and authorizes with Node,RBAC. The controller
manager signs service-account tokens and runs the real node-lifecycle and taint-eviction
controllers, whose timing is the real default unless the testbed is told otherwise. ``fail``
SIGKILLs the API server (clients get "connection refused"); ``recover`` restarts it on the same
address and port, with etcd's state kept.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from qonnect_testbed import kubeconfig, pki
from qonnect_testbed.kube.api import KubeApi, KubeApiError
from qonnect_testbed.kube.processes import Child

SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass
class Timing:
    """Node failure timing: the real components' flags (defaults are the real defaults)."""

    node_monitor_grace_period: float = 40.0
    default_unreachable_toleration_seconds: int = 300
    default_not_ready_toleration_seconds: int = 300


class ControlPlaneError(Exception):
    """A component that did not start: the message names it and quotes its log."""


def free_port(address: str) -> int:
    """A port free on address now (the component binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)
    return path


class ControlPlane:
    """The processes and files of one cluster under DIR/clusters/<name>/."""

    def __init__(
        self,
        name: str,
        address: str,
        directory: Path,
        bin_dir: Path,
        ca: pki.CertificateAuthority,
        ca_file: Path,
        timing: Timing,
    ) -> None:
        self.name = name
        self.address = address
        self.directory = directory
        self.bin = bin_dir
        self.ca = ca
        self.ca_file = ca_file
        self.timing = timing
        self.port = free_port(address)
        self.admin_token = secrets.token_urlsafe(32)
        self.server = f"https://{address}:{self.port}"
        self.api = KubeApi(self.server, self.admin_token, str(ca_file))
        self.children: dict[str, Child] = {}

    # ------------------------------------------------------------------ files and processes

    def _prepare(self) -> dict[str, Path]:
        d = self.directory
        # A new testbed starts empty, as the emulator's does: etcd data of an earlier run (other
        # ports, other service-account keys) is dropped.
        shutil.rmtree(d / "etcd", ignore_errors=True)
        (d / "logs").mkdir(parents=True, exist_ok=True)
        names = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
        cert, key = self.ca.issue_server(self.name, [self.address], names)
        cert_path, key_path = pki.write_server_pair(d, "apiserver", cert, key)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        sa_priv = _write(
            d / "sa.key",
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
        sa_pub = _write(
            d / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        )
        tokens = _write(d / "tokens.csv", f'{self.admin_token},admin,admin-uid,"system:masters"\n'.encode())
        kc = kubeconfig.write(
            d / "admin.kubeconfig",
            kubeconfig.build(self.name, self.server, self.admin_token, self.ca.cert_pem),
        )
        return {
            "cert": cert_path,
            "key": key_path,
            "sa_key": sa_priv,
            "sa_pub": sa_pub,
            "tokens": tokens,
            "kubeconfig": kc,
        }

    def _commands(self, files: dict[str, Path]) -> dict[str, list[str]]:
        b, a, t = self.bin, self.address, self.timing
        etcd_client, etcd_peer = free_port(a), free_port(a)
        return {
            "etcd": [
                str(b / "etcd"),
                "--name",
                self.name,
                "--data-dir",
                str(self.directory / "etcd"),
                "--listen-client-urls",
                f"http://{a}:{etcd_client}",
                "--advertise-client-urls",
                f"http://{a}:{etcd_client}",
                "--listen-peer-urls",
                f"http://{a}:{etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://{a}:{etcd_peer}",
                "--initial-cluster",
                f"{self.name}=http://{a}:{etcd_peer}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
                "--quota-backend-bytes",
                str(1 << 30),
            ],
            "kube-apiserver": [
                str(b / "kube-apiserver"),
                f"--etcd-servers=http://{a}:{etcd_client}",
                f"--bind-address={a}",
                f"--secure-port={self.port}",
                "--advertise-address=10.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={files['cert']}",
                f"--tls-private-key-file={files['key']}",
                f"--client-ca-file={self.ca_file}",
                f"--token-auth-file={files['tokens']}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={files['sa_pub']}",
                f"--service-account-signing-key-file={files['sa_key']}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                f"--default-not-ready-toleration-seconds={t.default_not_ready_toleration_seconds}",
                f"--default-unreachable-toleration-seconds={t.default_unreachable_toleration_seconds}",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--event-ttl=1h",
                "--v=1",
            ],
            "kube-controller-manager": [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={files['kubeconfig']}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={files['sa_key']}",
                f"--root-ca-file={self.ca_file}",
                f"--node-monitor-grace-period={_duration(t.node_monitor_grace_period)}",
                "--node-monitor-period=2s",
                "--profiling=false",
                "--v=1",
            ],
            "kube-scheduler": [
                str(b / "kube-scheduler"),
                f"--kubeconfig={files['kubeconfig']}",
                "--secure-port=0",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        }

    async def start(self, timeout: float) -> None:
        """Start etcd, then the API server, then the controllers; return when /readyz is ok."""
        files = self._prepare()
        for name, argv in self._commands(files).items():
            self.children[name] = Child(name, argv, self.directory / "logs" / f"{name}.log")
        deadline = time.monotonic() + timeout
        self.children["etcd"].start()
        self.children["kube-apiserver"].start()
        await self.wait_ready(deadline)
        self.children["kube-controller-manager"].start()
        self.children["kube-scheduler"].start()

    async def wait_ready(self, deadline: float) -> None:
        """Until the API server answers /readyz 200 (a dead component fails at once)."""
        while True:
            for child in self.children.values():
                if child.proc is not None and not child.running:
                    raise ControlPlaneError(
                        f"cluster {self.name}: {child.name} exited with code "
                        f"{child.exit_code()}; log {child.log_path}:\n{child.log_tail()}"
                    )
            try:
                await self.api.get("/readyz", timeout=3)
                return
            except KubeApiError as exc:
                last = exc.message
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"cluster {self.name}: kube-apiserver not ready in time ({last}); "
                    f"log {self.children['kube-apiserver'].log_path}"
                )
            await asyncio.sleep(0.3)

    @property
    def up(self) -> bool:
        child = self.children.get("kube-apiserver")
        return child is not None and child.running

    async def fail(self) -> None:
        """SIGKILL the API server: clients get connection refused, as from a dead control plane."""
        self.children["kube-apiserver"].kill()

    async def recover(self, timeout: float = 60.0) -> None:
        """Restart the API server on the same address and port; return when it is ready."""
        child = self.children["kube-apiserver"]
        if not child.running:
            child.start()
        await self.wait_ready(time.monotonic() + timeout)

    def dead_components(self) -> list[str]:
        """Components that exited although the testbed did not stop them."""
        return [n for n, c in self.children.items() if c.proc is not None and not c.running]

    def pids(self) -> dict[str, int]:
        return {
            name: child.proc.pid
            for name, child in self.children.items()
            if child.proc is not None and child.running
        }

    def rss_bytes(self) -> dict[str, int]:
        return {name: child.rss_bytes() for name, child in self.children.items()}

    async def stop(self) -> None:
        """Stop the controllers and the API server first, etcd last; close the client."""
        await self.api.close()
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            child = self.children.get(name)
            if child is not None:
                await asyncio.to_thread(child.kill, 15, 10.0)


def _duration(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"
