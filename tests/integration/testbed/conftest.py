"""One emulated cluster for the API-server tests: the real app over TLS with a bearer token.

The server runs in this process on its own event loop in a thread, bound to an ephemeral
loopback port; tests reach it only over HTTPS (official client, kubectl) and change the Store
(e.g. Deployment status) only through `cluster.call`, on the server's loop.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import secrets
import ssl
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client, config, dynamic
from qonnect_testbed.apiserver import make_app
from qonnect_testbed.store import Store
from support import specs


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        ).add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def _pki(directory: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a server certificate for 127.0.0.1 (PEM files)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("testbed-ca", ca_key, None, None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert("testbed-apiserver", key, ca, ca_key)
    ca_path, cert_path, key_path = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return ca_path, cert_path, key_path


@dataclass
class Cluster:
    """Handle on the running test cluster."""

    url: str
    token: str
    ca_path: Path
    kubeconfig: Path
    store: Store
    loop: asyncio.AbstractEventLoop

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run fn on the server's loop (the Store is single-threaded) and return its result."""

        async def run() -> Any:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=10)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("apiserver")
    ca_path, cert_path, key_path = _pki(directory)
    ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ssl_ctx.load_cert_chain(cert_path, key_path)
    token = secrets.token_urlsafe(24)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="apiserver", daemon=True)
    thread.start()
    store = Store("conformance")

    async def start() -> tuple[web.AppRunner, int]:
        runner = web.AppRunner(make_app(store, token), shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_ctx)
        await site.start()
        return runner, runner.addresses[0][1]

    runner, port = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    url = f"https://127.0.0.1:{port}"
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "conformance", "cluster": {"server": url, "certificate-authority": str(ca_path)}}
                ],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [{"name": "conformance", "context": {"cluster": "conformance", "user": "admin"}}],
                "current-context": "conformance",
            }
        )
    )
    kubeconfig.chmod(0o600)
    try:
        yield Cluster(url, token, ca_path, kubeconfig, store, loop)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


@pytest.fixture(scope="session")
def api_client(cluster: Cluster) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        yield api


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def apps(api_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


@pytest.fixture(scope="session")
def dyn(api_client: client.ApiClient) -> dynamic.DynamicClient:
    return dynamic.DynamicClient(api_client)


@pytest.fixture
def ns(core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace per test, removed afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        core.delete_namespace(name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture(scope="session")
def manifests() -> type:
    """Builders of the manifests the tests use."""
    return Manifests


class Manifests:
    """Minimal valid manifests."""

    @staticmethod
    def deployment(
        name: str, replicas: int = 2, image: str = "nginx:1.25", labels: dict | None = None
    ) -> dict:
        """A Deployment whose pods carry app=<name>."""
        return specs.deployment(name, replicas, image, labels=labels or {"app": name}, port=80)

    @staticmethod
    def pod(name: str, labels: dict | None = None, node: str | None = None) -> dict:
        """A minimal Pod manifest."""
        spec: dict = {"containers": [{"name": "main", "image": "nginx:1.25"}]}
        if node:
            spec["nodeName"] = node
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": spec,
        }
