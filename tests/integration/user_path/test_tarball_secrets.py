"""Issue 14.1: a collection build never ships tokens, keys, kubeconfigs, databases or local state.

`make check-build` runs scripts/check-build.sh, which scans the tarball (scripts/scan_tarball.py)
before installing it; these tests feed it crafted tarballs and real builds of a checkout copy
that holds a demo's state.
"""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import support
from user_path_support import ROOT, build, copy_tree

SCAN = [sys.executable, str(ROOT / "scripts" / "scan_tarball.py")]
KIND = "RSA " + "PRIVATE KEY"  # split, so this file itself holds no PEM key the scanner would flag
PEM = f"-----BEGIN {KIND}-----\nMIIEowIBAAKCAQEAq7Xn0fake0key0material0notreal\n-----END {KIND}-----\n"
TOKEN = "qkb_" + "Zx9" * 15
KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters:
- name: edge-1
  cluster: {{server: "https://10.0.0.1:6443"}}
users:
- name: admin
  user:
    token: {"s3cr3t-bearer-" * 3}
contexts:
- name: edge-1
  context: {{cluster: edge-1, user: admin}}
current-context: edge-1
"""


def sqlite_bytes(tmp_path: Path) -> bytes:
    db = tmp_path / "x.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (a)")
    return db.read_bytes()


def make_tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def scan(*tarballs: Path) -> subprocess.CompletedProcess:
    return support.run([*SCAN, *map(str, tarballs)], timeout=60, check=False)


def test_scanner_names_every_secret_at_once_without_printing_it(tmp_path):
    bad = make_tarball(
        tmp_path / "qonnect-core-0.1.0.tar.gz",
        {
            "MANIFEST.json": b"{}",
            "demo-state/tokens/admin.token": TOKEN.encode(),  # by name and content
            "docs/notes.md": PEM.encode(),  # key hidden in a doc
            "examples/cluster.yaml": KUBECONFIG.encode(),  # kubeconfig with a token
            "roles/x/files/state.bin": sqlite_bytes(tmp_path),  # database, harmless name
            "services/qonnect.egg-info/PKG-INFO": b"Name: qonnect\n",  # local build state
            "tests/fixture.txt": f"Authorization: Bearer {TOKEN}\n".encode(),
        },
    )
    run = scan(bad)
    assert run.returncode == 1, run.stderr
    for expected in (
        "demo-state/tokens/admin.token: local state directory demo-state/",
        "demo-state/tokens/admin.token: secret-looking file name admin.token",
        "docs/notes.md: PEM private key",
        "examples/cluster.yaml: kubeconfig with credentials",
        "roles/x/files/state.bin: SQLite database",
        "services/qonnect.egg-info/PKG-INFO: local state directory qonnect.egg-info/",
        "tests/fixture.txt: qonnect KB bearer token",
    ):
        assert expected in run.stderr, (expected, run.stderr)
    assert TOKEN not in run.stderr and "s3cr3t" not in run.stderr and "MIIE" not in run.stderr


def test_scanner_accepts_clean_content(tmp_path):
    clean = make_tarball(
        tmp_path / "clean.tar.gz",
        {
            "docs/security.md": b"Tokens look like qkb_... and are stored hashed; -----BEGIN CERTIFICATE-----\n",
            "examples/app.yml": b"apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n",
            "plugins/modules/deploy.py": b"token: str | None = None\n",
            "roles/r/templates/kubeconfig.j2": b"clusters:\nusers:\n- user:\n    token: {{ cluster_token }}\ncontexts:\n",
        },
    )
    run = scan(clean)
    assert run.returncode == 0, run.stderr


def test_build_of_a_checkout_with_demo_state_ships_none_of_it(tmp_path):
    """The real build: demo state, egg-info and keys in the tree stay out; check-build passes."""
    tree = copy_tree(tmp_path / "tree")
    demo = tree / "demo-state"
    (demo / "tokens").mkdir(parents=True)
    (demo / "tokens" / "admin.token").write_text(TOKEN)
    (demo / "raft.secret").write_text("ab" * 32)
    (demo / "testbed" / "kubeconfigs").mkdir(parents=True)
    (demo / "testbed" / "kubeconfigs" / "cloud-1.yaml").write_text(KUBECONFIG)
    (demo / "testbed" / "ca.key").write_text(PEM)
    (demo / "kb.sqlite").write_bytes(sqlite_bytes(tmp_path))
    (tree / "services" / "qonnect.egg-info").mkdir(exist_ok=True)
    (tree / "services" / "qonnect.egg-info" / "PKG-INFO").write_text("Name: qonnect\n")
    (tree / "kb.sqlite").write_bytes(sqlite_bytes(tmp_path))
    (tree / "ops.token").write_text(TOKEN)
    tarball = build(tree, tmp_path / "dist")
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert not [n for n in names if "demo-state" in n or "egg-info" in n or n.endswith((".token", ".sqlite"))]
    run = scan(tarball)
    assert run.returncode == 0, run.stderr


def test_check_build_fails_on_a_secret_that_build_ignore_cannot_know(tmp_path):
    """A private key pasted into a shipped file: `make check-build` (check-build.sh) must fail."""
    tree = copy_tree(tmp_path / "tree")
    (tree / "docs" / "pasted.md").write_text("# notes\n\n" + PEM)
    (tree / "examples" / "my-cluster.yaml").write_text(KUBECONFIG)
    dist = tmp_path / "dist"
    build(tree, dist)
    run = support.run(
        ["bash", str(ROOT / "scripts" / "check-build.sh"), str(dist)],
        timeout=300,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "docs/pasted.md: PEM private key" in run.stderr
    assert "examples/my-cluster.yaml: kubeconfig with credentials" in run.stderr
    assert "check-build:" not in run.stdout  # stopped before installing


def test_check_build_passes_on_the_checkout(built):
    run = support.run(
        ["bash", str(ROOT / "scripts" / "check-build.sh"), str(built.parent)],
        timeout=600,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "holds no secrets" in run.stdout
