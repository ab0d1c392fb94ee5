"""Refuse a collection tarball that carries secrets or local state.

A tarball is published: anything in it is public. This scans every member by name (tokens, keys,
databases, kubeconfigs, demo state, virtualenvs, egg-info) and by content (PEM private keys,
SQLite databases, KB bearer tokens, kubeconfig-shaped YAML holding credentials) and prints every
finding at once, naming the member, then exits 1. It never prints a secret's value.

Usage: scan_tarball.py TARBALL [TARBALL ...]
"""

from __future__ import annotations

import fnmatch
import re
import sys
import tarfile
from pathlib import PurePosixPath

# file names that are secrets or local state whatever their content
SECRET_NAMES = (
    "*.token",
    "*.secret",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.db",
    "*.sqlite",
    "*.sqlite3",
    "*.sqlite-wal",
    "*.sqlite-shm",
    "*.kubeconfig",
    "kubeconfig",
    "kubeconfig.y*ml",
    ".env",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
)
# directories that only exist on a developer's machine
LOCAL_DIRS = (
    "demo-state",
    "kubeconfigs",
    ".venv",
    "venv",
    ".tox",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
    "__pycache__",
    ".git",
    "build",
    "dist",
    "*.egg-info",
)

PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----")
SQLITE_MAGIC = b"SQLite format 3\x00"
KB_TOKEN = re.compile(rb"\bqkb_[A-Za-z0-9_-]{32,}")
# a kubeconfig: the three lists of a Config, and a credential field with a value
KUBECONFIG_SHAPE = (
    re.compile(rb"^\s*clusters:", re.M),
    re.compile(rb"^\s*users:", re.M),
    re.compile(rb"^\s*contexts:", re.M),
)
KUBECONFIG_SECRET = re.compile(
    rb"^\s*-?\s*(token|client-key-data|password|id-token|refresh-token)\s*:\s*[\"']?[^\s\"'#{]", re.M
)
MAX_READ = 16 * 1024 * 1024


def name_findings(path: str) -> list[str]:
    """What the member's name alone gives away."""
    parts = PurePosixPath(path).parts
    out = []
    for part in parts[:-1]:
        if any(fnmatch.fnmatch(part, pat) for pat in LOCAL_DIRS):
            out.append(f"local state directory {part}/")
            break
    base = parts[-1] if parts else path
    if any(fnmatch.fnmatch(base, pat) for pat in SECRET_NAMES):
        out.append(f"secret-looking file name {base}")
    return out


def content_findings(data: bytes) -> list[str]:
    """What the member's bytes give away (never the value itself)."""
    out = []
    if data.startswith(SQLITE_MAGIC):
        out.append("SQLite database")
    if PRIVATE_KEY.search(data):
        out.append("PEM private key")
    if KB_TOKEN.search(data):
        out.append("qonnect KB bearer token (qkb_...)")
    if all(p.search(data) for p in KUBECONFIG_SHAPE) and KUBECONFIG_SECRET.search(data):
        out.append("kubeconfig with credentials")
    return out


def scan(tarball: str) -> list[str]:
    """Every finding in one tarball, as 'tarball: member: what' lines."""
    findings = []
    with tarfile.open(tarball) as tar:
        for member in tar:
            what = name_findings(member.name)
            if member.isfile():
                fh = tar.extractfile(member)
                if fh is not None:
                    what += content_findings(fh.read(MAX_READ))
            findings += [f"{tarball}: {member.name}: {w}" for w in what]
    return findings


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    findings = []
    for tarball in argv:
        try:
            findings += scan(tarball)
        except (OSError, tarfile.TarError) as exc:
            findings.append(f"{tarball}: cannot read: {exc}")
    for line in findings:
        print(line, file=sys.stderr)
    if findings:
        print(
            f"scan: {len(findings)} secret or local-state finding(s); fix build_ignore in galaxy.yml "
            "or move the files out of the checkout",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
