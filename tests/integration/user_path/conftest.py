"""Shared helpers of the Ansible user's path tests: a copy of the collection as git sees it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
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
    subprocess.run([tool("ansible-galaxy"), "collection", "build", "--force", "--output-path", str(out), "."],
                   cwd=tree, check=True, capture_output=True, timeout=300, env=env)
    (tarball,) = out.glob("qonnect-core-*.tar.gz")
    return tarball


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Path:
    """The collection tarball built from a copy of the checkout (no local state added)."""
    base = tmp_path_factory.mktemp("built")
    tree = copy_tree(base / "tree")
    return build(tree, base / "dist")
