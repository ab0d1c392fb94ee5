"""Real processes for the agent tests: an emulated federation, a KB, and agents.

Everything is started as the user would (``qonnect testbed up``, ``qonnect kb serve``,
``qonnect agent``), bound to 127.0.0.0/8 with ports picked by the system, and stopped at the end
even when a test fails.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from _agent_harness import KB, QONNECT, Agent

_BUILD: dict[str, object] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the real engine's binaries (or take them from the cache) before any `kube` test of
    this directory runs: a cold build takes longer than a test's timeout. A failure is kept and
    raised by the kube_bin fixture, so those tests fail (never skip)."""
    here = Path(__file__).parent
    if _BUILD or not any(
        item.get_closest_marker("kube") and Path(str(item.fspath)).parent == here for item in session.items
    ):
        return
    from qonnect_testbed.kube import BinariesError, ensure_binaries

    try:
        _BUILD["bin"] = ensure_binaries()
    except BinariesError as exc:
        _BUILD["error"] = exc


@pytest.fixture(scope="session")
def kube_bin() -> Path:
    """The real engine's bin directory (kube-apiserver, ..., kubectl)."""
    if "error" in _BUILD:
        raise _BUILD["error"]  # type: ignore[misc]
    from qonnect_testbed.kube import ensure_binaries

    return ensure_binaries()


@pytest.fixture(scope="module")
def testbed(tmp_path_factory) -> Iterator[dict]:
    """Three emulated clusters (cloud-1, fog-1, edge-1) of the paper's profile."""
    root = tmp_path_factory.mktemp("testbed")
    up = subprocess.run(
        [
            *QONNECT,
            "testbed",
            "up",
            "--dir",
            str(root),
            "--profile",
            "paper",
            "--clusters",
            "3",
            "--timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    try:
        assert up.returncode == 0, up.stderr
        federation = yaml.safe_load((root / "federation.yaml").read_text())
        federation["dir"] = str(root)
        yield federation
    finally:
        subprocess.run(
            [*QONNECT, "testbed", "down", "--dir", str(root)], capture_output=True, timeout=60, check=False
        )


@pytest.fixture(scope="module")
def kb(tmp_path_factory, testbed) -> Iterator[KB]:
    """A running KB with the testbed's clusters registered."""
    server = KB(tmp_path_factory.mktemp("kb"))
    server.start()
    try:
        for cluster in testbed["clusters"]:
            server.admin.register_cluster(
                {"name": cluster["name"], "tier": cluster["tier"], "location": cluster["location"]}
            )
        yield server
    finally:
        server.stop()


@pytest.fixture
def start_agent(tmp_path, kb, testbed) -> Iterator[Callable[[str], Agent]]:
    agents: list[Agent] = []

    def start(name: str) -> Agent:
        agent = Agent(kb, testbed, name, tmp_path / name)
        agent.start()
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        if agent.proc is not None:
            agent.stop()
