"""Helpers and fixtures of the Ansible user's path tests: a copy of the collection as git sees it, and a KB
served over HTTPS with its own CA and three testbed clusters registered and reporting (real
processes, started by ``support.federation``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.federation import create_token, reporting_federation

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


def tls_pair(base: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 (the testbed's PKI, as the agent's
    TLS test uses it): (ca.pem, cert.pem, key.pem)."""
    from qonnect_testbed.pki import CertificateAuthority, write_server_pair

    ca = CertificateAuthority.create("qonnect test CA")
    ca_file = ca.save(base / "pki")
    cert, key = write_server_pair(base / "pki", "kb", *ca.issue_server("kb", ["127.0.0.1"]))
    return ca_file, cert, key


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
def stack(tmp_path_factory) -> Iterator[Stack]:
    base = tmp_path_factory.mktemp("user-path")
    ca, cert, key = tls_pair(base)
    args = ("--profile", "paper", "--clusters", "3", "--start-delay", "0.2")
    with reporting_federation(base, *args, tls=(cert, key, ca)) as fed:
        reader = create_token(fed.db, "reader", name="reader")
        yield Stack(base, fed.url, ca, fed.admin_token, reader, fed.clusters)
