"""Real processes for the agent tests: an emulated federation, a KB, and agents.

Everything is started as the user would (``qonnect testbed up``, ``qonnect kb serve``,
``qonnect agent``), bound to 127.0.0.0/8 with ports picked by the system, and stopped at the end
even when a test fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _agent_harness import KB, Agent, module_testbed
from support.federation import registration
from support.kube import BINARIES


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the real engine's binaries (or take them from the cache) before any `kube` test of
    this directory runs (see support.kube)."""
    here = Path(__file__).parent
    BINARIES.prepare(
        any(
            item.get_closest_marker("kube") and Path(str(item.fspath)).parent == here
            for item in session.items
        )
    )


@pytest.fixture(scope="session")
def kube_bin() -> Path:
    """The real engine's bin directory (kube-apiserver, ..., kubectl)."""
    return BINARIES.bin()


@pytest.fixture(scope="module")
def testbed(tmp_path_factory) -> Iterator[dict]:
    """Three emulated clusters (cloud-1, fog-1, edge-1) of the paper's profile."""
    yield from module_testbed(tmp_path_factory, "paper", "--clusters", "3")


@pytest.fixture(scope="module")
def kb(tmp_path_factory, testbed) -> Iterator[KB]:
    """A running KB with the testbed's clusters registered."""
    server = KB(tmp_path_factory.mktemp("kb"))
    server.start()
    try:
        for cluster in testbed["clusters"]:
            server.admin.register_cluster(  # node economics are the registration's (issue 25)
                {
                    "name": cluster["name"],
                    "tier": cluster["tier"],
                    "location": cluster["location"],
                    "node_economics": registration(cluster)["node_economics"],
                }
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
