"""Helpers and fixtures of the Ansible user's path tests: a copy of the collection as git sees it, and a KB
served over HTTPS with its own CA and three testbed clusters registered (real processes)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """A tool of the project venv (ansible-galaxy, ansible-builder...), by absolute path."""
    path = BIN / name
    return str(path) if path.exists() else shutil.which(name) or name


def copy_tree(dest: Path) -> Path:
    """Copy the files git tracks or would track (what a fresh clone plus local edits holds)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in files:
        rel = raw.decode()
        if not rel or not (ROOT / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return dest


def build(tree: Path, out: Path) -> Path:
    """ansible-galaxy collection build of tree into out; returns the tarball."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(out / "_none"))
    subprocess.run(
        [tool("ansible-galaxy"), "collection", "build", "--force", "--output-path", str(out), "."],
        cwd=tree,
        check=True,
        capture_output=True,
        timeout=300,
        env=env,
    )
    (tarball,) = out.glob("qonnect-core-*.tar.gz")
    return tarball


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Path:
    """The collection tarball built from a copy of the checkout (no local state added)."""
    base = tmp_path_factory.mktemp("built")
    tree = copy_tree(base / "tree")
    return build(tree, base / "dist")


QONNECT = tool("qonnect")


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def stop(proc: subprocess.Popen) -> None:
    """Stop one process this suite started (its own session), by pid."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def tls_pair(base: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1: (ca.pem, cert.pem, key.pem)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "qonnect test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = base / "ca.pem", base / "kb.crt", base / "kb.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@dataclass
class Stack:
    """A KB over HTTPS (own CA) with three testbed clusters registered, an agent reporting each."""

    base: Path
    url: str
    ca: Path
    admin: str
    reader: str
    clusters: dict[str, dict]

    def kb(self, token: str | None = None):
        from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient

        return KBClient(self.url, token or self.admin, ca_path=str(self.ca))


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    import yaml

    base = tmp_path_factory.mktemp("user-path")
    testbed = base / "testbed"
    procs: list[subprocess.Popen] = []
    try:
        subprocess.run(
            [
                QONNECT,
                "testbed",
                "up",
                "--profile",
                "paper",
                "--clusters",
                "3",
                "--dir",
                str(testbed),
                "--start-delay",
                "0.2",
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )
        fed = yaml.safe_load((testbed / "federation.yaml").read_text())
        ca, cert, key = tls_pair(base)
        db = f"sqlite:///{base / 'kb.sqlite'}"

        def token(role: str) -> str:
            return subprocess.run(
                [QONNECT, "kb", "token", "create", "--db", db, "--role", role, "--name", role],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout.strip()

        subprocess.run([QONNECT, "kb", "migrate", "--db", db], capture_output=True, timeout=60, check=False)
        admin, reader = token("admin"), token("reader")
        port_file = base / "kb.port"
        with open(base / "kb.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        QONNECT,
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
                        "--tls-cert",
                        str(cert),
                        "--tls-key",
                        str(key),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        port = wait_for(lambda: port_file.exists() and port_file.read_text().strip(), 60, "the KB")
        stack = Stack(
            base, f"https://127.0.0.1:{port}", ca, admin, reader, {c["name"]: c for c in fed["clusters"]}
        )
        kb = stack.kb()
        wait_for(lambda: _healthy(kb), 30, "the KB over TLS")
        for c in fed["clusters"]:
            kb.register_cluster(
                {
                    k: c[k]
                    for k in ("name", "tier", "location", "server", "kubeconfig", "context", "labels")
                    if c.get(k) is not None
                }
            )
            agent_token = base / f"agent-{c['name']}.token"
            agent_token.write_text(
                subprocess.run(
                    [
                        QONNECT,
                        "kb",
                        "token",
                        "create",
                        "--db",
                        db,
                        "--role",
                        "agent",
                        "--cluster",
                        c["name"],
                        "--name",
                        f"agent-{c['name']}",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=True,
                ).stdout
            )
            with open(base / f"agent-{c['name']}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            QONNECT,
                            "agent",
                            "--cluster",
                            c["name"],
                            "--kubeconfig",
                            c["kubeconfig"],
                            "--kb",
                            stack.url,
                            "--kb-ca",
                            str(ca),
                            "--token-file",
                            str(agent_token),
                            "--interval",
                            "2",
                            "--state-dir",
                            str(base / f"agent-{c['name']}"),
                        ],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

        def reporting() -> bool:
            inv = kb.inventory()
            return len(inv["clusters"]) == len(fed["clusters"]) and all(
                c["healthy"] and c["nodes"] for c in inv["clusters"]
            )

        wait_for(reporting, 90, "every agent to report")
        yield stack
    finally:
        for proc in procs:
            stop(proc)
        subprocess.run(
            [QONNECT, "testbed", "down", "--dir", str(testbed)], capture_output=True, timeout=60, check=False
        )


def _healthy(kb) -> bool:
    from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError

    try:
        kb.healthz()
    except KBError:
        return False
    return True
