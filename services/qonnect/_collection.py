"""Make ``ansible_collections.qonnect.core`` importable from the qonnect package.

The collection's module_utils are the single home of the QoS spec, the placement engine, the KB
client and the Kubernetes apply logic. Ansible finds them through its collection loader; plain
Python finds them when a directory holding ``ansible_collections/qonnect/core`` is on sys.path.
This module adds the first such directory from ANSIBLE_COLLECTIONS_PATH(S), the default
collection paths, or the source checkout this package was installed from.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

_DEFAULT_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")


def _candidates() -> list[Path]:
    found: list[Path] = []
    for var in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS"):
        for entry in os.environ.get(var, "").split(os.pathsep):
            if entry:
                found.append(Path(entry).expanduser())
    found.extend(Path(p).expanduser() for p in _DEFAULT_PATHS)
    # A source checkout: services/qonnect/_collection.py -> the repo root is two levels up,
    # and `make setup` links it as .venv/collections/ansible_collections/qonnect/core.
    repo = Path(__file__).resolve().parents[2]
    found.append(repo / ".venv" / "collections")
    return found


def ensure_importable() -> None:
    """Put a collections directory holding qonnect.core on sys.path if it is not there yet."""
    if importlib.util.find_spec("ansible_collections") is not None:
        try:
            if importlib.util.find_spec("ansible_collections.qonnect.core.plugins.module_utils"):
                return
        except ModuleNotFoundError:
            pass
    for base in _candidates():
        if (base / "ansible_collections" / "qonnect" / "core" / "galaxy.yml").exists() or (
            base / "ansible_collections" / "qonnect" / "core" / "MANIFEST.json"
        ).exists():
            sys.path.insert(0, str(base))
            importlib.invalidate_caches()
            return
    raise ImportError(
        "the qonnect.core collection is not installed: install it with "
        "'ansible-galaxy collection install qonnect.core' or set ANSIBLE_COLLECTIONS_PATH"
    )


ensure_importable()
