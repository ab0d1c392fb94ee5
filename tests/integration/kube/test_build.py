"""The build of the real engine: one pinned release, cached outside the checkout, kubectl linked."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from qonnect_testbed.kube import KUBE_VERSION
from qonnect_testbed.kube.binaries import BUILD_SCRIPT

ROOT = Path(__file__).resolve().parents[3]


def test_the_engine_expects_the_release_kube_go_mod_pins():
    text = (ROOT / "kube" / "go.mod").read_text()
    assert re.search(rf"^\s*k8s\.io/kubernetes {re.escape(KUBE_VERSION)}$", text, re.M)
    minor = KUBE_VERSION.split(".")[1]
    staging = re.findall(r"^\s*(k8s\.io/\S+) => (k8s\.io/\S+) (v\S+)$", text, re.M)
    assert len(staging) >= 30  # every staging module of k8s.io/kubernetes is replaced ...
    assert {v for _a, _b, v in staging} == {
        f"v0.{minor}.{KUBE_VERSION.split('.')[2]}"
    }  # ... at the same release


def test_a_second_build_reuses_the_cache_and_links_kubectl(kube_bin: Path):
    started = time.monotonic()
    out = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=True)
    assert time.monotonic() - started < 5  # idempotent: nothing is rebuilt
    assert Path(out.stdout.strip().splitlines()[-1]) == kube_bin
    assert not kube_bin.is_relative_to(ROOT)  # the cache is outside the checkout
    kubectl = Path(sys.executable).with_name("kubectl")
    assert kubectl.resolve() == (kube_bin / "kubectl").resolve()
    version = subprocess.run(
        [str(kubectl), "version", "--client"], capture_output=True, text=True, check=True
    )
    assert f"Client Version: {KUBE_VERSION}" in version.stdout
