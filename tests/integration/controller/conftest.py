"""Fixtures for the controller tests: real processes, always cleaned up."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _controller_stack import REPO, Stack


@pytest.fixture()
def stack(tmp_path: Path) -> Iterator[Stack]:
    """An empty stack; the test starts what it needs. Everything is stopped afterwards."""
    s = Stack(tmp_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def kb_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A KB shared by a module's tests (no clusters); each test starts its own replicas."""
    s = Stack(tmp_path_factory.mktemp("kb"))
    try:
        s.start_kb()
        yield s
    finally:
        s.close()


@pytest.fixture()
def raft3(kb_stack: Stack) -> Iterator[Stack]:
    """Three fresh controller replicas with an elected leader; killed afterwards."""
    try:
        kb_stack.start_replicas(3)
        kb_stack.wait_leader()
        yield kb_stack
    finally:
        kb_stack.stop_replicas()


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A module's federation: KB, 6 testbed clusters with agents, bookinfo deployed."""
    stack = Stack(tmp_path_factory.mktemp("federation"))
    try:
        stack.start_kb()
        stack.start_testbed(6)
        stack.start_agents(1.0)
        stack.deploy(REPO / "examples" / "bookinfo" / "energy-first.yml")
        yield stack
    finally:
        stack.close()
