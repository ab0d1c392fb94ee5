"""Where the real engine's binaries are, and building them when they are not there yet.

``scripts/build-kube.sh`` (``make kube``) builds kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl and etcd from the Go modules pinned in kube/ into a cache outside the
checkout, keyed by the Kubernetes version; ``QONNECT_KUBE_BIN`` points elsewhere if wanted.
KUBE_VERSION must equal the k8s.io/kubernetes version in kube/go.mod (a unit test checks it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

KUBE_VERSION = "v1.34.4"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# testbed/qonnect_testbed/kube/binaries.py -> the checkout root
BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "build-kube.sh"


class BinariesError(Exception):
    """The binaries are missing and could not be built: the message says why and what to run."""


def cache_root() -> Path:
    return Path(os.environ.get("QONNECT_KUBE_CACHE") or Path.home() / ".cache" / "qonnect" / "kube")


def bin_dir() -> Path:
    """The directory the binaries are expected in (it may not exist yet)."""
    override = os.environ.get("QONNECT_KUBE_BIN")
    return Path(override) if override else cache_root() / KUBE_VERSION / "bin"


def missing(directory: Path | None = None) -> list[str]:
    directory = directory or bin_dir()
    return [c for c in COMPONENTS if not os.access(directory / c, os.X_OK)]


def ensure_binaries(build: bool = True) -> Path:
    """The bin directory with every component; runs the build script first if one is missing."""
    directory = bin_dir()
    absent = missing(directory)
    if not absent:
        return directory
    if os.environ.get("QONNECT_KUBE_BIN"):
        raise BinariesError(f"QONNECT_KUBE_BIN={directory}: missing {', '.join(absent)}")
    if not build or not BUILD_SCRIPT.exists():
        raise BinariesError(
            f"the real Kubernetes engine needs {', '.join(absent)} in {directory}; "
            "build them with 'make kube' (scripts/build-kube.sh) in a qonnect.core checkout"
        )
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BinariesError(f"{BUILD_SCRIPT} failed with code {result.returncode}:\n{result.stderr[-3000:]}")
    absent = missing(directory)
    if absent:
        raise BinariesError(f"{BUILD_SCRIPT} finished but {directory} lacks {', '.join(absent)}")
    return directory
