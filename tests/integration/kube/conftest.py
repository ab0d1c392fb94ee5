"""Fixtures of the real engine's tests: binaries built (or taken from the cache), one federation.

The binaries come from scripts/build-kube.sh through the cache (a cold build takes minutes, a
warm one nothing). A failed build fails these tests; they are never skipped. The session
federation is the `tiers` profile (cloud-1, fog-1, edge-1) with shortened node timing, so the
node-loss test sees NotReady and eviction within a minute (the flags are the real ones).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
from qonnect_testbed.kube import KubeFederation, start_federation
from support.kube import BINARIES

HERE = Path(__file__).parent
GRACE_SECONDS = 8
TOLERATION_SECONDS = 10


def _needs_kube(item: pytest.Item) -> bool:
    path = Path(str(item.fspath))
    if path.is_relative_to(HERE) and path.name != "test_timeline.py":
        return True
    engines = os.environ.get("QONNECT_CONFORMANCE_ENGINES", "emulator,kube")
    return path.is_relative_to(HERE.parents[1] / "conformance") and "kube" in engines


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries (if the cache lacks them) before any test runs.

    A cold build takes longer than one test's timeout, so it happens here, once, outside every
    test; a failure is kept and raised by the kube_bin fixture, so those tests fail (not skip).
    """
    BINARIES.prepare(any(_needs_kube(item) for item in session.items))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(HERE) and "timeline" not in str(item.fspath):
            item.add_marker(pytest.mark.kube)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def node_timing() -> tuple[int, int]:
    """(node-monitor grace period, default toleration seconds) of the session federation."""
    return GRACE_SECONDS, TOLERATION_SECONDS


@pytest.fixture(scope="session")
def kube_bin() -> Path:
    """The built binaries (built at collection, through the cache)."""
    return BINARIES.bin()


@pytest.fixture(scope="session")
def tiers(kube_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeFederation]:
    fed = start_federation(
        tmp_path_factory.mktemp("kube-tiers"),
        "tiers",
        start_delay=0.5,
        node_monitor_grace_period=GRACE_SECONDS,
        default_unreachable_toleration_seconds=TOLERATION_SECONDS,
        default_not_ready_toleration_seconds=TOLERATION_SECONDS,
    )
    try:
        yield fed
    finally:
        fed.stop()
